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
	sg, err := dag.GroupSubtasks(cg, groups, export)
	if err != nil {
		return nil, dag.Errorf(dag.KindInternal, "grouping chunks into subtasks: %w", err)
	}
	return sg, nil
}

// prioritize sets every subtask's Priority: its depth (longest path from a
// source), the depth of its deepest successor, and its successor count.
// Subtask indexes are topological, so one forward pass suffices.
func prioritize(sg *dag.SubtaskGraph) {
	for s := range sg.Subtasks {
		d := int32(0)
		for _, p := range sg.Preds.Row(int32(s)) {
			d = max(d, sg.Subtasks[p].Priority.Depth+1)
		}
		sg.Subtasks[s].Priority.Depth = d
	}
	for s := range sg.Subtasks {
		succs := sg.Succs.Row(int32(s))
		dd := int32(0)
		for _, u := range succs {
			dd = max(dd, sg.Subtasks[u].Priority.Depth)
		}
		sg.Subtasks[s].Priority.DemandDepth = dd
		sg.Subtasks[s].Priority.Succs = int32(len(succs))
	}
}
