package raylet

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// TestListenerAnnouncesID: the raylet's listener knows the raylet's ID from
// its first connection on, so a peer sees who it reached and the
// listener's errors name it, for a given ID and for the default one.
func TestListenerAnnouncesID(t *testing.T) {
	ctx := testCtx(t)
	named := startRaylet(t, "r-named", 1<<20)

	r, err := Start(context.Background(), Config{
		Heads: []string{deadAddr(t)}, Token: testToken, Slots: 1,
		Store:     objectstore.Config{Dir: shmDir(t), Capacity: 1 << 20, SpillDir: t.TempDir()},
		Transport: transport.Config{Insecure: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(r.Addr())
	if want := host + "-" + port; r.ID() != want {
		t.Fatalf("default id %q, want %q (<hostname>-<port>)", r.ID(), want)
	}

	for _, r := range []*Raylet{named, r} {
		s, err := transport.Dial(ctx, r.Addr(), transport.Config{Insecure: true, Token: testToken, NodeID: "probe", Role: transport.RoleRaylet})
		if err != nil {
			t.Fatal(err)
		}
		s.Serve(nil)
		if s.RemoteID() != r.ID() {
			t.Errorf("raylet %s announces itself as %q", r.ID(), s.RemoteID())
		}
		s.Close()
	}
}

// fakeHead is a head leader that answers registrations with reg.
type fakeHead struct {
	addr  string
	reg   func() error
	calls atomic.Int64
}

func (h *fakeHead) HandleCall(_ context.Context, _ *transport.Session, m transport.Method, _ transport.Body) (any, error) {
	switch m {
	case wire.MethodLeader, wire.MethodHeartbeat: // a heartbeat call is the leader check
		return wire.Leader{ID: "h1", Addr: h.addr}, nil
	case wire.MethodRegisterRaylet:
		h.calls.Add(1)
		if err := h.reg(); err != nil {
			return nil, err
		}
		return wire.RegisterReply{HeadID: "h1", HeartbeatInterval: time.Second}, nil
	}
	return nil, dag.Errorf(dag.KindUnavailable, "fake head: no method %d", m)
}
func (h *fakeHead) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (h *fakeHead) HandleStream(_ *transport.Session, st net.Conn)                     { st.Close() }

func startWithHead(t *testing.T, h *fakeHead) *Raylet {
	t.Helper()
	return startWithHandler(t, h, &h.addr)
}

// startWithHandler serves a fake head leader "h1" with h, writes its
// address to addr (h answers leader checks with it), and starts raylet r1
// of one slot against it, closed when the test ends.
func startWithHandler(t *testing.T, h transport.Handler, addr *string) *Raylet {
	t.Helper()
	*addr = testutil.Serve(t, transport.Config{Insecure: true, Token: testToken, NodeID: "h1", Role: transport.RoleHead}, h)
	r, err := Start(context.Background(), Config{
		ID: "r1", Heads: []string{*addr}, Token: testToken, Slots: 1,
		Store:     objectstore.Config{Dir: shmDir(t), Capacity: 1 << 20, SpillDir: t.TempDir()},
		Transport: transport.Config{Insecure: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRefusedRegistrationStops: a registration the head refuses for good
// (the ID is another live raylet's) stops the raylet, whose Err says why,
// so that its process exits with the head's reason.
func TestRefusedRegistrationStops(t *testing.T) {
	held := `raylet id "r1" is held by a live raylet at 127.0.0.1:1111 since 2025-01-01 00:00:00 UTC (last heartbeat 10ms ago); choose another --id, or stop that raylet`
	h := &fakeHead{reg: func() error { return dag.Errorf(dag.KindInvalidArgument, "%s", held) }}
	r := startWithHead(t, h)
	select {
	case <-r.Done():
	case <-testCtx(t).Done():
		t.Fatal("a raylet refused by the head kept running")
	}
	err := r.Err()
	if !errors.Is(err, dag.ErrInvalidArgument) || !strings.Contains(err.Error(), held) || strings.Count(err.Error(), "r1") != 1 {
		t.Fatalf("Err() = %v; want the head's refusal, naming r1 once", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close after refusal: %v", err)
	}
}

// TestTransientRegistrationErrorRetries: a registration that fails in a
// way that may pass (no leader yet) is tried again, and the raylet runs on.
func TestTransientRegistrationErrorRetries(t *testing.T) {
	h := &fakeHead{}
	h.reg = func() error {
		if h.calls.Load() < 3 {
			return dag.Errorf(dag.KindUnavailable, "no leader elected yet; retry shortly")
		}
		return nil
	}
	r := startWithHead(t, h)
	testutil.WaitFor(t, waitLimit, "a third registration", func() bool { return h.calls.Load() >= 3 })
	if err := r.Err(); err != nil {
		t.Fatalf("a raylet stopped over a transient registration error: %v", err)
	}
}
