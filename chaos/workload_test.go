package chaos

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
)

// TestWorkloadsOnLocalCluster runs every kind of workload job, and a few
// dozen random DAGs, on an embedded cluster and checks each against the
// answer the harness computes itself: a wrong reference would make every
// chaos run report false violations.
func TestWorkloadsOnLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an embedded cluster; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2, Slots: 2, StoreSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var w witness
	run := func(spec jobSpec) {
		t.Helper()
		j, err := c.Submit(ctx, spec.graph, phobos.JobOptions{Fusion: spec.fusion})
		if err != nil {
			t.Fatalf("%s (%s): submit: %v", spec.kind, spec.desc, err)
		}
		res, err := j.Wait(ctx)
		if err != nil {
			t.Fatalf("%s (%s): %v", spec.kind, spec.desc, err)
		}
		if err := spec.check(res, &w); err != nil {
			t.Fatalf("%s (%s): %v", spec.kind, spec.desc, err)
		}
	}
	for seed := range uint64(40) {
		run(dagJob(rand.New(rand.NewPCG(seed, 7))))
	}
	run(seedOnesJob(100_000))
	run(seedRandJob(50_000, 7_000, 1))
	run(seedRandJob(50_000, 7_000, 1)) // the witness compares the bytes
	run(shuffleJob(4, 200, 3, 1))
	run(sleepJob(20, time.Millisecond))
	run(probeJob())
	run(chainJob(300))
	for s := 1; s <= 30; s++ {
		for _, spec := range (&plan{seed: 5, drivers: 3}).step(s) {
			run(spec)
		}
	}
}
