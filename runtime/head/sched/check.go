package sched

import (
	"fmt"
	"slices"

	"github.com/phobos-project/phobos/dag"
)

// Check verifies the Leader's invariants and returns the first one broken:
//
//   - each stage's counters against its subtasks' states: done counts the
//     FINISHED and FREED, active the RUNNING and CANCELLING; waiting counts
//     the inputs not FINISHED of each subtask that has yet to finish,
//     pending the readers not finished of each; a READY subtask waits for
//     nothing;
//   - queues against states: every READY subtask placed on a raylet has
//     exactly one live entry in that raylet's queue, and every live entry
//     is such a subtask; nothing is READY unplaced while a raylet may
//     take it (alive and not draining); a raylet's running count is its RUNNING and CANCELLING
//     subtasks; RUNNING and CANCELLING subtasks are on alive raylets;
//     each queue is a heap;
//   - object copies against raylets: copies (of subtask outputs and of
//     put objects) are on alive raylets, once each, never where the
//     original is; a needed FINISHED subtask's outputs exist on an alive
//     raylet;
//   - raylets against sessions: the session index and the raylets'
//     sessions agree; only alive raylets have one; parked pulls only on
//     them;
//   - admission charges against jobs: the charges add up to what is used;
//     a job is charged exactly while it is being lowered, runs, or has its
//     end recorded; it is queued exactly while it waits for memory;
//   - leases against sessions: the index of driver sessions and the
//     leases agree;
//   - the raylet index (index.go): every raylet is in both heaps, in
//     order.
//
// Step runs it after every event when built with -tags invariants; tests
// call it directly. It walks everything: it is for tests, not for a
// running head.
func (l *Leader) Check() error {
	s := l.s
	placeable := 0 // alive and not draining: what may take READY work
	for _, rv := range s.raylets {
		if rv.placeable() {
			placeable++
		}
	}
	running := make([]int, len(s.raylets))
	live := make([]int, len(s.raylets)) // live queue entries
	for r, rv := range s.raylets {
		rv.queue.entries(func(e entry) {
			if s.valid(e, Raylet(r)) {
				live[r]++
			}
		})
		if part, k, ok := rv.queue.check(); !ok {
			return fmt.Errorf("raylet %s's queue is out of order: %s entry %d", rv.id, part, k)
		}
		if !rv.alive && rv.queue.Len() > 0 {
			return fmt.Errorf("raylet %s is lost but has %d queued entries", rv.id, rv.queue.Len())
		}
		if rv.draining && live[r] > 0 {
			return fmt.Errorf("raylet %s is draining but has %d live queued entries", rv.id, live[r])
		}
	}
	ready := make([]int, len(s.raylets))
	for _, j := range s.order {
		if err := l.checkStage(j, placeable, running, ready); err != nil {
			return fmt.Errorf("stage %d/%d: %w", j.task, j.key.Stage, err)
		}
	}
	for r, rv := range s.raylets {
		if rv.running != running[r] {
			return fmt.Errorf("raylet %s counts %d running, its subtasks say %d", rv.id, rv.running, running[r])
		}
		if live[r] != ready[r] {
			return fmt.Errorf("raylet %s has %d live queue entries for %d READY subtasks placed on it", rv.id, live[r], ready[r])
		}
		if rv.session != nil {
			if !rv.alive {
				return fmt.Errorf("raylet %s is lost but keeps a session", rv.id)
			}
			if got, ok := l.bySess[rv.session]; !ok || got != Raylet(r) {
				return fmt.Errorf("raylet %s's session is not indexed to it", rv.id)
			}
		}
		if rv.parked.call != 0 && rv.session == nil {
			return fmt.Errorf("raylet %s has a parked pull but no session", rv.id)
		}
	}
	for sess, r := range l.bySess {
		if int(r) >= len(s.raylets) || s.raylets[r].session != sess {
			return fmt.Errorf("session index names raylet %d, which has another session", r)
		}
	}
	for id, p := range s.puts {
		if err := l.checkCopies(p.r, p.copies); err != nil {
			return fmt.Errorf("put object %s: %w", id, err)
		}
		if !s.raylets[p.r].alive {
			return fmt.Errorf("put object %s lives on lost raylet %s", id, s.raylets[p.r].id)
		}
	}
	if err := s.checkIndex(); err != nil {
		return err
	}
	return l.checkLifecycle()
}

func (s *scheduler) checkIndex() error {
	for _, h := range []*rayletHeap{&s.idx.free, &s.idx.steal} {
		for i, e := range h.heap {
			r := e.r
			if h.pos[r] != int32(i) {
				return fmt.Errorf("raylet %s: heap position %d recorded as %d", s.raylets[r].id, i, h.pos[r])
			}
			if now := h.entry(r); now != e {
				return fmt.Errorf("raylet %s: heap key %d/%d, its counts say %d/%d: changed without a touch", s.raylets[r].id, e.a, e.b, now.a, now.b)
			}
			if i == 0 {
				continue
			}
			p := h.heap[(i-1)/2].r
			if h.less(r, p) {
				return fmt.Errorf("raylet %s is ordered below raylet %s but should come first", s.raylets[r].id, s.raylets[p].id)
			}
		}
		for r, rv := range s.raylets {
			if r >= len(h.pos) || h.pos[r] < 0 {
				return fmt.Errorf("raylet %s is not indexed", rv.id)
			}
		}
	}
	return nil
}

func (l *Leader) checkStage(j *stage, placeable int, running, ready []int) error {
	s := l.s
	sg := j.sg
	done, active := 0, 0
	for i := int32(0); i < int32(len(j.state)); i++ {
		st := j.state[i]
		switch st {
		case Finished, Freed:
			done++
		case Running, Cancelling:
			active++
			w := j.where[i]
			if w < 0 || !s.raylets[w].alive {
				return fmt.Errorf("subtask %d is %v on no alive raylet", i, st)
			}
			running[w]++
		case Ready:
			if j.waiting[i] != 0 {
				return fmt.Errorf("subtask %d is READY but waits for %d inputs", i, j.waiting[i])
			}
			if w := j.where[i]; w >= 0 {
				if !s.raylets[w].alive {
					return fmt.Errorf("subtask %d is READY on lost raylet %s", i, s.raylets[w].id)
				}
				ready[w]++
			} else if placeable > 0 && j.status == dag.JobRunning {
				// Without a placeable raylet (none alive, or every
				// one draining) READY work waits for one (Drain).
				return fmt.Errorf("subtask %d is READY on no raylet while %d raylets could take it", i, placeable)
			}
		}
		if st == Unscheduled || st == Ready || st == Running {
			want := int32(0)
			for _, p := range sg.Preds.Row(i) {
				if j.state[p] != Finished {
					want++
				}
			}
			if j.waiting[i] != want {
				return fmt.Errorf("subtask %d (%v) waits for %d inputs, but %d are not FINISHED", i, st, j.waiting[i], want)
			}
			if st == Unscheduled && want == 0 && j.status == dag.JobRunning {
				return fmt.Errorf("subtask %d is UNSCHEDULED with every input FINISHED", i)
			}
		}
		if j.status == dag.JobRunning || j.status == dag.JobSucceeded {
			want := int32(0)
			for _, u := range sg.Succs.Row(i) {
				if us := j.state[u]; us != Finished && us != Freed {
					want++
				}
			}
			if j.pending[i] != want {
				return fmt.Errorf("subtask %d has %d pending readers, but %d are not finished", i, j.pending[i], want)
			}
		}
		if cs := j.copies[i]; len(cs) > 0 {
			if err := l.checkCopies(j.where[i], cs); err != nil {
				return fmt.Errorf("subtask %d: %w", i, err)
			}
		}
		if st == Finished && s.needed(j, i) && !s.available(j, i) {
			return fmt.Errorf("subtask %d is FINISHED and needed, but its outputs are on no alive raylet", i)
		}
	}
	if done != j.done {
		return fmt.Errorf("done is %d, but %d subtasks are FINISHED or FREED", j.done, done)
	}
	if active != j.active {
		return fmt.Errorf("active is %d, but %d subtasks are RUNNING or CANCELLING", j.active, active)
	}
	return nil
}

// checkCopies checks copies of an object whose original is on w.
func (l *Leader) checkCopies(w Raylet, copies []Raylet) error {
	for k, c := range copies {
		switch {
		case c < 0 || int(c) >= len(l.s.raylets) || !l.s.raylets[c].alive:
			return fmt.Errorf("a copy on raylet %d, which is not alive", c)
		case c == w:
			return fmt.Errorf("a copy on raylet %s, where the original is", l.s.raylets[c].id)
		case slices.Contains(copies[:k], c):
			return fmt.Errorf("two copies on raylet %s", l.s.raylets[c].id)
		}
	}
	return nil
}

// checkLifecycle checks jobs against admission, and leases against
// sessions.
func (l *Leader) checkLifecycle() error {
	var used int64
	for task, b := range l.adm.charged {
		used += b
		if j := l.jobs[task]; j == nil || !j.charged {
			return fmt.Errorf("job %d is charged %d bytes of head memory but is %s", task, b, phaseOf(j))
		}
	}
	if used != l.adm.used {
		return fmt.Errorf("admission uses %d bytes, its charges add up to %d", l.adm.used, used)
	}
	for task, j := range l.jobs {
		_, charged := l.adm.charged[task]
		if charged != j.charged {
			return fmt.Errorf("job %d (%s) says charged=%v, admission says %v", task, j.phase, j.charged, charged)
		}
		switch j.phase {
		case phaseMarking, phaseLowering, phaseRunning:
			if !charged {
				return fmt.Errorf("job %d is %s but not charged any head memory", task, j.phase)
			}
		case phaseQueued, phaseEnded:
			if charged {
				return fmt.Errorf("job %d is %s but charged head memory", task, j.phase)
			}
		}
		if (j.phase == phaseQueued) != l.adm.waiting(task) {
			return fmt.Errorf("job %d is %s, and admission's queue says waiting=%v", task, j.phase, l.adm.waiting(task))
		}
		if j.phase == phaseRunning && len(l.s.tasks[task]) == 0 {
			return fmt.Errorf("job %d runs no stage", task)
		}
		for _, c := range j.waiters {
			if w := l.waiters[c]; w == nil || w.task != task {
				return fmt.Errorf("job %d holds wait call %d the index does not", task, c)
			}
		}
	}
	for c, w := range l.waiters {
		if j := l.jobs[w.task]; j == nil || !slices.Contains(j.waiters, c) {
			return fmt.Errorf("wait call %d on job %d is held by no job", c, w.task)
		}
	}
	for sess, tasks := range l.leased {
		for _, t := range tasks {
			if le := l.leases[t]; le == nil || !slices.Contains(le.sessions, sess) {
				return fmt.Errorf("a session is indexed under put task %d, whose lease does not have it", t)
			}
		}
	}
	for t, le := range l.leases {
		for _, sess := range le.sessions {
			if !slices.Contains(l.leased[sess], t) {
				return fmt.Errorf("put task %d's lease has a session the index does not", t)
			}
		}
	}
	return nil
}

func phaseOf(j *job) string {
	if j == nil {
		return "unknown here"
	}
	return j.phase.String()
}
