package head

import (
	"sync"

	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// beats holds the raylets' heartbeats between their arrival and the loop's
// next look, the latest one per session. A heartbeat does not queue in the
// loop's inbox: with a thousand raylets, a loop busy for a few seconds has
// a few thousand heartbeats to read, which filled the inbox, stopped every
// session's read loop behind it, and, when the liveness tick came before
// the queued heartbeats, had the leader take live raylets for lost (and
// requeue their work, and tell every other raylet). Here a heartbeat costs
// its session's read loop a map write, and the loop applies every
// heartbeat that arrived before it checks liveness (run).
type beats struct {
	mu    sync.Mutex
	m     map[*transport.Session]wire.Heartbeat
	spare map[*transport.Session]wire.Heartbeat
	ready chan struct{} // has a value while m is not empty
}

func newBeats() *beats {
	return &beats{m: map[*transport.Session]wire.Heartbeat{}, spare: map[*transport.Session]wire.Heartbeat{}, ready: make(chan struct{}, 1)}
}

// add keeps sess's latest heartbeat for the loop.
func (b *beats) add(sess *transport.Session, hb wire.Heartbeat) {
	b.mu.Lock()
	b.m[sess] = hb
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take hands the loop the heartbeats kept so far; it gives the map back
// with done.
func (b *beats) take() map[*transport.Session]wire.Heartbeat {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.m
	b.m, b.spare = b.spare, nil
	if b.m == nil {
		b.m = map[*transport.Session]wire.Heartbeat{}
	}
	return m
}

func (b *beats) done(m map[*transport.Session]wire.Heartbeat) {
	clear(m)
	b.mu.Lock()
	b.spare = m
	b.mu.Unlock()
}

// stepBeats steps the machine with every heartbeat kept so far.
func (s *Server) stepBeats() {
	m := s.beats.take()
	for sess, hb := range m {
		if s.lead == nil {
			break
		}
		s.step(&sched.Heartbeat{Session: sess, Heartbeat: hb})
	}
	s.beats.done(m)
}
