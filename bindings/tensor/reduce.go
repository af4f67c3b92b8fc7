package tensor

import (
	"github.com/phobos-project/phobos/dag"
)

// DefaultCombine is how many partial results a tree reduction combines per
// node.
const DefaultCombine = 4

type reduceArgs struct {
	Combine int `cbor:"1,keyasint,omitempty"`
}

const (
	sumName        = "tensor.sum"
	sumCombineName = "tensor.sum.combine"
)

func init() {
	dag.MustRegister(sumOp{})
	dag.MustRegister(sumCombineOp{})
}

// Sum returns the sum of all elements, a 0-dimensional tensor. It runs as a
// tree reduction: one partial sum per chunk, then levels that each combine
// up to DefaultCombine partials.
func (t *Tensor) Sum() *Tensor { return t.SumCombine(DefaultCombine) }

// SumCombine is Sum with a chosen number of partials combined per tree node
// (at least 2).
func (t *Tensor) SumCombine(combine int) *Tensor {
	if t == nil {
		return failed(errNilReceiver("Sum"))
	}
	if combine < 2 {
		return failed(dag.Errorf(dag.KindInvalidArgument, "tensor.sum: combine size %d must be at least 2", combine))
	}
	return derive(sumName, reduceArgs{Combine: combine}, nil, t)
}

type sumOp struct{}

func (sumOp) Name() string { return sumName }

func (sumOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.Inputs) != 1 {
		return tc.Errorf("takes 1 input, has %d", len(n.Inputs))
	}
	var a reduceArgs
	if err := decodeArgs(sumName, n.Args, &a); err != nil {
		return tc.Errorf("%v", err)
	}
	if a.Combine == 0 {
		a.Combine = DefaultCombine
	}
	if a.Combine < 2 {
		return tc.Errorf("combine size %d must be at least 2", a.Combine)
	}
	in := tc.Inputs[0]
	args := tc.NodeArgs()
	level := make([]int32, len(in.Chunks))
	for i, c := range in.Chunks {
		p, err := tc.AddChunk(n.Op, args, dag.Float64, []int32{c}, nil, nil)
		if err != nil {
			return err
		}
		level[i] = p
	}
	combineOp := dag.OpIDOf(sumCombineName)
	for len(level) > 1 {
		next := level[:0:0]
		for i := 0; i < len(level); i += a.Combine {
			j := min(i+a.Combine, len(level))
			if j-i == 1 { // a lone partial moves up a level as it is
				next = append(next, level[i])
				continue
			}
			p, err := tc.AddChunk(combineOp, args, dag.Float64, level[i:j], nil, nil)
			if err != nil {
				return err
			}
			next = append(next, p)
		}
		level = next
	}
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: level})
	return nil
}

func (sumOp) Exec(kc *dag.KernelCall) error {
	if len(kc.Inputs) != 1 {
		return dag.Errorf(dag.KindInvalidArgument, "%s: got %d inputs, want 1", sumName, len(kc.Inputs))
	}
	out, err := allocFloat64(kc, 0, nil)
	if err != nil {
		return err
	}
	out[0] = sumFloat64(kc.Inputs[0].Float64s())
	return nil
}

type sumCombineOp struct{}

func (sumCombineOp) Name() string { return sumCombineName }

func (sumCombineOp) Exec(kc *dag.KernelCall) error {
	out, err := allocFloat64(kc, 0, nil)
	if err != nil {
		return err
	}
	s := 0.0
	for _, in := range kc.Inputs {
		v := in.Float64s()
		if len(v) != 1 {
			return dag.Errorf(dag.KindInvalidArgument, "%s: partial has %d elements, want 1", sumCombineName, len(v))
		}
		s += v[0]
	}
	out[0] = s
	return nil
}

// sumFloat64 adds x with four independent accumulators, which lets the CPU
// overlap the additions; the order is fixed, so results are reproducible.
func sumFloat64(x []float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func errNilReceiver(method string) error {
	return dag.Errorf(dag.KindInvalidArgument, "tensor.%s called on a nil tensor: build it with a constructor such as tensor.Rand", method)
}
