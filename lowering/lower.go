package lowering

import (
	"fmt"

	"github.com/phobos-project/phobos/dag"
)

// Options configure one lowering.
type Options struct {
	Fusion Fusion
	// Slots lists the free slots of each raylet known when the job is lowered,
	// in a fixed order; initial subtasks are assigned to indexes of this list.
	// Empty means no initial assignment (the scheduler places everything).
	Slots []int
}

// Allocate commits a new stage of task with n subtasks and returns its stage
// ID and the first index of its subtask range. The head implements it with
// one Raft command; tests use a counter.
type Allocate func(n int) (dag.StageID, uint64, error)

// Result locates one output tileable of the job: its chunk grid, with each
// chunk's object ID.
type Result struct {
	Node    int32
	Meta    dag.Meta
	NSplits [][]int64
	Objects []dag.ObjectID // row-major over the grid
}

// Plan is a lowered job.
type Plan struct {
	*Tiled
	Stage   *dag.SubtaskGraph
	Results []Result
}

// Lower tiles g, fuses and groups its chunks into subtasks, takes IDs for
// them from alloc, computes priorities and assigns the initial subtasks.
func Lower(g *dag.TileableGraph, task dag.TaskID, opts Options, reg *dag.Registry, alloc Allocate) (*Plan, error) {
	t, err := Tile(g, reg)
	if err != nil {
		return nil, err
	}
	return t.Plan(task, opts, alloc)
}

// Plan lowers an already tiled graph (see Lower). A head tiles first, so
// that a bad graph is refused before anything is committed.
func (t *Tiled) Plan(task dag.TaskID, opts Options, alloc Allocate) (*Plan, error) {
	g := t.Graph
	cg := t.Chunks
	users := cg.Users()
	isResult := make([]bool, cg.Len())
	for _, o := range g.Outputs {
		for _, c := range t.Grids[o].Chunks {
			isResult[c] = true
		}
	}
	groups := fuseChains(cg, users, opts.Fusion)
	sg, err := buildSubtasks(cg, users, groups, isResult)
	if err != nil {
		return nil, err
	}
	stage, base, err := alloc(sg.Len())
	if err != nil {
		return nil, fmt.Errorf("allocate ids for %d subtasks of task %d: %w", sg.Len(), task, err)
	}
	sg.Task, sg.Stage, sg.Base = task, stage, base
	prioritize(sg)
	assignInitial(sg, opts.Slots)

	p := &Plan{Tiled: t, Stage: sg}
	for _, o := range g.Outputs {
		grid := t.Grids[o]
		r := Result{
			Node:    o,
			Meta:    dag.Meta{DType: g.Nodes[o].DType, Shape: g.Nodes[o].Shape},
			NSplits: grid.NSplits,
			Objects: make([]dag.ObjectID, len(grid.Chunks)),
		}
		for i, c := range grid.Chunks {
			id, ok := sg.ObjectOf(c)
			if !ok {
				return nil, dag.Errorf(dag.KindInternal, "result chunk %d of %s is not exported", c, g.Describe(o))
			}
			r.Objects[i] = id
		}
		p.Results = append(p.Results, r)
	}
	return p, nil
}

// Counter returns an Allocate that hands out stage IDs 1, 2, … and
// consecutive subtask ranges from 1, for tests and `phobos plan`.
func Counter() Allocate {
	var stage dag.StageID
	return func(n int) (dag.StageID, uint64, error) {
		if stage == dag.MaxStageID {
			return 0, 0, fmt.Errorf("stage %d would overflow 2 bytes", uint32(stage)+1)
		}
		stage++
		return stage, 1, nil
	}
}
