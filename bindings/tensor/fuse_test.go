package tensor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// TestFusedChains builds random chains of elementwise ops, optionally ending
// in a reduction, over random shapes and chunkings. eval runs each fused and
// unfused and requires equal bytes; the reference checks the values.
func TestFusedChains(t *testing.T) {
	g := newGen(11)
	unaries := []unaryOp{negOp, absOp, expOp, sqrtOp}
	binaries := []binaryOp{addOp, subOp, mulOp, divOp, maxOp2, minOp2}
	reductions := []reduceOp{sumOp, prodOp, minOp, maxOp, meanOp}
	before := fusedRuns
	for i := range 80 {
		shape := g.shape(3, 40)
		a := g.data(g.dtype(), shape, false)
		b := g.data(g.dtype(), shape, false)
		opt := g.chunking(shape)
		var x *Tensor
		var want *arr
		switch i % 3 {
		case 0: // a binary op of two inputs starts the chain: the seeds' ADD
			x, want = FromSlice(floatData(a), shape, opt).Add(FromSlice(floatData(b), shape, opt)), refBinary(addOp, toFloat(a), toFloat(b))
		case 1: // a source starts it: RAND, ADD, MUL
			x = Rand(shape, opt, Seed(uint64(i)))
			want = toFloat(eval(t, x)[0])
		default:
			x, want = g.tensor(a), a
		}
		steps := []string{}
		for range 1 + g.r.IntN(4) {
			if g.r.IntN(5) == 0 && len(want.shape) > 0 { // a data-movement op in the middle of the chain
				if g.r.IntN(2) == 0 {
					perm := make([]int, len(want.shape))
					for d := range perm {
						perm[d] = len(perm) - 1 - d
					}
					x, want = x.T(), refTranspose(want, perm)
					steps = append(steps, "T")
				} else {
					x, want = x.Slice(Every(-1)), refSlice(want, []Range{Every(-1)})
					steps = append(steps, "::-1")
				}
				continue
			}
			if g.r.IntN(2) == 0 {
				op := unaries[g.r.IntN(len(unaries))]
				x, want = unary(op, x), refUnary(op, want)
				steps = append(steps, op.name)
				continue
			}
			op := binaries[g.r.IntN(len(binaries))]
			c := float64(g.r.IntN(7)-3) / 2
			if g.r.IntN(2) == 0 {
				x, want = binary(op, x, Scalar(c)), refBinary(op, want, scalarArr(c))
			} else {
				x, want = binary(op, Scalar(c), x), refBinary(op, scalarArr(c), want)
			}
			steps = append(steps, op.name)
		}
		what := fmt.Sprintf("case %d: %v %v", i, shape, steps)
		if g.r.IntN(2) == 0 {
			op := reductions[g.r.IntN(len(reductions))]
			var axes []int
			if len(want.shape) > 0 && g.r.IntN(2) == 0 {
				axes = []int{g.r.IntN(len(want.shape))}
			}
			if (op.kind == redMin || op.kind == redMax) && elements(shape) == 0 {
				continue
			}
			r := refReduce(op, want, axes, false)
			var opts []ReduceOption
			if axes != nil {
				opts = append(opts, Axis(axes...))
			}
			// Only exactness of fused against unfused is required here; the
			// reference agrees to rounding.
			near(t, what+" "+op.name, eval(t, reduce(op, x, opts))[0], r, 1e-9, elements(shape))
			continue
		}
		same(t, what, eval(t, x)[0], want)
	}
	if fusedRuns-before < 100 {
		t.Fatalf("only %d subtasks ran fused", fusedRuns-before)
	}
}

func floatData(a *arr) []float64 { return toFloat(a.value()).f }

func toFloat(v any) *arr {
	var a *arr
	switch v := v.(type) {
	case *arr:
		a = v
	case dag.Value:
		a = &arr{dt: v.Meta.DType, shape: v.Meta.Shape}
		if a.dt == dag.Int64 {
			a.i = v.Int64s()
		} else {
			a.f = v.Float64s()
		}
	}
	if a.dt == dag.Float64 {
		return a
	}
	f := newArr(dag.Float64, a.shape)
	for k, x := range a.i {
		f.f[k] = float64(x)
	}
	return f
}

func scalarArr(v float64) *arr {
	a := newArr(dag.Float64, nil)
	a.f[0] = v
	return a
}

// TestSeedChainFuses checks that the seeds' example and (t+1)*2 lower to
// the expected fused subtasks and that the raylet-style run fuses them.
func TestSeedChainFuses(t *testing.T) {
	a := Rand([]int64{1000}, Chunks(100), Seed(1))
	b := Rand([]int64{1000}, Chunks(100), Seed(2))
	x := Rand([]int64{9, 9}, Chunks(3), Seed(3))
	for _, c := range []struct {
		t    *Tensor
		want string // the first multi-op subtask
	}{
		{a.Add(b).Sum(), "tensor.add+tensor.sum"},
		{x.Add(Scalar(1)).Mul(Scalar(2)), "tensor.rand+tensor.add+tensor.mul"},
		{x.Exp().Sum(Axis(1)), "tensor.rand+tensor.exp+tensor.sum"},
		{x.Transpose().Slice(Every(-2)).Neg().Sqrt().Max(), "tensor.rand+tensor.transpose+tensor.slice+tensor.neg+tensor.sqrt+tensor.max"},
	} {
		g, err := Graph(c.t)
		if err != nil {
			t.Fatal(err)
		}
		p, err := lowering.Lower(g, 1, lowering.Options{}, dag.Ops, lowering.Counter())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for s := int32(0); s < int32(p.Stage.Len()); s++ {
			var names []string
			for _, ch := range p.Stage.ChunksOf(s) {
				names = append(names, dag.Ops.Name(p.Stage.Chunks.Nodes[ch].Op))
			}
			if strings.Join(names, "+") == c.want {
				found = true
			}
		}
		if !found {
			t.Fatalf("no subtask %s", c.want)
		}
		before := fusedRuns
		eval(t, c.t)
		if fusedRuns == before {
			t.Fatalf("%s never ran fused", c.want)
		}
	}
}

// TestFusedExportsIntermediate asks for a+b and (a+b).sum() at once: the
// ADD is both a subtask output and fused into the SUM.
func TestFusedExportsIntermediate(t *testing.T) {
	a := Arange(0, 5000, 1, Chunks(1200))
	b := Ones([]int64{5000}, Chunks(1200))
	s := a.Add(b)
	before := fusedRuns
	res := eval(t, s, s.Sum())
	if fusedRuns == before {
		t.Fatal("nothing ran fused")
	}
	x := res[0].Float64s()
	for i, v := range x {
		if v != float64(i+1) {
			t.Fatalf("a+b at %d = %v", i, v)
		}
	}
	if res[1].Float64s()[0] != 5000*5001/2 {
		t.Fatalf("sum %v", res[1].Float64s())
	}
}

func TestFuseChainDeclines(t *testing.T) {
	st := func(name string, ins ...int32) dag.ChainStep {
		return dag.ChainStep{Op: dag.OpIDOf(name), Inputs: ins, Shape: []int64{4}, DType: dag.Float64, Output: -1}
	}
	if k := addOp.FuseChain([]dag.ChainStep{st("tensor.add", -1, -2), st("tensor.nope", 0)}); k != nil {
		t.Fatal("fused a chain with an unknown op")
	}
	if k := addOp.FuseChain([]dag.ChainStep{st("tensor.add", -1, -2), st("tensor.transpose", 0)}); k != nil {
		t.Fatal("fused a chain with nothing to fuse")
	}
	if k := addOp.FuseChain([]dag.ChainStep{st("tensor.add", -1, -2), st("tensor.neg", 0)}); k == nil {
		t.Fatal("declined ADD, NEG")
	}
}

// TestFusedInterrupt cancels a long fused chain: it must stop with
// ErrInterrupted instead of finishing.
func TestFusedInterrupt(t *testing.T) {
	const n = 1 << 20
	steps := []dag.ChainStep{
		{Op: dag.OpIDOf("tensor.add"), Inputs: []int32{-1, -2}, Shape: []int64{n}, DType: dag.Float64, Output: -1},
		{Op: dag.OpIDOf("tensor.sum"), Args: mustArgs(reduceArgs{Axes: []int{0}}), Inputs: []int32{0}, Shape: []int64{}, DType: dag.Float64, Output: 0},
	}
	k := addOp.FuseChain(steps)
	if k == nil {
		t.Fatal("not fused")
	}
	x := make([]float64, n)
	in := dag.Value{Meta: dag.Meta{DType: dag.Float64, Shape: []int64{n}}, Data: dag.Float64sAsBytes(x)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	kc := &dag.KernelCall{Ctx: ctx, Inputs: []dag.Value{in, in}, Outputs: &heapAlloc{}, Shape: []int64{}, DType: dag.Float64}
	if err := k.Exec(kc); !errors.Is(err, dag.ErrInterrupted) {
		t.Fatalf("cancelled fused kernel returned %v", err)
	}
	kc.Ctx, kc.Outputs = context.Background(), &heapAlloc{}
	if err := k.Exec(kc); err != nil {
		t.Fatal(err)
	}
}

// TestKernelsRejectBadCalls runs every kernel on calls that do not match
// its args or inputs: each must return an error, never panic.
func TestKernelsRejectBadCalls(t *testing.T) {
	v := func(dt dag.DType, shape []int64, nbytes int) dag.Value {
		return dag.Value{Meta: dag.Meta{DType: dt, Shape: shape}, Data: make([]byte, nbytes)}
	}
	f4 := v(dag.Float64, []int64{4}, 32)
	cases := []struct {
		op    string
		args  []byte
		ins   []dag.Value
		shape []int64
	}{
		{"tensor.add", nil, []dag.Value{f4}, []int64{4}},
		{"tensor.add", nil, []dag.Value{f4, v(dag.Float64, []int64{3}, 24)}, []int64{4}},
		{"tensor.add", nil, []dag.Value{f4, v(dag.Float64, []int64{4}, 8)}, []int64{4}},
		{"tensor.add", []byte{0xff}, []dag.Value{f4, f4}, []int64{4}},
		{"tensor.neg", nil, []dag.Value{v(dag.Bool, []int64{4}, 4)}, []int64{4}},
		{"tensor.sum", mustArgs(reduceArgs{Axes: []int{3}}), []dag.Value{f4}, nil},
		{"tensor.sum", nil, []dag.Value{f4}, []int64{2}},
		{"tensor.sum.combine", nil, []dag.Value{f4, v(dag.Float64, []int64{2}, 16)}, []int64{4}},
		{"tensor.fromslice", mustArgs(dataArgs{Data: []float64{1}}), nil, []int64{4}},
		{"tensor.matmul", nil, []dag.Value{v(dag.Float64, []int64{2, 2}, 32), v(dag.Float64, []int64{3, 2}, 48)}, []int64{2, 2}},
		{"tensor.matmul", nil, []dag.Value{f4}, []int64{2, 2}},
		{"tensor.transpose", mustArgs(transposeArgs{Axes: []int{0, 0}}), []dag.Value{v(dag.Float64, []int64{2, 2}, 32)}, []int64{2, 2}},
		{"tensor.transpose", nil, []dag.Value{v(dag.Float64, []int64{2, 3}, 48)}, []int64{2, 3}},
		{"tensor.slice", mustArgs(sliceArgs{Starts: []int64{3}, Steps: []int64{1}}), []dag.Value{f4}, []int64{2}},
		{"tensor.rechunk", mustArgs(rechunkArgs{Counts: []int64{2}, Offset: []int64{0}}), []dag.Value{f4}, []int64{4}},
		{"tensor.rechunk", mustArgs(rechunkArgs{Counts: []int64{1}, Offset: []int64{2}}), []dag.Value{f4}, []int64{4}},
	}
	for _, c := range cases {
		op, ok := dag.Ops.Lookup(dag.OpIDOf(c.op))
		if !ok {
			t.Fatalf("%s not registered", c.op)
		}
		kc := &dag.KernelCall{Ctx: context.Background(), Args: c.args, Shape: c.shape, DType: dag.Float64, Inputs: c.ins, Outputs: &heapAlloc{}}
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return op.(dag.Kernel).Exec(kc)
		}()
		if err == nil || strings.HasPrefix(err.Error(), "panic") {
			t.Errorf("%s on %v: %v, want an error", c.op, c.ins, err)
		}
	}
}
