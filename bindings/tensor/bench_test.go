package tensor

import (
	"context"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// Kernel benchmarks. GB/s counts the bytes read from the inputs, so the
// fused and unfused (a+b).sum() and copy() of the same bytes compare
// directly:
//
//	go test -run '^$' -bench 'AddSum|Copy|Matmul' -benchmem ./bindings/tensor

const benchN = 10_000_000

// fixedAlloc hands out the same memory every run, as a warm object store
// would, so benchmarks measure kernels rather than the Go allocator.
type fixedAlloc struct{ bufs [][]byte }

func (f *fixedAlloc) Output(i int, m dag.Meta, n int) ([]byte, error) {
	for len(f.bufs) <= i {
		f.bufs = append(f.bufs, nil)
	}
	if cap(f.bufs[i]) < n {
		f.bufs[i] = dag.Float64sAsBytes(make([]float64, (n+7)/8))
	}
	return f.bufs[i][:n], nil
}

func benchInput(n int, seed float64) dag.Value {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i%1000)*seed + 0.5
	}
	return dag.Value{Meta: dag.Meta{DType: dag.Float64, Shape: []int64{int64(n)}}, Data: dag.Float64sAsBytes(x)}
}

var sumArgs = mustArgs(reduceArgs{Axes: []int{0}})

func addSumSteps(n int) []dag.ChainStep {
	return []dag.ChainStep{
		{Op: dag.OpIDOf("tensor.add"), Inputs: []int32{-1, -2}, Shape: []int64{int64(n)}, DType: dag.Float64, Output: -1},
		{Op: dag.OpIDOf("tensor.sum"), Args: sumArgs, Inputs: []int32{0}, Shape: []int64{}, DType: dag.Float64, Output: 0},
	}
}

// BenchmarkAddSumFused is the seeds' subtask [ADD, SUM] on one chunk of
// 10^7 elements, run as the raylet runs a fused subtask.
func BenchmarkAddSumFused(b *testing.B) {
	a, c := benchInput(benchN, 1), benchInput(benchN, 2)
	k := addOp.FuseChain(addSumSteps(benchN))
	if k == nil {
		b.Fatal("not fused")
	}
	out := &fixedAlloc{}
	kc := &dag.KernelCall{Ctx: context.Background(), Shape: []int64{}, DType: dag.Float64, Inputs: []dag.Value{a, c}, Outputs: out}
	b.SetBytes(16 * benchN)
	b.ReportAllocs()
	for b.Loop() {
		if err := k.Exec(kc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddSumUnfused runs ADD into a 10^7-element intermediate, then
// SUM over it: one kernel per op.
func BenchmarkAddSumUnfused(b *testing.B) {
	a, c := benchInput(benchN, 1), benchInput(benchN, 2)
	mid, out := &fixedAlloc{}, &fixedAlloc{}
	add := &dag.KernelCall{Ctx: context.Background(), Shape: []int64{benchN}, DType: dag.Float64, Inputs: []dag.Value{a, c}, Outputs: mid}
	sum := &dag.KernelCall{Ctx: context.Background(), Args: sumArgs, Shape: []int64{}, DType: dag.Float64, Outputs: out}
	b.SetBytes(16 * benchN)
	b.ReportAllocs()
	for b.Loop() {
		if err := addOp.Exec(add); err != nil {
			b.Fatal(err)
		}
		sum.Inputs = []dag.Value{{Meta: dag.Meta{DType: dag.Float64, Shape: []int64{benchN}}, Data: mid.bufs[0]}}
		if err := sumOp.Exec(sum); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy copies the same 2×10^7 float64s (a and b) with copy(): the
// memory-bandwidth yardstick for the two above.
func BenchmarkCopy(b *testing.B) {
	a, c := benchInput(benchN, 1), benchInput(benchN, 2)
	dst := make([]byte, 16*benchN)
	b.SetBytes(16 * benchN)
	for b.Loop() {
		copy(dst, a.Data)
		copy(dst[8*benchN:], c.Data)
	}
}

// BenchmarkAddSumVsCopy times copy(), fused and unfused (a+b).sum() in turn
// within each iteration, so all three see the same machine load, and
// reports each one's GB/s (input bytes) and the ratios to copy.
func BenchmarkAddSumVsCopy(b *testing.B) {
	a, c := benchInput(benchN, 1), benchInput(benchN, 2)
	dst := make([]byte, 16*benchN)
	k := addOp.FuseChain(addSumSteps(benchN))
	out, mid := &fixedAlloc{}, &fixedAlloc{}
	fused := &dag.KernelCall{Ctx: context.Background(), Shape: []int64{}, DType: dag.Float64, Inputs: []dag.Value{a, c}, Outputs: out}
	add := &dag.KernelCall{Ctx: context.Background(), Shape: []int64{benchN}, DType: dag.Float64, Inputs: []dag.Value{a, c}, Outputs: mid}
	sum := &dag.KernelCall{Ctx: context.Background(), Args: sumArgs, Shape: []int64{}, DType: dag.Float64, Outputs: out,
		Inputs: make([]dag.Value, 1)}
	var tc, tf, tu time.Duration
	for b.Loop() {
		t0 := time.Now()
		copy(dst, a.Data)
		copy(dst[8*benchN:], c.Data)
		t1 := time.Now()
		if err := k.Exec(fused); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := addOp.Exec(add); err != nil {
			b.Fatal(err)
		}
		sum.Inputs[0] = dag.Value{Meta: dag.Meta{DType: dag.Float64, Shape: []int64{benchN}}, Data: mid.bufs[0]}
		if err := sumOp.Exec(sum); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		tc, tf, tu = tc+t1.Sub(t0), tf+t2.Sub(t1), tu+t3.Sub(t2)
	}
	gbs := func(d time.Duration) float64 { return 16 * benchN * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(gbs(tc), "copy-GB/s")
	b.ReportMetric(gbs(tf), "fused-GB/s")
	b.ReportMetric(gbs(tu), "unfused-GB/s")
	b.ReportMetric(tc.Seconds()/tf.Seconds(), "fused/copy")
	b.ReportMetric(tc.Seconds()/tu.Seconds(), "unfused/copy")
}

// BenchmarkSum is a whole-array sum of 10^7 elements.
func BenchmarkSum(b *testing.B) {
	a := benchInput(benchN, 1)
	kc := &dag.KernelCall{Ctx: context.Background(), Args: sumArgs, Shape: []int64{}, DType: dag.Float64, Inputs: []dag.Value{a}, Outputs: &fixedAlloc{}}
	b.SetBytes(8 * benchN)
	b.ReportAllocs()
	for b.Loop() {
		if err := sumOp.Exec(kc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkElementwise runs single ops over 10^6 elements (bytes read).
func BenchmarkElementwise(b *testing.B) {
	const n = 1_000_000
	x, y := benchInput(n, 1), benchInput(n, 3)
	for _, c := range []struct {
		name string
		op   dag.Kernel
		args []byte
		ins  []dag.Value
	}{
		{"add", addOp, nil, []dag.Value{x, y}},
		{"mul-scalar", mulOp, mustArgs(elemArgs{Side: sideRight, Value: 3}), []dag.Value{x}},
		{"maximum", maxOp2, nil, []dag.Value{x, y}},
		{"sqrt", sqrtOp, nil, []dag.Value{x}},
		{"exp", expOp, nil, []dag.Value{x}},
		{"sum-axis0", sumOp, mustArgs(reduceArgs{Axes: []int{0}}), []dag.Value{reshape(x, 1000, 1000)}},
		{"sum-axis1", sumOp, mustArgs(reduceArgs{Axes: []int{1}}), []dag.Value{reshape(x, 1000, 1000)}},
		{"transpose", transposeOp{}, nil, []dag.Value{reshape(x, 1000, 1000)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			shape := c.ins[0].Meta.Shape
			if c.name == "sum-axis0" || c.name == "sum-axis1" {
				shape = []int64{1000}
			}
			kc := &dag.KernelCall{Ctx: context.Background(), Args: c.args, Shape: shape, DType: dag.Float64, Inputs: c.ins, Outputs: &fixedAlloc{}}
			b.SetBytes(int64(8 * n * len(c.ins)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.op.Exec(kc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func reshape(v dag.Value, shape ...int64) dag.Value {
	v.Meta.Shape = shape
	return v
}

// BenchmarkMatmul multiplies two 1000×1000 chunks (one output chunk).
func BenchmarkMatmul(b *testing.B) {
	const n = 1000
	a, c := reshape(benchInput(n*n, 1e-3), n, n), reshape(benchInput(n*n, 2e-3), n, n)
	kc := &dag.KernelCall{Ctx: context.Background(), Shape: []int64{n, n}, DType: dag.Float64, Inputs: []dag.Value{a, c}, Outputs: &fixedAlloc{}}
	b.ReportAllocs()
	for b.Loop() {
		if err := (matmulOp{}).Exec(kc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	b.Log("micro-kernel:", gemmKernel.name)
}

// BenchmarkTileSeedExample tiles the seed example at 85,000 chunks per input
// (the lowering benchmark's graph): the part of lowering these ops own.
func BenchmarkTileSeedExample(b *testing.B) {
	const chunks = 85000
	x := Rand([]int64{chunks * 100}, Chunks(100), Seed(1))
	y := Rand([]int64{chunks * 100}, Chunks(100), Seed(2))
	g, err := Graph(x.Add(y).Sum())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		tl, err := lowering.Tile(g, dag.Ops)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(tl.Chunks.Len()), "chunks")
	}
}
