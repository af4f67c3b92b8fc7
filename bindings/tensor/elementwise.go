package tensor

import (
	"fmt"

	"github.com/phobos-project/phobos/dag"
)

// binaryOp is an elementwise op of two same-shaped, same-chunked tensors.
type binaryOp struct {
	name string
	loop func(dst, a, b []float64)
}

var (
	addOp = binaryOp{"tensor.add", func(d, a, b []float64) {
		for i := range d {
			d[i] = a[i] + b[i]
		}
	}}
	subOp = binaryOp{"tensor.sub", func(d, a, b []float64) {
		for i := range d {
			d[i] = a[i] - b[i]
		}
	}}
	mulOp = binaryOp{"tensor.mul", func(d, a, b []float64) {
		for i := range d {
			d[i] = a[i] * b[i]
		}
	}}
	divOp = binaryOp{"tensor.div", func(d, a, b []float64) {
		for i := range d {
			d[i] = a[i] / b[i]
		}
	}}
)

func init() {
	for _, op := range []binaryOp{addOp, subOp, mulOp, divOp} {
		dag.MustRegister(op)
	}
}

// Add returns t + u elementwise.
func (t *Tensor) Add(u *Tensor) *Tensor { return binary(addOp, t, u) }

// Sub returns t - u elementwise.
func (t *Tensor) Sub(u *Tensor) *Tensor { return binary(subOp, t, u) }

// Mul returns t * u elementwise.
func (t *Tensor) Mul(u *Tensor) *Tensor { return binary(mulOp, t, u) }

// Div returns t / u elementwise.
func (t *Tensor) Div(u *Tensor) *Tensor { return binary(divOp, t, u) }

func binary(op binaryOp, t, u *Tensor) *Tensor {
	if t == nil || u == nil {
		return failed(fmt.Errorf("%s: an operand is nil", op.name))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	if err := u.Err(); err != nil {
		return failed(err)
	}
	if !sameShape(t.shape, u.shape) {
		return failed(fmt.Errorf("%s: shapes %v and %v differ", op.name, t.shape, u.shape))
	}
	return derive(op.name, nil, t.shape, t, u)
}

func (op binaryOp) Name() string { return op.name }

func (op binaryOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.Inputs) != 2 {
		return tc.Errorf("takes 2 inputs, has %d", len(n.Inputs))
	}
	a, b := tc.Input(0), tc.Input(1)
	if !sameShape(a.Shape, b.Shape) || !sameShape(a.Shape, n.Shape) {
		return tc.Errorf("input shapes %v and %v and output shape %v must be equal", a.Shape, b.Shape, n.Shape)
	}
	ga, gb := tc.Inputs[0], tc.Inputs[1]
	if !sameSplits(ga.NSplits, gb.NSplits) {
		return tc.Errorf("inputs are chunked differently (%v and %v); give them the same chunk size", ga.NSplits, gb.NSplits)
	}
	args := tc.NodeArgs()
	grid := &dag.Grid{NSplits: ga.NSplits, Chunks: make([]int32, len(ga.Chunks))}
	for i := range ga.Chunks {
		in := [2]int32{ga.Chunks[i], gb.Chunks[i]}
		src := in[0]
		c, err := tc.AddChunk(n.Op, args, n.DType, in[:], tc.Chunks.Index(src), tc.Chunks.Shape(src))
		if err != nil {
			return err
		}
		grid.Chunks[i] = c
	}
	tc.SetGrid(grid)
	return nil
}

func (op binaryOp) Exec(kc *dag.KernelCall) error {
	if len(kc.Inputs) != 2 {
		return dag.Errorf(dag.KindInvalidArgument, "%s: got %d inputs, want 2", op.name, len(kc.Inputs))
	}
	a, b := kc.Inputs[0].Float64s(), kc.Inputs[1].Float64s()
	if len(a) != len(b) {
		return dag.Errorf(dag.KindInvalidArgument, "%s: inputs have %d and %d elements", op.name, len(a), len(b))
	}
	out, err := allocFloat64(kc, 0, kc.Inputs[0].Meta.Shape)
	if err != nil {
		return err
	}
	if len(out) != len(a) {
		return dag.Errorf(dag.KindInvalidArgument, "%s: output has %d elements, inputs %d", op.name, len(out), len(a))
	}
	op.loop(out, a, b)
	return nil
}
