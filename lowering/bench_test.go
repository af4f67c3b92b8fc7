package lowering_test

import (
	"fmt"
	"github.com/phobos-project/phobos/bindings/bench"
	"runtime"
	"slices"
	"testing"

	"github.com/phobos-project/phobos/bindings/kv"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// BenchmarkLowerSeedExample lowers (a+b).sum() with 85,000 chunks per input
// (about 280,000 subtasks with chain fusion) on 2 raylets: tile, fuse,
// group, allocate, prioritise, assign. It reports the subtasks and the heap
// a kept plan retains per subtask (measured after GC around one lowering).
// Targets (issue 5): <= 0.25 s and <= 500 bytes per subtask.
func BenchmarkLowerSeedExample(b *testing.B) {
	for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseColoring} {
		b.Run(fusion.String(), func(b *testing.B) {
			g := seedExample(b, 85000*100, 100)
			opts := lowering.Options{Fusion: fusion, Slots: []int{4, 4}}
			lower := func() *lowering.Plan {
				p, err := lowering.Lower(g, 1, opts, dag.Ops, lowering.Counter())
				if err != nil {
					b.Fatal(err)
				}
				return p
			}
			b.ReportAllocs()
			var p *lowering.Plan
			for b.Loop() {
				p = lower()
			}
			n := p.Stage.Len()
			p = nil
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			p = lower()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(p)
			b.ReportMetric(float64(n), "subtasks")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "retained-B/subtask")
		})
	}
}

// BenchmarkLowerSeedRaylets lowers the seed example's million subtasks
// (370,370 chunks per input) for 10 and 1,000 raylets of 16 slots, with
// either fusion: lowering's cost should not grow with the raylets it
// places on (issue 17). Colouring once scanned the raylets it had met for
// every batch of initial chunks: 0.45 s at 1,000 raylets against 0.30 s
// at 10.
func BenchmarkLowerSeedRaylets(b *testing.B) {
	g := seedExample(b, 370370*100, 100)
	for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseColoring} {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("%s/raylets=%d", fusion, n), func(b *testing.B) {
				opts := lowering.Options{Fusion: fusion, Slots: slices.Repeat([]int{16}, n)}
				for b.Loop() {
					if _, err := lowering.Lower(g, 1, opts, dag.Ops, lowering.Counter()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkLoweringBytes measures what lowering a job allocates in all
// (TotalAlloc across Tile and Plan, an upper bound of its peak) and what
// the finished plan keeps (heap after GC), per graph shape and fusion,
// next to the estimate's PlanBytes without the scheduler's share: the
// constants of lowering.EstimateJob come from here.
func BenchmarkLoweringBytes(b *testing.B) {
	for _, c := range loweringBytesCases(b) {
		for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseColoring, lowering.FuseNone} {
			b.Run(c.name+"/"+fusion.String(), func(b *testing.B) {
				opts := lowering.Options{Fusion: fusion, Slots: []int{4, 4}}
				est, err := lowering.EstimateJob(c.g, dag.Ops, fusion)
				if err != nil {
					b.Fatal(err)
				}
				var total, kept uint64
				var built lowering.Estimate
				for b.Loop() {
					var before, mid, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					tl, err := lowering.Tile(c.g, dag.Ops)
					if err != nil {
						b.Fatal(err)
					}
					p, err := tl.Plan(1, opts, lowering.Counter())
					if err != nil {
						b.Fatal(err)
					}
					runtime.ReadMemStats(&mid)
					runtime.GC()
					runtime.ReadMemStats(&after)
					runtime.KeepAlive(p)
					total, kept = mid.TotalAlloc-before.TotalAlloc, after.HeapAlloc-before.HeapAlloc
					built = tl.Built()
				}
				lowerEst := est.PlanBytes - est.Subtasks*lowering.BytesPerSubtask
				b.ReportMetric(float64(built.Chunks), "chunks")
				b.ReportMetric(float64(built.Edges), "edges")
				b.ReportMetric(float64(built.Subtasks), "subtasks")
				b.ReportMetric(float64(total)/float64(built.Chunks), "alloc-B/chunk")
				b.ReportMetric(float64(kept)/float64(built.Chunks), "kept-B/chunk")
				b.ReportMetric(float64(lowerEst)/float64(total), "est/alloc")
			})
		}
	}
}

type bytesCase struct {
	name string
	g    *dag.TileableGraph
}

func loweringBytesCases(b *testing.B) []bytesCase {
	graph := func(ts ...*tensor.Tensor) *dag.TileableGraph {
		g, err := tensor.Graph(ts...)
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	m := tensor.Rand([]int64{600, 600}, tensor.Chunks(3))
	kvg, err := kv.Words(kv.Text(400, 1, 1)).GroupBy(400).Sum().TileableGraph()
	if err != nil {
		b.Fatal(err)
	}
	return []bytesCase{
		{"seed", seedExample(b, 100_000*10, 10)},
		{"2d-chain-axis", graph(m.Add(tensor.Scalar(1)).Mul(m).Sum(tensor.Axis(1)))},
		{"rechunk", graph(m.Rechunk(4))},
		{"slice", graph(m.Slice(tensor.Stride(1, 599, 2), tensor.Every(-1)))},
		{"matmul", graph(tensor.Matmul(tensor.Rand([]int64{300, 300}, tensor.Chunks(3)), tensor.Rand([]int64{300, 300}, tensor.Chunks(3))))},
		{"kv-shuffle", kvg},
		{"3d-transpose", graph(tensor.Rand([]int64{60, 60, 60}, tensor.Chunks(3)).Transpose(2, 0, 1).Neg())},
	}
}

// BenchmarkLowerTenMillion lowers jobs of about 10 million subtasks (issue
// 17, item 3: lowering within 2 s): ten million independent subtasks, and
// the seed example with 3.33 million chunks per input on 16 raylets. It
// reports the subtasks, seconds per lowering and the heap the kept plan
// retains per subtask. Run it alone: each lowering takes gigabytes.
func BenchmarkLowerTenMillion(b *testing.B) {
	cases := []struct {
		name string
		g    func() *dag.TileableGraph
	}{
		{"independent", func() *dag.TileableGraph {
			g, err := bench.Independent(10_000_000).TileableGraph()
			if err != nil {
				b.Fatal(err)
			}
			return g
		}},
		{"seed", func() *dag.TileableGraph { return seedExample(b, 3_333_334*100, 100) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			g := c.g()
			opts := lowering.Options{Fusion: lowering.FuseChain, Slots: slices.Repeat([]int{16}, 16)}
			var n int
			var before, after runtime.MemStats
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				p, err := lowering.Lower(g, 1, opts, dag.Ops, lowering.Counter())
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				n = p.Stage.Len()
				runtime.KeepAlive(p)
				b.StartTimer()
			}
			b.ReportMetric(float64(n), "subtasks")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "retained-B/subtask")
		})
	}
}
