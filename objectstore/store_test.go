package objectstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/phobos-project/phobos/dag"
)

func oid(i uint64) dag.ObjectID {
	return dag.NewObjectID(dag.PackSubtaskID(1, 1, i+1), 0)
}

// openTest opens a store without spilling in a fresh temp dir and closes it
// at cleanup. (Spilling has its own tests, in spill_test.go.)
func openTest(t testing.TB, capacity int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), Name: "test", Capacity: capacity, DisableSpill: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// put creates, fills and seals id.
func put(t testing.TB, s *Store, id dag.ObjectID, data, meta []byte) {
	t.Helper()
	view, err := s.Create(id, int64(len(data)), meta)
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	copy(view, data)
	if err := s.Seal(id); err != nil {
		t.Fatalf("seal %s: %v", id, err)
	}
}

func wantErr(t *testing.T, what string, err, sentinel error, kind dag.Kind) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: err = %v, want %v", what, err, sentinel)
	}
	if !errors.Is(err, kind) {
		t.Errorf("%s: err = %v, want kind %v (got %v)", what, err, kind, dag.KindOf(err))
	}
}

// checkStats compares the fields of st that want sets (non-negative ones).
func checkStats(t *testing.T, what string, st Stats, used int64, objects, sealed, pinned, pending int) {
	t.Helper()
	if st.Used != used || st.Free != st.Capacity-used || st.Objects != objects || st.Sealed != sealed || st.Pinned != pinned || st.PendingDelete != pending {
		t.Errorf("%s: stats = %+v; want used %d, objects %d, sealed %d, pinned %d, pending %d",
			what, st, used, objects, sealed, pinned, pending)
	}
}

func TestLifecycle(t *testing.T) {
	s := openTest(t, 1<<20)
	id := oid(1)
	data := []byte("hello, object store")
	meta := []byte{1, 2, 3}

	view, err := s.Create(id, int64(len(data)), meta)
	if err != nil {
		t.Fatal(err)
	}
	if len(view) != len(data) || cap(view) != len(data) {
		t.Fatalf("view len %d cap %d, want both %d", len(view), cap(view), len(data))
	}
	copy(view, data)
	if s.Contains(id) {
		t.Error("Contains before Seal")
	}
	_, err = s.Get(id)
	wantErr(t, "get before seal", err, ErrNotSealed, dag.KindUnavailable)
	checkStats(t, "created", s.Stats(), 64, 1, 0, 0, 0)

	if err := s.Seal(id); err != nil {
		t.Fatal(err)
	}
	if !s.Contains(id) {
		t.Error("not Contains after Seal")
	}
	if ids := s.IDs(nil); len(ids) != 1 || ids[0] != id {
		t.Errorf("IDs = %v, want [%s]", ids, id)
	}
	obj, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if obj.ID != id || !bytes.Equal(obj.Data, data) || !bytes.Equal(obj.Meta, meta) || obj.Offset != 0 {
		t.Errorf("Get = {%s %q %v %d}, want {%s %q %v 0}", obj.ID, obj.Data, obj.Meta, obj.Offset, id, data, meta)
	}
	checkStats(t, "pinned", s.Stats(), 64, 1, 1, 1, 0)
	s.Release(id)
	checkStats(t, "released", s.Stats(), 64, 1, 1, 0, 0)

	if err := s.Delete(id); err != nil {
		t.Fatal(err)
	}
	if s.Contains(id) {
		t.Error("Contains after Delete")
	}
	st := s.Stats()
	checkStats(t, "deleted", st, 0, 0, 0, 0, 0)
	if st.LargestFree != st.Capacity || st.FreeExtents != 1 {
		t.Errorf("after delete: largest %d extents %d, want %d and 1", st.LargestFree, st.FreeExtents, st.Capacity)
	}
}

func TestAbortFreesSpace(t *testing.T) {
	s := openTest(t, 1<<20)
	id := oid(1)
	if _, err := s.Create(id, 1000, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(id); err != nil {
		t.Fatal(err)
	}
	checkStats(t, "aborted", s.Stats(), 0, 0, 0, 0, 0)
	// The id is free again.
	put(t, s, id, []byte("second try"), nil)
}

func TestMetaIsCopied(t *testing.T) {
	s := openTest(t, 1<<20)
	meta := []byte("dtype=f64")
	put(t, s, oid(1), []byte{1}, meta)
	meta[0] = 'X'
	obj, err := s.Get(oid(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(oid(1))
	if string(obj.Meta) != "dtype=f64" {
		t.Errorf("meta = %q; the store must keep its own copy", obj.Meta)
	}
}

func TestMisuseErrors(t *testing.T) {
	type env struct {
		s       *Store
		sealed  dag.ObjectID // sealed, unpinned
		open    dag.ObjectID // created, not sealed
		pinnedD dag.ObjectID // deleted while pinned
		missing dag.ObjectID
	}
	setup := func(t *testing.T) env {
		s := openTest(t, 1<<20)
		e := env{s: s, sealed: oid(1), open: oid(2), pinnedD: oid(3), missing: oid(99)}
		put(t, s, e.sealed, []byte("x"), nil)
		if _, err := s.Create(e.open, 10, nil); err != nil {
			t.Fatal(err)
		}
		put(t, s, e.pinnedD, []byte("y"), nil)
		if _, err := s.Get(e.pinnedD); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(e.pinnedD); err != nil {
			t.Fatal(err)
		}
		return e
	}
	tests := []struct {
		name     string
		do       func(e env) error
		sentinel error
		kind     dag.Kind
	}{
		{"seal missing", func(e env) error { return e.s.Seal(e.missing) }, ErrNotFound, dag.KindNotFound},
		{"seal twice", func(e env) error { return e.s.Seal(e.sealed) }, ErrSealed, dag.KindInvalidArgument},
		{"abort missing", func(e env) error { return e.s.Abort(e.missing) }, ErrNotFound, dag.KindNotFound},
		{"abort sealed", func(e env) error { return e.s.Abort(e.sealed) }, ErrSealed, dag.KindInvalidArgument},
		{"get missing", func(e env) error { _, err := e.s.Get(e.missing); return err }, ErrNotFound, dag.KindNotFound},
		{"get unsealed", func(e env) error { _, err := e.s.Get(e.open); return err }, ErrNotSealed, dag.KindUnavailable},
		{"get deleted", func(e env) error { _, err := e.s.Get(e.pinnedD); return err }, ErrNotFound, dag.KindNotFound},
		{"delete missing", func(e env) error { return e.s.Delete(e.missing) }, ErrNotFound, dag.KindNotFound},
		{"delete unsealed", func(e env) error { return e.s.Delete(e.open) }, ErrNotSealed, dag.KindUnavailable},
		{"delete twice", func(e env) error { return e.s.Delete(e.pinnedD) }, ErrNotFound, dag.KindNotFound},
		{"create sealed id", func(e env) error { _, err := e.s.Create(e.sealed, 1, nil); return err }, ErrExists, dag.KindInvalidArgument},
		{"create unsealed id", func(e env) error { _, err := e.s.Create(e.open, 1, nil); return err }, ErrExists, dag.KindInvalidArgument},
		{"create deleted but pinned id", func(e env) error { _, err := e.s.Create(e.pinnedD, 1, nil); return err }, ErrExists, dag.KindInvalidArgument},
		{"create too large", func(e env) error { _, err := e.s.Create(e.missing, 1<<20+1, nil); return err }, ErrTooLarge, dag.KindResourceExhausted},
		{"create negative size", func(e env) error { _, err := e.s.Create(e.missing, -1, nil); return err }, dag.ErrInvalidArgument, dag.KindInvalidArgument},
		{"create zero id", func(e env) error { _, err := e.s.Create(dag.ObjectID{}, 1, nil); return err }, dag.ErrInvalidArgument, dag.KindInvalidArgument},
		{"create huge meta", func(e env) error {
			_, err := e.s.Create(e.missing, 1, make([]byte, MaxMetaSize+1))
			return err
		}, dag.ErrInvalidArgument, dag.KindInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			before := e.s.Stats()
			wantErr(t, tc.name, tc.do(e), tc.sentinel, tc.kind)
			if after := e.s.Stats(); after != before {
				t.Errorf("a failed call changed the store: %+v -> %+v", before, after)
			}
		})
	}
}

func TestErrorMessagesNameTheInput(t *testing.T) {
	s := openTest(t, 1<<20)
	_, err := s.Create(oid(7), 2<<20, nil)
	for _, want := range []string{oid(7).String(), "2097152", "1048576", "raise its capacity (Config.Capacity)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("too-large error %q does not mention %q", err, want)
		}
	}
	_, err = s.Get(oid(8))
	if err == nil || !strings.Contains(err.Error(), oid(8).String()) {
		t.Errorf("not-found error %q does not name the object", err)
	}
}

func TestReleaseWithoutGetIsIgnored(t *testing.T) {
	var logs bytes.Buffer
	s, err := Open(Config{Dir: t.TempDir(), Capacity: 1 << 20, Logger: slogTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	put(t, s, oid(1), []byte("x"), nil)
	if _, err := s.Get(oid(1)); err != nil {
		t.Fatal(err)
	}
	s.Release(oid(1))
	s.Release(oid(1)) // one too many: must not go below zero or unpin anyone else
	s.Release(oid(2)) // never existed
	if st := s.Stats(); st.Pinned != 0 || st.Objects != 1 {
		t.Errorf("stats after extra Releases: %+v", st)
	}
	if n := strings.Count(logs.String(), "Release without a matching Get"); n != 2 {
		t.Errorf("logged %d misuse warnings, want 2:\n%s", n, logs.String())
	}
	// A pin taken after the bogus Releases still protects the object.
	if _, err := s.Get(oid(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(oid(1)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PendingDelete != 1 || st.Used != 64 {
		t.Errorf("pinned delete freed at once: %+v", st)
	}
	s.Release(oid(1))
	checkStats(t, "after last release", s.Stats(), 0, 0, 0, 0, 0)
}

func TestAfterClose(t *testing.T) {
	s := openTest(t, 1<<20)
	put(t, s, oid(1), []byte("x"), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"create": func() error { _, err := s.Create(oid(2), 1, nil); return err }(),
		"seal":   s.Seal(oid(1)),
		"abort":  s.Abort(oid(1)),
		"get":    func() error { _, err := s.Get(oid(1)); return err }(),
		"delete": s.Delete(oid(1)),
		"close":  s.Close(),
	} {
		wantErr(t, name, err, ErrClosed, dag.KindUnavailable)
	}
	s.Release(oid(1)) // must not panic
	if s.Contains(oid(1)) {
		t.Error("Contains after Close")
	}
	if ids := s.IDs(nil); len(ids) != 0 {
		t.Errorf("IDs after Close = %v", ids)
	}
	if st := s.Stats(); st != (Stats{Capacity: 1 << 20}) {
		t.Errorf("Stats after Close = %+v", st)
	}
}

func TestZeroSizeObjects(t *testing.T) {
	s := openTest(t, 4096)
	put(t, s, oid(1), make([]byte, 4096), nil) // the store is now full
	view, err := s.Create(oid(2), 0, []byte("empty"))
	if err != nil {
		t.Fatalf("zero-size create in a full store: %v", err)
	}
	if len(view) != 0 {
		t.Fatalf("view len %d", len(view))
	}
	if err := s.Seal(oid(2)); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Get(oid(2))
	if err != nil {
		t.Fatal(err)
	}
	if obj.Data == nil || len(obj.Data) != 0 || string(obj.Meta) != "empty" {
		t.Errorf("Get of zero-size object = %+v", obj)
	}
	s.Release(oid(2))
	checkStats(t, "zero-size", s.Stats(), 4096, 2, 2, 0, 0)
	if err := s.Delete(oid(2)); err != nil {
		t.Fatal(err)
	}
	checkStats(t, "zero-size deleted", s.Stats(), 4096, 1, 1, 0, 0)
}

func TestDataRoundTripAndAlignment(t *testing.T) {
	s := openTest(t, 8<<20)
	r := rand.New(rand.NewPCG(7, 7))
	sizes := []int{1, 63, 64, 65, 1000, 4096, 1<<20 + 3, 7}
	want := make([][]byte, len(sizes))
	// Write them all first, so an overlap or a view that runs past its
	// object would corrupt a neighbour and show up below.
	for i, n := range sizes {
		want[i] = make([]byte, n)
		for j := range want[i] {
			want[i][j] = byte(r.Uint32())
		}
		put(t, s, oid(uint64(i)), want[i], []byte(fmt.Sprint(n)))
	}
	for i, n := range sizes {
		obj, err := s.Get(oid(uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(obj.Data, want[i]) {
			t.Errorf("object %d (%d bytes): data differs from what was written", i, n)
		}
		if string(obj.Meta) != fmt.Sprint(n) {
			t.Errorf("object %d: meta %q", i, obj.Meta)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(obj.Data))); p%Alignment != 0 || obj.Offset%Alignment != 0 {
			t.Errorf("object %d: address %#x offset %d not %d-byte aligned", i, p, obj.Offset, Alignment)
		}
		if cap(obj.Data) != n {
			t.Errorf("object %d: cap %d, want %d (append must not reach a neighbour)", i, cap(obj.Data), n)
		}
		s.Release(oid(uint64(i)))
	}
}

func TestFullThenDeleteThenFits(t *testing.T) {
	const quarter = 256 << 10
	s := openTest(t, 1<<20)
	for i := range 4 {
		put(t, s, oid(uint64(i)), make([]byte, quarter), nil)
	}
	_, err := s.Create(oid(10), 1, nil)
	wantErr(t, "create in full store", err, ErrFull, dag.KindResourceExhausted)
	for _, want := range []string{oid(10).String(), "need 64 bytes", "0 bytes free", "largest free block 0 bytes", "capacity 1048576 bytes", "raise the store's capacity (Config.Capacity)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("full error %q does not mention %q", err, want)
		}
	}

	// A pinned object's delete frees nothing until its Release.
	if _, err := s.Get(oid(0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(oid(0)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Create(oid(10), quarter, nil)
	wantErr(t, "create while the deleted object is pinned", err, ErrFull, dag.KindResourceExhausted)
	s.Release(oid(0))

	view, err := s.Create(oid(10), quarter, nil)
	if err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	if len(view) != quarter {
		t.Fatalf("view len %d", len(view))
	}
}

func TestFragmentationAndCoalescing(t *testing.T) {
	const page, n = 4096, 16
	s := openTest(t, n*page)
	for i := range n {
		put(t, s, oid(uint64(i)), bytes.Repeat([]byte{byte(i)}, page), nil)
	}
	for i := 0; i < n; i += 2 {
		if err := s.Delete(oid(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Free != n/2*page || st.LargestFree != page || st.FreeExtents != n/2 {
		t.Fatalf("after deleting every other object: %+v; want free %d in %d extents of %d", st, n/2*page, n/2, page)
	}
	// Half the store is free, yet no two free pages touch.
	_, err := s.Create(oid(100), 2*page, nil)
	wantErr(t, "fragmented create", err, ErrFull, dag.KindResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), "32768 bytes free, largest free block 4096 bytes") {
		t.Errorf("fragmented full error %q should say free and largest block", err)
	}
	// Deleting one object between two holes merges three pages into one extent.
	if err := s.Delete(oid(1)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.LargestFree != 3*page || st.FreeExtents != n/2-1 {
		t.Errorf("after merging: largest %d extents %d, want %d and %d", st.LargestFree, st.FreeExtents, 3*page, n/2-1)
	}
	put(t, s, oid(100), make([]byte, 2*page), nil)
	// The survivors kept their bytes through all of this.
	for i := 3; i < n; i += 2 {
		obj, err := s.Get(oid(uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(obj.Data, bytes.Repeat([]byte{byte(i)}, page)) {
			t.Errorf("object %d changed", i)
		}
		s.Release(oid(uint64(i)))
	}
	for _, id := range s.IDs(nil) {
		if err := s.Delete(id); err != nil {
			t.Fatal(err)
		}
	}
	st = s.Stats()
	if st.Used != 0 || st.FreeExtents != 1 || st.LargestFree != n*page {
		t.Errorf("after deleting everything: %+v; want one free extent of %d", st, n*page)
	}
	put(t, s, oid(200), make([]byte, n*page), nil)
}

func TestDeleteOfPinnedObjectIsDeferred(t *testing.T) {
	s := openTest(t, 1<<20)
	id := oid(1)
	put(t, s, id, []byte("pinned twice"), nil)
	a, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(id); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(id); err != nil {
		t.Fatal(err)
	}
	if s.Contains(id) {
		t.Error("deleted object still Contained")
	}
	checkStats(t, "deleted, two pins", s.Stats(), 64, 1, 1, 1, 1)
	if string(a.Data) != "pinned twice" {
		t.Errorf("a pinned view changed after Delete: %q", a.Data)
	}
	s.Release(id)
	checkStats(t, "deleted, one pin", s.Stats(), 64, 1, 1, 1, 1)
	s.Release(id)
	checkStats(t, "deleted, no pins", s.Stats(), 0, 0, 0, 0, 0)
	put(t, s, id, []byte("again"), nil)
}

// TestConcurrentLifecycle runs writers, readers, deleters and aborters on a
// small id space at once. Each id's size and bytes are a function of the id,
// so any reader can check any object it gets; a use-after-free or an overlap
// shows up as wrong bytes.
func TestConcurrentLifecycle(t *testing.T) {
	const (
		ids     = 48
		workers = 8
		steps   = 1500
	)
	s := openTest(t, 4<<20)
	sizeOf := func(i uint64) int64 { return int64(i*977) % 9000 }
	fill := func(i uint64, b []byte) {
		for j := range b {
			b[j] = byte(i*31 + uint64(j))
		}
	}
	check := func(i uint64, b []byte) error {
		if int64(len(b)) != sizeOf(i) {
			return fmt.Errorf("object %d: %d bytes, want %d", i, len(b), sizeOf(i))
		}
		for j := range b {
			if b[j] != byte(i*31+uint64(j)) {
				return fmt.Errorf("object %d: byte %d is %d, want %d", i, j, b[j], byte(i*31+uint64(j)))
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			fail := func(err error) { errs <- err }
			for range steps {
				i := uint64(r.IntN(ids))
				id := oid(i)
				switch r.IntN(4) {
				case 0, 1: // write; an abort now and then
					view, err := s.Create(id, sizeOf(i), nil)
					if errors.Is(err, ErrExists) || errors.Is(err, ErrFull) {
						continue
					}
					if err != nil {
						fail(err)
						return
					}
					fill(i, view)
					if r.IntN(8) == 0 {
						err = s.Abort(id)
					} else {
						err = s.Seal(id)
					}
					if err != nil {
						fail(err)
						return
					}
				case 2: // read
					obj, err := s.Get(id)
					if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotSealed) {
						continue
					}
					if err != nil {
						fail(err)
						return
					}
					err = check(i, obj.Data)
					s.Release(id)
					if err != nil {
						fail(err)
						return
					}
				case 3: // delete, often while others hold pins
					if err := s.Delete(id); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotSealed) {
						fail(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := s.Stats(); st.Pinned != 0 || st.PendingDelete != 0 || st.Objects != st.Sealed {
		t.Errorf("after all workers finished: %+v; want no pins, no pending deletes, nothing unsealed", st)
	}
	for _, id := range s.IDs(nil) {
		if err := s.Delete(id); err != nil {
			t.Fatal(err)
		}
	}
	checkStats(t, "after deleting everything", s.Stats(), 0, 0, 0, 0, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.alloc.check(); err != nil {
		t.Error(err)
	}
	if s.alloc.freeExtents() != 1 {
		t.Errorf("%d free extents after deleting everything, want 1", s.alloc.freeExtents())
	}
}

func TestGetReleaseDoesNotAllocate(t *testing.T) {
	s := openTest(t, 1<<20)
	put(t, s, oid(1), make([]byte, 1000), []byte("m"))
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.Get(oid(1)); err != nil {
			t.Fatal(err)
		}
		s.Release(oid(1))
	})
	if allocs != 0 {
		t.Errorf("Get+Release allocates %.1f times per call, want 0", allocs)
	}
}

// TestWarmJobDoesNotAllocate: once a store has held a job's objects, the
// next job of as many (up to maxSpare) creates, seals and deletes them
// without allocating: entries are recycled and the table does not grow.
func TestWarmJobDoesNotAllocate(t *testing.T) {
	s := openTest(t, 4<<20)
	const n = 20_000
	job := func() {
		for i := range uint64(n) {
			if _, err := s.Create(oid(i), 8, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Seal(oid(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range uint64(n) {
			if err := s.Delete(oid(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	job()
	if allocs := testing.AllocsPerRun(3, job); allocs != 0 {
		t.Errorf("a warm job of %d objects allocates %.0f times, want 0", n, allocs)
	}
}

func TestCloseRemovesFile(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), Name: "close", Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); err != nil {
		t.Fatalf("arena file missing while open: %v", err)
	}
	put(t, s, oid(1), []byte("x"), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("arena file still there after Close: %v", err)
	}
}
