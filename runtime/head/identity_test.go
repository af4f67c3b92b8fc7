package head

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// startIdentityHead starts a one-head cluster whose raylets heartbeat
// every 50ms and are lost after rayletTimeout of silence.
func startIdentityHead(t *testing.T, rayletTimeout time.Duration) *Server {
	t.Helper()
	s, err := Start(Config{
		ID: "h1", Listen: "127.0.0.1:0", DataDir: t.TempDir(), Token: metaToken,
		Raft: raftmeta.Config{
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		},
		RayletTimeout: rayletTimeout, HeartbeatInterval: 50 * time.Millisecond,
		Logger: metaTestLogger(), Transport: transport.Config{Insecure: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	testutil.WaitFor(t, 10*time.Second, "the head to lead", s.Node().IsLeader)
	return s
}

// fakeRaylet is a session to the head that speaks for a raylet process.
type fakeRaylet struct {
	t    *testing.T
	sess *transport.Session
	addr string
	stop chan struct{} // closes to stop heartbeats
	once sync.Once
	beat sync.WaitGroup // the heartbeat goroutine

	// asCalls makes the heartbeats calls, as raylets send them, each
	// answered with the leader: answered counts the answers naming h1,
	// others the rest (errors included).
	asCalls          bool
	answered, others atomic.Int64
}

func dialRaylet(t *testing.T, ctx context.Context, s *Server, id, addr string) *fakeRaylet {
	t.Helper()
	sess, err := transport.Dial(ctx, s.Addr(), transport.Config{Insecure: true, Token: metaToken, NodeID: id, Role: transport.RoleRaylet})
	if err != nil {
		t.Fatal(err)
	}
	sess.Serve(nil)
	t.Cleanup(func() { sess.Close() })
	return &fakeRaylet{t: t, sess: sess, addr: addr, stop: make(chan struct{})}
}

// register registers as raylet id, retrying while the head is not ready to
// lead (it may know it leads a moment before its scheduler runs), as
// raylets do.
func (f *fakeRaylet) register(ctx context.Context, id string) error {
	for {
		err := f.sess.Call(ctx, wire.MethodRegisterRaylet, wire.RegisterRaylet{ID: id, Addr: f.addr, Slots: 1, StoreCapacity: 1 << 20}, nil)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
}

// heartbeat sends a heartbeat every 20ms until silence is called.
func (f *fakeRaylet) heartbeat() {
	f.t.Cleanup(f.silence)
	f.beat.Add(1)
	go func() {
		defer f.beat.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
				if !f.asCalls {
					f.sess.Send(wire.MethodHeartbeat, wire.Heartbeat{})
					continue
				}
				var ld wire.Leader
				if err := f.sess.Call(context.Background(), wire.MethodHeartbeat, wire.Heartbeat{}, &ld); err == nil && ld.ID == "h1" {
					f.answered.Add(1)
				} else {
					f.others.Add(1)
				}
			}
		}
	}()
}

// silence stops the heartbeats, as if the process had died on a machine
// that went away (its session stays open), and returns once none is
// being sent.
func (f *fakeRaylet) silence() {
	f.once.Do(func() { close(f.stop) })
	f.beat.Wait()
}

func (f *fakeRaylet) pull(ctx context.Context, wait time.Duration) (wire.PullReply, error) {
	var rep wire.PullReply
	err := f.sess.Call(ctx, wire.MethodPull, wire.Pull{Credits: 4, Wait: wait}, &rep)
	return rep, err
}

// TestLiveRayletIDIsRefused: a second process registering the ID of a live
// raylet is refused with an error naming the ID, the holder's address,
// since when it holds it and what to do; the holder keeps its place.
func TestLiveRayletIDIsRefused(t *testing.T) {
	ctx := testCtx(t)
	s := startIdentityHead(t, 5*time.Second)
	a := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := a.register(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	a.heartbeat()
	b := dialRaylet(t, ctx, s, "r1", "127.0.0.1:2222")
	err := b.register(ctx, "r1")
	if !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("second registration of r1: %v, want an invalid-argument refusal", err)
	}
	for _, want := range []string{`raylet id "r1"`, "held by a live raylet at 127.0.0.1:1111 since ", "choose another raylet id, or stop that raylet"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := a.pull(ctx, 0); err != nil {
		t.Fatalf("the holder lost its place: pull: %v", err)
	}
	if _, err := b.pull(ctx, 0); err == nil {
		t.Fatal("the refused process may pull work")
	}
	if a.sess.Err() != nil {
		t.Fatalf("the holder's session was closed: %v", a.sess.Err())
	}
}

// TestHeartbeatCallsKeepTheID: heartbeats sent as calls (a raylet's
// leader check) show the raylet alive as messages do, so a second process
// asking for its ID is refused, and each is answered with the leader.
func TestHeartbeatCallsKeepTheID(t *testing.T) {
	ctx := testCtx(t)
	s := startIdentityHead(t, 5*time.Second)
	a := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := a.register(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	a.asCalls = true
	a.heartbeat()
	testutil.WaitFor(t, 10*time.Second, "a heartbeat call answered", func() bool { return a.answered.Load() > 0 })
	b := dialRaylet(t, ctx, s, "r1", "127.0.0.1:2222")
	if err := b.register(ctx, "r1"); !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("second registration of r1: %v, want an invalid-argument refusal", err)
	}
	a.silence()
	if n := a.others.Load(); n != 0 {
		t.Errorf("%d heartbeat calls failed or named another leader than h1", n)
	}
}

// TestClosedRayletIDIsFree: a raylet restarted under its ID after its
// process died (its session ended) registers at once.
func TestClosedRayletIDIsFree(t *testing.T) {
	ctx := testCtx(t)
	s := startIdentityHead(t, time.Minute) // the timeout plays no part
	a := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := a.register(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	a.sess.Close()
	b := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := b.register(ctx, "r1"); err != nil {
		t.Fatalf("restarted r1: %v", err)
	}
	if _, err := b.pull(ctx, 0); err != nil {
		t.Fatalf("restarted r1 cannot pull: %v", err)
	}
}

// TestSameAddressReregisters: a raylet that registers again on a new
// session (its old one looked dead to it) keeps its ID even while the old
// session is open and a heartbeat it sent there arrives late: two live
// processes cannot listen on one address, so a claim from the holder's
// address is the holder's.
func TestSameAddressReregisters(t *testing.T) {
	ctx := testCtx(t)
	s := startIdentityHead(t, time.Minute)
	old := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := old.register(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	old.heartbeat()
	again := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := again.register(ctx, "r1"); err != nil {
		t.Fatalf("r1 registering again from its own address: %v", err)
	}
	select {
	case <-old.sess.Done():
	case <-ctx.Done():
		t.Fatal("the replaced session was not closed")
	}
	if _, err := again.pull(ctx, 0); err != nil {
		t.Fatalf("the re-registered r1 cannot pull: %v", err)
	}
}

// TestSilentHolderIsReplaced: a raylet whose machine vanished leaves an
// open session that sends nothing. A new process under its ID is admitted
// once the raylet timeout has passed since the old one's last heartbeat,
// and the work the old one was running is given to the new one.
func TestSilentHolderIsReplaced(t *testing.T) {
	ctx := testCtx(t)
	s := startIdentityHead(t, 500*time.Millisecond)
	a := dialRaylet(t, ctx, s, "r1", "127.0.0.1:1111")
	if err := a.register(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	a.heartbeat()
	g, err := tensor.Graph(tensor.Ones([]int64{4}, tensor.Chunks(4)).Sum())
	if err != nil {
		t.Fatal(err)
	}
	req := wire.SubmitJob{Graph: *g}
	rand.Read(req.RequestID[:])
	drv, err := transport.Dial(ctx, s.Addr(), transport.Config{Insecure: true, Token: metaToken, NodeID: "driver", Role: transport.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	drv.Serve(nil)
	t.Cleanup(func() { drv.Close() })
	for {
		// A loaded machine can cost even a lone head its leadership for a
		// moment; a driver retries with the same request ID, and so do we.
		err := drv.Call(ctx, wire.MethodSubmitJob, req, &wire.SubmitReply{})
		if err == nil {
			break
		}
		if !retryable(err) || ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	rep, err := a.pull(ctx, 5*time.Second)
	if err != nil || len(rep.Subtasks) != 1 {
		t.Fatalf("pull: %d subtasks, %v; want the job's one", len(rep.Subtasks), err)
	}
	running := rep.Subtasks[0].ID

	a.silence() // dead while running it; its session stays open
	// Every heartbeat it sent is read by the head before r1 claims its ID
	// again: the head reads a session's messages in order, and answers
	// this call after them. (One still on the wire would be a holder that
	// beat after the claim, and refuse it.)
	if err := a.sess.Call(ctx, wire.MethodHeartbeat, wire.Heartbeat{}, &wire.Leader{}); err != nil {
		t.Fatal(err)
	}
	b := dialRaylet(t, ctx, s, "r1", "127.0.0.1:2222")
	if err := b.register(ctx, "r1"); err != nil {
		t.Fatalf("r1 restarted after its old process went silent: %v", err)
	}
	select {
	case <-a.sess.Done():
	case <-ctx.Done():
		t.Fatal("the silent holder's session was not closed")
	}
	rep, err = b.pull(ctx, 5*time.Second)
	if err != nil || len(rep.Subtasks) != 1 || rep.Subtasks[0].ID != running {
		t.Fatalf("the new r1 pulled %+v, %v; want subtask %s, which the old one was running", rep.Subtasks, err, running)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestClosedSessionsAreForgotten: the head forgets a session once it
// closes (no goroutine waits for each one: the session's close does it).
func TestClosedSessionsAreForgotten(t *testing.T) {
	s := startIdentityHead(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() int {
		s.sessMu.Lock()
		defer s.sessMu.Unlock()
		return len(s.accepted)
	}
	base := open()
	var rs []*fakeRaylet
	for i := range 20 {
		rs = append(rs, dialRaylet(t, ctx, s, fmt.Sprintf("r%d", i), "r:7001"))
	}
	testutil.WaitFor(t, 10*time.Second, "the head to hold the 20 sessions", func() bool { return open() == base+20 })
	for _, r := range rs {
		r.sess.Close()
	}
	testutil.WaitFor(t, 10*time.Second, "the head to forget the 20 closed sessions", func() bool { return open() == base })
}
