package head

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// sender is what an outbox sends through: a raylet's session (tests use
// a fake that can hold a send back).
type sender interface {
	Send(m transport.Method, msg any) error
	RemoteID() string
}

// An outbox sends the one-way messages the loop makes for one raylet's
// session in the order the loop made them, and lets a pull reply wait for
// the messages made before it.
//
// Order matters because a message can undo work a later reply hands out:
// a step frees object X on a raylet (say a late completion of a subtask
// being rebuilt was discarded) and a later step hands the same raylet the
// rebuild, which makes X again. The raylet applies what arrives on its
// session in order, so the free must be written before the reply; sent
// by a goroutine of its own it could land after, deleting the new X while
// the head counts it there (a job then failed "no location has it").
//
// One writer goroutine runs while messages wait, so a slow raylet holds up
// only its own messages, never the loop or the other raylets.
type outbox struct {
	s    *Server
	sess sender

	mu      sync.Mutex
	queue   []outMsg
	spare   []outMsg // the writer's last batch, reused
	queued  uint64   // messages ever queued: the sequence number of the last (the loop's alone)
	writing bool     // a writer goroutine is draining queue
	notify  chan struct{}

	// sent counts the messages sent or given up on (a session that does
	// not take a message fails it within its write timeout). Written
	// under mu; read without it on the fast path of wait.
	sent atomic.Uint64
}

func newOutbox(s *Server, sess sender) *outbox { return &outbox{s: s, sess: sess} }

// put queues messages (the loop calls it) and returns the sequence number
// of the last; a writer starts if none runs.
func (o *outbox) put(msgs ...outMsg) uint64 {
	o.mu.Lock()
	o.queue = append(o.queue, msgs...)
	o.queued += uint64(len(msgs))
	seq := o.queued
	start := !o.writing && len(msgs) > 0
	if start {
		o.writing = true
	}
	o.mu.Unlock()
	if start {
		o.s.wg.Add(1)
		go o.write()
	}
	return seq
}

// pending returns the sequence number a reply made now must wait for, 0
// if every queued message has been sent. Only the loop calls it, and only
// the loop writes queued (in put): no lock on a pull reply's path.
func (o *outbox) pending() uint64 {
	if o.sent.Load() == o.queued {
		return 0
	}
	return o.queued
}

// write sends what is queued, batch after batch, until nothing is.
func (o *outbox) write() {
	defer o.s.wg.Done()
	for {
		o.mu.Lock()
		batch := o.queue
		if len(batch) == 0 {
			o.writing = false
			o.mu.Unlock()
			return
		}
		o.queue, o.spare = o.spare[:0], nil
		o.mu.Unlock()
		for i := range batch {
			m := &batch[i]
			if err := o.sess.Send(m.m, m.msg); err != nil {
				o.s.log.Debug("send to raylet", "raylet", o.sess.RemoteID(), "method", wire.Name(m.m), "err", err)
			}
			*m = outMsg{} // let the message go once sent
		}
		o.mu.Lock()
		o.sent.Add(uint64(len(batch)))
		if o.notify != nil {
			close(o.notify)
			o.notify = nil
		}
		if cap(batch) <= maxSpareMsgs {
			o.spare = batch[:0]
		}
		o.mu.Unlock()
	}
}

// maxSpareMsgs bounds the batch an outbox keeps for reuse: a release's
// thousands of free messages are not held for the raylet's lifetime.
const maxSpareMsgs = 64

// wait returns once message seq has been sent (or given up on), or with
// ctx's error.
func (o *outbox) wait(ctx context.Context, seq uint64) error {
	for o.sent.Load() < seq {
		o.mu.Lock()
		if o.sent.Load() >= seq {
			o.mu.Unlock()
			return nil
		}
		if o.notify == nil {
			o.notify = make(chan struct{})
		}
		ch := o.notify
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
