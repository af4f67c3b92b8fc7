package head

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// gatedSender records what is sent through it; each Send waits for a
// token on gate (after saying on entered that it is waiting), and fails
// when fail is set.
type gatedSender struct {
	entered chan transport.Method
	gate    chan struct{}
	fail    bool
	log     *eventLog
	busy    sync.Mutex // held during a Send: a second at once is a bug
}

func newGatedSender(log *eventLog) *gatedSender {
	return &gatedSender{entered: make(chan transport.Method, 16), gate: make(chan struct{}), log: log}
}

func (g *gatedSender) Send(m transport.Method, msg any) error {
	if !g.busy.TryLock() {
		panic("two sends at once on one session")
	}
	defer g.busy.Unlock()
	g.entered <- m
	<-g.gate
	g.log.add(wire.Name(m))
	if g.fail {
		return errors.New("session closed")
	}
	return nil
}

func (g *gatedSender) RemoteID() string { return "r1" }

// eventLog is what a raylet would see, in order.
type eventLog struct {
	mu  sync.Mutex
	got []string
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	l.got = append(l.got, s)
	l.mu.Unlock()
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func quietServer() *Server {
	return &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestOutboxKeepsOrderAndWaits: messages go out in the order they were
// queued, one Send at a time however they were queued, a failed Send
// still counts as done, and wait returns only once the message it names
// has gone.
func TestOutboxKeepsOrderAndWaits(t *testing.T) {
	s := quietServer()
	var log eventLog
	g := newGatedSender(&log)
	ob := newOutbox(s, g)
	defer func() { close(g.gate); s.wg.Wait() }()

	if seq := ob.pending(); seq != 0 {
		t.Fatalf("pending %d with nothing queued, want 0", seq)
	}
	first := ob.put(outMsg{m: wire.MethodFreeObjects})
	if m := <-g.entered; m != wire.MethodFreeObjects {
		t.Fatalf("first send %s, want FreeObjects", wire.Name(m))
	}
	// The writer is inside the first Send: queue two more behind it.
	last := ob.put(outMsg{m: wire.MethodCancelSubtasks}, outMsg{m: wire.MethodPeerLost})
	if first != 1 || last != 3 || ob.pending() != 3 {
		t.Fatalf("sequence numbers %d, %d, pending %d; want 1, 3, 3", first, last, ob.pending())
	}
	waited := make(chan error, 1)
	go func() { waited <- ob.wait(context.Background(), last) }()

	g.gate <- struct{}{} // the free goes
	if m := <-g.entered; m != wire.MethodCancelSubtasks {
		t.Fatalf("second send %s, want CancelSubtasks", wire.Name(m))
	}
	select {
	case err := <-waited:
		t.Fatalf("wait for message 3 returned (%v) with message 2 unsent", err)
	default:
	}
	if err := ob.wait(context.Background(), first); err != nil {
		t.Fatalf("wait for the sent message: %v", err)
	}
	g.fail = true // the session fails the rest
	g.gate <- struct{}{}
	<-g.entered
	g.gate <- struct{}{}
	if err := <-waited; err != nil {
		t.Fatalf("wait for message 3: %v", err)
	}
	if got, want := log.list(), []string{"FreeObjects", "CancelSubtasks", "PeerLost"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if seq := ob.pending(); seq != 0 {
		t.Fatalf("pending %d once all were sent, want 0", seq)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next := ob.put(outMsg{m: wire.MethodFreeObjects})
	<-g.entered
	if err := ob.wait(ctx, next); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with its context ended: %v, want context.Canceled", err)
	}
}

// TestPullReplyFollowsEarlierFrees: a step that frees an object on a
// raylet and answers that raylet's pull queues the free first, and the
// reply waits until the free is written. (The reply may hand out the
// rebuild of the freed object; written first, the raylet would make the
// object and then delete it.)
func TestPullReplyFollowsEarlierFrees(t *testing.T) {
	s := quietServer()
	var log eventLog
	g := newGatedSender(&log)
	now := time.Now()
	m := sched.New(sched.Config{Head: "h1"})
	m.Step(now, &sched.Records{})
	fx := m.Step(now, &sched.Register{Call: 1, Session: g, RegisterRaylet: wire.RegisterRaylet{ID: "r1", Addr: "r1:1", Slots: 1}})
	for _, c := range slices.Clone(fx.Commits) {
		m.Step(now, &sched.Committed{Req: c.Req})
	}
	const r = sched.Raylet(0)
	if m.Session(r) != sched.Session(g) {
		t.Fatalf("raylet %d's session is %v after registering, want the test's", r, m.Session(r))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.lead = &leadership{m: m, ctx: ctx, cancel: cancel, pending: map[sched.Call]*envelope{}}
	env := &envelope{reply: make(chan result, 1)}
	const call = sched.Call(7)
	s.lead.pending[call] = env
	defer func() { close(g.gate); s.wg.Wait() }()

	free := make([][]dag.ObjectID, 1)
	free[r] = []dag.ObjectID{{}}
	s.carryOut(&sched.Effects{
		Told:      []sched.Raylet{r},
		Free:      free,
		Interrupt: make([][]dag.SubtaskID, 1),
		Pulls:     []sched.PullReply{{Call: call, Raylet: r}},
	})
	res := <-env.reply
	if res.after == nil || res.seq != 1 {
		t.Fatalf("the pull reply waits for message %d of %p, want message 1 of raylet r1's outbox", res.seq, res.after)
	}
	replied := make(chan struct{})
	go func() {
		if err := res.waitAfter(context.Background()); err != nil {
			t.Errorf("waiting to reply: %v", err)
		}
		log.add("PullReply")
		close(replied)
	}()
	if m := <-g.entered; m != wire.MethodFreeObjects {
		t.Fatalf("sent %s, want FreeObjects", wire.Name(m))
	}
	g.gate <- struct{}{}
	<-replied
	if got, want := log.list(), []string{"FreeObjects", "PullReply"}; !slices.Equal(got, want) {
		t.Fatalf("the raylet got %v, want %v", got, want)
	}
}
