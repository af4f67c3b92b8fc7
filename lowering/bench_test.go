package lowering_test

import (
	"runtime"
	"testing"

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
