package tensor

import (
	"fmt"
	"strings"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// reserveGrid checks, before any per-chunk memory is allocated, that the
// chunk graph has room for shape cut into chunks of sizes (one per
// dimension, or one for all).
func reserveGrid(tc *dag.TileContext, shape, sizes []int64) error {
	n := int64(1)
	for d, s := range shape {
		if len(sizes) > 0 {
			n = dag.SatMul(n, dag.ChunksAlong(s, sizes[min(d, len(sizes)-1)]))
		}
	}
	return tc.Reserve(n)
}

// splits cuts a dimension of size n into chunks of c: c,…,c,n mod c.
// A dimension of size 0 is one empty chunk. Callers check the count
// (reserveGrid) before sizes users chose reach it.
func splits(n, c int64) []int64 {
	if n <= 0 {
		return []int64{0}
	}
	k := dag.ChunksAlong(n, c)
	s := dag.HugePages(make([]int64, k))
	for i := range s {
		s[i] = c
	}
	if r := n % c; r != 0 {
		s[k-1] = r
	}
	return s
}

// offsets returns the start of every chunk of s and, last, the total.
func offsets(s []int64) []int64 {
	o := dag.HugePages(make([]int64, len(s)+1))
	for i, c := range s {
		o[i+1] = o[i] + c
	}
	return o
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
		if !nextIndex(idx, nsplits) {
			return nil
		}
	}
}

// nextIndex advances idx in row-major order over the grid and reports
// whether it did not wrap around.
func nextIndex(idx []int32, nsplits [][]int64) bool {
	for d := len(idx) - 1; d >= 0; d-- {
		idx[d]++
		if int(idx[d]) < len(nsplits[d]) {
			return true
		}
		idx[d] = 0
	}
	return false
}

// sourceSplits returns a source node's chunk sizes per dimension: explicit
// ones from its args, or its ChunkSize cut by the c,…,c,n mod c rule.
func sourceSplits(tc *dag.TileContext, explicit [][]int64) ([][]int64, error) {
	n := tc.Tileable()
	if explicit != nil {
		if len(explicit) != len(n.Shape) {
			return nil, tc.Errorf("has %d chunk split lists for %d dimensions; give one per dimension", len(explicit), len(n.Shape))
		}
		if err := checkSplits(n.Shape, explicit); err != nil {
			return nil, tc.Errorf("%v", err)
		}
		return explicit, nil
	}
	if len(n.ChunkSize) != len(n.Shape) {
		return nil, tc.Errorf("needs a chunk size for each of its %d dimensions, has %d", len(n.Shape), len(n.ChunkSize))
	}
	if err := reserveGrid(tc, n.Shape, n.ChunkSize); err != nil {
		return nil, err
	}
	nsplits := make([][]int64, len(n.Shape))
	for d, size := range n.Shape {
		if size < 0 {
			return nil, tc.Errorf("dimension %d has negative size %d", d, size)
		}
		if n.ChunkSize[d] <= 0 {
			return nil, tc.Errorf("chunk size %d in dimension %d must be positive", n.ChunkSize[d], d)
		}
		nsplits[d] = splits(size, n.ChunkSize[d])
	}
	return nsplits, nil
}

// tileSource adds one chunk per grid position of a node without inputs.
// chunkArgs, if set, gives each chunk its own args from its position, its
// offset in the array and its shape; otherwise chunks share the node's args.
func tileSource(tc *dag.TileContext, nsplits [][]int64, dt dag.DType, chunkArgs func(idx []int32, off, shape []int64) (int32, error)) error {
	n := tc.Tileable()
	if len(n.Inputs) != 0 {
		return tc.Errorf("takes no inputs, has %d", len(n.Inputs))
	}
	total := 1
	for _, s := range nsplits {
		total *= len(s)
	}
	grid := &dag.Grid{NSplits: nsplits, Chunks: dag.HugePages(make([]int32, 0, total))}
	tc.SetGrid(grid)
	if chunkArgs == nil && len(nsplits) == 1 {
		// A vector of chunks sharing the node's args (most sources): one
		// row, added in one pass.
		first, err := tc.AddRow(n.Op, tc.NodeArgs(), dt, total, nsplits[0])
		if err != nil {
			return err
		}
		for j := range int32(total) {
			grid.Chunks = append(grid.Chunks, first+j)
		}
		return nil
	}
	var args int32
	var offs [][]int64
	if chunkArgs == nil {
		args = tc.NodeArgs()
	} else {
		offs = make([][]int64, len(nsplits))
		for d, s := range nsplits {
			offs[d] = offsets(s)
		}
	}
	off := make([]int64, len(nsplits))
	err := forEachChunk(nsplits, func(idx []int32, shape []int64) error {
		a := args
		if chunkArgs != nil {
			for d, i := range idx {
				off[d] = offs[d][i]
			}
			var err error
			if a, err = chunkArgs(idx, off, shape); err != nil {
				return err
			}
		}
		c, err := tc.AddChunk(n.Op, a, dt, nil, idx, shape)
		grid.Chunks = append(grid.Chunks, c)
		return err
	})
	return err
}

// sameSplits reports whether two grids cut their arrays identically.
func sameSplits(a, b [][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for d := range a {
		if !sameShape(a[d], b[d]) {
			return false
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

func hasUnknown(shape []int64) bool {
	for _, d := range shape {
		if d < 0 {
			return true
		}
	}
	return false
}

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// broadcastShapes returns the NumPy broadcast of shapes: aligned at the
// right, each dimension equal or 1.
func broadcastShapes(shapes ...[]int64) ([]int64, error) {
	nd := 0
	for _, s := range shapes {
		nd = max(nd, len(s))
	}
	out := make([]int64, nd)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		for k, d := range s {
			o := &out[nd-len(s)+k]
			switch {
			case d == *o || d == 1:
			case *o == 1 || *o == unknown && d != 1:
				*o = d // an unknown size must turn out to be d or 1
			case d == unknown:
			default:
				names := make([]string, len(shapes))
				for i, s := range shapes {
					names[i] = fmt.Sprint(s)
				}
				return nil, fmt.Errorf("shapes %s do not broadcast: aligned at the right, dimension %d is %d in one and %d in another (each must be equal or 1)",
					strings.Join(names, " and "), nd-len(s)+k, *o, d)
			}
		}
	}
	return out, nil
}

// broadcastsTo reports whether an array of shape s can be read as shape to.
func broadcastsTo(s, to []int64) bool {
	if len(s) > len(to) {
		return false
	}
	for k, d := range s {
		if t := to[len(to)-len(s)+k]; d != t && d != 1 {
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
	if err := codec.Unmarshal(b, v); err != nil {
		return dag.Errorf(dag.KindInvalidArgument, "%s: malformed args: %w", op, err)
	}
	return nil
}

// decodeNodeArgs decodes the args of the node being tiled.
func decodeNodeArgs(tc *dag.TileContext, v any) error {
	if err := decodeArgs("", tc.Tileable().Args, v); err != nil {
		return tc.Errorf("malformed args: %v", err)
	}
	return nil
}

// unknown is the size of a dimension that depends on computed data (an
// upstream mask selection or unique): lowering's Unknown.
const unknown = -1

// inputShapes returns the shapes of the node's inputs, read from their
// chunk grids: lowering keeps those exact even where the graph declares a
// size unknown (a data-dependent op upstream). While some input chunk's
// size is still unknown, it returns an error that asks lowering for those
// chunks' metas (lowering.MetaNeeder); lowering computes them in a stage of
// their own and tiles the node again.
func inputShapes(tc *dag.TileContext) ([][]int64, error) {
	shapes := make([][]int64, len(tc.Inputs))
	var need []int32
	for i, g := range tc.Inputs {
		s := make([]int64, len(g.NSplits))
		known := true
		for d, sp := range g.NSplits {
			for _, c := range sp {
				known = known && c >= 0
				s[d] += c
			}
		}
		if !known {
			for _, c := range g.Chunks {
				for _, n := range tc.Chunks.Shape(c) {
					if n < 0 {
						need = append(need, c)
						break
					}
				}
			}
		}
		shapes[i] = s
	}
	if len(need) > 0 {
		return nil, &waitSizes{node: tc.Graph.Describe(tc.Node), chunks: need}
	}
	return shapes, nil
}

// waitSizes asks lowering for the metas of chunks (lowering.MetaNeeder).
type waitSizes struct {
	node   string
	chunks []int32
}

func (e *waitSizes) Error() string {
	return fmt.Sprintf("%s: waits for the sizes of %d computed chunks", e.node, len(e.chunks))
}

func (e *waitSizes) NeededChunks() []int32 { return e.chunks }

// checkNode checks that the node being tiled declares the shape and dtype its
// op computes (graph files can say anything). An unset dtype is accepted,
// and so is an unknown size (see unknown) in the declared shape.
func checkNode(tc *dag.TileContext, shape []int64, dt dag.DType) error {
	n := tc.Tileable()
	ok := len(n.Shape) == len(shape)
	for d := 0; ok && d < len(shape); d++ {
		ok = n.Shape[d] == shape[d] || n.Shape[d] == unknown
	}
	if !ok {
		return tc.Errorf("declares shape %v but its inputs give %v", n.Shape, shape)
	}
	if n.DType != dag.DTypeInvalid && n.DType != dt {
		return tc.Errorf("declares dtype %s but its op computes %s", n.DType, dt)
	}
	return nil
}

// inputDType returns input i's dtype, checking the kernels support it. The
// input's chunks are authoritative: a graph file may leave a node's dtype out.
func inputDType(tc *dag.TileContext, i int) (dag.DType, error) {
	d := tc.Input(i).DType
	if g := tc.Inputs[i]; g != nil && len(g.Chunks) > 0 {
		d = tc.Chunks.Nodes[g.Chunks[0]].DType
	}
	if !numeric(d) {
		return 0, tc.Errorf("input %d has dtype %s; tensor ops compute on float64 and int64", i, d)
	}
	return d, nil
}

// normAxis turns a possibly negative axis into [0, nd).
func normAxis(axis, nd int) (int, error) {
	if axis < -nd || axis >= nd {
		return 0, fmt.Errorf("axis %d is out of range for %d dimensions (use 0..%d or -%d..-1)", axis, nd, nd-1, nd)
	}
	if axis < 0 {
		axis += nd
	}
	return axis, nil
}

// mustEncode encodes chunk args; they are plain structs of numbers.
func mustEncode(v any) []byte { return mustArgs(v) }
