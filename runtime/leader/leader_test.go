package leader

import (
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

var testToken = []byte("leader test token, at least 32 bytes")

// fakeHead answers MethodLeader with whoever it says leads; paused, it
// stops answering while its connections stay up, as a SIGSTOPped head's
// kernel keeps accepting and acknowledging.
type fakeHead struct {
	id, addr string
	leader   atomic.Value // string: the leader's id; its address is looked up in heads
	heads    map[string]*fakeHead
	paused   chan struct{} // closed: answer nothing
	resume   chan struct{} // closed at cleanup
}

func (h *fakeHead) HandleCall(ctx context.Context, _ *transport.Session, m transport.Method, _ transport.Body) (any, error) {
	select {
	case <-h.paused:
		select {
		case <-h.resume:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	default:
	}
	id := h.leader.Load().(string)
	return wire.Leader{ID: id, Addr: h.heads[id].addr}, nil
}
func (h *fakeHead) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (h *fakeHead) HandleStream(_ *transport.Session, st net.Conn)                     { st.Close() }

func startFakeHeads(t *testing.T, ids ...string) map[string]*fakeHead {
	heads := map[string]*fakeHead{}
	for _, id := range ids {
		h := &fakeHead{id: id, heads: heads, paused: make(chan struct{}), resume: make(chan struct{})}
		h.leader.Store(ids[0])
		h.addr = testutil.Serve(t, transport.Config{Insecure: true, Token: testToken, NodeID: id}, h)
		t.Cleanup(func() { close(h.resume) }) // runs first: held calls end before the sessions close
		heads[id] = h
	}
	return heads
}

func waitLeader(t *testing.T, c *Conn, want string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, "a session to "+want, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Session(ctx) // reconnects once the check dropped the old session
		s := c.Current()
		return s != nil && s.RemoteID() == want
	})
}

// A leader that stops answering (paused) is left for the new leader within
// seconds, although its connection stays up.
func TestCheckLeavesAPausedLeader(t *testing.T) {
	heads := startFakeHeads(t, "a", "b")
	c := New(Config{Heads: []string{heads["a"].addr, heads["b"].addr},
		Transport: transport.Config{Insecure: true, Token: testToken, NodeID: "raylet"}, CheckInterval: 50 * time.Millisecond, CheckTimeout: 300 * time.Millisecond})
	defer c.Close()
	waitLeader(t, c, "a")
	old := c.Current()

	heads["b"].leader.Store("b")
	close(heads["a"].paused)
	waitLeader(t, c, "b")
	if old.Err() == nil {
		t.Error("the session to the paused leader is still open")
	}
}

// A head that says another head now leads is left for that one.
func TestCheckFollowsANewLeader(t *testing.T) {
	heads := startFakeHeads(t, "a", "b")
	c := New(Config{Heads: []string{heads["a"].addr},
		Transport: transport.Config{Insecure: true, Token: testToken, NodeID: "raylet"}, CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Second})
	defer c.Close()
	waitLeader(t, c, "a")
	heads["a"].leader.Store("b")
	heads["b"].leader.Store("b")
	waitLeader(t, c, "b")
}

// Config.Check is the check's question: one that names another leader
// moves the Conn there, although head a, asked MethodLeader, names
// itself.
func TestCheckAsksConfigCheck(t *testing.T) {
	heads := startFakeHeads(t, "a", "b")
	heads["b"].leader.Store("b")
	var asked atomic.Int64
	c := New(Config{Heads: []string{heads["a"].addr},
		Transport: transport.Config{Insecure: true, Token: testToken, NodeID: "raylet"}, CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Second,
		Check: func(ctx context.Context, s *transport.Session) (wire.Leader, error) {
			asked.Add(1)
			return wire.Leader{ID: "b", Addr: heads["b"].addr}, nil
		}})
	defer c.Close()
	waitLeader(t, c, "b")
	if asked.Load() == 0 {
		t.Error("the session moved to b without Config.Check being asked")
	}
}

func TestConfigValidate(t *testing.T) {
	d := DefaultConfig()
	if d.CheckInterval <= 0 || d.CheckTimeout <= 0 || d.AttemptTimeout <= 0 || d.Retry.Base <= 0 || d.Retry.Max < d.Retry.Base {
		t.Fatalf("DefaultConfig has an unset default: %+v", d)
	}
	ok := DefaultConfig()
	ok.Heads = []string{"127.0.0.1:7070", " h2:7070 ", ""}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := (Config{Heads: []string{"h:1"}}).Validate(); err != nil {
		t.Fatalf("zero fields take defaults, yet: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no heads", Config{}, "no head address"},
		{"only blanks", Config{Heads: []string{" ", ""}}, "no head address"},
		{"no port", Config{Heads: []string{"h1"}}, `"h1" is not host:port`},
		{"negative check timeout", Config{Heads: []string{"h:1"}, CheckTimeout: -time.Second}, "negative check timeout"},
		{"negative attempt timeout", Config{Heads: []string{"h:1"}, AttemptTimeout: -1}, "negative attempt timeout"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, dag.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v; want invalid argument naming %q", tc.name, err, tc.want)
		}
	}
}

// A Conn made from a bad Config fails every call with Validate's error,
// without dialling anything.
func TestNewWithBadConfigFailsCalls(t *testing.T) {
	c := New(Config{Heads: []string{"nohostport"}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Call(ctx, wire.MethodLeader, struct{}{}, nil)
	if !errors.Is(err, dag.ErrInvalidArgument) || !strings.Contains(err.Error(), "nohostport") {
		t.Fatalf("Call on a Conn with a bad Config: %v", err)
	}
}

// Heads are trimmed and deduplicated, so a list typed as "a, b" works.
func TestHeadsNormalised(t *testing.T) {
	c := New(Config{Heads: []string{" a:1", "b:2 ", "a:1", ""}})
	defer c.Close()
	if want := []string{"a:1", "b:2"}; !slices.Equal(c.cfg.Heads, want) || !slices.Equal(c.known, want) {
		t.Fatalf("heads %q, known %q; want %q", c.cfg.Heads, c.known, want)
	}
}

// Between checks no goroutine of the Conn waits: the checks run from a
// timer. (With a thousand raylets in one process, a goroutine each asleep
// between checks was a thousand stacks for every collection to read.)
func TestNoGoroutineBetweenChecks(t *testing.T) {
	heads := startFakeHeads(t, "a")
	c := New(Config{Heads: []string{heads["a"].addr},
		Transport: transport.Config{Insecure: true, Token: testToken, NodeID: "raylet"}, CheckInterval: time.Hour})
	defer c.Close()
	waitLeader(t, c, "a")
	// A goroutine just started may not show its function yet: look again
	// after yielding, as an old-style checker would be parked by then.
	buf := make([]byte, 1<<20)
	for range 100 {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if strings.Contains(stacks, "leader.(*Conn).check") || strings.Contains(stacks, "leader.(*Conn).startChecks") {
			t.Fatalf("a goroutine waits between checks:\n%s", stacks)
		}
		runtime.Gosched()
	}
}
