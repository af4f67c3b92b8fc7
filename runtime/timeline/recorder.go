package timeline

import (
	"slices"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// Kind is what happened to one attempt of a subtask.
type Kind uint8

const (
	// Queued: the subtask was placed on a raylet's ready queue.
	Queued Kind = iota + 1
	// Dispatched: the leader handed it to its raylet in a pull reply.
	Dispatched
	// Started: the raylet began the attempt in a slot (fetching its
	// inputs first; Fetch on the attempt's end says for how long).
	Started
	// Finished: the attempt stored its outputs.
	Finished
	// Failed: the attempt failed (it may be retried as a new attempt).
	Failed
	// Cancelled: the attempt was interrupted by a cancel.
	Cancelled
)

var kindNames = [...]string{"", "queued", "dispatched", "started", "finished", "failed", "cancelled"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "kind?"
}

// ends reports whether k closes an attempt.
func (k Kind) ends() bool { return k == Finished || k == Failed || k == Cancelled }

// NoSlot is an Event's Slot when no slot applies (queued, dispatched) or
// the raylet did not say.
const NoSlot = -1

// Event is one thing that happened to one attempt of a subtask. It holds
// no pointers but its two strings, which callers are expected to share
// (a raylet's ID, a subtask's interned op names), so recording one
// allocates nothing.
type Event struct {
	// Time is when it happened, in Unix nanoseconds (of the clock of the
	// process that saw it: the head for Queued and Dispatched, the raylet
	// for the rest).
	Time    int64
	Subtask dag.SubtaskID
	Kind    Kind
	// Attempt counts from 1.
	Attempt uint16
	// Slot is the raylet's slot that ran the attempt, from 0, or NoSlot.
	Slot int16
	// Raylet is the ID of the raylet the subtask was queued on or ran on.
	Raylet string
	// Ops names the subtask's fused ops ("tensor.add+tensor.sum"); it
	// labels the attempt in traces.
	Ops string
	// BytesRead and BytesWritten are the attempt's input and output bytes,
	// and Fetch the part of it spent fetching inputs from other raylets;
	// set on the event that ends the attempt.
	BytesRead    int64
	BytesWritten int64
	Fetch        time.Duration
}

// Snapshot is a copy of what a Recorder holds for one job.
type Snapshot struct {
	Task dag.TaskID
	// Events are the recorded events, oldest first (in the order they were
	// recorded, which is time order per process).
	Events []Event
	// Dropped counts events of this job dropped to stay within the cap.
	Dropped uint64
}

// Config bounds a Recorder; a zero field takes its default.
type Config struct {
	// PerJob is the most events kept per job; default 65,536 (about 6 MiB
	// at ~96 bytes an event). A subtask that runs once makes four or five.
	PerJob int
	// Jobs is the most jobs kept; recording a new job beyond it forgets the
	// job whose recording began first. Default 32.
	Jobs int
}

// Defaults of Config.
const (
	DefaultPerJob = 1 << 16
	DefaultJobs   = 32
)

func (c Config) withDefaults() Config {
	if c.PerJob <= 0 {
		c.PerJob = DefaultPerJob
	}
	if c.Jobs <= 0 {
		c.Jobs = DefaultJobs
	}
	return c
}

// Recorder keeps the recent events of recent jobs. All methods are safe
// for concurrent use; the scheduler records while HTTP handlers take
// snapshots.
type Recorder struct {
	cfg Config

	mu    sync.Mutex
	jobs  map[dag.TaskID]*ring
	order []dag.TaskID // jobs by when their recording began, oldest first
	spare *ring        // a forgotten job's ring, reused by the next job
}

// ring is one job's events: a circular buffer that grows fourfold up to
// the cap (copying a quarter of what doubling copies: the head records
// every subtask's events here, and growth was a tenth of the CPU of a
// stream of small jobs), then overwrites its oldest event.
type ring struct {
	ev      []Event
	start   int // index of the oldest event
	n       int
	dropped uint64
}

const firstRing = 256

// NewRecorder returns an empty Recorder bounded by cfg.
func NewRecorder(cfg Config) *Recorder {
	return &Recorder{cfg: cfg.withDefaults(), jobs: make(map[dag.TaskID]*ring)}
}

// Config returns the Recorder's bounds, defaults filled in.
func (r *Recorder) Config() Config { return r.cfg }

// Record adds e to task's timeline.
func (r *Recorder) Record(task dag.TaskID, e Event) {
	r.mu.Lock()
	r.ring(task).add(e, r.cfg.PerJob)
	r.mu.Unlock()
}

// RecordBatch adds es, in order, to task's timeline, under one lock.
func (r *Recorder) RecordBatch(task dag.TaskID, es []Event) {
	if len(es) == 0 {
		return
	}
	r.mu.Lock()
	g := r.ring(task)
	for i := range es {
		g.add(es[i], r.cfg.PerJob)
	}
	r.mu.Unlock()
}

// ring returns task's ring, making it (and forgetting the oldest job if
// need be) on its first event. r.mu is held.
func (r *Recorder) ring(task dag.TaskID) *ring {
	if g, ok := r.jobs[task]; ok {
		return g
	}
	for len(r.order) >= r.cfg.Jobs {
		r.forgetLocked(r.order[0])
	}
	g := r.spare
	r.spare = nil
	if g == nil {
		g = &ring{}
	}
	r.jobs[task] = g
	r.order = append(r.order, task)
	return g
}

func (g *ring) add(e Event, limit int) {
	if g.n < len(g.ev) {
		g.ev[(g.start+g.n)%len(g.ev)] = e
		g.n++
		return
	}
	if len(g.ev) < limit {
		// Grow: copy in order, so start is 0 again.
		size := min(max(4*len(g.ev), firstRing), limit)
		ev := make([]Event, size)
		copy(ev, g.ev[g.start:])
		copy(ev[len(g.ev)-g.start:], g.ev[:g.start])
		g.ev, g.start = ev, 0
		g.ev[g.n] = e
		g.n++
		return
	}
	// Full: overwrite the oldest.
	g.ev[g.start] = e
	g.start = (g.start + 1) % len(g.ev)
	g.dropped++
}

// Snapshot copies task's events into dst[:0] (grown as needed) and
// reports whether the Recorder knows the job.
func (r *Recorder) Snapshot(task dag.TaskID, dst []Event) (Snapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.jobs[task]
	if !ok {
		return Snapshot{Task: task, Events: dst[:0]}, false
	}
	dst = slices.Grow(dst[:0], g.n)
	end := min(g.start+g.n, len(g.ev))
	dst = append(dst, g.ev[g.start:end]...)
	dst = append(dst, g.ev[:g.n-(end-g.start)]...)
	return Snapshot{Task: task, Events: dst, Dropped: g.dropped}, true
}

// Forget drops task's timeline (its results were released, say).
func (r *Recorder) Forget(task dag.TaskID) {
	r.mu.Lock()
	r.forgetLocked(task)
	r.mu.Unlock()
}

func (r *Recorder) forgetLocked(task dag.TaskID) {
	g, ok := r.jobs[task]
	if !ok {
		return
	}
	delete(r.jobs, task)
	for i, t := range r.order {
		if t == task {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	// Drop the strings it points to: until it wrapped, its events are
	// the first n (start moves only once it is full).
	if g.n < len(g.ev) {
		clear(g.ev[:g.n])
	} else {
		clear(g.ev)
	}
	*g = ring{ev: g.ev[:cap(g.ev)]}
	if r.spare == nil || cap(r.spare.ev) < cap(g.ev) {
		r.spare = g
	}
}
