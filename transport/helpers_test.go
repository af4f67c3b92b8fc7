package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/transport/pki"
)

// waitLimit bounds every wait on a condition; reaching it fails the test.
const waitLimit = 20 * time.Second

// kind is a local error classifier with a WireCode, standing in for dag.Kind.
type kind uint16

func (k kind) Error() string    { return fmt.Sprintf("kind %d", uint16(k)) }
func (k kind) WireCode() uint16 { return uint16(k) }

var testToken = []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0")

// testCA is the CA every test certificate comes from.
var testCA = sync.OnceValue(func() *pki.CA {
	ca, err := pki.NewCA("transport test CA", 0)
	if err != nil {
		panic(err)
	}
	return ca
})

var (
	sourcesMu sync.Mutex
	sources   = map[string]*pki.Source{}
)

// sourceFor returns an in-memory identity named name with role r, from
// testCA, made once per name and role.
func sourceFor(name string, r Role) *pki.Source {
	key := name + "/" + r.String()
	sourcesMu.Lock()
	defer sourcesMu.Unlock()
	if s := sources[key]; s != nil {
		return s
	}
	c, err := testCA().Issue(pki.Request{Role: r, Name: name})
	if err != nil {
		panic(err)
	}
	s := testCA().Source(c)
	sources[key] = s
	return s
}

// testConfig is a TLS config for node id, with a head certificate named
// id. Tests log every failed handshake (the failure log's interval is 1ns).
func testConfig(id string, logs *logRecorder) Config {
	c := Config{TLS: sourceFor(id, RoleHead), NodeID: id, HandshakeTimeout: 5 * time.Second, FailureLogInterval: time.Nanosecond}
	if logs != nil {
		c.Logger = slog.New(logs)
	}
	return c
}

// plainConfig is a plaintext-mode config for node id, claiming role head.
func plainConfig(id string, logs *logRecorder) Config {
	c := Config{Insecure: true, Token: testToken, Role: RoleHead, NodeID: id, HandshakeTimeout: 5 * time.Second, FailureLogInterval: time.Nanosecond}
	if logs != nil {
		c.Logger = slog.New(logs)
	}
	return c
}

// modes runs f once per transport mode and network (TLS and plaintext,
// each over TCP and over a MemNetwork), with that mode's config maker.
func modes(t *testing.T, f func(t *testing.T, mk func(id string, logs *logRecorder) Config)) {
	t.Run("tls", func(t *testing.T) { nets(t, testConfig, f) })
	t.Run("plaintext", func(t *testing.T) { nets(t, plainConfig, f) })
}

// nets runs f over TCP and over a new MemNetwork, with base's configs put
// on that network: the in-memory twin must pass what TCP passes.
func nets(t *testing.T, base func(id string, logs *logRecorder) Config, f func(t *testing.T, mk func(id string, logs *logRecorder) Config)) {
	t.Run("tcp", func(t *testing.T) { f(t, base) })
	t.Run("mem", func(t *testing.T) {
		mem := NewMemNetwork()
		f(t, func(id string, logs *logRecorder) Config {
			c := base(id, logs)
			c.Network = mem
			return c
		})
	})
}

// fromIP returns cfg dialing from source address ip: over TCP a loopback
// address (127.0.0.0/8 is all loopback on Linux), as a client on another
// host would; over a MemNetwork that host's view.
func fromIP(cfg Config, ip string) Config {
	if mem, ok := cfg.Network.(*MemNetwork); ok {
		cfg.Network = mem.Host(ip)
		return cfg
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	cfg.Dial = d.DialContext
	return cfg
}

// logRecorder is a slog.Handler that keeps every record as one line, so a
// test can wait for the line that proves something happened.
type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

type recHandler struct {
	r     *logRecorder
	attrs []slog.Attr
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	return recHandler{r: r}.Handle(ctx, rec)
}
func (r *logRecorder) WithAttrs(as []slog.Attr) slog.Handler { return recHandler{r: r, attrs: as} }
func (r *logRecorder) WithGroup(string) slog.Handler         { return r }

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) WithGroup(string) slog.Handler            { return h }
func (h recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recHandler{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h recHandler) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
	}
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	h.r.mu.Lock()
	h.r.lines = append(h.r.lines, b.String())
	close(h.r.changed)
	h.r.changed = make(chan struct{})
	h.r.mu.Unlock()
	return nil
}

// waitFor waits for a log line containing every one of parts.
func (r *logRecorder) waitFor(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		r.mu.Lock()
		for _, l := range r.lines {
			if containsAll(l, parts...) {
				r.mu.Unlock()
				return l
			}
		}
		ch := r.changed
		lines := append([]string(nil), r.lines...)
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no log line containing %q; got:\n%s", parts, strings.Join(lines, "\n"))
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// Methods of the test handler.
const (
	mEcho     Method = 1 // echoes an echoMsg
	mFail     Method = 2 // returns fmt.Errorf("handler says no: %w", kind(req.N))
	mBlock    Method = 3 // signals started, waits for release or ctx
	mBig      Method = 4 // returns req.N bytes
	mCallBack Method = 5 // calls the peer's mEcho with req and returns the answer
	mPanic    Method = 6
	mSeq      Method = 7  // one-way: req.N goes to msgs
	mStrict   Method = 8  // wants a strictReq
	mEncoded  Method = 9  // echoes an echoMsg, encoded before it returns (Encode)
	mRelease  Method = 10 // holdHandler: decodes, releases its body, then waits as mBlock
)

type echoMsg struct {
	N int    `cbor:"1,keyasint,omitempty"`
	S string `cbor:"2,keyasint,omitempty"`
	B []byte `cbor:"3,keyasint,omitempty"`
}

// encodedEcho encodes itself, as a hot-path message does.
type encodedEcho echoMsg

func (e encodedEcho) AppendCBOR(dst []byte) ([]byte, error) {
	b, err := codec.Marshal(echoMsg(e))
	return append(dst, b...), err
}

type strictReq struct {
	A int `cbor:"1,keyasint"`
}

// testHandler serves the methods above, and bulk streams by returning the
// SHA-256 of everything read (via hashStream).
type testHandler struct {
	started chan struct{}
	release chan struct{}
	msgs    chan int
}

func newTestHandler() *testHandler {
	return &testHandler{started: make(chan struct{}, 16), release: make(chan struct{}), msgs: make(chan int, 100000)}
}

func (h *testHandler) HandleCall(ctx context.Context, s *Session, m Method, body Body) (any, error) {
	switch m {
	case mStrict:
		var r strictReq
		if err := body.Decode(&r); err != nil {
			return nil, err
		}
		return r, nil
	case mPanic:
		panic("boom")
	}
	var req echoMsg
	if err := body.Decode(&req); err != nil {
		return nil, err
	}
	switch m {
	case mEcho:
		return req, nil
	case mEncoded:
		return Encode(encodedEcho(req))
	case mFail:
		return nil, fmt.Errorf("handler says no: %w", kind(req.N))
	case mBlock:
		h.started <- struct{}{}
		select {
		case <-h.release:
			return req, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case mBig:
		return echoMsg{B: make([]byte, req.N)}, nil
	case mCallBack:
		var out echoMsg
		err := s.Call(ctx, mEcho, req, &out)
		return out, err
	}
	return nil, fmt.Errorf("no method %d: %w", m, kind(CodeInvalidArgument))
}

func (h *testHandler) HandleMessage(s *Session, m Method, body Body) {
	var req echoMsg
	if err := body.Decode(&req); err == nil && m == mSeq {
		h.msgs <- req.N
	}
}

func (h *testHandler) HandleStream(s *Session, st net.Conn) {
	defer st.Close()
	sum, n, err := hashStream(st)
	if err != nil {
		return
	}
	WriteMsg(st, streamDigest{Sum: sum, N: n})
}

type streamDigest struct {
	Sum []byte `cbor:"1,keyasint"`
	N   int64  `cbor:"2,keyasint"`
}

// testServer is a listener whose sessions are served by h.
type testServer struct {
	nw       Network // nil: TCP
	l        *Listener
	logs     *logRecorder
	sessions chan *Session
}

func startServer(t *testing.T, cfg Config, h Handler) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		ts := &testServer{logs: newLogRecorder()}
		cfg.Logger = slog.New(ts.logs)
		return ts.start(t, cfg, h)
	}
	return (&testServer{}).start(t, cfg, h)
}

func (ts *testServer) start(t *testing.T, cfg Config, h Handler) *testServer {
	t.Helper()
	l, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ts.l, ts.nw = l, cfg.Network
	ts.sessions = make(chan *Session, 64)
	var mu sync.Mutex
	var all []*Session
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, s)
			mu.Unlock()
			s.Serve(h)
			select {
			case ts.sessions <- s:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, s := range all {
			s.Close()
		}
	})
	return ts
}

func (ts *testServer) addr() string { return ts.l.Addr().String() }

// rawDial opens a plain conn to ts on its network, closed at cleanup.
func (ts *testServer) rawDial(t *testing.T) net.Conn { return rawDial(t, ts.nw, ts.addr()) }

// rawFrom dials ts from source address ip (see fromIP), without a
// handshake; the caller closes the conn.
func (ts *testServer) rawFrom(ip string) (net.Conn, error) {
	cfg := fromIP(Config{Network: ts.nw}, ip)
	return cfg.dial(context.Background(), ts.addr())
}

// nextSession returns the next session the server accepted.
func (ts *testServer) nextSession(t *testing.T) *Session {
	t.Helper()
	select {
	case s := <-ts.sessions:
		return s
	case <-time.After(waitLimit):
		t.Fatal("server accepted no session")
		return nil
	}
}

// dial dials ts, serves the client side with h and closes it at cleanup.
func dial(t *testing.T, addr string, cfg Config, h Handler) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	s, err := Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatalf("Dial %s: %v", addr, err)
	}
	s.Serve(h)
	t.Cleanup(func() { s.Close() })
	return s
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks that err is classified with code.
func wantCode(t *testing.T, err error, code uint16) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want code %d", code)
	}
	if !errors.Is(err, kind(code)) {
		t.Fatalf("error %q is not code %d (errors.Is)", err, code)
	}
}

// rawListener is a plain listener on nw (nil: TCP) that runs serve on
// each conn, for peers that are not phobos.
func rawListener(t *testing.T, nw Network, serve func(net.Conn)) string {
	t.Helper()
	if nw == nil {
		nw = TCP{}
	}
	ln, err := nw.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// rawDial opens a plain conn on nw (nil: TCP), closed at cleanup.
func rawDial(t *testing.T, nw Network, addr string) net.Conn {
	t.Helper()
	if nw == nil {
		nw = TCP{}
	}
	c, err := nw.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readUntilClosed reads c until the peer closes it or waitLimit passes.
func readUntilClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLimit))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server never closed the conn")
	}
}
