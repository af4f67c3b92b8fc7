package raftmeta

import (
	"context"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
)

// Allocation throughput on a 3-head loopback cluster with fsync on (the
// bolt store syncs every append). One by one, each allocation pays a full
// commit round trip; with many concurrent callers BatchApplyCh groups their
// commands into shared log appends.
func BenchmarkAllocTask(b *testing.B) {
	c := startCluster(b, 3, nil)
	l := c.leader()
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.AllocTask(ctx, NewRequestID()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
	})
	for _, callers := range []int{16, 64} {
		b.Run("concurrent-"+strconv.Itoa(callers), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism((callers + 1) / 2) // GOMAXPROCS is 2 here; RunParallel multiplies
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.AllocTask(ctx, NewRequestID()); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
		})
	}
}

// BenchmarkFSMApply measures the state machine alone on AllocSubtasks
// entries: decode, dedupe lookup, allocate, remember.
func BenchmarkFSMApply(b *testing.B) {
	h := newHarness(b, 0)
	task := h.do(AllocTask{}).Task
	h.do(AllocStage{Task: task})
	batch := make([]*raft.Log, 4096)
	refill := func() {
		for i := range batch {
			h.index++
			d, err := EncodeCommand(Command{RequestID: NewRequestID(), Body: AllocSubtasks{Task: task, Stage: 1, N: 1}})
			if err != nil {
				b.Fatal(err)
			}
			batch[i] = &raft.Log{Index: h.index, Type: raft.LogCommand, Data: d}
		}
	}
	refill()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(batch) {
			b.StopTimer()
			refill()
			i = 0
			b.StartTimer()
		}
		if r := h.f.Apply(batch[i]).(Result); r.Err() != nil {
			b.Fatal(r.Err())
		}
		i++
	}
}
