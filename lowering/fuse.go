package lowering

import (
	"fmt"

	"github.com/phobos-project/phobos/dag"
)

// Fusion chooses how chunks are grouped into subtasks.
type Fusion uint8

const (
	// FuseChain fuses a chunk with its one successor while that successor has
	// exactly one predecessor: the seeds' chain fusion, and the default.
	FuseChain Fusion = iota
	// FuseNone makes every chunk its own subtask.
	FuseNone
	// FuseColoring is Mars's later colouring fusion: initial chunks are
	// placed on raylets first and grouped per raylet, a chunk whose
	// predecessors share one colour inherits it, and the readers of a
	// broadcaster (a chunk with many readers) or of a chunk read both inside
	// and outside its colour start new colours. Each colour is a subtask.
	FuseColoring
)

func (f Fusion) String() string {
	switch f {
	case FuseChain:
		return "chain"
	case FuseNone:
		return "none"
	case FuseColoring:
		return "coloring"
	}
	return fmt.Sprintf("fusion(%d)", uint8(f))
}

// ParseFusion is the inverse of String; "" means chain.
func ParseFusion(s string) (Fusion, error) {
	switch s {
	case "chain", "":
		return FuseChain, nil
	case "none":
		return FuseNone, nil
	case "coloring", "colouring":
		return FuseColoring, nil
	}
	return 0, fmt.Errorf("fusion %q: want chain, none or coloring", s)
}

// fuseChains groups chunks lo… of cg into chains (chunks below lo are
// fetched from earlier stages and belong to no group). Chunks are visited in
// index order, which is topological; a chunk not yet grouped starts a group,
// and the group grows along the chunk's only (distinct) user while that
// user's only (distinct) input is the chunk. Groups come out in topological
// order, each in execution order, as rows of a CSR table. sole is
// soleUsers(cg) (unused, and may be nil, with FuseNone).
func fuseChains(cg *dag.ChunkGraph, sole []int32, lo int32, mode Fusion) dag.CSR {
	n := int32(cg.Len())
	grouped := dag.HugePages(make([]bool, n))
	off := dag.HugePages(make([]int32, 1, n-lo+1))
	dst := dag.HugePages(make([]int32, 0, n-lo))
	for c := lo; c < n; c++ {
		if grouped[c] {
			continue
		}
		cur := c
		for {
			grouped[cur] = true
			dst = append(dst, cur)
			if mode == FuseNone {
				break
			}
			u := sole[cur]
			if u < 0 || grouped[u] {
				break
			}
			if _, ok := only(cg.Inputs(u)); !ok {
				break
			}
			cur = u
		}
		off = append(off, int32(len(dst)))
	}
	return dag.CSR{Off: off, Dst: dst}
}

// soleUsers returns, for every chunk of cg, its only distinct user: the
// chunk that reads it, when exactly one chunk does (any number of times),
// else -1. It is the one fact chain fusion needs of the users table, in one
// pass and one slice.
func soleUsers(cg *dag.ChunkGraph) []int32 {
	const none, many = -1, -2
	n := int32(cg.Len())
	sole := dag.HugePages(make([]int32, n))
	for i := range sole {
		sole[i] = none
	}
	for c := int32(0); c < n; c++ {
		for _, in := range cg.Inputs(c) {
			switch sole[in] {
			case none:
				sole[in] = c
			case c, many:
			default:
				sole[in] = many
			}
		}
	}
	for i, u := range sole {
		if u == many {
			sole[i] = none
		}
	}
	return sole
}

// only returns the single distinct value of s, if s has exactly one.
func only(s []int32) (int32, bool) {
	if len(s) == 0 {
		return -1, false
	}
	for _, v := range s[1:] {
		if v != s[0] {
			return -1, false
		}
	}
	return s[0], true
}
