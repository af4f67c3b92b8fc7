package sched

import (
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
)

// TestWaveInSlices: when a job's work wakes more parked pulls than one step
// may serve (maxWaveSpecs subtasks), the step serves a slice, asks for
// Resume, and the Resume steps serve the rest: every raylet's parked pull
// is answered with its share, no step hands out much more than the
// budget, and the job runs to the end.
func TestWaveInSlices(t *testing.T) {
	const raylets, credits = 40, 1024
	n := int64(maxWaveSpecs + maxWaveSpecs/4) // about 500 a raylet
	h, names, parked := parkedRaylets(t, raylets, credits)
	h.widest = 0
	h.addJob(1, tensor.Ones([]int64{n}, tensor.Chunks(1)), 0)
	if h.widest >= int(n) {
		t.Errorf("one step handed out the whole wave of %d", n)
	}
	if h.widest > maxWaveSpecs+credits {
		t.Errorf("one step handed out %d subtasks; the budget is %d (and one pull's credits)", h.widest, maxWaveSpecs)
	}
	var total int64
	for _, name := range names {
		rp, ok := h.got[parked[name]]
		if !ok || rp.Err != nil {
			t.Fatalf("%s's parked pull not answered (%+v)", name, rp)
		}
		total += int64(len(h.raylet(name).running))
	}
	if total != n {
		t.Fatalf("parked pulls got %d subtasks, want all %d", total, n)
	}
	if len(h.l.backlog.list) != 0 {
		t.Fatalf("%d raylets still in the backlog", len(h.l.backlog.list))
	}
	for _, name := range names {
		fr := h.raylet(name)
		h.done(name, fr.running...)
		fr.running = nil
	}
	if st, err := h.status(1, false); err != nil || st.Status != dag.JobSucceeded {
		t.Fatalf("job 1: %+v, %v; want succeeded", st, err)
	}
}

// parkedRaylets is a harness with n raylets of 16 slots, each with a pull
// of the given credits parked at the head (as idle raylets have), and the
// calls of those pulls by raylet.
func parkedRaylets(t *testing.T, n, credits int) (*harness, []string, map[string]Call) {
	t.Helper()
	h := newHarness(t, Config{Head: "h1"})
	h.records()
	var names []string
	for i := range n {
		name := string(rune('A'+i/26)) + string(rune('a'+i%26))
		h.addRaylet(name, 16)
		names = append(names, name)
	}
	parked := map[string]Call{}
	for _, name := range names {
		if got := h.pull(name, credits, time.Second); len(got) != 0 {
			t.Fatalf("%s got %d subtasks before any job", name, len(got))
		}
		parked[name] = h.calls
	}
	return h, names, parked
}
