package head

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/runtime/wire"
)

// BenchmarkAllocThroughput measures task ID allocations per second over the
// wire against a 3-head loopback cluster with fsync on (raft-boltdb syncs
// every log append, on the leader and on each follower):
//
//   - one-by-one: a single caller; every allocation pays a whole commit
//     (leader fsync, replication, follower fsync, apply) by itself;
//   - batched-N: N concurrent callers at the leader; raft's BatchApplyCh
//     gathers their commands into shared appends, one fsync per batch;
//   - forwarded-N: the same, but every call goes to a follower, which
//     forwards it to the leader over its cached session.
//
// go test -run XXX -bench AllocThroughput -benchtime 3s ./runtime/head
func BenchmarkAllocThroughput(b *testing.B) {
	c := startMetaCluster(b, 3)
	l := c.leader(10 * time.Second)
	f := c.follower(l)
	const sessions = 16
	var clients []*metaClient
	for i := range sessions {
		clients = append(clients, c.client(fmt.Sprintf("bench-%d", i)))
	}
	ctx := context.Background()
	b.Run("one-by-one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a wire.Allocated
			if err := clients[0].call(ctx, c.addr(l), wire.MethodAllocTask, wire.AllocTask{RequestID: newReq()}, &a); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
	})
	for _, tc := range []struct {
		name    string
		at      int
		callers int
	}{
		{"batched-64", l, 64},
		{"batched-256", l, 256},
		{"forwarded-256", f, 256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, tc.callers/runtime.GOMAXPROCS(0)))
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				cl := clients[int(next.Add(1))%sessions]
				for pb.Next() {
					var a wire.Allocated
					if err := cl.call(ctx, c.addr(tc.at), wire.MethodAllocTask, wire.AllocTask{RequestID: newReq()}, &a); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
		})
	}
}
