package dag

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSubtaskIDPacking(t *testing.T) {
	id, err := NewSubtaskID(1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.String(), "010000000100010000000000"; got != want {
		t.Fatalf("(1,1,1) = %s, want %s", got, want)
	}
	cases := []struct{ task, stage, index uint64 }{
		{0, 0, 0}, {1, 2, 3}, {MaxTaskID, MaxStageID, MaxSubtaskIndex}, {0xdeadbeef, 0x1234, 0x0102030405},
	}
	for _, c := range cases {
		id, err := NewSubtaskID(c.task, c.stage, c.index)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if uint64(id.Task()) != c.task || uint64(id.Stage()) != c.stage || id.Index() != c.index {
			t.Fatalf("%v round-tripped to (%d,%d,%d)", c, id.Task(), id.Stage(), id.Index())
		}
		back, err := ParseSubtaskID(id.String())
		if err != nil || back != id {
			t.Fatalf("parse %s = %s, %v", id, back, err)
		}
	}
	// Byte ranges, as the MEP intends (its own slicing example is wrong).
	id = PackSubtaskID(0x04030201, 0x0605, 0x0c0b0a090807)
	for i, b := range id {
		if b != byte(i+1) {
			t.Fatalf("byte %d = %#x, want %#x (id %s)", i, b, i+1, id)
		}
	}
}

func TestSubtaskIDErrors(t *testing.T) {
	for _, c := range []struct {
		task, stage, index uint64
		want               string
	}{
		{1, 1 << 16, 0, "stage 65536"},
		{1, 1, 1 << 48, "index 281474976710656"},
		{1 << 32, 1, 1, "task 4294967296"},
	} {
		_, err := NewSubtaskID(c.task, c.stage, c.index)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSubtaskID(%d,%d,%d) = %v, want error mentioning %q", c.task, c.stage, c.index, err, c.want)
		}
	}
	for _, s := range []string{"", "0100", "zz0000000100010000000000", "01000000010001000000000000"} {
		if _, err := ParseSubtaskID(s); err == nil || !strings.Contains(err.Error(), "subtask id") {
			t.Errorf("ParseSubtaskID(%q) = %v, want a subtask id error", s, err)
		}
	}
}

func TestObjectID(t *testing.T) {
	st := PackSubtaskID(7, 2, 99)
	o := NewObjectID(st, 3)
	if o.Subtask() != st || o.Output() != 3 {
		t.Fatalf("object %s split into %s, %d", o, o.Subtask(), o.Output())
	}
	back, err := ParseObjectID(o.String())
	if err != nil || back != o {
		t.Fatalf("parse %s = %s, %v", o, back, err)
	}
	for _, s := range []string{"", "abc", st.String(), st.String() + ":x"} {
		if _, err := ParseObjectID(s); err == nil {
			t.Errorf("ParseObjectID(%q) succeeded", s)
		}
	}
}

type namedOp string

func (n namedOp) Name() string { return string(n) }

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(namedOp("test.op3666")); err != nil {
		t.Fatal(err)
	}
	if op, ok := r.Lookup(OpIDOf("test.op3666")); !ok || op.Name() != "test.op3666" {
		t.Fatalf("lookup = %v, %v", op, ok)
	}
	// These two names hash alike under murmur3_32 (found by search).
	if OpIDOf("test.op3666") != OpIDOf("test.op37924") {
		t.Fatal("test premise broken: names no longer collide")
	}
	err := r.Register(namedOp("test.op37924"))
	if err == nil || !strings.Contains(err.Error(), "collides") || !strings.Contains(err.Error(), "test.op3666") {
		t.Fatalf("colliding registration: %v", err)
	}
	if err := r.Register(namedOp("test.op3666")); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("duplicate registration: %v", err)
	}
	if err := r.Register(namedOp("")); err == nil {
		t.Fatal("empty name accepted")
	}
}

// TestRegistryConcurrent: ops registered while others are looked up on
// other goroutines are all found afterwards, and an op once found stays
// found (Register replaces the map rather than writing into it; -race
// checks that no lookup reads a map being written).
func TestRegistryConcurrent(t *testing.T) {
	r := NewRegistry()
	const n = 200
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("test.concurrent%d", i)
	}
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			seen := make([]bool, n)
			for {
				for i, name := range names {
					_, ok := r.Lookup(OpIDOf(name))
					if seen[i] && !ok {
						errs <- fmt.Errorf("%s was found, then lost", name)
						return
					}
					seen[i] = seen[i] || ok
				}
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
			}
		}()
	}
	for _, name := range names {
		if err := r.Register(namedOp(name)); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Names(); len(got) != n {
		t.Fatalf("%d names registered, want %d", len(got), n)
	}
}

func TestErrorKinds(t *testing.T) {
	base := errors.New("disk on fire")
	err := Errorf(KindCancelled, "job 4: %w", base)
	if !errors.Is(err, ErrCancelled) || errors.Is(err, ErrNotFound) {
		t.Fatalf("kind matching wrong for %v", err)
	}
	if !errors.Is(err, base) {
		t.Fatal("cause lost")
	}
	wrapped := errors.Join(errors.New("other"), err)
	if KindOf(wrapped) != KindCancelled {
		t.Fatalf("KindOf = %v", KindOf(wrapped))
	}
	if KindOf(base) != KindUnknown {
		t.Fatal("plain error has a kind")
	}
}
