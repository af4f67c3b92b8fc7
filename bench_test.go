package phobos_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
)

func benchCluster(b *testing.B, fusion string) (*phobos.Client, context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2, Slots: 2, StoreSize: 256 << 20, Options: phobos.Options{Fusion: fusion}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, ctx
}

func runJob(b *testing.B, c *phobos.Client, ctx context.Context, g phobos.Graph) {
	j, err := c.Submit(ctx, g)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := j.Done(ctx); err != nil {
		b.Fatal(err)
	}
	if err := j.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkIndependent runs 200,000 trivial independent subtasks end to end.
func BenchmarkIndependent(b *testing.B) {
	c, ctx := benchCluster(b, "")
	const n = 200_000
	for b.Loop() {
		runJob(b, c, ctx, bench.Independent(n))
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "subtasks/s")
}

// BenchmarkChain runs a chain of 20,000 dependent subtasks, fusion off.
func BenchmarkChain(b *testing.B) {
	c, ctx := benchCluster(b, "none")
	const n = 20_000
	for b.Loop() {
		runJob(b, c, ctx, bench.Chain(n))
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "hops/s")
}

// BenchmarkSeedExample runs (a+b).sum() at 85,000 chunks per input and
// reports the process heap held per subtask while the finished job's
// results are still held (head and both raylets share this process).
func BenchmarkSeedExample(b *testing.B) {
	c, ctx := benchCluster(b, "")
	const chunks, chunk = 85_000, 100
	var heapPer float64
	subtasks := 0
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a := tensor.Rand([]int64{chunks * chunk}, tensor.Chunks(chunk), tensor.Seed(1))
		x := tensor.Rand([]int64{chunks * chunk}, tensor.Chunks(chunk), tensor.Seed(2))
		j, err := c.Submit(ctx, a.Add(x).Sum())
		if err != nil {
			b.Fatal(err)
		}
		st, err := j.Done(ctx)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		subtasks = st.Subtasks
		heapPer = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(st.Subtasks)
		if err := j.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(subtasks*b.N)/b.Elapsed().Seconds(), "subtasks/s")
	b.ReportMetric(heapPer, "heap-B/subtask")
}
