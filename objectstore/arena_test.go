package objectstore

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/phobos-project/phobos/dag"
)

// slogTo returns a logger writing text lines to w, safe for concurrent use.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestSanitizeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "store"},
		{"raylet-1", "raylet-1"},
		{"node_a.b", "node_a.b"},
		{"../etc/passwd", ".._etc_passwd"},
		{"a b\x00c", "a_b_c"},
		{"héllo", "h__llo"},
		{strings.Repeat("x", 100), strings.Repeat("x", maxNameLen)},
	} {
		if got := sanitizeName(tc.in); got != tc.want {
			t.Errorf("sanitizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseArenaPID(t *testing.T) {
	for _, tc := range []struct {
		file, name string
		pid        int
		ok         bool
	}{
		{"phobos-r1-1234.arena", "r1", 1234, true},
		{"phobos-r1-1.arena", "r1", 1, true},
		{"phobos-r1-0.arena", "r1", 0, false},
		{"phobos-r1-01.arena", "r1", 0, false}, // not a name we write
		{"phobos-r1-.arena", "r1", 0, false},
		{"phobos-r1-12a.arena", "r1", 0, false},
		{"phobos-r1--12.arena", "r1", 0, false},
		{"phobos-r1-+12.arena", "r1", 0, false},
		{"phobos-r1-12.arena.tmp", "r1", 0, false},
		{"phobos-r1-99999999999.arena", "r1", 0, false},
		{"phobos-r1-4294967295.arena", "r1", 0, false},
		{"phobos-r1-x-12.arena", "r1", 0, false}, // another store named "r1-x"
		{"phobos-r1-x-12.arena", "r1-x", 12, true},
		{"phobos-r2-12.arena", "r1", 0, false},
		{"other-r1-12.arena", "r1", 0, false},
	} {
		pid, ok := parseArenaPID(tc.file, tc.name)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("parseArenaPID(%q, %q) = %d, %v; want %d, %v", tc.file, tc.name, pid, ok, tc.pid, tc.ok)
		}
	}
}

// FuzzParseArenaPID checks the parser of file names found in the store dir
// (written by anyone): it never panics, accepts only what arenaFileName
// produces, and round-trips every name it produces.
func FuzzParseArenaPID(f *testing.F) {
	f.Add("phobos-r1-1234.arena", "r1", 42)
	f.Add("phobos--1.arena", "", 1)
	f.Add("phobos-a-b-7.arena", "a-b", 7)
	f.Fuzz(func(t *testing.T, file, name string, pid int) {
		name = sanitizeName(name)
		if got, ok := parseArenaPID(file, name); ok && arenaFileName(name, got) != file {
			t.Errorf("parseArenaPID(%q, %q) accepted pid %d, but that pid's file is %q", file, name, got, arenaFileName(name, got))
		}
		if pid > 0 && pid <= 1<<31-1 {
			if got, ok := parseArenaPID(arenaFileName(name, pid), name); !ok || got != pid {
				t.Errorf("round trip of pid %d with name %q gave %d, %v", pid, name, got, ok)
			}
		}
	})
}

func TestOpenRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"zero capacity", Config{Dir: dir}, []string{"capacity 0", "set Config.Capacity"}},
		{"negative capacity", Config{Dir: dir, Capacity: -5}, []string{"capacity -5", "Config.Capacity"}},
		{"missing dir", Config{Dir: filepath.Join(dir, "nope"), Capacity: 4096}, []string{filepath.Join(dir, "nope"), "Config.Dir"}},
		// A program that sets the Config from flags has errors name them.
		{"zero capacity, named", Config{Dir: dir, SettingNames: map[string]string{"Capacity": "--store-size"}}, []string{"capacity 0", "set --store-size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, dag.ErrInvalidArgument) {
				t.Errorf("kind %v, want invalid argument: %v", dag.KindOf(err), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed Opens left files: %v", ents)
	}
}

func TestOpenSameNameTwice(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, "twin", 4096)
	_, err := Open(Config{Dir: dir, Name: "twin", Capacity: 4096})
	if !errors.Is(err, os.ErrExist) || !strings.Contains(err.Error(), "Name") {
		t.Errorf("second Open with the same name: %v; want an exists error that says to use another Name", err)
	}
	// The first store's file must survive the failed second Open.
	if _, err := os.Stat(s.Path()); err != nil {
		t.Errorf("first store's file: %v", err)
	}
}

func TestOpenDefaultsAndRounding(t *testing.T) {
	name := "objectstore-test-defaults"
	s, err := Open(Config{Name: name + "/x", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	wantDir := defaultDir()
	if dir := filepath.Dir(s.Path()); dir != wantDir {
		t.Errorf("default dir %s, want %s", dir, wantDir)
	}
	if base, want := filepath.Base(s.Path()), arenaFileName(name+"_x", os.Getpid()); base != want {
		t.Errorf("file %s, want %s", base, want)
	}
	page := int64(os.Getpagesize())
	if st := s.Stats(); st.Capacity != page {
		t.Errorf("capacity 1 rounded to %d, want the page size %d", st.Capacity, page)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 2*page || fi.Mode().Perm() != 0o600 {
		t.Errorf("arena file size %d mode %v, want %d (a header page and one data page) and 0600", fi.Size(), fi.Mode().Perm(), 2*page)
	}
}

func openIn(t *testing.T, dir, name string, capacity int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, Name: name, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// deadPID returns the pid of a child that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run a child to get a dead pid: %v", err)
	}
	pid := cmd.Process.Pid
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Skipf("pid %d was reused at once (kill: %v); cannot make a stale file", pid, err)
	}
	return pid
}

func TestOpenRemovesStaleArenaFiles(t *testing.T) {
	dir := t.TempDir()
	dead := deadPID(t)
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("old arena"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(arenaFileName("r1", dead))
	live := mk(arenaFileName("r1", os.Getppid()))
	otherName := mk(arenaFileName("r2", dead))
	longerName := mk(arenaFileName("r1-x", dead))
	notPID := mk("phobos-r1-abc.arena")
	unrelated := mk("notes.txt")
	keep := []string{live, otherName, longerName, notPID, unrelated}
	if os.Geteuid() == 0 {
		// Another user's file under a stale name (a squatter's, when the
		// raylet runs as root) is not ours to delete.
		foreign := mk(arenaFileName("r1", deadPID(t)))
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, foreign)
	}

	var logs bytes.Buffer
	s, err := Open(Config{Dir: dir, Name: "r1", Capacity: 4096, Logger: slogTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale file of dead pid %d not removed (stat: %v)", dead, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s should be kept: %v", filepath.Base(p), err)
		}
	}
	if !strings.Contains(logs.String(), "removed stale arena file") {
		t.Errorf("removal not logged:\n%s", logs.String())
	}
}

// TestOpenOnFullTmpfs mounts a 1 MiB tmpfs and asks for a 4 MiB store:
// Open must fail with ENOSPC and a helpful message, not map pages that
// would SIGBUS on first touch. A store that fits must be fully writable.
func TestOpenOnFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); the ENOSPC path is untested", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})

	_, err := Open(Config{Dir: dir, Name: "big", Capacity: 4 << 20})
	if err == nil {
		t.Fatal("Open of 4 MiB on a 1 MiB tmpfs succeeded")
	}
	if !errors.Is(err, unix.ENOSPC) || !errors.Is(err, dag.ErrResourceExhausted) {
		t.Errorf("err = %v (kind %v); want ENOSPC with kind resource exhausted", err, dag.KindOf(err))
	}
	for _, want := range []string{dir, "4194304", "free of", "Config.Dir", "Config.Capacity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed Open left %v behind", ents)
	}

	s := openIn(t, dir, "small", 512<<10)
	view, err := s.Create(oid(1), 512<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range view { // every page must have backing store
		view[i] = byte(i)
	}
	if err := s.Seal(oid(1)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenWithoutFallocateFallsBack(t *testing.T) {
	old := fallocate
	fallocate = func(int, uint32, int64, int64) error { return unix.EOPNOTSUPP }
	t.Cleanup(func() { fallocate = old })

	var logs bytes.Buffer
	s, err := Open(Config{Dir: t.TempDir(), Capacity: 64 << 10, Logger: slogTo(&logs)})
	if err != nil {
		t.Fatalf("Open without fallocate: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "fallocate") {
		t.Errorf("no warning about the missing fallocate:\n%s", logs.String())
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if want := 64<<10 + int64(os.Getpagesize()); fi.Size() != want {
		t.Errorf("file size %d, want %d", fi.Size(), want)
	}
	put(t, s, oid(1), bytes.Repeat([]byte{7}, 64<<10), nil)
}

func TestOpenOtherFallocateErrorFails(t *testing.T) {
	old := fallocate
	fallocate = func(int, uint32, int64, int64) error { return unix.EIO }
	t.Cleanup(func() { fallocate = old })
	dir := t.TempDir()
	_, err := Open(Config{Dir: dir, Capacity: 4096})
	if !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v; want EIO naming %s", err, dir)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed Open left %v behind", ents)
	}
}
