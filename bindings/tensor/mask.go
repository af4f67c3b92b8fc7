package tensor

import (
	"github.com/phobos-project/phobos/dag"
)

const maskName = "tensor.mask"

func init() { dag.MustRegister(maskOp{}) }

// Select returns the elements of t where mask is nonzero (NumPy's t[mask]),
// in order, as a 1-D tensor. t and mask are 1-D, of the same length and
// chunked alike; mask may be float64, int64 or bool. How many elements
// survive depends on the data, so a graph using Select runs in two stages:
// each chunk is filtered first, then the survivors are cut into chunks of
// the size given with Chunks (default: the chunk size of t's source).
func (t *Tensor) Select(mask *Tensor, opts ...Option) *Tensor {
	if t == nil {
		return failed(errNilReceiver("Select"))
	}
	if mask == nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "tensor.Select: mask is nil"))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	if err := mask.Err(); err != nil {
		return failed(err)
	}
	if len(t.shape) != 1 || !sameShape(t.shape, mask.shape) {
		return failed(dag.Errorf(dag.KindInvalidArgument, "tensor.Select: t has shape %v and mask %v; both must be 1-D of the same length", t.shape, mask.shape))
	}
	sel := derive(maskName, nil, []int64{unknownSize}, t.dtype, t, mask)
	return settle(sel, t, opts)
}

type maskOp struct{}

func (maskOp) Name() string { return maskName }
func (maskOp) NewArgs() any { return new(struct{}) }

// Tile filters chunk by chunk: output chunk i holds the selected elements
// of input chunk i; its size is unknown until it runs.
func (maskOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.Inputs) != 2 {
		return tc.Errorf("takes 2 inputs (values and mask), has %d", len(n.Inputs))
	}
	x, m := tc.Input(0), tc.Input(1)
	if len(x.Shape) != 1 || !sameShape(x.Shape, m.Shape) {
		return tc.Errorf("values have shape %v and mask %v; both must be 1-D of the same length", x.Shape, m.Shape)
	}
	gx, gm := tc.Inputs[0], tc.Inputs[1]
	if !sameSplits(gx.NSplits, gm.NSplits) {
		return tc.Errorf("values and mask are chunked differently (%v and %v); give them the same chunk size", gx.NSplits, gm.NSplits)
	}
	if len(n.Shape) != 1 || n.Shape[0] != unknownSize {
		return tc.Errorf("declares shape %v; its size depends on the data, so declare [-1]", n.Shape)
	}
	dt := x.DType
	if len(gx.Chunks) > 0 {
		dt = tc.Chunks.Nodes[gx.Chunks[0]].DType
	}
	if n.DType != dag.DTypeInvalid && n.DType != dt {
		return tc.Errorf("declares dtype %s but its values are %s", n.DType, dt)
	}
	args := tc.NodeArgs()
	grid := &dag.Grid{NSplits: [][]int64{make([]int64, len(gx.Chunks))}, Chunks: make([]int32, len(gx.Chunks))}
	for i := range gx.Chunks {
		grid.NSplits[0][i] = unknownSize
		c, err := tc.AddChunk(n.Op, args, dt, []int32{gx.Chunks[i], gm.Chunks[i]}, []int32{int32(i)}, []int64{unknownSize})
		if err != nil {
			return err
		}
		grid.Chunks[i] = c
	}
	tc.SetGrid(grid)
	return nil
}

// Exec counts the selected elements, allocates exactly that much and copies
// them, with one loop per mask and value type (no per-element calls).
func (maskOp) Exec(kc *dag.KernelCall) error {
	if len(kc.Inputs) != 2 {
		return dag.Errorf(dag.KindInvalidArgument, "%s: got %d inputs, want 2", maskName, len(kc.Inputs))
	}
	x, m := kc.Inputs[0], kc.Inputs[1]
	size := x.Meta.DType.Size()
	n := x.Meta.Elements()
	if (size != 8 && size != 1) || int64(len(x.Data)) != n*int64(size) || m.Meta.Elements() != n || int64(len(m.Data)) != n*int64(m.Meta.DType.Size()) {
		return dag.Errorf(dag.KindInvalidArgument, "%s: values %s%v and mask %s%v do not match", maskName, x.Meta.DType, x.Meta.Shape, m.Meta.DType, m.Meta.Shape)
	}
	var count int
	switch m.Meta.DType {
	case dag.Bool:
		count = countNonzero(m.Data)
	case dag.Int64:
		count = countNonzero(m.Int64s())
	case dag.Float64:
		count = countNonzero(m.Float64s())
	default:
		return dag.Errorf(dag.KindInvalidArgument, "%s: mask dtype %s; want bool, int64 or float64", maskName, m.Meta.DType)
	}
	out, err := kc.Output(0, dag.Meta{DType: x.Meta.DType, Shape: []int64{int64(count)}}, count*size)
	if err != nil {
		return err
	}
	if size == 8 {
		dst, src := dag.BytesAsInt64s(out), dag.BytesAsInt64s(x.Data)
		switch m.Meta.DType {
		case dag.Bool:
			compress(dst, src, m.Data)
		case dag.Int64:
			compress(dst, src, m.Int64s())
		case dag.Float64:
			compress(dst, src, m.Float64s())
		}
		return nil
	}
	switch m.Meta.DType {
	case dag.Bool:
		compress(out, x.Data, m.Data)
	case dag.Int64:
		compress(out, x.Data, m.Int64s())
	case dag.Float64:
		compress(out, x.Data, m.Float64s())
	}
	return nil
}

func countNonzero[M uint8 | int64 | float64](m []M) int {
	n := 0
	for _, v := range m {
		if v != 0 {
			n++
		}
	}
	return n
}

// compress copies x[i] for every nonzero m[i] into dst, in order.
func compress[V uint8 | int64, M uint8 | int64 | float64](dst, x []V, m []M) {
	w := 0
	for i, v := range m {
		if v != 0 {
			dst[w] = x[i]
			w++
		}
	}
}
