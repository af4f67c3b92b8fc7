// Package testutil holds helpers that tests of several packages share.
package testutil

import (
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/transport"
)

// WaitFor polls cond until it holds, failing t if d passes first. Tests
// wait on conditions with it, never on time alone.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

// Serve listens on a loopback port with cfg and serves every session
// dialled to it with h, until the test ends: then the listener and the
// sessions are closed. It returns the address.
func Serve(t testing.TB, cfg transport.Config, h transport.Handler) string {
	t.Helper()
	ln, err := transport.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sessions []*transport.Session
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
	})
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			s.Serve(h)
			mu.Lock()
			sessions = append(sessions, s)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}
