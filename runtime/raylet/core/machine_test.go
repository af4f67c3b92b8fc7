package core

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// t0 is a time for events whose time does not matter.
var t0 = time.Unix(1_000_000, 0)

func TestNewRefusesBadConfigs(t *testing.T) {
	good := Config{Slots: 2, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 20}
	mk := func(t Subtask[int], why Reason) int { return 0 }
	if _, err := New(good, mk, intFailed); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	for _, c := range []struct {
		what string
		edit func(*Config)
		want string
	}{
		{"no slots", func(c *Config) { c.Slots = 0 }, "0 slots"},
		{"negative prefetch", func(c *Config) { c.Prefetch = -1 }, "prefetch -1"},
		{"no grace", func(c *Config) { c.CancelGrace = 0 }, "cancel grace 0s"},
		{"no room", func(c *Config) { c.Room = 0 }, "store room 0"},
	} {
		cfg := good
		c.edit(&cfg)
		_, err := New(cfg, mk, intFailed)
		if err == nil || !strings.Contains(err.Error(), c.want) || dag.KindOf(err) != dag.KindInvalidArgument {
			t.Errorf("%s: got %v, want an invalid-argument error containing %q", c.what, err, c.want)
		}
	}
	if _, err := New[int, int](good, mk, nil); err == nil {
		t.Error("no failed function: accepted")
	}
	if _, err := New[int, int](good, nil, intFailed); err == nil {
		t.Error("no cancelled function: accepted")
	}
}

// TestWindow checks the window for each range of the average run time.
func TestWindow(t *testing.T) {
	for _, c := range []struct {
		slots, prefetch int
		avg             time.Duration
		want            int
	}{
		{4, 2, 0, 6}, // nothing measured yet
		{4, 2, time.Second, 6},
		{4, 2, 10*time.Millisecond + 1, 6},
		{4, 2, 10 * time.Millisecond, 32},
		{4, 2, 2 * time.Millisecond, 32},
		{4, 40, 2 * time.Millisecond, 44}, // a prefetch beyond 8 per slot stays
		{4, 2, time.Millisecond, 256},
		{4, 2, time.Microsecond, 256},
		{32, 2, time.Microsecond, 1024}, // capped
		{32, 2000, time.Microsecond, 2032},
	} {
		m, err := New(Config{Slots: c.slots, Prefetch: c.prefetch, CancelGrace: time.Second, Room: 1},
			func(Subtask[int], Reason) int { return 0 }, intFailed)
		if err != nil {
			t.Fatal(err)
		}
		m.avgRun = c.avg
		if got := m.Window(); got != c.want {
			t.Errorf("%d slots, prefetch %d, average %v: window %d, want %d", c.slots, c.prefetch, c.avg, got, c.want)
		}
	}
}

// TestCheckFindsBrokenStates proves the invariant check can fail: each
// case breaks one piece of bookkeeping of a busy machine.
func TestCheckFindsBrokenStates(t *testing.T) {
	busy := func() *Machine[int, int] {
		m, err := New(Config{Slots: 2, Prefetch: 1, CancelGrace: time.Second, Room: 100},
			func(Subtask[int], Reason) int { return -1 }, intFailed)
		if err != nil {
			t.Fatal(err)
		}
		m.Room(100, t0)
		m.Pulled([]Subtask[int]{{ID: dag.PackSubtaskID(1, 1, 1), WorkingSet: 10}, {ID: dag.PackSubtaskID(1, 1, 2), WorkingSet: 10}, {ID: dag.PackSubtaskID(1, 1, 3), WorkingSet: 10}}, false, t0)
		if err := m.check(); err != nil {
			t.Fatalf("a sound machine fails its check: %v", err)
		}
		return m
	}
	for _, c := range []struct {
		what  string
		spoil func(m *Machine[int, int])
		want  string
	}{
		{"running miscounted", func(m *Machine[int, int]) { m.running-- }, "slots run subtasks"},
		{"inflight miscounted", func(m *Machine[int, int]) { m.inflight++ }, "in flight"},
		{"reservation leaked", func(m *Machine[int, int]) { m.reserved += 5 }, "reserved"},
		{"idle slot with queued work", func(m *Machine[int, int]) {
			m.running--
			m.inflight--
			m.reserved -= m.slots[0].task.WorkingSet
			m.slots[0] = slotState[int]{}
		}, "is idle while queued subtask"},
		{"window not kept full", func(m *Machine[int, int]) { m.cfg.Prefetch += 5 }, "no pull out or waiting"},
		{"timer not asked for", func(m *Machine[int, int]) { m.slots[0].abandonAt = time.Unix(5, 0) }, "next tick"},
		{"an event out of turn", func(m *Machine[int, int]) { m.Reported(t0) }, "out of turn: reported with no report out"},
		{"a run finished twice", func(m *Machine[int, int]) {
			r := m.slots[0].run
			m.Finished(0, r, 1, time.Second, t0)
			m.Finished(0, r, 1, time.Second, t0)
		}, "finished an unknown run"},
	} {
		m := busy()
		if err := spoiled(m, c.spoil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: check says %v, want an error containing %q", c.what, err, c.want)
		}
	}
}

// spoiled runs spoil on m and returns what m's check says then. In the
// invariants build an event that breaks an invariant panics at once; the
// panic is returned as the error.
func spoiled(m *Machine[int, int], spoil func(*Machine[int, int])) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	spoil(m)
	return m.check()
}

// TestSteadyStateAllocatesNothing runs rounds of pull, start and finish,
// as a busy raylet does, and checks that once the machine's buffers have
// grown a round allocates nothing.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	if checkInvariants {
		t.Skip("the invariants build checks after every event")
	}
	m, err := New(Config{Slots: 4, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 30},
		func(Subtask[int], Reason) int { return -1 }, intFailed)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]Subtask[int], 1024)
	for i := range tasks {
		tasks[i] = Subtask[int]{ID: dag.PackSubtaskID(1, 1, uint64(i+1)), WorkingSet: 8, Spec: i}
	}
	type started struct {
		slot Slot
		run  Run
		spec int
	}
	var (
		runs             = make([]started, 0, 1024)
		credits, next    int
		pullOut, reptOut bool
	)
	note := func(effs []Effect[int, int]) {
		for _, e := range effs {
			switch e.Kind {
			case Start:
				runs = append(runs, started{e.Slot, e.Run, e.Task.Spec})
			case Pull:
				pullOut, credits = true, e.Credits
			case Report:
				reptOut = true
			}
		}
	}
	round := func() {
		if pullOut {
			n := min(credits, len(tasks)-next)
			if n == 0 {
				next = 0
				n = min(credits, len(tasks))
			}
			pullOut = false
			note(m.Pulled(tasks[next:next+n], false, t0))
			next += n
		}
		for len(runs) > 0 {
			r := runs[0]
			runs = runs[:copy(runs, runs[1:])]
			note(m.Finished(r.slot, r.run, r.spec, 200*time.Microsecond, t0))
			if reptOut {
				reptOut = false
				note(m.Reported(t0))
			}
		}
	}
	note(m.Room(1<<30, t0))
	for range 50 {
		round()
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("a round of pull, start and finish allocates %v times, want 0", allocs)
	}
	if m.Window() != 256 {
		t.Errorf("window %d with tiny subtasks, want 256", m.Window())
	}
}

// TestRandomEvents drives machines with random events in random order —
// pulls answered or failed, runs ending, cancels, ticks, room changes —
// checking the invariants after each event and that the effects make
// sense to a raylet carrying them out. Then it lets all work end and
// checks that the head heard exactly one completion for every subtask
// pulled.
func TestRandomEvents(t *testing.T) {
	seen := map[Kind]int{}
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed, 3000, seen) })
	}
	// The walk reaches every effect, abandons and discards included.
	for k := Start; k <= Timer; k++ {
		if seen[k] == 0 {
			t.Errorf("no %v effect in any run", k)
		}
	}
	t.Logf("effects: %v", seen)
}

type randomDone struct {
	spec   int
	why    Reason
	failed bool // the kernel failed
}

type randomSim struct {
	t   *testing.T
	rnd *rand.Rand
	m   *Machine[int, randomDone]
	now time.Time

	nextID    int
	queued    map[int]bool // pulled, not started or dropped
	slots     map[Slot]Subtask[int]
	runs      map[Slot]Run
	stuck     map[Run]Subtask[int]
	pull      *Effect[int, randomDone]
	report    *Effect[int, randomDone]
	timer     time.Time
	delivered map[int]int  // completions the head got, by subtask
	stored    map[int]bool // subtasks whose kernels succeeded: their outputs exist
	room      int64
	seen      map[Kind]int
}

func randomRun(t *testing.T, seed uint64, events int, seen map[Kind]int) {
	rnd := rand.New(rand.NewPCG(seed, 0))
	slots := 1 + rnd.IntN(4)
	room := int64(64 + rnd.IntN(256))
	m, err := New(Config{Slots: slots, Prefetch: rnd.IntN(3), CancelGrace: 2 * time.Second, Room: room},
		func(t Subtask[int], why Reason) randomDone { return randomDone{spec: t.Spec, why: why} },
		func(d randomDone) bool { return d.why != 0 || d.failed })
	if err != nil {
		t.Fatal(err)
	}
	s := &randomSim{t: t, rnd: rnd, m: m, now: time.Unix(1000, 0), room: room,
		queued: map[int]bool{}, slots: map[Slot]Subtask[int]{}, runs: map[Slot]Run{},
		stuck: map[Run]Subtask[int]{}, delivered: map[int]int{}, stored: map[int]bool{}, seen: seen}
	s.apply("room", m.Room(room, s.now))
	for range events {
		s.step(false)
	}
	// Let everything end: no more work from the head, every kernel returns.
	for i := 0; ; i++ {
		if i > 100_000 {
			t.Fatalf("work never ends: %d queued, %d running, %d abandoned, pull out %v, report out %v",
				len(s.queued), len(s.slots), len(s.stuck), s.pull != nil, s.report != nil)
		}
		if len(s.queued) == 0 && len(s.slots) == 0 && len(s.stuck) == 0 && m.Pending() == 0 && s.report == nil &&
			(s.pull == nil || len(s.pull.Done) == 0) {
			break
		}
		s.step(true)
	}
	for id := 0; id < s.nextID; id++ {
		if n := s.delivered[id]; n != 1 {
			t.Errorf("subtask %d: the head heard %d completions, want 1", id, n)
		}
	}
}

// step sends one random event the raylet could send now; draining, the
// head sends no more work and nothing fails.
func (s *randomSim) step(draining bool) {
	r := s.rnd
	switch k := r.IntN(10); {
	case k < 3 && s.pull != nil:
		if !draining && r.IntN(8) == 0 {
			s.pull = nil
			s.advance(time.Duration(r.IntN(30)) * time.Millisecond)
			s.apply("pull failed", s.m.PullFailed(s.now))
			return
		}
		n := 0
		if !draining {
			n = r.IntN(s.pull.Credits + 1)
		}
		tasks := make([]Subtask[int], n)
		for i := range tasks {
			id := s.nextID
			s.nextID++
			tasks[i] = Subtask[int]{ID: dag.PackSubtaskID(1, 1, uint64(id+1)), WorkingSet: int64(r.IntN(int(s.room))), Spec: id}
			// Some go ahead of subtasks they read (After): mostly recent
			// ones, which may still be here, or may have ended (failed,
			// dropped: then the raylet finds no output and says so).
			if id > 0 && r.IntN(3) == 0 {
				for range 1 + r.IntN(3) {
					// A stored output is read, not waited for (the raylet
					// leaves it out of After).
					if p := max(0, id-1-r.IntN(min(id, 6))); !s.stored[p] {
						tasks[i].After = append(tasks[i].After, dag.PackSubtaskID(1, 1, uint64(p+1)))
					}
				}
			}
			s.queued[id] = true
		}
		s.deliver(s.pull.Done)
		s.pull = nil
		s.apply("pulled", s.m.Pulled(tasks, false, s.now))
	case k < 5 && s.report != nil:
		if !draining && r.IntN(8) == 0 {
			s.report = nil
			s.advance(time.Duration(r.IntN(30)) * time.Millisecond)
			s.apply("report failed", s.m.ReportFailed(s.now))
			return
		}
		s.deliver(s.report.Done)
		s.report = nil
		s.apply("reported", s.m.Reported(s.now))
	case k < 7 && len(s.slots) > 0:
		slot := s.anySlot()
		took := []time.Duration{50 * time.Microsecond, 3 * time.Millisecond, 40 * time.Millisecond}[r.IntN(3)]
		run, task := s.runs[slot], s.slots[slot]
		delete(s.slots, slot)
		delete(s.runs, slot)
		s.advance(took / 10)
		failed := !draining && r.IntN(6) == 0
		s.stored[task.Spec] = !failed
		s.apply("finished", s.m.Finished(slot, run, randomDone{spec: task.Spec, failed: failed}, took, s.now))
	case k < 8 && len(s.stuck) > 0:
		for run, task := range s.stuck {
			s.apply("abandoned run finished", s.m.Finished(-1, run, randomDone{spec: task.Spec}, time.Hour, s.now))
			break
		}
	case k < 9 && !draining && s.nextID > 0:
		var ids []dag.SubtaskID
		for range 1 + r.IntN(3) {
			ids = append(ids, dag.PackSubtaskID(1, 1, uint64(r.IntN(s.nextID)+1)))
		}
		s.advance(time.Duration(r.IntN(500)) * time.Millisecond)
		s.apply("cancel", s.m.Cancel(ids, s.now))
	case k < 9 && !draining && r.IntN(4) == 0:
		s.room = int64(32 + r.IntN(256))
		s.apply("room", s.m.Room(s.room, s.now))
	default:
		if draining && !s.timer.IsZero() {
			s.now = s.timer
		} else {
			s.advance(time.Duration(r.IntN(1500)) * time.Millisecond)
		}
		if r.IntN(20) == 0 {
			s.apply("registered", s.m.Registered(s.now))
			return
		}
		s.apply("tick", s.m.Tick(s.now))
	}
}

func (s *randomSim) advance(d time.Duration) { s.now = s.now.Add(d) }

func (s *randomSim) anySlot() Slot {
	for k := range s.slots {
		return k
	}
	panic("no slot")
}

func (s *randomSim) deliver(done []randomDone) {
	for _, d := range done {
		s.delivered[d.spec]++
	}
}

// apply carries out effects as a raylet would, failing the test on one a
// raylet could not carry out.
func (s *randomSim) apply(event string, effs []Effect[int, randomDone]) {
	t := s.t
	t.Helper()
	if err := s.m.check(); err != nil {
		t.Fatalf("after %s: %v", event, err)
	}
	for _, e := range effs {
		s.seen[e.Kind]++
		switch e.Kind {
		case Start:
			if _, busy := s.slots[e.Slot]; busy {
				t.Fatalf("after %s: start %d in busy slot %d", event, e.Task.Spec, e.Slot)
			}
			if !s.queued[e.Task.Spec] {
				t.Fatalf("after %s: start %d, which is not queued", event, e.Task.Spec)
			}
			for _, p := range e.Task.After {
				if !s.stored[int(p.Index())-1] {
					t.Fatalf("after %s: start %d before %d, which it reads, stored its output", event, e.Task.Spec, p.Index()-1)
				}
			}
			delete(s.queued, e.Task.Spec)
			s.slots[e.Slot], s.runs[e.Slot] = e.Task, e.Run
		case Interrupt:
			if s.slots[e.Slot].Spec != e.Task.Spec || s.runs[e.Slot] != e.Run {
				t.Fatalf("after %s: interrupt %d in slot %d, which runs something else", event, e.Task.Spec, e.Slot)
			}
		case Replace:
			if s.runs[e.Slot] != e.Run {
				t.Fatalf("after %s: replace slot %d's worker for run %d, which it does not run", event, e.Slot, e.Run)
			}
			s.stuck[e.Run] = e.Task
			delete(s.slots, e.Slot)
			delete(s.runs, e.Slot)
		case Drop:
			if !s.queued[e.Task.Spec] {
				t.Fatalf("after %s: drop %d, which is not queued", event, e.Task.Spec)
			}
			delete(s.queued, e.Task.Spec)
		case Discard:
			if _, ok := s.stuck[e.Run]; !ok {
				t.Fatalf("after %s: discard run %d, which was not abandoned", event, e.Run)
			}
			delete(s.stuck, e.Run)
		case Pull:
			if s.pull != nil {
				t.Fatalf("after %s: a second pull", event)
			}
			if e.Credits <= 0 {
				t.Fatalf("after %s: a pull for %d credits", event, e.Credits)
			}
			e.Done = append([]randomDone(nil), e.Done...) // the machine's until answered
			s.pull = &e
		case Report:
			if s.report != nil {
				t.Fatalf("after %s: a second report", event)
			}
			if len(e.Done) == 0 {
				t.Fatalf("after %s: an empty report", event)
			}
			e.Done = append([]randomDone(nil), e.Done...)
			s.report = &e
		case Timer:
			s.timer = e.At
		default:
			t.Fatalf("after %s: effect %v", event, e.Kind)
		}
	}
	if len(s.slots) > len(s.m.slots) {
		t.Fatalf("after %s: %d slots busy of %d", event, len(s.slots), len(s.m.slots))
	}
}

// TestSubtaskRunningIsNotStartedAgain: a new leader may hand out again a
// subtask this raylet still runs for the old one. The second copy waits in
// the queue while the first runs, and starts once it has ended: never two
// slots on one subtask (they would write the same objects).
func TestSubtaskRunningIsNotStartedAgain(t *testing.T) {
	m, err := New(Config{Slots: 2, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 30},
		func(Subtask[int], Reason) int { return -1 }, intFailed)
	if err != nil {
		t.Fatal(err)
	}
	starts := func(effs []Effect[int, int]) (out []Effect[int, int]) {
		for _, e := range effs {
			if e.Kind == Start {
				out = append(out, e)
			}
		}
		return out
	}
	pulls := func(effs []Effect[int, int]) bool {
		for _, e := range effs {
			if e.Kind == Pull {
				return true
			}
		}
		return false
	}
	if !pulls(m.Room(1<<30, t0)) {
		t.Fatal("no pull with room and idle slots")
	}
	id := dag.PackSubtaskID(1, 1, 7)
	effs := m.Pulled([]Subtask[int]{{ID: id, Spec: 1}}, false, t0)
	first := starts(effs)
	if len(first) != 1 || !pulls(effs) {
		t.Fatalf("first copy: %d starts, pull out %v; want 1 start and the next pull", len(first), pulls(effs))
	}
	again := starts(m.Pulled([]Subtask[int]{{ID: id, Attempt: 1, Spec: 2}}, false, t0))
	if len(again) != 0 {
		t.Fatalf("the copy handed out again started on slot %d while slot %d runs it", again[0].Slot, first[0].Slot)
	}
	after := starts(m.Finished(first[0].Slot, first[0].Run, 0, time.Millisecond, t0))
	if len(after) != 1 || after[0].Task.Spec != 2 {
		t.Fatalf("after the first run ended: starts %+v, want the second copy", after)
	}
}

// intFailed takes a negative int completion for a failure.
func intFailed(c int) bool { return c < 0 }

// TestImminent checks the estimate the raylet's idle workers look by: a
// stencil step (every next task reads both running ones) releases more
// than its workers; a chain releases one per worker.
func TestImminent(t *testing.T) {
	m, err := New(Config{Slots: 2, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 30},
		func(Subtask[int], Reason) int { return -1 }, intFailed)
	if err != nil {
		t.Fatal(err)
	}
	m.Room(1<<30, t0)
	id := func(i uint64) dag.SubtaskID { return dag.PackSubtaskID(1, 1, i) }
	both := []dag.SubtaskID{id(1), id(2)}
	effs := m.Pulled([]Subtask[int]{{ID: id(1)}, {ID: id(2)}, {ID: id(3), After: both}, {ID: id(4), After: both}}, false, t0)
	if got := m.Imminent(); got != 4 || got <= m.Running() {
		t.Fatalf("stencil step: imminent %d with %d running, want 4 (two readers of each)", got, m.Running())
	}
	for _, e := range effs {
		if e.Kind == Start && e.Task.ID == id(1) {
			m.Finished(e.Slot, e.Run, 0, time.Millisecond, t0)
		}
	}
	if got := m.Imminent(); got != 2 || got <= m.Running() {
		t.Fatalf("stencil step, one task ended: imminent %d with %d running, want 2 > 1", got, m.Running())
	}

	c, _ := New(Config{Slots: 2, Prefetch: 2, CancelGrace: time.Second, Room: 1 << 30},
		func(Subtask[int], Reason) int { return -1 }, intFailed)
	c.Room(1<<30, t0)
	c.Pulled([]Subtask[int]{{ID: id(1)}, {ID: id(2), After: []dag.SubtaskID{id(1)}}, {ID: id(3), After: []dag.SubtaskID{id(2)}}}, false, t0)
	if got := c.Imminent(); got != 1 || got > c.Running() {
		t.Fatalf("chain: imminent %d with %d running, want 1, not more than running", got, c.Running())
	}
}

// TestReaderOfASubtaskSentAgain: a subtask the head sends again while an
// attempt of it runs (a lost completion, a new leader) may end first with
// the reader's input stored; the reader then waits only for its other
// input, though the subtask is still here, and starts once that ends. (The
// invariants, under -tags invariants, took that state for a broken one.)
func TestReaderOfASubtaskSentAgain(t *testing.T) {
	m, err := New(Config{Slots: 2, Prefetch: 4, CancelGrace: time.Second, Room: 1 << 30},
		func(Subtask[int], Reason) int { return -1 }, intFailed)
	if err != nil {
		t.Fatal(err)
	}
	m.Room(1<<30, t0)
	p, q, r := dag.PackSubtaskID(1, 1, 7), dag.PackSubtaskID(1, 1, 8), dag.PackSubtaskID(1, 1, 9)
	started := map[int]Effect[int, int]{}
	note := func(effs []Effect[int, int]) {
		for _, e := range effs {
			if e.Kind == Start {
				started[e.Task.Spec] = e
			}
		}
	}
	note(m.Pulled([]Subtask[int]{{ID: p, Spec: 1}, {ID: q, Spec: 2}, {ID: r, Spec: 3, After: []dag.SubtaskID{p, q}}}, false, t0))
	if _, ok := started[1]; !ok {
		t.Fatalf("p did not start: %v", started)
	}
	if _, ok := started[2]; !ok {
		t.Fatalf("q did not start: %v", started)
	}
	note(m.Pulled([]Subtask[int]{{ID: p, Attempt: 1, Spec: 4}}, false, t0))
	note(m.Finished(started[1].Slot, started[1].Run, 0, time.Millisecond, t0))
	if _, ok := started[3]; ok {
		t.Fatal("the reader started before q ended")
	}
	note(m.Finished(started[2].Slot, started[2].Run, 0, time.Millisecond, t0))
	_, readerRan := started[3]
	_, againRan := started[4]
	if !readerRan || !againRan {
		t.Fatalf("after both inputs ended: reader started %v, p's second attempt %v; want both", readerRan, againRan)
	}
}
