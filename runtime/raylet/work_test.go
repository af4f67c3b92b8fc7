package raylet

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/raylet/core"
	"github.com/phobos-project/phobos/runtime/wire"
)

// TestStepsAllocateNothingInSteadyState drives the raylet's bookkeeping —
// pull replies decoded into recycled batches, subtasks handed to workers,
// completions stepped through the machine and carried on pulls — the way
// its goroutines do, but from the test goroutine and without kernels, and
// checks that once batches and buffers have grown a round (two subtasks)
// allocates nothing. AllocsPerRun rounds down, so this is about what each
// subtask costs; TestRunAllocatesNothingInSteadyState covers running it.
func TestStepsAllocateNothingInSteadyState(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const slots = 2
	m, err := core.New(core.Config{Slots: slots, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 30},
		func(t core.Subtask[queued], why core.Reason) wire.Completion {
			return wire.Completion{ID: t.ID, Attempt: t.Attempt, Kind: dag.KindCancelled}
		}, func(c wire.Completion) bool { return c.Failed() })
	if err != nil {
		t.Fatal(err)
	}
	r := &Raylet{ctx: ctx, log: slog.New(slog.DiscardHandler), m: m, id: "steps",
		pulls: make(chan pullOrder, 1), reports: make(chan []wire.Completion, 1), retired: map[core.Run]*worker{}}
	r.timer = time.AfterFunc(time.Hour, func() {})
	r.timer.Stop()
	for k := range slots {
		r.workers = append(r.workers, &worker{slot: core.Slot(k), s: newSlot(r), start: make(chan order, 1)})
	}

	var index uint64
	now := time.Unix(1000, 0)
	// answer plays the head: it fills the pull the machine asked for.
	answer := func() {
		select {
		case o := <-r.pulls:
			b := o.b
			b.rep.Subtasks = b.rep.Subtasks[:0]
			for range o.credits {
				index++
				if cap(b.rep.Subtasks) > len(b.rep.Subtasks) {
					b.rep.Subtasks = b.rep.Subtasks[:len(b.rep.Subtasks)+1]
				} else {
					b.rep.Subtasks = append(b.rep.Subtasks, wire.SubtaskSpec{})
				}
				s := &b.rep.Subtasks[len(b.rep.Subtasks)-1]
				s.ID, s.OutputBytes = dag.PackSubtaskID(1, 1, index), 8
			}
			r.step(&event{kind: evPulled, b: b, at: now})
		case done := <-r.reports:
			_ = done
			r.step(&event{kind: evReported, at: now})
		default:
		}
	}
	sizes := []int64{8}
	round := func() {
		answer()
		// Every worker that was handed a subtask finishes it.
		for _, w := range r.workers {
			select {
			case o := <-w.start:
				now = now.Add(10 * time.Microsecond)
				r.step(&event{kind: evFinished, w: w, run: o.run, q: o.q,
					c: wire.Completion{ID: o.q.spec.ID, Attempt: o.q.spec.Attempt, Sizes: sizes}, took: 10 * time.Microsecond, at: now})
			default:
			}
		}
		answer()
	}
	r.step(&event{kind: evRoom, room: 1 << 30, at: now})
	for range 2000 {
		round()
	}
	if r.m.Window() < 128 {
		t.Fatalf("window %d: the subtasks should count as tiny", r.m.Window())
	}
	if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
		t.Errorf("a round of steps allocates %v times, want 0", allocs)
	}
	if index < 3000 {
		t.Errorf("only %d subtasks pulled: the rounds did not run", index)
	}
}
