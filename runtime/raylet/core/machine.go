package core

import (
	"strconv"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// Slot numbers one of the raylet's Config.Slots places to run a subtask,
// from 0. A slot keeps its number when its worker is replaced.
type Slot int32

// Run names one start of a subtask in a slot; the worker reports it back
// with Finished. Runs count up from 1 and are never reused, so a late
// report from an abandoned kernel cannot be taken for its slot's next run.
type Run uint64

// Subtask is a pulled subtask as the machine sees it. Spec is the raylet's
// own handle on the decoded spec; the machine only carries it.
type Subtask[T any] struct {
	ID      dag.SubtaskID
	Attempt int
	// WorkingSet is the store space the subtask needs while it runs (its
	// pinned inputs and its outputs), for memory admission.
	WorkingSet int64
	// After lists subtasks pulled to this raylet whose outputs this one
	// reads and that had not stored them when it was pulled: the head
	// dispatched it ahead of them. It waits until they finish, and is
	// dropped (reason InputFailed) if one of them fails or is dropped.
	After []dag.SubtaskID
	Spec  T
}

// Config configures a Machine. Every field is required.
type Config struct {
	// Slots is how many subtasks run at once, > 0.
	Slots int
	// Prefetch is how many subtasks beyond the slots a pull may ask for
	// while subtasks are long, >= 0 (see Machine.Window).
	Prefetch int
	// CancelGrace is how long an interrupted kernel may run on before it
	// is abandoned, > 0.
	CancelGrace time.Duration
	// Room is the store space working sets may take, > 0 (the store's
	// capacity); Machine.Room changes it.
	Room int64
}

// Reason says why the machine ended an attempt that did not run to its
// end; the raylet turns it into the completion the head is told.
type Reason uint8

const (
	// Dropped: cancelled while queued, before it started.
	Dropped Reason = iota + 1
	// Abandoned: its kernel ignored its interrupt for the cancel grace.
	Abandoned
	// InputFailed: dropped before it started, because a subtask it was
	// to read from here (Subtask.After) failed or was dropped.
	InputFailed
)

// Kind is what an Effect asks the raylet to do.
type Kind uint8

const (
	// Start: run Task in Slot; report it with Finished(Slot, Run, ...).
	// The slot's worker is idle: it has reported every earlier run.
	Start Kind = iota + 1
	// Interrupt: cancel the context of the kernel running Run in Slot.
	Interrupt
	// Replace: the kernel running Run (Task) in Slot ignored its interrupt
	// and is abandoned. Give Slot a new worker; the old one goes on until
	// its kernel returns and reports Finished, which yields Discard. Task
	// is already reported cancelled.
	Replace
	// Drop: Task was dropped from the queue before it started (it is
	// reported cancelled); its spec is no longer used.
	Drop
	// Discard: the abandoned Run (Task) ended after all. Delete what it
	// stored itself (not outputs it found made by an earlier attempt),
	// and retire the worker that ran it.
	Discard
	// Pull: ask the head for up to Credits subtasks, carrying the
	// completions Done. Answer with Pulled or PullFailed.
	Pull
	// Report: send the completions Done to the head. Answer with Reported
	// or ReportFailed.
	Report
	// Timer: call Tick at At, replacing any earlier timer; a zero At means
	// no tick is wanted.
	Timer
)

var kindNames = [...]string{Start: "start", Interrupt: "interrupt", Replace: "replace", Drop: "drop",
	Discard: "discard", Pull: "pull", Report: "report", Timer: "timer"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Effect is one thing the raylet is to do. Only the fields its Kind names
// are set.
type Effect[T, C any] struct {
	Kind    Kind
	Slot    Slot
	Run     Run
	Task    Subtask[T]
	Credits int
	// Done is owned by the machine: the raylet may read it until it
	// answers the Pull or Report, and must not keep it after.
	Done       []C
	Completion C
	At         time.Time
}

// Defaults of the window and of the waits after failed sends.
const (
	// Subtasks averaging at most shortRun (or tinyRun) get a deeper window:
	// a round trip per few of them would leave slots idle.
	shortRun = 10 * time.Millisecond
	tinyRun  = time.Millisecond
	// Tiny subtasks get at least minTinyDepth per slot and at most
	// maxTinyWindow in all.
	minTinyDepth  = 64
	maxTinyWindow = 1024

	firstPullWait   = 20 * time.Millisecond
	firstReportWait = 50 * time.Millisecond
	maxWait         = time.Second

	// maxHold is how long a completion may wait for a pull to carry it
	// while the raylet is busy, and how long a pull to a busy head may be
	// out before it is taken to be parked there (see maybePull and
	// maybeReport).
	maxHold = time.Millisecond
)

// Machine is a raylet's slot pool, prefetch window, memory admission and
// abandon accounting. T is the raylet's handle on a subtask spec, C its
// completion message.
//
// A Machine is not safe for concurrent use: one goroutine at a time steps
// it (the raylet holds a lock for a step and the carrying out of its
// effects). Every event method returns the effects of that event, in the
// order they are to be carried out, in a slice the machine reuses at the
// next event. In steady state no event allocates.
type Machine[T, C any] struct {
	cfg       Config
	cancelled func(Subtask[T], Reason) C
	failed    func(C) bool

	queue    queue[T]       // pulled, not started, best first
	waiting  waitList[T]    // pulled, waiting for subtasks in After to finish
	slots    []slotState[T] // by Slot
	stuck    []stuckRun[T]  // abandoned kernels still running
	lastRun  Run
	inflight int           // waiting, queued and running: what the window counts
	running  int           // slots running a subtask
	reserved int64         // working sets of running and abandoned kernels
	avgRun   time.Duration // moving average of run times
	// avgRTT is the moving average of the time a pull the head filled took
	// to come back: a pull it did not fill may have been parked there.
	avgRTT time.Duration

	pending   []C       // completions waiting for a pull or a report
	heldSince time.Time // when the oldest pending completion came; zero if none
	now       time.Time // the latest time an event brought
	spare     [2][]C    // delivered batches' memory, for the next ones
	inPull    []C       // completions riding on the pull that is out
	pulling   bool      // a pull is out
	pullSent  time.Time // when it went
	asked     int       // its credits
	// headBusy says the head has more work queued for this raylet (its
	// last answer said so), so a pull out is answered promptly rather than
	// parked.
	headBusy  bool
	inReport  []C
	reporting bool
	// After a failed pull or report, the next waits until pullAt or
	// reportAt (zero: no wait); the waits double up to maxWait.
	pullAt, reportAt     time.Time
	pullWait, reportWait time.Duration
	timer                time.Time // the tick last asked for; zero: none
	misused              string    // the first event sent out of turn (see misuse)

	effects []Effect[T, C]
}

type slotState[T any] struct {
	run  Run // 0: idle
	task Subtask[T]
	// abandonAt is when an interrupted kernel is given up; zero while not
	// interrupted.
	abandonAt time.Time
}

type stuckRun[T any] struct {
	run  Run
	task Subtask[T]
}

// New returns an idle machine. cancelled makes the completion of an
// attempt the machine ends itself, and failed says whether a completion
// reports a failure (pure functions of their arguments). The first event,
// whatever it is, yields the first pull; usually it is Room.
func New[T, C any](cfg Config, cancelled func(t Subtask[T], why Reason) C, failed func(C) bool) (*Machine[T, C], error) {
	switch {
	case cfg.Slots <= 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: %d slots; want at least 1", cfg.Slots)
	case cfg.Prefetch < 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: prefetch %d is negative", cfg.Prefetch)
	case cfg.CancelGrace <= 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: cancel grace %v; want a positive duration", cfg.CancelGrace)
	case cfg.Room <= 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: store room %d bytes; want a positive size", cfg.Room)
	case cancelled == nil:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: no function to make cancelled completions")
	case failed == nil:
		return nil, dag.Errorf(dag.KindInvalidArgument, "raylet core: no function to tell failed completions")
	}
	return &Machine[T, C]{cfg: cfg, cancelled: cancelled, failed: failed, slots: make([]slotState[T], cfg.Slots)}, nil
}

// Window is how many subtasks the raylet keeps pulled (running plus
// queued). Long subtasks get the slots plus the prefetch, so that queued
// work stays at the head where it can still go elsewhere; short ones (the
// moving average of run times under 10ms) get 8 per slot. Tiny ones (under
// 1ms) get enough per slot to keep it busy through two pull round trips
// (at least 64, at most 1024 in all): a slot that runs through its queue
// before the next pull's answer comes idles, and a round trip per few
// subtasks floods the head with messages.
func (m *Machine[T, C]) Window() int {
	base := m.cfg.Slots + m.cfg.Prefetch
	switch avg := m.avgRun; {
	case avg == 0 || avg > shortRun:
		return base
	case avg > tinyRun:
		return max(base, 8*m.cfg.Slots)
	default:
		depth := minTinyDepth
		if m.avgRTT > 0 {
			depth = max(depth, int(min(2*m.avgRTT/avg, maxTinyWindow)))
		}
		return max(base, min(depth*m.cfg.Slots, maxTinyWindow))
	}
}

// Running is how many slots run a subtask (abandoned kernels not counted).
func (m *Machine[T, C]) Running() int { return m.running }

// Inflight is how many pulled subtasks are queued or running.
func (m *Machine[T, C]) Inflight() int { return m.inflight }

// Queued is how many pulled subtasks wait for a slot.
func (m *Machine[T, C]) Queued() int { return m.queue.len() }

// Waiting is how many pulled subtasks wait for subtasks of this raylet
// they read (Subtask.After).
func (m *Machine[T, C]) Waiting() int { return m.waiting.live }

// Imminent estimates how many waiting subtasks the running ones will
// release as they end: the readers waiting on each running subtask,
// summed (a reader of two running subtasks counts twice). It costs a map
// lookup per slot. When it exceeds Running, some worker now idle will have
// work the moment a running subtask ends, as in a stencil step whose
// tasks all read all of the previous step's; when it does not, each ends
// onto its own worker, as in a chain.
func (m *Machine[T, C]) Imminent() int {
	if m.waiting.live == 0 {
		return 0
	}
	n := 0
	for k := range m.slots {
		if s := &m.slots[k]; s.run != 0 {
			n += int(m.waiting.readers[s.task.ID])
		}
	}
	return n
}

// Reserved is the store space the running and abandoned kernels need.
func (m *Machine[T, C]) Reserved() int64 { return m.reserved }

// Abandoned is how many abandoned kernels are still running.
func (m *Machine[T, C]) Abandoned() int { return len(m.stuck) }

// Pending is how many completions wait to be sent.
func (m *Machine[T, C]) Pending() int { return len(m.pending) }

// Pulled is the answer to a Pull: the head sent tasks, best first (none
// when it had nothing before its wait ended), and more says it stopped at
// the credits with more queued for this raylet, so that the next pull is
// answered at once (see maybeReport). The completions the pull carried
// are delivered.
func (m *Machine[T, C]) Pulled(tasks []Subtask[T], more bool, now time.Time) []Effect[T, C] {
	m.begin(now)
	if m.pulling {
		m.pulling = false
		m.recycle(m.inPull)
		m.inPull = nil
		m.pullWait = 0
		m.headBusy = more
		if len(tasks) >= m.asked && now.After(m.pullSent) {
			m.avgRTT = average(m.avgRTT, now.Sub(m.pullSent))
		}
	} else {
		m.misuse("pulled with no pull out")
	}
	m.inflight += len(tasks)
	for i := range tasks {
		m.arrive(tasks[i])
	}
	return m.settle()
}

// PullFailed is the answer to a Pull that did not reach the head (or whose
// reply was lost): its completions wait for the next pull, which goes
// after a wait that doubles from 20ms up to 1s with each failure in a row.
func (m *Machine[T, C]) PullFailed(now time.Time) []Effect[T, C] {
	m.begin(now)
	if m.pulling {
		m.pulling = false
		m.requeue(m.inPull)
		m.inPull = nil
		m.pullWait = nextWait(m.pullWait, firstPullWait)
		m.pullAt = now.Add(m.pullWait)
	} else {
		m.misuse("pull failed with no pull out")
	}
	return m.settle()
}

// Reported is the answer to a Report that went out.
func (m *Machine[T, C]) Reported(now time.Time) []Effect[T, C] {
	m.begin(now)
	if m.reporting {
		m.reporting = false
		m.recycle(m.inReport)
		m.inReport = nil
		m.reportWait = 0
	} else {
		m.misuse("reported with no report out")
	}
	return m.settle()
}

// ReportFailed is the answer to a Report that did not go out: its
// completions are sent again after a wait that doubles from 50ms up to 1s
// with each failure in a row (or ride on a pull before then).
func (m *Machine[T, C]) ReportFailed(now time.Time) []Effect[T, C] {
	m.begin(now)
	if m.reporting {
		m.reporting = false
		m.requeue(m.inReport)
		m.inReport = nil
		m.reportWait = nextWait(m.reportWait, firstReportWait)
		m.reportAt = now.Add(m.reportWait)
	} else {
		m.misuse("report failed with no report out")
	}
	return m.settle()
}

// Registered says the raylet registered with a (new) head leader: a pull
// or report waiting after failures goes at once.
func (m *Machine[T, C]) Registered(now time.Time) []Effect[T, C] {
	m.begin(now)
	m.pullAt, m.pullWait = time.Time{}, 0
	m.reportAt, m.reportWait = time.Time{}, 0
	return m.settle()
}

// Finished says that the worker of slot ran run to its end at now, with
// completion c after took. A run the machine abandoned meanwhile yields
// Discard instead of a report.
func (m *Machine[T, C]) Finished(slot Slot, run Run, c C, took time.Duration, now time.Time) []Effect[T, C] {
	m.begin(now)
	if slot >= 0 && int(slot) < len(m.slots) && run != 0 && m.slots[slot].run == run {
		s := &m.slots[slot]
		m.running--
		m.inflight--
		m.reserved -= s.task.WorkingSet
		m.avgRun = average(m.avgRun, took)
		m.report(c)
		id := s.task.ID
		*s = slotState[T]{}
		m.ended(id, !m.failed(c))
	} else if i := m.stuckIndex(run); i >= 0 {
		st := m.stuck[i]
		m.reserved -= st.task.WorkingSet
		m.stuck = deleteAt(m.stuck, i)
		m.emit(Effect[T, C]{Kind: Discard, Slot: slot, Run: run, Task: st.task, Completion: c})
	} else {
		m.misuse("finished an unknown run")
	}
	return m.settle()
}

// Cancel interrupts the running subtasks among ids and drops the queued
// ones (each reported cancelled). An interrupted kernel still running
// CancelGrace after now is abandoned (see Tick). IDs the raylet does not
// have are ignored.
func (m *Machine[T, C]) Cancel(ids []dag.SubtaskID, now time.Time) []Effect[T, C] {
	m.begin(now)
	for _, id := range ids {
		if k := m.runningSlot(id); k >= 0 {
			s := &m.slots[k]
			m.emit(Effect[T, C]{Kind: Interrupt, Slot: Slot(k), Run: s.run, Task: s.task})
			if s.abandonAt.IsZero() {
				s.abandonAt = now.Add(m.cfg.CancelGrace)
			}
			continue
		}
		if i := m.queue.find(id); i >= 0 {
			m.drop(m.queue.remove(i), Dropped)
		} else if i := m.waiting.find(id); i >= 0 {
			m.drop(m.waiting.remove(i), Dropped)
		}
	}
	return m.settle()
}

// Tick tells the machine the time: kernels interrupted at least
// CancelGrace ago are abandoned (reported cancelled, their slots given
// new workers), and a pull or report waiting after a failure goes if its
// wait is over.
func (m *Machine[T, C]) Tick(now time.Time) []Effect[T, C] {
	m.begin(now)
	m.timer = time.Time{} // the timer that woke us is spent
	if !m.pullAt.IsZero() && !now.Before(m.pullAt) {
		m.pullAt = time.Time{}
	}
	if !m.reportAt.IsZero() && !now.Before(m.reportAt) {
		m.reportAt = time.Time{}
	}
	for k := range m.slots {
		s := &m.slots[k]
		if s.run == 0 || s.abandonAt.IsZero() || now.Before(s.abandonAt) {
			continue
		}
		m.stuck = append(m.stuck, stuckRun[T]{run: s.run, task: s.task})
		m.running--
		m.inflight--
		m.report(m.cancelled(s.task, Abandoned))
		m.emit(Effect[T, C]{Kind: Replace, Slot: Slot(k), Run: s.run, Task: s.task})
		id := s.task.ID
		*s = slotState[T]{}
		m.ended(id, false)
	}
	return m.settle()
}

// Room says how much store space working sets may take now.
func (m *Machine[T, C]) Room(bytes int64, now time.Time) []Effect[T, C] {
	m.begin(now)
	if bytes > 0 {
		m.cfg.Room = bytes
	} else {
		m.misuse("room not positive")
	}
	return m.settle()
}

// arrive takes a pulled subtask in: queued, or waiting while a subtask it
// reads from here has yet to finish. One that reads from a subtask this
// machine no longer has, and whose output the raylet did not find stored
// (it leaves such a subtask out of After), reads from one that failed or
// was dropped: it is dropped too.
func (m *Machine[T, C]) arrive(t Subtask[T]) {
	if len(t.After) > maxAfter {
		m.misuse("a subtask waits for more than 64 others")
		m.drop(t, InputFailed)
		return
	}
	for _, p := range t.After {
		if !m.has(p) {
			m.drop(t, InputFailed)
			return
		}
	}
	if len(t.After) > 0 {
		m.waiting.add(t)
		return
	}
	m.queue.push(t)
}

// has reports whether subtask id is queued, waiting or running here. The
// newest are looked at first: a subtask pulled ahead of its input usually
// came right after it.
func (m *Machine[T, C]) has(id dag.SubtaskID) bool {
	return m.waiting.find(id) >= 0 || m.queue.findLast(id) >= 0 || m.runningSlot(id) >= 0
}

// ended goes on from subtask id's end: if it stored its outputs, a
// waiting subtask that waited for it alone is queued; if not, those
// reading from it are dropped, and in turn those reading from them.
func (m *Machine[T, C]) ended(id dag.SubtaskID, ok bool) {
	n := m.waiting.readers[id]
	if n == 0 {
		return
	}
	delete(m.waiting.readers, id)
	for i := m.waiting.first; n > 0 && i < len(m.waiting.s); i++ {
		w := &m.waiting.s[i]
		if w.pend == 0 {
			continue // a hole
		}
		found := false
		for k, p := range w.t.After {
			if p == id && w.pend&(1<<k) != 0 {
				w.pend &^= 1 << k
				found = true
			}
		}
		if !found {
			continue
		}
		n--
		switch {
		case !ok:
			m.drop(m.waiting.remove(i), InputFailed) // and what reads from it
		case w.pend == 0:
			m.queue.push(m.waiting.remove(i))
		}
	}
}

// drop ends t before it started, reporting it cancelled for why, and
// drops what waits to read from it.
func (m *Machine[T, C]) drop(t Subtask[T], why Reason) {
	m.inflight--
	m.report(m.cancelled(t, why))
	m.emit(Effect[T, C]{Kind: Drop, Task: t})
	m.ended(t.ID, false)
}

// begin readies the effect list for an event at now. Events may bring
// times slightly out of order (the raylet's goroutines read the clock
// before they step the machine); the machine's clock keeps the latest.
func (m *Machine[T, C]) begin(now time.Time) {
	clear(m.effects)
	m.effects = m.effects[:0]
	if now.After(m.now) {
		m.now = now
	}
}

func (m *Machine[T, C]) emit(e Effect[T, C]) { m.effects = append(m.effects, e) }

// settle does what the state after an event calls for: start what fits in
// idle slots, pull if the window has room, report completions no pull is
// about to carry, and ask for the next tick.
func (m *Machine[T, C]) settle() []Effect[T, C] {
	m.admit()
	m.maybePull()
	m.maybeReport()
	if next := m.nextTick(); !next.Equal(m.timer) {
		m.timer = next
		m.emit(Effect[T, C]{Kind: Timer, At: next})
	}
	if checkInvariants {
		if err := m.check(); err != nil {
			panic(err)
		}
	}
	return m.effects
}

// admit starts queued subtasks in idle slots (memory admission): each idle
// slot takes the best queued subtask whose working set fits in the room
// beside the running ones. When nothing is reserved the best one starts
// whatever its size, so that work always progresses; one that cannot fit
// at all then fails with the store's error.
func (m *Machine[T, C]) admit() {
	for k := 0; k < len(m.slots) && m.queue.len() > 0; k++ {
		s := &m.slots[k]
		if s.run != 0 {
			continue
		}
		i := m.fit()
		if i < 0 {
			return
		}
		t := m.queue.remove(i)
		m.lastRun++
		*s = slotState[T]{run: m.lastRun, task: t}
		m.running++
		m.reserved += t.WorkingSet
		m.emit(Effect[T, C]{Kind: Start, Slot: Slot(k), Run: s.run, Task: t})
	}
}

// fit returns the index in the queue of the best subtask that fits, or -1.
// A subtask a slot already runs waits for that run to end: a new leader
// may hand out again what this raylet still runs for the old one (its
// records do not say what runs), and two runs of one subtask at once
// would write the same objects.
func (m *Machine[T, C]) fit() int {
	for i := 0; i < m.queue.len(); i++ {
		t := m.queue.at(i)
		if m.reserved+t.WorkingSet > m.cfg.Room && m.reserved != 0 {
			continue
		}
		if m.running > 0 && m.runningSlot(t.ID) >= 0 {
			continue
		}
		return i
	}
	return -1
}

// maybePull asks for work when no pull is out or waiting after a failure
// and the window has room: half of it, or any while the queue holds less
// than a subtask per slot (a slot would soon idle), or while a completion
// has waited maxHold for a pull to carry it. Pending completions ride on
// the pull, so that a busy raylet sends one message per batch, not one
// per subtask, and never holds a completion back for long.
func (m *Machine[T, C]) maybePull() {
	if m.pulling || !m.pullAt.IsZero() {
		return
	}
	w := m.Window()
	credits := w - m.inflight
	if credits <= 0 || 2*credits < w && !m.short() && !m.overdue() {
		return
	}
	m.pulling, m.inPull, m.pullSent, m.asked = true, m.pending, m.now, credits
	m.pending, m.heldSince = nil, time.Time{}
	m.emit(Effect[T, C]{Kind: Pull, Credits: credits, Done: m.inPull})
}

// maybeReport sends completions no pull is about to carry. While a pull is
// out they go at once if the head may be holding it until work appears
// (its last answer did not fill the pull: the head may be waiting for
// these very completions); if the head is busy, they wait for the answer
// (the next pull takes them) until the pull has been out maxHold. They
// wait too while this raylet runs a pipeline (subtasks wait here for
// others of its own), up to maxHold from the oldest: the head sent what
// follows them already, and one report per hop of a chain would cost
// more than the hop. While the window is full no pull goes, so they go
// at once. Otherwise a pull will carry them (see maybePull), or they wait
// for the pull after a failure.
func (m *Machine[T, C]) maybeReport() {
	if m.reporting || len(m.pending) == 0 || !m.reportAt.IsZero() {
		return
	}
	switch {
	case m.pulling:
		if m.headBusy && m.now.Before(m.pullSent.Add(maxHold)) || m.pipelining() {
			return
		}
	case m.inflight < m.Window():
		return
	}
	m.reporting, m.inReport = true, m.pending
	m.pending, m.heldSince = nil, time.Time{}
	m.emit(Effect[T, C]{Kind: Report, Done: m.inReport})
}

// pipelining reports whether completions may wait because this raylet
// runs a pipeline (see maybeReport).
func (m *Machine[T, C]) pipelining() bool {
	return m.waiting.live > 0 && m.now.Before(m.heldSince.Add(maxHold))
}

// short reports whether the queue holds less than a subtask per slot.
func (m *Machine[T, C]) short() bool { return m.queue.len() < m.cfg.Slots }

// overdue reports whether a pending completion has waited maxHold.
func (m *Machine[T, C]) overdue() bool {
	return len(m.pending) > 0 && !m.now.Before(m.heldSince.Add(maxHold))
}

// holdUntil is when held completions stop waiting, if time is what they
// wait for; zero otherwise.
func (m *Machine[T, C]) holdUntil() time.Time {
	if len(m.pending) == 0 {
		return time.Time{}
	}
	switch {
	case !m.pulling && m.pullAt.IsZero() && m.inflight < m.Window():
		return m.heldSince.Add(maxHold) // then a pull goes
	case m.pulling && !m.reporting && m.reportAt.IsZero():
		// Then they are reported, unless a pipeline's subtasks have all
		// started meanwhile (then they go at once).
		var t time.Time
		if m.headBusy {
			t = m.pullSent.Add(maxHold)
		}
		if m.waiting.live > 0 && m.heldSince.Add(maxHold).After(t) {
			t = m.heldSince.Add(maxHold)
		}
		return t
	}
	return time.Time{}
}

// report queues c to be sent, in memory kept from a delivered batch.
func (m *Machine[T, C]) report(c C) {
	if m.pending == nil {
		for i := range m.spare {
			if m.spare[i] != nil {
				m.pending, m.spare[i] = m.spare[i], nil
				break
			}
		}
	}
	if len(m.pending) == 0 {
		m.heldSince = m.now
	}
	m.pending = append(m.pending, c)
}

// recycle keeps a delivered batch's memory for a next one: two are kept,
// since a pull and a report may be out while completions gather.
func (m *Machine[T, C]) recycle(batch []C) {
	small := 0
	if cap(m.spare[1]) < cap(m.spare[0]) {
		small = 1
	}
	if cap(batch) > cap(m.spare[small]) {
		clear(batch)
		m.spare[small] = batch[:0]
	}
}

// requeue puts an undelivered batch back before what came since; they
// count as held from now (a wait after the failure comes first anyway).
func (m *Machine[T, C]) requeue(batch []C) {
	switch {
	case len(batch) == 0:
		return
	case len(m.pending) == 0:
		m.pending = batch
	default:
		m.pending = append(batch, m.pending...)
	}
	m.heldSince = m.now
}

// nextTick is when the machine next needs a Tick: the earliest abandon
// deadline or end of a wait; zero if none.
func (m *Machine[T, C]) nextTick() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	earlier(m.pullAt)
	earlier(m.reportAt)
	earlier(m.holdUntil())
	for k := range m.slots {
		if m.slots[k].run != 0 {
			earlier(m.slots[k].abandonAt)
		}
	}
	return next
}

func (m *Machine[T, C]) runningSlot(id dag.SubtaskID) int {
	for k := range m.slots {
		if m.slots[k].run != 0 && m.slots[k].task.ID == id {
			return k
		}
	}
	return -1
}

func (m *Machine[T, C]) stuckIndex(run Run) int {
	for i := range m.stuck {
		if m.stuck[i].run == run {
			return i
		}
	}
	return -1
}

// misuse notes an event the raylet should never send in this state. The
// event is ignored; check reports it, so the invariants build and the
// tests fail.
func (m *Machine[T, C]) misuse(what string) {
	if m.misused == "" {
		m.misused = what
	}
}

// average moves the average run time a step towards took; the first run
// sets it, so that the window does not take long subtasks for short ones
// while the average climbs from zero.
func average(avg, took time.Duration) time.Duration {
	if avg == 0 {
		return max(took, 1) // nonzero: measured
	}
	return (7*avg + took) / 8
}

func nextWait(last, first time.Duration) time.Duration {
	if last == 0 {
		return first
	}
	return min(2*last, maxWait)
}

func deleteAt[E any](s []E, i int) []E {
	copy(s[i:], s[i+1:])
	var zero E
	s[len(s)-1] = zero
	return s[:len(s)-1]
}

// queue holds pulled subtasks best first. Taking the first is O(1); taking
// one further back (memory admission skipping one that does not fit)
// shifts those after it.
type queue[T any] struct {
	s    []Subtask[T]
	head int
}

func (q *queue[T]) len() int                { return len(q.s) - q.head }
func (q *queue[T]) at(i int) *Subtask[T]    { return &q.s[q.head+i] }
func (q *queue[T]) push(t Subtask[T])       { q.compact(); q.s = append(q.s, t) }
func (q *queue[T]) remove(i int) Subtask[T] { return q.take(q.head + i) }

func (q *queue[T]) take(j int) Subtask[T] {
	t := q.s[j]
	if j == q.head {
		q.s[j] = Subtask[T]{}
		q.head++
	} else {
		q.s = deleteAt(q.s, j)
	}
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	}
	return t
}

// compact moves the queue to the front of its memory when appending would
// otherwise grow it.
func (q *queue[T]) compact() {
	if q.head == 0 || len(q.s) < cap(q.s) {
		return
	}
	n := copy(q.s, q.s[q.head:])
	clear(q.s[n:])
	q.s, q.head = q.s[:n], 0
}

// findLast is find, looking from the back.
func (q *queue[T]) findLast(id dag.SubtaskID) int {
	for i := len(q.s) - 1; i >= q.head; i-- {
		if q.s[i].ID == id {
			return i - q.head
		}
	}
	return -1
}

func (q *queue[T]) find(id dag.SubtaskID) int {
	for i := q.head; i < len(q.s); i++ {
		if q.s[i].ID == id {
			return i - q.head
		}
	}
	return -1
}

// waitList holds the subtasks waiting for others of this raylet (After),
// in arrival order. A subtask leaves it in O(1) (its entry is left as a
// hole, and the list compacted when holes are most of it), and the
// readers of a subtask that ends are found without a walk of the list
// when it has none, and with a walk only as far as the last of them when
// it has: a chain a thousand links ahead keeps a thousand waiting, and
// each hop must not cost a thousand.
type waitList[T any] struct {
	s     []waiter[T]
	first int // s[:first] are holes
	live  int
	// readers counts, by subtask, the waiting subtasks that wait for it.
	readers map[dag.SubtaskID]int32
}

type waiter[T any] struct {
	t Subtask[T]
	// pend has bit k set while t.After[k] has yet to finish here (for the
	// first entry of each subtask in After); 0 marks a hole.
	pend uint64
}

// maxAfter is the most entries a Subtask's After may have.
const maxAfter = 64

// add takes in t, which waits for every subtask in its After (at most
// maxAfter entries).
func (l *waitList[T]) add(t Subtask[T]) {
	if len(l.s) >= 32 && 2*l.live < len(l.s) {
		l.compact()
	}
	if l.readers == nil {
		l.readers = make(map[dag.SubtaskID]int32)
	}
	var pend uint64
	for k, p := range t.After {
		if !containsID(t.After[:k], p) {
			pend |= 1 << k
			l.readers[p]++
		}
	}
	l.s = append(l.s, waiter[T]{t: t, pend: pend})
	l.live++
}

// remove takes out entry i and returns its subtask, which no longer
// counts as a reader of the subtasks it was waiting for.
func (l *waitList[T]) remove(i int) Subtask[T] {
	w := l.s[i]
	for k, p := range w.t.After {
		if w.pend&(1<<k) == 0 {
			continue
		}
		if n := l.readers[p]; n <= 1 {
			delete(l.readers, p)
		} else {
			l.readers[p] = n - 1
		}
	}
	l.s[i] = waiter[T]{}
	l.live--
	for l.first < len(l.s) && l.s[l.first].pend == 0 {
		l.first++
	}
	if l.first == len(l.s) {
		l.s, l.first = l.s[:0], 0
	}
	return w.t
}

// find returns the entry of subtask id, or -1; the newest are looked at
// first.
func (l *waitList[T]) find(id dag.SubtaskID) int {
	for i := len(l.s) - 1; i >= l.first; i-- {
		if l.s[i].pend != 0 && l.s[i].t.ID == id {
			return i
		}
	}
	return -1
}

// compact moves the waiting subtasks to the front, in order.
func (l *waitList[T]) compact() {
	n := 0
	for i := l.first; i < len(l.s); i++ {
		if l.s[i].pend != 0 {
			l.s[n] = l.s[i]
			n++
		}
	}
	clear(l.s[n:])
	l.s, l.first = l.s[:n], 0
}

func containsID(ids []dag.SubtaskID, id dag.SubtaskID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
