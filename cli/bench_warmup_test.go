package cli

import (
	"context"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
)

// TestMeasureJobWarmsUp runs a benchmark job with two warm-up runs on an
// embedded cluster: the cluster ran it three times, every run finished,
// and the result says two ran before it and carries the first one's rate.
func TestMeasureJobWarmsUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 1, Slots: 2, StoreSize: 16 << 20, NoHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, warmup := range []int{0, 2} {
		before, err := c.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := measureJob(ctx, c, warmup, "independent", 500, bench.Independent(500), true)
		if err != nil {
			t.Fatalf("warmup %d: %v", warmup, err)
		}
		after, err := c.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ran := len(after) - len(before); ran != warmup+1 {
			t.Fatalf("warmup %d: the cluster ran %d jobs, want %d", warmup, ran, warmup+1)
		}
		for _, j := range after[len(before):] {
			if j.Status != phobos.JobSucceeded || j.Finished != 500 {
				t.Fatalf("warmup %d: job %v %s with %d of 500 subtasks finished", warmup, j.Task, j.Status, j.Finished)
			}
		}
		if r.N != 500 || r.PerSec <= 0 || r.WarmupRuns != warmup || (r.ColdPerSec > 0) != (warmup > 0) {
			t.Fatalf("warmup %d: result %+v", warmup, r)
		}
	}
}
