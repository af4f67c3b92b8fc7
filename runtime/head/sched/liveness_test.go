package sched

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// warnings records the messages logged at WARN or above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// TestSilenceAfterGoodbyeIsNoWarning: a raylet that said goodbye and then
// stops heartbeating before its session closes is leaving, and the head
// lets it go without a warning (a thousand raylets stopping printed a
// thousand); one that falls silent without a goodbye is warned about and
// lost.
func TestSilenceAfterGoodbyeIsNoWarning(t *testing.T) {
	w := &warnings{}
	h := newHarness(t, Config{Head: "h1", RayletTimeout: 5 * time.Second, Logger: slog.New(w)})
	h.records()
	h.addRaylet("A", 2)
	h.addRaylet("B", 2)
	h.step(&Goodbye{Call: h.call("bye A"), Session: h.raylet("A").sess})
	h.advance(10 * time.Second)
	h.step(&Tick{}) // the shell's liveness tick
	if _, ok := h.l.bySess[h.raylet("A").sess]; ok {
		t.Fatal("raylet A, silent after its goodbye, is still registered")
	}
	if _, ok := h.l.bySess[h.raylet("B").sess]; ok {
		t.Fatal("raylet B, silent, is still registered")
	}
	got := w.take()
	want := map[string]int{"raylet missed heartbeats": 1, "raylet lost": 1} // B's
	for _, m := range got {
		want[m]--
	}
	for m, n := range want {
		if n != 0 {
			t.Fatalf("warnings %q: want one %q for B and none for A", got, m)
		}
	}
}
