package tensor

import (
	"github.com/phobos-project/phobos/dag"
)

// splits cuts a dimension of size n into chunks of c: c,…,c,n mod c.
// A dimension of size 0 is one empty chunk.
func splits(n, c int64) []int64 {
	if n == 0 {
		return []int64{0}
	}
	k := (n + c - 1) / c
	s := make([]int64, k)
	for i := range s {
		s[i] = c
	}
	if r := n % c; r != 0 {
		s[k-1] = r
	}
	return s
}

// forEachChunk calls fn for every grid position in row-major order with the
// position and the chunk's shape. fn must not keep idx or shape.
func forEachChunk(nsplits [][]int64, fn func(idx []int32, shape []int64) error) error {
	nd := len(nsplits)
	idx := make([]int32, nd)
	shape := make([]int64, nd)
	for _, s := range nsplits {
		if len(s) == 0 {
			return nil
		}
	}
	for {
		for d := range idx {
			shape[d] = nsplits[d][idx[d]]
		}
		if err := fn(idx, shape); err != nil {
			return err
		}
		d := nd - 1
		for ; d >= 0; d-- {
			idx[d]++
			if int(idx[d]) < len(nsplits[d]) {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return nil
		}
	}
}

// tileSource tiles a node with no inputs by its declared chunk size.
func tileSource(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.ChunkSize) != len(n.Shape) {
		return tc.Errorf("needs a chunk size for each of its %d dimensions, has %d", len(n.Shape), len(n.ChunkSize))
	}
	nsplits := make([][]int64, len(n.Shape))
	total := 1
	for d, size := range n.Shape {
		if n.ChunkSize[d] <= 0 {
			return tc.Errorf("chunk size %d in dimension %d must be positive", n.ChunkSize[d], d)
		}
		nsplits[d] = splits(size, n.ChunkSize[d])
		total *= len(nsplits[d])
	}
	args := tc.NodeArgs()
	grid := &dag.Grid{NSplits: nsplits, Chunks: make([]int32, 0, total)}
	err := forEachChunk(nsplits, func(idx []int32, shape []int64) error {
		c, err := tc.AddChunk(n.Op, args, n.DType, nil, idx, shape)
		grid.Chunks = append(grid.Chunks, c)
		return err
	})
	tc.SetGrid(grid)
	return err
}

// sameSplits reports whether two grids cut their arrays identically.
func sameSplits(a, b [][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for d := range a {
		if len(a[d]) != len(b[d]) {
			return false
		}
		for i := range a[d] {
			if a[d][i] != b[d][i] {
				return false
			}
		}
	}
	return true
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeArgs decodes op args into v, naming the op on failure.
func decodeArgs(op string, b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	if err := codecUnmarshal(b, v); err != nil {
		return dag.Errorf(dag.KindInvalidArgument, "%s: malformed args: %w", op, err)
	}
	return nil
}
