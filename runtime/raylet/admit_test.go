package raylet

import (
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
)

func TestAdmissionTakesWhatFits(t *testing.T) {
	store, err := objectstore.Open(objectstore.Config{Dir: t.TempDir(), Name: "admit", Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	spec := func(i uint64, out int64, ins ...int64) queued {
		s := &wire.SubtaskSpec{ID: dag.PackSubtaskID(1, 1, i), OutputBytes: out}
		for _, n := range ins {
			s.Inputs = append(s.Inputs, wire.InputSpec{Size: n})
		}
		return queued{spec: s}
	}
	r := &Raylet{store: store}
	r.queue = []queued{
		spec(1, 4<<20, 2<<20), // 6 MiB: first in line
		spec(2, 3<<20),        // 3 MiB: does not fit beside the first
		spec(3, 1<<20, 1<<20), // 2 MiB: does
		spec(4, 1),
	}
	take := func() uint64 {
		s := r.admit().spec
		if s == nil {
			return 0
		}
		r.reserved += s.WorkingSet()
		return s.ID.Index()
	}
	if got := take(); got != 1 {
		t.Fatalf("first admitted %d, want 1 (the best, when nothing runs)", got)
	}
	if got := take(); got != 3 {
		t.Fatalf("then admitted %d, want 3 (the best that fits)", got)
	}
	if got := take(); got != 0 {
		t.Fatalf("then admitted %d with the store fully reserved", got)
	}
	r.reserved = 0
	if got := take(); got != 2 {
		t.Fatalf("after the running ones finished, admitted %d, want 2", got)
	}
	// Nothing running: even a subtask larger than the store is started, so
	// that it fails with a clear store error instead of waiting forever.
	r.reserved = 0
	r.queue = []queued{spec(9, 64<<20)}
	if got := take(); got != 9 {
		t.Fatalf("an oversized subtask with nothing running was not admitted: %d", got)
	}
}
