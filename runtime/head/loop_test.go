package head

import (
	"testing"
	"time"

	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// TestTimers: the loop's timers come due earliest first, a timer set
// again moves, a cleared one never comes due, and the channel the loop
// selects on is nil when no timer is set.
func TestTimers(t *testing.T) {
	var tm timers
	if tm.C() != nil {
		t.Fatal("a channel with no timer set")
	}
	t0 := time.Now()
	a := sched.TimerID{Kind: sched.TimerPull, Raylet: 1}
	b := sched.TimerID{Kind: sched.TimerWait, Call: 7}
	c := sched.TimerID{Kind: sched.TimerResultTTL, Task: 3}
	tm.set(a, t0.Add(3*time.Second))
	tm.set(b, t0.Add(time.Second))
	tm.set(c, t0.Add(2*time.Second))
	tm.set(a, t0.Add(500*time.Millisecond)) // moved: now the earliest
	tm.clear(c)
	if tm.C() == nil {
		t.Fatal("no channel with timers set")
	}
	if got := tm.due(t0); len(got) != 0 {
		t.Fatalf("due before any deadline: %v", got)
	}
	got := tm.due(t0.Add(5 * time.Second))
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("due %v, want [%v %v] (the cleared timer never)", got, a, b)
	}
	if tm.C() != nil || len(tm.at) != 0 {
		t.Fatal("timers left after all came due")
	}
	tm.set(c, t0)
	tm.reset()
	if tm.C() != nil || len(tm.due(t0.Add(time.Hour))) != 0 {
		t.Fatal("a timer outlived reset")
	}
}

// TestBeats: the loop gets each session's latest heartbeat once, the ready
// channel says when there are some, and the maps are reused.
func TestBeats(t *testing.T) {
	b := newBeats()
	s1, s2 := &transport.Session{}, &transport.Session{}
	b.add(s1, wire.Heartbeat{Running: 1})
	b.add(s2, wire.Heartbeat{Running: 2})
	b.add(s1, wire.Heartbeat{Running: 3})
	select {
	case <-b.ready:
	default:
		t.Fatal("heartbeats kept but nothing ready")
	}
	m := b.take()
	if len(m) != 2 || m[s1].Running != 3 || m[s2].Running != 2 {
		t.Fatalf("took %v, want s1's latest (3) and s2's (2)", m)
	}
	b.done(m)
	if m := b.take(); len(m) != 0 {
		t.Fatalf("took %v again", m)
	} else {
		b.done(m)
	}
	b.add(s2, wire.Heartbeat{Running: 4})
	if m := b.take(); len(m) != 1 || m[s2].Running != 4 {
		t.Fatalf("took %v, want s2's 4", m)
	}
}
