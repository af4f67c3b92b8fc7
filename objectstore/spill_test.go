package objectstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
)

const waitLimit = 20 * time.Second

// openSpill opens a spilling store with its arena and spill dir in fresh
// temp dirs (or spillDir if given).
func openSpill(t testing.TB, capacity int64, spillDir string) *Store {
	t.Helper()
	if spillDir == "" {
		spillDir = t.TempDir()
	}
	s, err := Open(Config{Dir: t.TempDir(), Name: "spill", Capacity: capacity, SpillDir: spillDir})
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

// pattern is the content of object i: a function of i, so any reader can
// check any object.
func pattern(i uint64, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*131 + uint64(j)*7 + uint64(j>>8))
	}
	return b
}

// wantData gets id, compares its bytes and releases it.
func wantData(t *testing.T, s *Store, i uint64, n int) {
	t.Helper()
	obj, err := s.Get(oid(i))
	if err != nil {
		t.Fatalf("get %d: %v", i, err)
	}
	defer s.Release(oid(i))
	if !bytes.Equal(obj.Data, pattern(i, n)) {
		t.Fatalf("object %d: bytes differ after spill and restore", i)
	}
}

func spillFiles(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.SpillDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != spillLock {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestSpillOldestFirstAndRestore(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 4*obj, "")
	for i := range uint64(4) {
		put(t, s, oid(i), pattern(i, obj), []byte{byte(i)})
	}
	wantData(t, s, 0, obj) // 0 is now the most recently used; 1 is the oldest

	put(t, s, oid(4), pattern(4, obj), nil)
	st := s.Stats()
	if st.Spilled != 1 || st.SpilledBytes != obj || st.Spills != 1 || st.SpillFileBytes != obj || st.Objects != 5 {
		t.Fatalf("after one spill: %+v", st)
	}
	if files := spillFiles(t, s); len(files) != 1 || !strings.HasPrefix(files[0], oid(1).String()) {
		t.Fatalf("spill files %v, want one for %s (the least recently used)", files, oid(1))
	}
	if !s.Contains(oid(1)) {
		t.Error("a spilled object is not Contained")
	}
	if ids := s.IDs(nil); len(ids) != 5 {
		t.Errorf("IDs lists %d objects, want 5 (spilled ones too)", len(ids))
	}

	// Get restores object 1 (spilling 2, now the oldest) with its meta.
	got, err := s.Get(oid(1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, pattern(1, obj)) || !bytes.Equal(got.Meta, []byte{1}) {
		t.Fatal("restored object differs")
	}
	s.Release(oid(1))
	st = s.Stats()
	if st.Restores != 1 || st.Restored != obj || st.Spilled != 1 || st.Spills != 2 {
		t.Fatalf("after restore: %+v", st)
	}
	for i := range uint64(5) {
		wantData(t, s, i, obj)
	}
	// Every object was restored at most once and kept its file: evicting
	// them again needs no more writes.
	spills := s.Stats().Spills
	put(t, s, oid(9), pattern(9, 4*obj), nil)
	if st := s.Stats(); st.Spills != spills || st.Spilled != 5 {
		t.Errorf("evicting clean copies wrote again: spills %d -> %d, spilled %d", spills, st.Spills, st.Spilled)
	}

	// Delete of a spilled object removes its file.
	for i := range uint64(5) {
		if err := s.Delete(oid(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(oid(9)); err != nil {
		t.Fatal(err)
	}
	if files := spillFiles(t, s); len(files) != 0 {
		t.Errorf("spill files left after deleting everything: %v", files)
	}
	if st := s.Stats(); st.Spilled != 0 || st.SpilledBytes != 0 || st.SpillFileBytes != 0 || st.Objects != 0 || st.Used != 0 {
		t.Errorf("after deleting everything: %+v", st)
	}
}

func TestPinnedObjectsNeverMove(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 4*obj, "")
	var offs [4]int64
	for i := range uint64(4) {
		put(t, s, oid(i), pattern(i, obj), nil)
		o, err := s.Get(oid(i))
		if err != nil {
			t.Fatal(err)
		}
		offs[i] = o.Offset
	}
	_, err := s.Create(oid(10), obj, nil)
	wantErr(t, "create with every object pinned", err, ErrFull, dag.KindResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Errorf("full error %q should say the objects are pinned", err)
	}
	if st := s.Stats(); st.Spills != 0 || st.Spilled != 0 {
		t.Errorf("pinned objects were spilled: %+v", st)
	}
	for i := range uint64(4) {
		o, err := s.Get(oid(i))
		if err != nil {
			t.Fatal(err)
		}
		if o.Offset != offs[i] || !bytes.Equal(o.Data, pattern(i, obj)) {
			t.Errorf("pinned object %d moved or changed", i)
		}
		s.Release(oid(i))
		s.Release(oid(i))
	}
}

func TestCreateCtxWaitsForSpace(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 2*obj, "")
	put(t, s, oid(0), pattern(0, obj), nil)
	put(t, s, oid(1), pattern(1, obj), nil)
	for i := range uint64(2) {
		if _, err := s.Get(oid(i)); err != nil {
			t.Fatal(err)
		}
	}

	// A deadline ends the wait with an error that says why.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := s.CreateCtx(ctx, oid(5), obj, nil)
	cancel()
	wantErr(t, "create past its deadline", err, ErrFull, dag.KindDeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "gave up waiting for 4096 bytes") {
		t.Errorf("deadline error %q should wrap the context's and name the bytes", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = s.CreateCtx(ctx, oid(5), obj, nil)
	wantErr(t, "create with a cancelled context", err, ErrFull, dag.KindCancelled)

	// Larger than the whole store: at once, without waiting.
	_, err = s.CreateCtx(context.Background(), oid(6), 3*obj, nil)
	wantErr(t, "create larger than the store", err, ErrTooLarge, dag.KindResourceExhausted)

	// A waiting create goes ahead when a pin is released: the released
	// object is spilled to make room.
	done := make(chan error, 1)
	go func() {
		view, err := s.CreateCtx(context.Background(), oid(7), obj, nil)
		if err == nil {
			copy(view, pattern(7, obj))
			err = s.Seal(oid(7))
		}
		done <- err
	}()
	testutil.WaitFor(t, waitLimit, "the create to wait", func() bool { return s.Stats().Waits == 3 })
	s.Release(oid(1))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("create still waiting after a release")
	}
	if st := s.Stats(); st.Spilled != 1 {
		t.Errorf("want the released object spilled: %+v", st)
	}
	s.Release(oid(0))
	wantData(t, s, 1, obj)
	wantData(t, s, 7, obj)
}

func TestCloseEndsWaiters(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), Capacity: 4096, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, oid(0), pattern(0, 4096), nil)
	if _, err := s.Get(oid(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.CreateCtx(context.Background(), oid(1), 4096, nil)
		done <- err
	}()
	testutil.WaitFor(t, waitLimit, "the create to wait", func() bool { return s.Stats().Waits == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		wantErr(t, "create waiting at Close", err, ErrClosed, dag.KindUnavailable)
	case <-time.After(waitLimit):
		t.Fatal("create still waiting after Close")
	}
}

func TestGetWaitsForSpaceToRestore(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 2*obj, "")
	for i := range uint64(3) {
		put(t, s, oid(i), pattern(i, obj), nil)
	}
	// 0 is spilled; pin the others so it cannot come back.
	for i := uint64(1); i < 3; i++ {
		if _, err := s.Get(oid(i)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Get(oid(0))
	wantErr(t, "get of a spilled object with the arena pinned", err, ErrFull, dag.KindResourceExhausted)
	done := make(chan error, 1)
	go func() {
		obj0, err := s.GetCtx(context.Background(), oid(0))
		if err == nil {
			if !bytes.Equal(obj0.Data, pattern(0, obj)) {
				err = errors.New("restored bytes differ")
			}
			s.Release(oid(0))
		}
		done <- err
	}()
	testutil.WaitFor(t, waitLimit, "the get to wait", func() bool { return s.Stats().Waits == 1 })
	s.Release(oid(2))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Release(oid(1))
}

// TestNoHalfWrittenReads holds a restore between reserving its arena space
// and reading the file: a second Get must wait for it and then see the
// whole object, never the space's old bytes.
func TestNoHalfWrittenReads(t *testing.T) {
	const obj = 64 << 10
	s := openSpill(t, 2*obj, "")
	for i := range uint64(3) {
		put(t, s, oid(i), pattern(i, obj), nil)
	}
	if st := s.Stats(); st.Spilled != 1 {
		t.Fatalf("setup: %+v", st)
	}
	inRestore, proceed := make(chan struct{}), make(chan struct{})
	testHookRestore = func(dag.ObjectID) {
		close(inRestore)
		<-proceed
	}
	t.Cleanup(func() { testHookRestore = nil })

	results := make(chan error, 2)
	get := func() {
		o, err := s.Get(oid(0))
		if err == nil {
			if !bytes.Equal(o.Data, pattern(0, obj)) {
				err = errors.New("a Get returned the object before its restore finished")
			}
			s.Release(oid(0))
		}
		results <- err
	}
	go get()
	<-inRestore
	go get()
	testutil.WaitFor(t, waitLimit, "the second get to wait for the restore", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.wake != nil
	})
	close(proceed)
	for range 2 {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	if st := s.Stats(); st.Restores != 1 {
		t.Errorf("two Gets of one spilled object restored it %d times, want 1", st.Restores)
	}
}

// TestGetDuringSpillReadsTheArenaCopy pins an object while it is being
// written to its spill file: the reader gets the arena copy at once, and
// the object stays in the arena while pinned.
func TestGetDuringSpillReadsTheArenaCopy(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 2*obj, "")
	put(t, s, oid(0), pattern(0, obj), nil)
	put(t, s, oid(1), pattern(1, obj), nil)
	inSpill, proceed := make(chan struct{}), make(chan struct{})
	testHookSpillWrite = func(id dag.ObjectID) {
		if id == oid(0) {
			close(inSpill)
			<-proceed
		}
	}
	t.Cleanup(func() { testHookSpillWrite = nil })

	created := make(chan error, 1)
	go func() {
		_, err := s.CreateCtx(context.Background(), oid(2), obj, nil)
		created <- err
	}()
	<-inSpill
	o, err := s.Get(oid(0)) // must not wait for the spill
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Data, pattern(0, obj)) {
		t.Fatal("arena copy differs during spill")
	}
	if err := s.Delete(oid(1)); err != nil { // room for the create after all
		t.Fatal(err)
	}
	close(proceed)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Spilled != 0 || st.Spills != 1 || st.SpillFileBytes != obj {
		t.Errorf("pinned object left the arena, or its clean copy was lost: %+v", st)
	}
	if !bytes.Equal(o.Data, pattern(0, obj)) {
		t.Fatal("pinned view changed after the spill")
	}
	s.Release(oid(0))
	if err := s.Abort(oid(2)); err != nil {
		t.Fatal(err)
	}
}

// TestSpillDirFull spills into a 16 KiB tmpfs: once it is full, a create
// fails with a clear error and every object is still readable.
func TestSpillDirFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); the full-spill-dir path is untested", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	const obj = 8 << 10
	s := openSpill(t, 4*obj, dir)
	for i := range uint64(4) {
		put(t, s, oid(i), pattern(i, obj), nil)
	}
	var err error
	n := uint64(4)
	for ; n < 12 && err == nil; n++ {
		var view []byte
		if view, err = s.Create(oid(n), obj, nil); err == nil {
			copy(view, pattern(n, obj))
			if err := s.Seal(oid(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err == nil {
		t.Fatal("48 KiB of spills fit in a 16 KiB spill dir")
	}
	wantErr(t, "create with a full spill dir", err, ErrSpill, dag.KindResourceExhausted)
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("err %v does not wrap ENOSPC", err)
	}
	for _, want := range []string{"spill", s.SpillDir(), "stays in memory", "move the spill directory to a larger disk", "free of"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	st := s.Stats()
	if files := spillFiles(t, s); len(files) != st.Spilled || st.Spilled == 0 {
		t.Errorf("%d files in the spill dir for %d spilled objects (a partial file left behind?): %v", len(files), st.Spilled, files)
	}
	// Nothing was lost: the objects in the arena read back whole; the
	// spilled ones cannot come back while nothing else can be spilled, and
	// say so, and do come back once there is room.
	var inArena, onDisk []uint64
	for i := range n - 1 {
		o, err := s.Get(oid(i))
		switch {
		case err == nil:
			if !bytes.Equal(o.Data, pattern(i, obj)) {
				t.Errorf("object %d changed", i)
			}
			s.Release(oid(i))
			inArena = append(inArena, i)
		case errors.Is(err, ErrSpill) && errors.Is(err, unix.ENOSPC):
			onDisk = append(onDisk, i)
		default:
			t.Fatalf("get %d: %v", i, err)
		}
	}
	if len(onDisk) != st.Spilled {
		t.Fatalf("%d objects could not be read back, %d are spilled", len(onDisk), st.Spilled)
	}
	for _, i := range inArena[:len(onDisk)] {
		if err := s.Delete(oid(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range onDisk {
		wantData(t, s, i, obj)
	}
}

func TestSpillDirFailing(t *testing.T) {
	const obj = 4096
	s := openSpill(t, 2*obj, "")
	put(t, s, oid(0), pattern(0, obj), nil)
	put(t, s, oid(1), pattern(1, obj), nil)
	if err := os.RemoveAll(s.SpillDir()); err != nil {
		t.Fatal(err)
	}
	_, err := s.Create(oid(2), obj, nil)
	wantErr(t, "create with the spill dir gone", err, ErrSpill, dag.KindUnavailable)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err %v does not wrap the os error", err)
	}
	wantData(t, s, 0, obj)
	wantData(t, s, 1, obj)
	if st := s.Stats(); st.Spilled != 0 || st.Objects != 2 {
		t.Errorf("after failed spills: %+v", st)
	}
}

func TestRestoreDetectsCorruptFile(t *testing.T) {
	const obj = 4096
	s := openSpill(t, obj, "")
	put(t, s, oid(0), pattern(0, obj), nil)
	put(t, s, oid(1), pattern(1, obj), nil) // spills 0
	files := spillFiles(t, s)
	if len(files) != 1 {
		t.Fatalf("spill files %v", files)
	}
	p := filepath.Join(s.SpillDir(), files[0])
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(oid(0))
	wantErr(t, "get of a corrupted spill", err, ErrSpill, dag.KindUnavailable)
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), p) {
		t.Errorf("error %q should say the file %s is corrupt", err, p)
	}
	// The failed restore gave its arena space back.
	wantData(t, s, 1, obj)
}

func TestSpillDirLifecycle(t *testing.T) {
	root := t.TempDir()
	s, err := Open(Config{Dir: t.TempDir(), Name: "lc", Capacity: 4096, SpillDir: root})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.SpillDir()
	if filepath.Dir(dir) != root || !parseSpillDir(filepath.Base(dir)) || !strings.HasPrefix(filepath.Base(dir), "phobos-lc-") {
		t.Errorf("spill dir %s, want %s/phobos-lc-<32 hex>.spill", dir, root)
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("spill dir %s: %v, %v; want a 0700 directory", dir, fi.Mode(), err)
	}
	put(t, s, oid(0), pattern(0, 4096), nil)
	put(t, s, oid(1), pattern(1, 4096), nil)
	for _, f := range append(spillFiles(t, s), spillLock) {
		if fi, err := os.Lstat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", f, fi.Mode().Perm(), err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spill dir still there after Close: %v", err)
	}

	// The default is under os.TempDir(), named after the store.
	d, err := Open(Config{Dir: t.TempDir(), Name: "lc-default", Capacity: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.SpillDir(), filepath.Join(os.TempDir(), "phobos-lc-default-")) {
		t.Errorf("default spill dir %s, not under %s", d.SpillDir(), os.TempDir())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.SpillDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("default spill dir still there after Close: %v", err)
	}

	// A spill dir that cannot be created is an error at Open.
	_, err = Open(Config{Dir: t.TempDir(), Capacity: 4096, SpillDir: filepath.Join(root, "missing", "deeper")})
	if err == nil || !strings.Contains(err.Error(), "Config.SpillDir") {
		t.Errorf("Open with a missing spill dir: %v; want an error naming Config.SpillDir", err)
	}
}

// TestSpillDirsLeftBehind: Open removes the spill directory of a store
// that is gone (its lock is free) and of an older release's store named
// after a dead pid, and leaves alone a live store's directory and
// anything it did not make: no lock file, a lock file that is a link, a
// link to a directory, another user's directory.
func TestSpillDirsLeftBehind(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, lock bool) string {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "x"), []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(p, spillLock), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	hex := strings.Repeat("ab", spillRandom/2)
	dead := mk("phobos-gone-"+hex+".spill", true)
	legacy := mk(fmt.Sprintf("phobos-lc-%d.spill", deadPID(t)), false)
	noLock := mk("phobos-other-"+strings.Repeat("cd", spillRandom/2)+".spill", false)
	linkLock := mk("phobos-other-"+strings.Repeat("ef", spillRandom/2)+".spill", false)
	if err := os.Symlink(filepath.Join(dead, "x"), filepath.Join(linkLock, spillLock)); err != nil {
		t.Fatal(err)
	}
	var others []string // another user's, made to look like ours
	if os.Geteuid() == 0 {
		for _, p := range []string{
			mk("phobos-other-"+strings.Repeat("12", spillRandom/2)+".spill", true),
			mk(fmt.Sprintf("phobos-lc-%d.spill", deadPID(t)), false),
		} {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			others = append(others, p)
		}
	} else {
		t.Log("not root: cannot make another user's directory; that case is untested")
	}
	target := mk("not-a-spill-dir", true)
	link := filepath.Join(root, "phobos-link-"+strings.Repeat("01", spillRandom/2)+".spill")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	live, err := Open(Config{Dir: t.TempDir(), Name: "live", Capacity: 4096, SpillDir: root})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the spill dir of a store that is gone was not removed: %v", err)
	}

	s, err := Open(Config{Dir: t.TempDir(), Name: "lc", Capacity: 4096, SpillDir: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an older release's spill dir of a dead pid was not removed: %v", err)
	}
	for _, p := range append([]string{live.SpillDir(), noLock, linkLock, filepath.Join(target, "x"), link}, others...) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// TestSpillDirSquatted: another user who creates the directory a store
// would use, or links it elsewhere, before the store opens cannot make
// the store use it: the name is not predictable, and mkdir never reuses a
// path. Here the squatter knows the old naming (phobos-<name>-<pid>.spill)
// and fills the directory with every name of the new form it can guess.
func TestSpillDirSquatted(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	old := filepath.Join(root, fmt.Sprintf("phobos-sq-%d.spill", os.Getpid()))
	if err := os.Symlink(elsewhere, old); err != nil {
		t.Fatal(err)
	}
	guessed := filepath.Join(root, "phobos-sq-"+strings.Repeat("0", spillRandom)+".spill")
	if err := os.Mkdir(guessed, 0o777); err != nil {
		t.Fatal(err)
	}
	s := openSpill(t, 4096, root)
	if d := s.SpillDir(); d == old || d == guessed || filepath.Dir(d) != root {
		t.Fatalf("the store uses %s", d)
	}
	put(t, s, oid(0), pattern(0, 4096), nil)
	put(t, s, oid(1), pattern(1, 4096), nil) // spills 0
	if s.Stats().Spills == 0 {
		t.Fatal("nothing spilled")
	}
	for _, d := range []string{elsewhere, guessed} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("the store wrote into the squatted %s", d)
		}
	}
	if err := ownedBy(old, true); err == nil {
		t.Error("ownedBy accepts a symbolic link as a directory")
	}
}

// TestConcurrentSpilling runs writers, readers and deleters on a store far
// smaller than the data, so spills and restores happen all the time. Every
// object's bytes are a function of its id, so a reader that ever sees a
// half-written restore, a reused block or a wrong file fails.
func TestConcurrentSpilling(t *testing.T) {
	const (
		ids     = 64
		workers = 8
		steps   = 600
	)
	s := openSpill(t, 64<<10, "")
	sizeOf := func(i uint64) int { return int(i*2731) % (12 << 10) }
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range steps {
				i := uint64(r.IntN(ids))
				id := oid(i)
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				err := func() error {
					switch r.IntN(5) {
					case 0, 1:
						view, err := s.CreateCtx(ctx, id, int64(sizeOf(i)), nil)
						if errors.Is(err, ErrExists) || errors.Is(err, ErrFull) {
							return nil
						}
						if err != nil {
							return err
						}
						copy(view, pattern(i, sizeOf(i)))
						return s.Seal(id)
					case 2, 3:
						o, err := s.GetCtx(ctx, id)
						if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotSealed) || errors.Is(err, ErrFull) {
							return nil
						}
						if err != nil {
							return err
						}
						defer s.Release(id)
						if !bytes.Equal(o.Data, pattern(i, sizeOf(i))) {
							return fmt.Errorf("object %d: wrong bytes", i)
						}
						return nil
					default:
						err := s.Delete(id)
						if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotSealed) {
							return nil
						}
						return err
					}
				}()
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if st.Spills == 0 || st.Restores == 0 {
		t.Errorf("the test did not spill and restore: %+v", st)
	}
	if st.Pinned != 0 || st.PendingDelete != 0 || st.Objects != st.Sealed {
		t.Errorf("after all workers: %+v", st)
	}
	// The books agree with the files and the allocator.
	s.mu.Lock()
	var nSpilled int
	var fileBytes, used int64
	files := map[string]bool{}
	for _, e := range s.objects.all() {
		if e.where == spilled {
			nSpilled++
		} else {
			used += e.block
		}
		if e.file != "" {
			files[filepath.Base(e.file)] = true
			fileBytes += e.size
		}
	}
	if err := s.alloc.check(); err != nil {
		t.Error(err)
	}
	if nSpilled != st.Spilled || fileBytes != st.SpillFileBytes || used != s.alloc.used {
		t.Errorf("books: %d spilled, %d file bytes, %d used; stats say %d, %d, %d", nSpilled, fileBytes, used, st.Spilled, st.SpillFileBytes, s.alloc.used)
	}
	s.mu.Unlock()
	for _, f := range spillFiles(t, s) {
		if !files[f] {
			t.Errorf("spill file %s belongs to no object", f)
		}
	}
	if len(spillFiles(t, s)) != len(files) {
		t.Errorf("%d spill files, %d objects with a file", len(spillFiles(t, s)), len(files))
	}
	for i := range uint64(ids) {
		if s.Contains(oid(i)) {
			wantData(t, s, i, sizeOf(i))
		}
	}
}
