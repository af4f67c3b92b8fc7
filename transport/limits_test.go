package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// suppressed is how many failures from src the listener has counted
// without logging them.
func (l *Listener) suppressed(src string) int {
	l.fails.mu.Lock()
	defer l.fails.mu.Unlock()
	if e := l.fails.bySrc[netip.MustParseAddr(src)]; e != nil {
		return e.suppressed
	}
	return -1
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, not synchronising
	}
}

// Issue 12: 1,100 idle connections from one address filled every
// handshake slot, and every other client got a bare EOF. Now one source
// gets 32 slots; a client elsewhere connects and calls at once, and one
// more from the flooding address is told the node is busy.
func TestOneSourceCannotFillTheHandshakeSlots(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("h1", nil)
		scfg.HandshakeTimeout = time.Minute // the idle conns hold their slots throughout
		scfg.FailureLogInterval = time.Minute
		ts := startServer(t, scfg, newTestHandler())
		const flood = 1100
		var idle []net.Conn
		t.Cleanup(func() {
			for _, c := range idle {
				c.Close()
			}
		})
		for range flood {
			c, err := ts.rawFrom("127.0.0.2")
			if err != nil {
				t.Fatalf("idle conn %d: %v", len(idle), err)
			}
			idle = append(idle, c)
		}
		busy := flood - DefaultMaxHandshakesPerSource
		waitUntil(t, "the listener has refused the flood", func() bool { return ts.l.suppressed("127.0.0.2") == busy-1 })

		c := dial(t, ts.addr(), mk("status", nil), nil)
		if err := c.Call(callCtx(t), mEcho, echoMsg{S: "phobos status"}, nil); err != nil {
			t.Fatalf("a call from another address during the flood: %v", err)
		}

		ccfg := mk("one-more", nil)
		ccfg = fromIP(ccfg, "127.0.0.2")
		_, err := Dial(callCtx(t), ts.addr(), ccfg)
		wantCode(t, err, CodeResourceExhausted)
		for _, p := range []string{ts.addr(), `node "h1" is busy`, "too many connections from 127.0.0.2 in the handshake (32)", "retry later"} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("busy error %q lacks %q", err, p)
			}
		}
		// One log line for the whole flood from 127.0.0.2.
		ts.logs.mu.Lock()
		n := 0
		for _, l := range ts.logs.lines {
			if strings.Contains(l, "127.0.0.2") && strings.Contains(l, "WARN") {
				n++
			}
		}
		ts.logs.mu.Unlock()
		if n != 1 {
			t.Errorf("%d WARN lines about 127.0.0.2, want 1 per interval", n)
		}
	})
}

func TestGlobalHandshakeCap(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("h1", nil)
		scfg.MaxHandshakes = 4
		scfg.HandshakeTimeout = time.Minute
		ts := startServer(t, scfg, newTestHandler())
		for i := range 4 {
			c, err := ts.rawFrom("127.0.0." + string(rune('3'+i)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		waitUntil(t, "four handshakes in progress", func() bool {
			ts.l.mu.Lock()
			defer ts.l.mu.Unlock()
			return ts.l.inHandshake == 4
		})
		_, err := Dial(callCtx(t), ts.addr(), mk("cli", nil))
		wantCode(t, err, CodeResourceExhausted)
		if !strings.Contains(err.Error(), "too many connections in the handshake (4)") {
			t.Errorf("busy error %q", err)
		}
		ts.logs.waitFor(t, "WARN", "refused a connection: busy", "127.0.0.1", "too many connections in the handshake (4)")
	})
}

// manualClock is a clock a test moves by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Handshake failures are logged once per source per interval, and the
// next line says how many were left out.
func TestFailureLogIsRateLimited(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		clock := &manualClock{t: time.Unix(1e9, 0)}
		scfg := mk("srv", nil)
		scfg.FailureLogInterval = 30 * time.Second
		scfg.now = clock.now
		ts := startServer(t, scfg, newTestHandler())
		garbage := func(from string) {
			c, err := ts.rawFrom(from)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			readUntilClosed(t, c)
		}
		for range 5 {
			garbage("127.0.0.1")
		}
		waitUntil(t, "four failures counted", func() bool { return ts.l.suppressed("127.0.0.1") == 4 })
		garbage("127.0.0.9") // another source has its own allowance
		ts.logs.waitFor(t, "WARN", "handshake failed", "127.0.0.9")

		clock.advance(30 * time.Second)
		garbage("127.0.0.1")
		line := ts.logs.waitFor(t, "WARN", "handshake failed", "127.0.0.1", "suppressed=4", "suppressed_over=30s")
		t.Logf("after the interval: %s", line)
		ts.logs.mu.Lock()
		n := 0
		for _, l := range ts.logs.lines {
			if strings.Contains(l, "handshake failed") && strings.Contains(l, "remote=127.0.0.1:") {
				n++
			}
		}
		ts.logs.mu.Unlock()
		if n != 2 {
			t.Errorf("%d lines for six failures from 127.0.0.1 over two intervals, want 2", n)
		}
	})
}

// holdHandler holds mBlock calls until released and records how many it
// ran at once and the most bytes its session and listener held meanwhile.
type holdHandler struct {
	*testHandler
	l                   *Listener
	running, peak       atomic.Int64
	peakSess, peakListn atomic.Int64
}

func raise(a *atomic.Int64, v int64) {
	for old := a.Load(); v > old && !a.CompareAndSwap(old, v); old = a.Load() {
	}
}

func (h *holdHandler) HandleCall(ctx context.Context, s *Session, m Method, body Body) (any, error) {
	if m == mRelease {
		var req echoMsg
		if err := body.Decode(&req); err != nil {
			return nil, err
		}
		body.Release()
		body.Release() // a second does nothing
		if len(body.Raw()) != 0 {
			return nil, errors.New("a released body still shows its bytes")
		}
		m = mBlock
	} else if m != mBlock {
		return h.testHandler.HandleCall(ctx, s, m, body)
	}
	raise(&h.peak, h.running.Add(1))
	defer h.running.Add(-1)
	raise(&h.peakSess, s.BytesInFlight())
	raise(&h.peakListn, h.l.BytesInFlight())
	h.started <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil, nil
}

const budgetFrame = 1 << 20

func budgetServer(t *testing.T, mk func(string, *logRecorder) Config) (*testServer, *holdHandler) {
	scfg := mk("srv", nil)
	scfg.MaxFrameSize = budgetFrame
	scfg.SessionBudget = 2 * budgetFrame
	scfg.ListenerBudget = 4 * budgetFrame
	h := &holdHandler{testHandler: &testHandler{started: make(chan struct{}, 64), release: make(chan struct{}), msgs: make(chan int, 16)}}
	ts := startServer(t, scfg, h)
	h.l = ts.l
	return ts, h
}

// bigCall is a request just under the server's 1 MiB max frame.
var bigCall = echoMsg{B: make([]byte, budgetFrame-64)}

// A dozen max-size requests on one session: the session holds at most its
// budget (two of them) at once, the rest wait unread, and another
// session's calls go on meanwhile.
func TestSessionByteBudget(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts, h := budgetServer(t, mk)
		hostile := dial(t, ts.addr(), mk("hostile", nil), nil)
		results := make(chan error, 12)
		for range 12 {
			go func() { results <- hostile.Call(callCtx(t), mBlock, bigCall, nil) }()
		}
		for range 2 {
			<-h.started
		}
		waitUntil(t, "all twelve requests sent", func() bool {
			hostile.pmu.Lock()
			defer hostile.pmu.Unlock()
			return len(hostile.pending) == 12
		})
		other := dial(t, ts.addr(), mk("other", nil), nil)
		for i := range 10 {
			if err := other.Call(callCtx(t), mEcho, echoMsg{N: i}, nil); err != nil {
				t.Fatalf("another session's call %d while the budget is full: %v", i, err)
			}
		}
		if n := h.running.Load(); n != 2 {
			t.Errorf("%d big requests running at once, want the 2 that fit the session's budget", n)
		}
		close(h.release)
		for range 12 {
			if err := <-results; err != nil {
				t.Errorf("a held call: %v", err)
			}
		}
		if p := h.peak.Load(); p > 2 {
			t.Errorf("%d big requests ran at once; the session budget holds 2", p)
		}
		if p := h.peakSess.Load(); p > 2*budgetFrame {
			t.Errorf("a session held %d bytes; its budget is %d", p, 2*budgetFrame)
		}
	})
}

// A peer that closes its connection while the session's read loop waits
// for budget (its handlers hold it all) closes the session at this end
// too: nothing else in the session is reading, and no goroutine waits
// in every session for yamux to end.
func TestPeerGoneWhileReadLoopWaits(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts, h := budgetServer(t, mk)
		defer close(h.release)
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		for range 4 {
			go c.Call(callCtx(t), mBlock, bigCall, nil)
		}
		for range 2 {
			<-h.started // the budget holds two; the read loop waits with the third
		}
		s := ts.nextSession(t)
		c.Close()
		select {
		case <-s.Done():
		case <-time.After(waitLimit):
			t.Fatal("the session stayed open after its peer closed the connection")
		}
		if err := s.Err(); !errors.Is(err, kind(CodeUnavailable)) {
			t.Fatalf("the session closed with %v, want unavailable", err)
		}
	})
}

// A dozen max-size requests on one session whose handlers release their
// bodies once decoded and then wait: all of them run at once, since what
// waits holds none of the session's or the listener's budget (a pull that
// waits at the head for work).
func TestReleasedBodiesLeaveTheBudget(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts, h := budgetServer(t, mk)
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		results := make(chan error, 12)
		for range 12 {
			go func() { results <- c.Call(callCtx(t), mRelease, bigCall, nil) }()
		}
		ctx := callCtx(t)
		for i := range 12 {
			select {
			case <-h.started:
			case <-ctx.Done():
				t.Fatalf("%d of 12 requests that released their bodies run; the rest wait for budget", i)
			}
		}
		if b := ts.l.BytesInFlight(); b != 0 {
			t.Errorf("the listener holds %d bytes for calls that released their bodies", b)
		}
		close(h.release)
		for range 12 {
			if err := <-results; err != nil {
				t.Errorf("a held call: %v", err)
			}
		}
	})
}

// Calls waiting for their answers hold none of their requests' memory
// once written: a pull waiting at the head for work kept its encoded
// request until answered, a buffer for each raylet's pull. Each request
// here is 2 MiB, past the largest buffer the pool keeps, so its buffer is
// its own and only a reference to it keeps it alive: a finalizer on each
// counts the ones let go while all the calls still wait.
func TestWaitingCallsHoldNoRequest(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("srv", nil)
		scfg.MaxFrameSize = 4 << 20
		h := &holdHandler{testHandler: newTestHandler()}
		ts := startServer(t, scfg, h)
		h.l = ts.l
		ccfg := mk("cli", nil)
		ccfg.MaxFrameSize = 4 << 20
		c := dial(t, ts.addr(), ccfg, nil)
		const calls = 8
		var freed atomic.Int64
		results := make(chan error, calls)
		for range calls {
			go func() { results <- c.Call(callCtx(t), mRelease, finalizedRequest{&freed}, nil) }()
		}
		for range calls {
			<-h.started // each request written, read and released by its handler
		}
		waitUntil(t, "the waiting calls let go of their requests", func() bool {
			runtime.GC()
			return freed.Load() == calls
		})
		close(h.release)
		for range calls {
			if err := <-results; err != nil {
				t.Errorf("a held call: %v", err)
			}
		}
	})
}

// finalizedRequest encodes as a 2 MiB echoMsg into the caller's buffer and
// sets a finalizer on that buffer that adds one to freed.
type finalizedRequest struct{ freed *atomic.Int64 }

func (r finalizedRequest) AppendCBOR(dst []byte) ([]byte, error) {
	start := len(dst)
	dst, err := encodedEcho{B: make([]byte, 2<<20)}.AppendCBOR(dst)
	if err != nil {
		return dst, err
	}
	if start != headerSize {
		return dst, fmt.Errorf("the frame buffer holds %d bytes before the body, want the header's %d", start, headerSize)
	}
	runtime.SetFinalizer(&dst[:1][0], func(*byte) { r.freed.Add(1) }) // the start of the buffer's memory
	return dst, nil
}

// A released body's bookkeeping lets go of its pooled buffer: a handler
// that waits after Release must not keep the buffer alive once the pool
// drops it.
func TestReleasedBodyLetsGoOfItsBuffer(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	s := dial(t, ts.addr(), testConfig("cli", nil), nil)
	held := &heldBody{s: s, pooled: getBuf(0, 64<<10)} // n and share 0: nothing of the budgets
	b := Body{raw: make([]byte, 1), held: held}
	b.Release()
	if held.pooled != nil {
		t.Error("a released body's heldBody still points at its pooled buffer")
	}
}

// A dozen max-size requests on a dozen sessions: the listener holds at
// most its budget at once, and a session with small calls goes on.
func TestListenerByteBudget(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts, h := budgetServer(t, mk)
		results := make(chan error, 12)
		for range 12 {
			c := dial(t, ts.addr(), mk("hostile", nil), nil)
			go func() { results <- c.Call(callCtx(t), mBlock, bigCall, nil) }()
		}
		// Each frame draws (1 MiB - reserve) on the 4 MiB listener budget.
		fit := int(4 * budgetFrame / (budgetFrame - 64 + 16 - SessionReserve))
		for range fit {
			<-h.started
		}
		other := dial(t, ts.addr(), mk("other", nil), nil)
		for i := range 10 {
			if err := other.Call(callCtx(t), mEcho, echoMsg{N: i, B: make([]byte, 64<<10)}, nil); err != nil {
				t.Fatalf("a small call %d while the listener's budget is full: %v", i, err)
			}
		}
		if n := h.running.Load(); n != int64(fit) {
			t.Errorf("%d big requests running at once, want the %d that fit the listener's budget", n, fit)
		}
		if b := ts.l.BytesInFlight(); b > 4*budgetFrame {
			t.Errorf("the listener holds %d bytes; its budget is %d", b, 4*budgetFrame)
		}
		close(h.release)
		for range 12 {
			if err := <-results; err != nil {
				t.Errorf("a held call: %v", err)
			}
		}
		if p := h.peakListn.Load(); p > 4*budgetFrame {
			t.Errorf("the listener held %d bytes beyond reserves; its budget is %d", p, 4*budgetFrame)
		}
		if p := ts.l.budget.peakUse(); p > 4*budgetFrame {
			t.Errorf("the listener's budget peaked at %d bytes; it is %d", p, 4*budgetFrame)
		}
		if p := h.peak.Load(); p > int64(fit) {
			t.Errorf("%d big requests ran at once; %d fit", p, fit)
		}
	})
}

// A response no call waits for is skipped unread and costs nothing.
func TestUnsolicitedResponseIsSkipped(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		s := ts.nextSession(t)
		b := getBuf(headerSize, 0)
		encodeInto(b, echoMsg{B: make([]byte, 512<<10)})
		if err := s.writeFrame(b, header{typ: frameResponse, method: mEcho, id: 424242}); err != nil {
			t.Fatal(err)
		}
		putBuf(b)
		var out echoMsg
		if err := c.Call(callCtx(t), mEcho, echoMsg{S: "next"}, &out); err != nil || out.S != "next" {
			t.Fatalf("call after an unsolicited response: %v", err)
		}
		if c.Err() != nil {
			t.Fatalf("session closed: %v", c.Err())
		}
	})
}
