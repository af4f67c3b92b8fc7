package transport

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestSessionGoroutines: an idle session costs its two ends at most six
// goroutines (each end's read loop, and yamux's receive and send loops).
// The keepalive runs from a timer, and the loop accepting bulk streams
// starts with the first of them: a goroutine for each session asleep
// between checks, or waiting for a stream that between a head and a
// raylet never comes, was at a head with a thousand raylets a thousand
// more stacks for the collector to scan. Once a stream comes, the
// accepting end has one more.
func TestSessionGoroutines(t *testing.T) {
	mem := NewMemNetwork()
	cfg := plainConfig("srv", nil)
	cfg.Network = mem
	ts := startServer(t, cfg, newTestHandler())
	before := runtime.NumGoroutine()
	const n = 40
	var clients []*Session
	for i := range n {
		c := plainConfig(fmt.Sprintf("c%d", i), nil)
		c.Network = mem
		clients = append(clients, dial(t, ts.addr(), c, newTestHandler()))
		ts.nextSession(t)
	}
	// Up to one goroutine a session of slack, for handshakes still
	// returning: with an accept loop at each end it is eight.
	if per := float64(runtime.NumGoroutine()-before) / n; per > 7 {
		t.Fatalf("%.1f goroutines per session (both ends), want at most 6", per)
	}
	// A bulk stream to the server is accepted and served on a session
	// that had none.
	st, err := clients[0].OpenStream(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	payload := []byte("the first stream of the session")
	if _, err := st.Write(payload); err != nil {
		t.Fatal(err)
	}
	st.Close() // half-close: the server sees EOF, we can still read
	var got streamDigest
	if err := ReadMsg(st, &got, 1<<10); err != nil {
		t.Fatalf("reading the digest of the first stream: %v", err)
	}
	if got.N != int64(len(payload)) {
		t.Fatalf("the server read %d bytes of the first stream, want %d", got.N, len(payload))
	}
}

// TestAfterClose: f runs once the session closes, with Err saying why; a
// stopped f never runs; f given after the close runs at once.
func TestAfterClose(t *testing.T) {
	mem := NewMemNetwork()
	cfg := plainConfig("srv", nil)
	cfg.Network = mem
	ts := startServer(t, cfg, newTestHandler())
	c := plainConfig("cli", nil)
	c.Network = mem
	s := dial(t, ts.addr(), c, newTestHandler())
	ran := make(chan error, 1)
	s.AfterClose(func() { ran <- s.Err() })
	stopped := s.AfterClose(func() { t.Error("a stopped AfterClose ran") })
	if !stopped() {
		t.Fatal("stop before the close reported f had started")
	}
	select {
	case err := <-ran:
		t.Fatalf("ran before the close: %v", err)
	default:
	}
	s.Close()
	select {
	case err := <-ran:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Err in AfterClose = %v, want the close's reason", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("AfterClose did not run after the close")
	}
	late := make(chan struct{})
	s.AfterClose(func() { close(late) })
	select {
	case <-late:
	case <-time.After(waitLimit):
		t.Fatal("AfterClose given after the close did not run")
	}
}
