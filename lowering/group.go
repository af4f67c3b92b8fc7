package lowering

import (
	"github.com/phobos-project/phobos/dag"
)

// buildSubtasks turns groups of chunks into a linked subtask graph. A chunk
// is exported (becomes an object) when a chunk outside its group reads it or
// when export marks it (a result, or a chunk later stages read). Chunks in
// no group (fetched from earlier stages) belong to no subtask. The graph
// keeps groups.Dst as its table of chunks.
func buildSubtasks(cg *dag.ChunkGraph, groups dag.CSR, export []bool) (*dag.SubtaskGraph, error) {
	return buildSubtasksThen(cg, groups, export, nil)
}

// buildSubtasksThen is buildSubtasks that starts then as
// dag.GroupSubtasksThen does: on a goroutine of its own once the graph's
// predecessors and successors are known, and only if it succeeds.
func buildSubtasksThen(cg *dag.ChunkGraph, groups dag.CSR, export []bool, then func(*dag.SubtaskGraph)) (*dag.SubtaskGraph, error) {
	sg, err := dag.GroupSubtasksThen(cg, groups, export, then)
	if err != nil {
		return nil, dag.Errorf(dag.KindInternal, "grouping chunks into subtasks: %w", err)
	}
	return sg, nil
}

// prioritize sets every subtask's Priority: its depth (longest path from a
// source), the depth of its deepest successor, and its successor count.
// Subtask indexes are topological, so one forward pass over the
// predecessors suffices: a subtask's depth is final when it is reached,
// and it passes it on to its predecessors as they gain it as a successor.
// A graph fresh from GroupSubtasks has every priority zero, which is what
// a subtask without predecessors or successors keeps (no write at all
// for a job of independent subtasks).
func prioritize(sg *dag.SubtaskGraph) {
	sub := sg.Subtasks
	off, dst := sg.Preds.Off, sg.Preds.Dst
	for s := range sub {
		preds := dst[off[s]:off[s+1]]
		if len(preds) == 0 {
			continue
		}
		d := int32(0)
		for _, p := range preds {
			d = max(d, sub[p].Priority.Depth+1)
		}
		sub[s].Priority.Depth = d
		for _, p := range preds {
			pp := &sub[p].Priority
			pp.DemandDepth = max(pp.DemandDepth, d)
			pp.Succs++
		}
	}
}
