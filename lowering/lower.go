package lowering

import (
	"errors"
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
	// ColorInitial is how many initial chunks of one raylet share a colour
	// (FuseColoring only); 0 means DefaultColorInitial.
	ColorInitial int
	// Broadcast: a chunk read by more than this many chunks is a
	// broadcaster (FuseColoring only); 0 means DefaultBroadcast.
	Broadcast int
}

// Allocate commits a new stage of task with n subtasks and returns its stage
// ID and the first index of its subtask range. The head implements it with
// one Raft command (and, replaying a job after a failover, returns the
// stage it committed before); tests use Counter.
type Allocate func(n int) (dag.StageID, uint64, error)

// ErrNeedsStages is returned by Tiled.Plan for a job whose tiling depends
// on computed data: it must be lowered stage by stage with NextStage.
var ErrNeedsStages = errors.New("lowering: the job has data-dependent ops and needs more than one stage")

// Result locates one output tileable of the job: its chunk grid, with each
// chunk's object ID. Meta.Shape and NSplits hold Unknown where the size of
// a data-dependent output is only known from the objects themselves.
type Result struct {
	Node    int32
	Meta    dag.Meta
	NSplits [][]int64
	Objects []dag.ObjectID // row-major over the grid
}

// Plan is one lowered stage of a job. A plan is immutable once returned and
// does not share mutable state with the Tiled that made it, so a scheduler
// may keep it while the next stage is lowered.
type Plan struct {
	Graph *dag.TileableGraph
	Stage *dag.SubtaskGraph
	// Fetches is, for a stage after the first, the objects of earlier stages
	// this stage reads: chunk i < len(Fetches) of Stage.Chunks is a fetch
	// node (op "fetch", in no subtask) standing for object Fetches[i].
	Fetches []dag.ObjectID
	// Keep lists this stage's objects that later stages or the job's results
	// read. The scheduler must not free them when this stage's readers are
	// done; they live until the job ends.
	Keep []dag.ObjectID
	// Final reports whether this is the job's last stage. Results is set on
	// the final plan only; its objects may come from any stage.
	Final   bool
	Results []Result
}

// ObjectOf returns the object holding chunk c of Stage.Chunks: a fetched
// object of an earlier stage, or one of this stage's outputs.
func (p *Plan) ObjectOf(c int32) (dag.ObjectID, bool) {
	if int(c) < len(p.Fetches) {
		return p.Fetches[c], true
	}
	return p.Stage.ObjectOf(c)
}

// Lower tiles g, fuses and groups its chunks into subtasks, takes IDs for
// them from alloc, computes priorities and assigns the initial subtasks. It
// is for jobs that lower in one stage; see Tiled.NextStage for the others.
func Lower(g *dag.TileableGraph, task dag.TaskID, opts Options, reg *dag.Registry, alloc Allocate) (*Plan, error) {
	t, err := Tile(g, reg)
	if err != nil {
		return nil, err
	}
	return t.Plan(task, opts, alloc)
}

// Plan lowers a job that needs a single stage (see Lower). A head tiles
// first, so that a bad graph is refused before anything is committed. A job
// with data-dependent ops gets an error wrapping ErrNeedsStages.
func (t *Tiled) Plan(task dag.TaskID, opts Options, alloc Allocate) (*Plan, error) {
	if !t.complete() {
		return nil, dag.Errorf(dag.KindInvalidArgument, "%s waits for the sizes of %d computed chunks: %w",
			t.Graph.Describe(t.waiting[0]), len(t.need), ErrNeedsStages)
	}
	return t.NextStage(task, opts, alloc)
}

// NextStage lowers every chunk tiled since the last stage into the next
// stage's subtask graph: it fuses and groups them, takes the stage ID and
// subtask range from alloc (called once per stage, also for a stage without
// subtasks), computes priorities and assigns initial subtasks.
//
// The protocol for a job with data-dependent ops:
//
//	t, err := Tile(g, reg)               // refuses bad graphs
//	for {
//		p, err := t.NextStage(task, opts, alloc)
//		run p to the end
//		if p.Final { break }
//		t.Feed(metas of t.Need())        // then tiling goes on
//	}
//
// Lowering is deterministic: the same graph, options, committed IDs and fed
// metas give byte-identical plans (see Plan.Canonical).
func (t *Tiled) NextStage(task dag.TaskID, opts Options, alloc Allocate) (*Plan, error) {
	if len(t.needObjs) > 0 {
		return nil, dag.Errorf(dag.KindInternal, "lower stage %d of task %d: feed the metas of the %d objects Need lists first", t.stages+1, task, len(t.needObjs))
	}
	if t.Done() && t.stages > 0 {
		return nil, dag.Errorf(dag.KindInternal, "lower task %d: every stage is lowered already", task)
	}
	lo, hi := t.lowered, int32(t.Chunks.Len())
	complete := t.complete()
	var (
		cg    *dag.ChunkGraph
		fetch []int32 // chunks of earlier stages this stage reads, by fetch node
	)
	if lo == 0 && complete {
		cg = t.Chunks // the whole job in one stage: nothing will change the graph
	} else {
		cg, fetch = t.stageChunks(lo, hi)
	}
	nf := int32(len(fetch))

	// Export results, and what untiled nodes will read: beside finding
	// each chunk's sole user for chain fusion, which reads only cg.
	export := dag.HugePages(make([]bool, cg.Len()))
	var keep []bool // what later stages read: none after the last
	if !complete {
		keep = dag.HugePages(make([]bool, cg.Len()))
	}
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		t.markExports(export, keep, lo, nf)
	}()
	var sole []int32
	if opts.Fusion == FuseChain {
		sole = soleUsers(cg)
	}
	<-marked

	var groups dag.CSR
	var chunkRaylet []int32
	switch opts.Fusion {
	case FuseColoring:
		users := cg.Users()
		chunkRaylet = assignChunks(cg, users, nf, opts.Slots)
		groups = fuseColoring(cg, users, nf, chunkRaylet, opts.ColorInitial, opts.Broadcast)
	case FuseChain:
		groups = fuseChains(cg, sole, nf, opts.Fusion)
	case FuseNone:
		groups = fuseChains(cg, nil, nf, opts.Fusion)
	default:
		return nil, dag.Errorf(dag.KindInvalidArgument, "lower task %d: unknown fusion %v", task, opts.Fusion)
	}
	// Initial assignment writes only the subtasks' Raylet and needs no
	// IDs; taking the IDs writes the graph's Task, Stage and Base;
	// finishing the stage reads only the graph's IDs, Owner and OutIndex,
	// and priorities write only the subtasks' Priority. Each is
	// deterministic and they share nothing written, so assignment runs
	// beside the rest (on a second core when there is one; beside the Raft
	// commit that allocates the IDs in a head) and the plan is the same as
	// in sequence. It starts as soon as grouping knows the subtasks'
	// predecessors and successors (beside numbering their outputs), and
	// writes into the subtasks once grouping has returned. Assignment is
	// the longer (a walk of the whole graph when subtasks have edges);
	// the rest takes about as long for a job of independent subtasks.
	grouped, placed := make(chan struct{}), make(chan struct{})
	assign := func(sg *dag.SubtaskGraph) {
		defer close(placed)
		if opts.Fusion == FuseColoring {
			<-grouped // reads the subtasks' chunks
			for s := range sg.Subtasks {
				if len(sg.Preds.Row(int32(s))) == 0 {
					sg.Subtasks[s].Raylet = chunkRaylet[sg.ChunksOf(int32(s))[0]]
				}
			}
			return
		}
		raylet := initialRaylets(sg, opts.Slots)
		<-grouped
		setRaylets(sg, raylet)
	}
	sg, err := buildSubtasksThen(cg, groups, export, assign)
	if err != nil {
		return nil, err // assign was not started
	}
	close(grouped)
	// Every stage takes an ID, even one without subtasks (its needs were
	// all computed earlier), so that stage k of a job always follows the
	// k-th Feed: a head replaying the job pairs them up.
	stage, base, err := alloc(sg.Len())
	if err != nil {
		<-placed
		return nil, fmt.Errorf("allocate ids for %d subtasks of task %d: %w", sg.Len(), task, err)
	}
	sg.Task, sg.Stage, sg.Base = task, stage, base
	p, err := t.finishStage(sg, cg, fetch, keep, lo, hi, complete)
	prioritize(sg)
	<-placed
	if err != nil {
		return nil, err
	}
	t.stages++
	t.subtasks += int64(sg.Len())
	if invariants && complete {
		t.checkEstimate(opts.Fusion)
	}
	return p, nil
}

// markExports sets export and keep (unless keep is nil: a final stage
// keeps nothing for later ones), indexed by this stage's chunks (a chunk
// c >= lo of the job is nf + c - lo), for the chunks of the job's tiled
// outputs and the tiled inputs of untiled nodes.
func (t *Tiled) markExports(export, keep []bool, lo, nf int32) {
	local := func(c int32) int32 { return nf + c - lo } // of a chunk of this stage
	mark := func(grid *dag.Grid) {
		for _, c := range grid.Chunks {
			if c >= lo {
				export[local(c)] = true
				if keep != nil {
					keep[local(c)] = true
				}
			}
		}
	}
	for _, o := range t.Graph.Outputs {
		if t.state[o] == tiled {
			mark(t.Grids[o])
		}
	}
	for n, st := range t.state {
		if st == tiled {
			continue
		}
		for _, in := range t.Graph.Nodes[n].Inputs {
			if t.state[in] == tiled {
				mark(t.Grids[in])
			}
		}
	}
}

// finishStage makes the plan of stage sg (of chunks cg, lowered from chunks
// lo…hi-1 of the job, reading fetch from earlier stages): its fetches, the
// objects it keeps, the job's results if complete, and what the next stage
// needs. It reads of sg only its IDs, Owner and OutIndex.
func (t *Tiled) finishStage(sg *dag.SubtaskGraph, cg *dag.ChunkGraph, fetch []int32, keep []bool, lo, hi int32, complete bool) (*Plan, error) {
	task := sg.Task
	nf := int32(len(fetch))
	local := func(c int32) int32 { return nf + c - lo } // of a chunk of this stage
	p := &Plan{Graph: t.Graph, Stage: sg, Final: complete}
	if nf > 0 {
		p.Fetches = make([]dag.ObjectID, nf)
		for i, c := range fetch {
			p.Fetches[i] = t.objects[c]
		}
	}
	if cg != t.Chunks {
		// Later stages, Need and Results find this stage's objects here.
		if len(t.objects) < int(hi) {
			t.objects = append(t.objects, make([]dag.ObjectID, int(hi)-len(t.objects))...)
		}
		for c := lo; c < hi; c++ {
			if id, ok := sg.ObjectOf(local(c)); ok {
				t.objects[c] = id
			}
		}
	}
	if !complete {
		for c := nf; c < int32(cg.Len()); c++ {
			if keep[c] {
				id, _ := sg.ObjectOf(c)
				p.Keep = append(p.Keep, id)
			}
		}
	}
	t.lowered = hi
	objectOf := sg.ObjectOf
	objectsOf := sg.ObjectsOf
	if cg != t.Chunks {
		objectOf = func(c int32) (dag.ObjectID, bool) {
			id := t.objects[c]
			return id, !id.IsZero()
		}
		objectsOf = func(cs []int32, out []dag.ObjectID) int {
			for i, c := range cs {
				id, ok := objectOf(c)
				if !ok {
					return i
				}
				out[i] = id
			}
			return len(cs)
		}
	}
	if complete {
		for _, o := range t.Graph.Outputs {
			r, err := t.result(o, objectsOf)
			if err != nil {
				return nil, err
			}
			p.Results = append(p.Results, r)
		}
	}
	for _, c := range t.need {
		id, ok := objectOf(c)
		if !ok {
			return nil, dag.Errorf(dag.KindInternal, "task %d: chunk %d of %s is needed but was never exported", task, c, t.Graph.Describe(t.Chunks.Nodes[c].Tileable))
		}
		m := t.Chunks.Meta(c)
		m.Shape = append([]int64(nil), m.Shape...)
		t.needObjs = append(t.needObjs, Need{Object: id, Planned: m})
	}
	return p, nil
}

// result describes output tileable o of a job that is tiled in full:
// objectsOf fills the objects of its chunks (as SubtaskGraph.ObjectsOf).
// Its NSplits share the grid's rows, which nothing changes once every
// node is tiled (Feed has nothing left to feed): ten million chunks'
// splits are 80 MB a copy would allocate and write.
func (t *Tiled) result(o int32, objectsOf func([]int32, []dag.ObjectID) int) (Result, error) {
	g := t.Graph
	grid := t.Grids[o]
	r := Result{
		Node:    o,
		Meta:    dag.Meta{DType: g.Nodes[o].DType, Shape: append([]int64(nil), g.Nodes[o].Shape...)},
		NSplits: make([][]int64, len(grid.NSplits)),
		Objects: dag.HugePages(make([]dag.ObjectID, len(grid.Chunks))),
	}
	for d, s := range grid.NSplits {
		r.NSplits[d] = s[:len(s):len(s)]
		if d < len(r.Meta.Shape) && r.Meta.Shape[d] == Unknown {
			// The declared size was unknown; the grid may know it by now.
			sum := int64(0)
			for _, x := range s {
				if x < 0 {
					sum = Unknown
					break
				}
				sum += x
			}
			r.Meta.Shape[d] = sum
		}
	}
	if k := objectsOf(grid.Chunks, r.Objects); k < len(grid.Chunks) {
		return r, dag.Errorf(dag.KindInternal, "result chunk %d of %s is not exported", grid.Chunks[k], g.Describe(o))
	}
	return r, nil
}

// Counter returns an Allocate that hands out stage IDs 1, 2, … and
// consecutive subtask ranges from 1 within each stage, for tests and
// `phobos plan`.
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
