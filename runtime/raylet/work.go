package raylet

import (
	"runtime"
	"slices"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/raylet/core"
	"github.com/phobos-project/phobos/runtime/wire"
)

// effects is what one step of the machine asks for.
type effects = []core.Effect[queued, wire.Completion]

// eventKind is what an event reports.
type eventKind uint8

const (
	evRoom         eventKind = iota + 1 // the store's room (at start)
	evFinished                          // a worker's run ended
	evPulled                            // a pull's reply was decoded into b
	evPullFailed                        // a pull failed; b holds no subtasks
	evReported                          // a report went out
	evReportFailed                      // a report did not go out
	evCancel                            // the head cancels ids
	evRegistered                        // registered with a (new) leader
	evTick                              // the timer fired
)

// event is what a goroutine of the raylet steps the machine with, at the
// time it read from the clock.
type event struct {
	kind eventKind
	w    *worker
	run  core.Run
	q    queued // the run's subtask, given back
	c    wire.Completion
	took time.Duration
	b    *pullBatch
	ids  []dag.SubtaskID
	at   time.Time
	room int64
}

// pullOrder is a pull the machine wants sent: credits, the completions
// that ride on it (the machine's until the answer), and the batch to
// decode the reply into.
type pullOrder struct {
	credits int
	done    []wire.Completion
	b       *pullBatch
}

// worker runs the subtasks the machine starts in its slot, one at a time.
type worker struct {
	slot  core.Slot
	s     *slot
	start chan order // room for one; closed when the worker retires
}

// order is a subtask for a worker to run.
type order struct {
	run core.Run
	q   queued
}

// step runs one event through the machine and carries out its effects, all
// under r.mu: no effect waits (every channel it sends on has room, because
// the machine hands a worker one subtask at a time and keeps one pull and
// one report out at most), so the lock is held for the step alone and no
// operation is split around an unlock. The goroutine that has the event
// takes the step itself, rather than handing it to a goroutine owning the
// machine: a worker whose run ended usually finds its next subtask in its
// own channel and goes on without a switch, where a handoff to an owner and
// back cost two wakeups per subtask (3× the time on BenchmarkIndependent).
//
// Once the raylet is stopping, events are dropped: nothing starts, and no
// worker is added while Close waits for them.
func (r *Raylet) step(ev *event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return
	}
	var effs effects
	switch ev.kind {
	case evRoom:
		effs = r.m.Room(ev.room, ev.at)
	case evFinished:
		effs = r.m.Finished(ev.w.slot, ev.run, ev.c, ev.took, ev.at)
		// The worker is done with the spec (an abandoned one too, now);
		// Discard needs the retired worker's allocator, which outlives the spec.
		r.specDone(ev.q.b)
	case evPulled:
		effs = r.pulled(ev.b, ev.at)
	case evPullFailed:
		r.putBatch(ev.b)
		effs = r.m.PullFailed(ev.at)
	case evReported:
		effs = r.m.Reported(ev.at)
	case evReportFailed:
		effs = r.m.ReportFailed(ev.at)
	case evCancel:
		effs = r.m.Cancel(ev.ids, ev.at)
	case evRegistered:
		effs = r.m.Registered(ev.at)
	case evTick:
		effs = r.m.Tick(ev.at)
	}
	r.apply(effs)
	r.soon.Store(r.m.Imminent() > r.m.Running())
}

// pulled queues a pull reply's subtasks. r.mu is held.
func (r *Raylet) pulled(b *pullBatch, now time.Time) effects {
	tasks := r.tasks[:0]
	b.after = b.after[:0]
	for i := range b.rep.Subtasks {
		spec := &b.rep.Subtasks[i]
		a0 := len(b.after)
		for k := range spec.Inputs {
			// Dispatched ahead of its input: it waits for the subtask making
			// it here, unless that has stored it already.
			in := &spec.Inputs[k]
			if !in.Pending || slices.Contains(b.after[a0:], in.Object.Subtask()) || r.store.Contains(in.Object) {
				continue
			}
			b.after = append(b.after, in.Object.Subtask())
		}
		tasks = append(tasks, core.Subtask[queued]{ID: spec.ID, Attempt: spec.Attempt, WorkingSet: spec.WorkingSet(), Spec: queued{spec: spec, b: b}})
		if len(b.after) > a0 {
			tasks[len(tasks)-1].After = b.after[a0:len(b.after):len(b.after)]
		}
	}
	if b.left = len(tasks); b.left == 0 {
		r.putBatch(b)
	}
	effs := r.m.Pulled(tasks, b.rep.More, now)
	clear(tasks)
	r.tasks = tasks[:0]
	return effs
}

// tick steps the machine when its timer fires.
func (r *Raylet) tick() { r.step(&event{kind: evTick, at: time.Now()}) }

// apply carries out the machine's effects, in order. r.mu is held.
func (r *Raylet) apply(effs effects) {
	for i := range effs {
		e := &effs[i]
		switch e.Kind {
		case core.Start:
			w := r.workers[e.Slot]
			w.s.renew(r) // a fresh context if the last run was interrupted
			w.start <- order{run: e.Run, q: e.Task.Spec}
		case core.Interrupt:
			r.workers[e.Slot].s.cancel()
		case core.Replace:
			r.log.Warn("abandoned a kernel that ignored its interrupt", "subtask", e.Task.ID, "grace", r.cfg.CancelGrace)
			r.retired[e.Run] = r.workers[e.Slot]
			r.workers[e.Slot] = r.startWorker(e.Slot)
		case core.Drop:
			r.specDone(e.Task.Spec.b)
		case core.Discard:
			if w := r.retired[e.Run]; w != nil {
				w.s.a.discard()
				delete(r.retired, e.Run)
				close(w.start)
			}
		case core.Pull:
			r.pulls <- pullOrder{credits: e.Credits, done: e.Done, b: r.takeBatch()}
		case core.Report:
			r.reports <- e.Done
		case core.Timer:
			r.timer.Stop()
			if !e.At.IsZero() {
				r.timer.Reset(time.Until(e.At))
			}
		}
	}
}

// startWorker starts a worker for slot k, with state of its own. r.mu is
// held.
func (r *Raylet) startWorker(k core.Slot) *worker {
	w := &worker{slot: k, s: newSlot(r), start: make(chan order, 1)}
	r.working.Add(1)
	go r.work(w)
	return w
}

// look waits for w's next order by looking, up to cfg.SpinWait, while
// the running subtasks are about to release more waiting ones than they
// have workers (soon; core.Machine.Imminent): an idle worker's order is
// then likely to come within microseconds, and a sleeping worker takes
// tens to wake. It yields to every other goroutine between looks. got is
// false when no order came; ok is false when w retired.
func (r *Raylet) look(w *worker) (o order, ok, got bool) {
	if r.cfg.SpinWait <= 0 || !r.soon.Load() {
		return o, true, false
	}
	deadline := time.Now().Add(r.cfg.SpinWait)
	for {
		select {
		case o, ok = <-w.start:
			return o, ok, true
		default:
		}
		if !r.soon.Load() || !time.Now().Before(deadline) {
			return o, true, false
		}
		runtime.Gosched()
	}
}

// work runs what the machine starts in w's slot until w retires or the
// raylet stops.
func (r *Raylet) work(w *worker) {
	defer r.working.Done()
	for {
		o, ok, got := r.look(w)
		if !got {
			select {
			case <-r.ctx.Done():
				return
			case o, ok = <-w.start:
			}
		}
		if !ok {
			return
		}
		r.kernels.Add(1)
		start := time.Now()
		c := r.run(w.s, o.q.spec)
		end := time.Now()
		took := end.Sub(start)
		c.Slot, c.Started, c.TookUS, c.FetchUS = int16(w.slot), start.UnixNano(), wire.Micros(took), wire.Micros(w.s.fetch)
		if r.met != nil {
			o := metrics.OutcomeFinished
			switch {
			case c.Kind == dag.KindCancelled || c.Kind == dag.KindInterrupted:
				o = metrics.OutcomeCancelled
			case c.Failed():
				o = metrics.OutcomeFailed
			}
			r.met.Ran(o, took)
			r.met.SetSlots(r.cfg.Slots, int(min(r.kernels.Load()-1, int64(r.cfg.Slots))))
		}
		r.kernels.Add(-1)
		r.step(&event{kind: evFinished, w: w, run: o.run, q: o.q, c: c, took: end.Sub(start), at: end})
	}
}
