package sched

import (
	"cmp"
	"slices"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Draining a raylet: an operator takes a raylet out of service without
// failing anything. The Leader places no new work on it (placement,
// lowering's initial assignment and retries pass it over, and its pulls
// get nothing, stolen work included), its queued subtasks move to other
// raylets, and what runs there finishes. It shows as "draining" while
// subtasks run on it and "drained" after.
//
// Objects it holds stay where they are and are served from there while it
// runs: peers fetch them as before. They are not copied away. When the
// drained raylet is then stopped (it says goodbye), whatever a live job
// still needs of it is rebuilt through lineage, as after any loss; copying
// every object off ahead of time would move bytes that mostly nobody reads
// again, and lineage already covers the rest. Put objects (a driver's
// data) cannot be rebuilt: put them again, or keep the raylet until their
// readers are done.
//
// A drain lasts for this leadership: a new leader does not know of it
// (drain again after a failover).

// placeable reports whether new work may be placed on rv.
func (rv *raylet) placeable() bool { return rv.alive && !rv.draining }

// Drain stops placing work on raylet r and moves its queued subtasks to
// other raylets (or leaves them READY without a raylet until one is
// placeable). Subtasks running there run on.
func (s *scheduler) Drain(r Raylet) *schedEffects {
	fx := s.begin()
	rv := s.raylets[r]
	rv.draining = true
	clear(rv.frontier) // nothing more goes to it, ahead of its inputs or not
	rv.frontier = rv.frontier[:0]
	var q []entry
	rv.queue.entries(func(e entry) { q = append(q, e) })
	rv.queue.reset()
	s.touch(r) // out of placement's way before its queue is placed again
	// In the order they were queued, not the queue's (which depends on how
	// it was built).
	slices.SortFunc(q, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range q {
		if s.valid(e, r) {
			s.makeReady(s.stageAt(e.slot), e.i, NoRaylet)
		}
	}
	s.touch(r)
	return fx
}

// Undrain lets raylet r take work again and places the work that waited
// for a placeable raylet.
func (s *scheduler) Undrain(r Raylet) *schedEffects {
	s.raylets[r].draining = false
	s.touch(r)
	s.wake(r)
	return s.Requeue()
}

// DrainRaylet asks the Leader to drain raylet ID, or with Undrain to put
// it back in service. Admins only. The reply is the raylet's
// wire.RayletInfo.
type DrainRaylet struct {
	Call    Call
	Caller  Caller
	ID      string
	Undrain bool
}

func (*DrainRaylet) event() {}

func (l *Leader) drainRaylet(ev *DrainRaylet) {
	verb := "drain"
	if ev.Undrain {
		verb = "undrain"
	}
	if !ev.Caller.Admin {
		l.reply(ev.Call, nil, dag.Errorf(dag.KindPermissionDenied, "%s raylet %q: %q is not an admin; only admins drain raylets", verb, ev.ID, ev.Caller.Name))
		return
	}
	r, ok := l.s.RayletByID(ev.ID)
	if !ok || !l.known[ev.ID] {
		l.reply(ev.Call, nil, dag.Errorf(dag.KindNotFound, "%s raylet %q: no raylet has that ID; list the raylets with phobos status", verb, ev.ID))
		return
	}
	rv := l.s.raylets[r]
	if ev.Undrain {
		delete(l.draining, ev.ID)
		if rv.draining {
			l.s.Undrain(r)
			l.log.Info("raylet back in service", "raylet", ev.ID)
		}
	} else {
		l.draining[ev.ID] = true
		if !rv.draining {
			l.s.Drain(r)
			l.log.Info("raylet draining", "raylet", ev.ID, "running", rv.running)
		}
	}
	l.reply(ev.Call, l.rayletInfo(rv), nil)
}

// rayletInfo is how this leader sees one raylet.
func (l *Leader) rayletInfo(rv *raylet) wire.RayletInfo {
	info := wire.RayletInfo{ID: rv.id, Addr: rv.addr, Slots: rv.slots, State: RayletLost, HTTP: rv.http}
	switch {
	case rv.alive && rv.session != nil:
		info.State, info.Store, info.CertNotAfter = RayletAlive, rv.store, rv.certNotAfter
		info.Busy, info.Queued = rv.running, rv.queue.Len()
		if rv.draining {
			info.State = RayletDraining
			if rv.running == 0 {
				info.State = RayletDrained
			}
		}
	case rv.leaving:
		info.State = RayletLeft
	}
	return info
}

// The states of a raylet as the Leader reports them (wire.RayletInfo.State).
const (
	RayletAlive    = "alive"    // registered, takes work
	RayletDraining = "draining" // registered, takes no new work, some still runs
	RayletDrained  = "drained"  // registered, takes no new work, none runs
	RayletLost     = "lost"     // stopped beating or its session broke
	RayletLeft     = "left"     // said goodbye: stopped cleanly
)
