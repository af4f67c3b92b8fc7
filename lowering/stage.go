package lowering

import (
	"slices"

	"github.com/phobos-project/phobos/dag"
)

// FetchName is the op of the fetch nodes at the start of a later stage's
// chunk graph: stand-ins for objects of earlier stages. A fetch node is in
// no subtask; it has neither a tiler nor a kernel.
const FetchName = "fetch"

type fetchOp struct{}

func (fetchOp) Name() string { return FetchName }

func init() { dag.MustRegister(fetchOp{}) }

// stageChunks copies chunks [lo, hi) of the job's chunk graph into a chunk
// graph of their own, preceded by one fetch node for each chunk of an
// earlier stage they read (in index order). It returns the copy and, for
// each fetch node, the chunk it stands for. Chunk lo+i becomes chunk
// len(fetch)+i.
func (t *Tiled) stageChunks(lo, hi int32) (*dag.ChunkGraph, []int32) {
	m := t.Chunks
	loc := make([]int32, lo) // fetch node of each earlier chunk read, or -1
	for i := range loc {
		loc[i] = -1
	}
	var fetch []int32
	for c := lo; c < hi; c++ {
		for _, in := range m.Inputs(c) {
			if in < lo && loc[in] < 0 {
				loc[in] = 0
				fetch = append(fetch, in)
			}
		}
	}
	slices.Sort(fetch)
	nf := int32(len(fetch))
	cg := dag.NewChunkGraph(int(nf + hi - lo))
	noArgs := cg.AddArgs(nil)
	fetchID := dag.OpIDOf(FetchName)
	for i, f := range fetch {
		loc[f] = int32(i)
		n := &m.Nodes[f]
		// AddNode cannot fail here: no inputs, index and shape from one chunk.
		_, _ = cg.AddNode(fetchID, n.Tileable, noArgs, n.DType, nil, m.Index(f), m.Shape(f))
	}
	args := make([]int32, len(m.Args))
	for i := range args {
		args[i] = -1
	}
	var ins []int32
	for c := lo; c < hi; c++ {
		n := &m.Nodes[c]
		ins = ins[:0]
		for _, in := range m.Inputs(c) {
			if in >= lo {
				ins = append(ins, nf+in-lo)
			} else {
				ins = append(ins, loc[in])
			}
		}
		if args[n.Args] < 0 {
			args[n.Args] = cg.AddArgs(m.Args[n.Args])
		}
		_, _ = cg.AddNode(n.Op, n.Tileable, args[n.Args], n.DType, ins, m.Index(c), m.Shape(c))
	}
	return cg, fetch
}
