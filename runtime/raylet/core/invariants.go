package core

import (
	"fmt"

	"github.com/phobos-project/phobos/dag"
)

// check returns the first broken invariant, or nil. It runs after every
// event in the invariants build and in this package's tests, so it
// allocates nothing unless it fails and costs O(slots²) plus the queue.
func (m *Machine[T, C]) check() error {
	if m.misused != "" {
		return fmt.Errorf("raylet core: an event out of turn: %s", m.misused)
	}
	if m.queue.head < 0 || m.queue.head > len(m.queue.s) {
		return fmt.Errorf("raylet core: queue head %d outside its %d entries", m.queue.head, len(m.queue.s))
	}
	running := 0
	var reserved int64
	for k := range m.slots {
		s := &m.slots[k]
		if s.run == 0 {
			if !s.abandonAt.IsZero() {
				return fmt.Errorf("raylet core: idle slot %d has an abandon deadline", k)
			}
			continue
		}
		running++
		reserved += s.task.WorkingSet
		if s.run > m.lastRun {
			return fmt.Errorf("raylet core: slot %d runs run %d, after the last started (%d)", k, s.run, m.lastRun)
		}
		for j := k + 1; j < len(m.slots); j++ {
			if o := &m.slots[j]; o.run == s.run || o.run != 0 && o.task.ID == s.task.ID {
				return fmt.Errorf("raylet core: slots %d and %d run the same run or subtask (%d, %s)", k, j, s.run, s.task.ID)
			}
		}
	}
	for i := range m.stuck {
		st := &m.stuck[i]
		reserved += st.task.WorkingSet
		if st.run == 0 || st.run > m.lastRun {
			return fmt.Errorf("raylet core: abandoned run %d was never started", st.run)
		}
		for k := range m.slots {
			if m.slots[k].run == st.run {
				return fmt.Errorf("raylet core: run %d is both abandoned and in slot %d", st.run, k)
			}
		}
	}
	switch {
	case running != m.running:
		return fmt.Errorf("raylet core: %d slots run subtasks; counted %d", running, m.running)
	case m.inflight != m.waiting.live+m.queue.len()+m.running:
		return fmt.Errorf("raylet core: %d in flight, but %d waiting, %d queued and %d running", m.inflight, m.waiting.live, m.queue.len(), m.running)
	case reserved != m.reserved:
		return fmt.Errorf("raylet core: running and abandoned kernels need %d bytes; reserved %d", reserved, m.reserved)
	case !m.pulling && m.inPull != nil, !m.reporting && m.inReport != nil:
		return fmt.Errorf("raylet core: completions held for a send that is not out")
	case m.pulling && !m.pullAt.IsZero(), m.reporting && !m.reportAt.IsZero():
		return fmt.Errorf("raylet core: a send is out and waiting to go at once")
	}

	if err := m.checkWaiting(); err != nil {
		return err
	}

	// Nothing is left waiting that could go now.
	if m.running < len(m.slots) && m.queue.len() > 0 && m.fit() >= 0 {
		return fmt.Errorf("raylet core: a slot is idle while queued subtask %s fits", m.queue.at(m.fit()).ID)
	}
	w := m.Window()
	if credits := w - m.inflight; !m.pulling && m.pullAt.IsZero() && credits > 0 && (2*credits >= w || m.short() || m.overdue()) {
		return fmt.Errorf("raylet core: %d in flight of a window of %d, and no pull out or waiting", m.inflight, w)
	}
	if len(m.pending) > 0 && !m.reporting && m.reportAt.IsZero() {
		// They wait for the answer to the pull out, or for a pull to go.
		held := m.headBusy && m.now.Before(m.pullSent.Add(maxHold)) || m.pipelining()
		if m.pulling && !held || !m.pulling && m.inflight >= w {
			return fmt.Errorf("raylet core: %d completions wait, and no pull or report will take them", len(m.pending))
		}
	}
	if len(m.pending) > 0 && m.heldSince.IsZero() || len(m.pending) == 0 && !m.heldSince.IsZero() {
		return fmt.Errorf("raylet core: %d completions pending, held since %v", len(m.pending), m.heldSince)
	}
	if next := m.nextTick(); !next.Equal(m.timer) {
		return fmt.Errorf("raylet core: the next tick is due at %v; the timer asked for is %v", next, m.timer)
	}
	return nil
}

// checkWaiting checks the wait list: its holes and counts, and that each
// waiting subtask waits for at least one subtask, only for subtasks of its
// After still here, and is neither queued nor running. It is
// O(waiting × (After + queue + slots)), and allocates.
func (m *Machine[T, C]) checkWaiting() error {
	l := &m.waiting
	if l.first < 0 || l.first > len(l.s) || l.first < len(l.s) && l.s[l.first].pend == 0 {
		return fmt.Errorf("raylet core: the wait list starts at %d of %d, at a hole", l.first, len(l.s))
	}
	live := 0
	readers := map[dag.SubtaskID]int32{}
	for i := range l.s {
		w := &l.s[i]
		if w.pend == 0 {
			continue
		}
		if i < l.first {
			return fmt.Errorf("raylet core: waiting subtask %s before the wait list's start", w.t.ID)
		}
		live++
		var here uint64
		for k, p := range w.t.After {
			if !containsID(w.t.After[:k], p) && m.has(p) {
				here |= 1 << k
			}
			if w.pend&(1<<k) != 0 {
				readers[p]++
			}
		}
		// It waits only for subtasks here. One here need not be waited
		// for: the head may have sent it again (a lost completion, a new
		// leader) and an attempt of it that ended first stored what the
		// reader reads.
		if w.pend&^here != 0 {
			return fmt.Errorf("raylet core: subtask %s waits for %b of %v; only %b of them are here", w.t.ID, w.pend, w.t.After, here)
		}
		if m.queue.find(w.t.ID) >= 0 || m.runningSlot(w.t.ID) >= 0 {
			return fmt.Errorf("raylet core: subtask %s is both waiting and queued or running", w.t.ID)
		}
	}
	if live != l.live {
		return fmt.Errorf("raylet core: %d subtasks wait; counted %d", live, l.live)
	}
	if len(readers) != len(l.readers) {
		return fmt.Errorf("raylet core: the wait list counts readers of %d subtasks; %d are read", len(l.readers), len(readers))
	}
	for p, n := range readers {
		if l.readers[p] != n {
			return fmt.Errorf("raylet core: %d waiting subtasks read %s; counted %d", n, p, l.readers[p])
		}
	}
	return nil
}
