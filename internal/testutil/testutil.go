// Package testutil holds helpers that tests of several packages share.
package testutil

import (
	"testing"
	"time"
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
