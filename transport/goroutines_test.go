package transport

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestSessionGoroutines: an idle session costs its two ends at most
// eight goroutines (each end's read loop and accept loop, and yamux's
// receive and send loops). The keepalive runs from a timer: a goroutine
// for each session asleep between checks was, at a head with a thousand
// raylets, a thousand more stacks for the collector to scan.
func TestSessionGoroutines(t *testing.T) {
	mem := NewMemNetwork()
	cfg := plainConfig("srv", nil)
	cfg.Network = mem
	ts := startServer(t, cfg, newTestHandler())
	before := runtime.NumGoroutine()
	const n = 40
	for i := range n {
		c := plainConfig(fmt.Sprintf("c%d", i), nil)
		c.Network = mem
		dial(t, ts.addr(), c, newTestHandler())
		ts.nextSession(t)
	}
	// Up to one goroutine a session of slack, for handshakes still
	// returning: with a keepalive goroutine at each end it is ten.
	if per := float64(runtime.NumGoroutine()-before) / n; per > 9 {
		t.Fatalf("%.1f goroutines per session (both ends), want at most 8", per)
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
