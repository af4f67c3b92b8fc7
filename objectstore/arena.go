package objectstore

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"

	"github.com/phobos-project/phobos/dag"
)

// arena is the memory-mapped file that holds object bytes. It is created
// whole at Open and never grows, so every page it maps has backing store.
type arena struct {
	path    string
	file    *os.File  // kept open for the life of the store
	mapping mmap.MMap // the whole file: header page, then the data
	data    []byte    // mapping[dataOffset:], the object space
	id      [16]byte  // random; in the header, so a reader can tell this arena from any other
}

// fallocate is unix.Fallocate; tests replace it to simulate a filesystem
// without fallocate support.
var fallocate = unix.Fallocate

// maxNameLen bounds the sanitised Name so the file name stays well under
// NAME_MAX.
const maxNameLen = 64

// defaultDir is /dev/shm when it is a directory (RAM-backed, so the arena
// never waits on a disk), else the system temp directory.
func defaultDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// sanitizeName keeps [A-Za-z0-9_.-] of name, replaces every other byte with
// '_', and bounds its length, so Name can never escape Dir or break the
// file-name pattern. An empty name becomes "store".
func sanitizeName(name string) string {
	if name == "" {
		return "store"
	}
	b := []byte(name)
	if len(b) > maxNameLen {
		b = b[:maxNameLen]
	}
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// arenaFileName is phobos-<name>-<pid>.arena; name must be sanitised.
func arenaFileName(name string, pid int) string {
	return "phobos-" + name + "-" + strconv.Itoa(pid) + arenaSuffix
}

const (
	arenaSuffix = ".arena"
	spillSuffix = ".spill" // the store's directory inside the spill dir
)

// parseArenaPID returns the pid in file when file is exactly
// arenaFileName(name, pid) for a positive decimal pid. Names of other
// stores ("phobos-<name>-x-12.arena" when name is a prefix of theirs) do
// not parse, because the part between name and ".arena" must be the
// canonical decimal form (digits only, no leading zero).
func parseArenaPID(file, name string) (int, bool) { return parsePID(file, name, arenaSuffix) }

// parsePID is parseArenaPID for any suffix.
func parsePID(file, name, suffix string) (int, bool) {
	rest, ok := strings.CutPrefix(file, "phobos-"+name+"-")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, suffix)
	if !ok || digits == "" || len(digits) > 10 || digits[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 || pid > math.MaxInt32 {
		return 0, false
	}
	return pid, true
}

// removeStale deletes arena files (suffix ".arena") or spill directories
// (".spill", as older releases named them) of this name left in dir by
// processes that no longer exist (kill -9, a crash). A pid that answers
// signal 0, or that we may not signal (EPERM: another user's live
// process), is left alone, and so is anything this user does not own. Failures are
// logged, never fatal: a stale file only wastes space.
func removeStale(dir, name, suffix string, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Warn("objectstore: cannot list directory for stale files", "dir", dir, "err", err)
		return
	}
	what := "arena file"
	if suffix == spillSuffix {
		what = "spill directory"
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, ok := parsePID(e.Name(), name, suffix)
		if !ok || pid == self {
			continue
		}
		if suffix == arenaSuffix && !e.Type().IsRegular() || suffix == spillSuffix && !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := ownedBy(p, suffix == spillSuffix); err != nil {
			log.Debug("objectstore: left alone a file named like a stale one", "path", p, "why", err)
			continue // another user's (a squatter's, as root) is not ours to delete
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("objectstore: cannot remove stale "+what+" of a dead process", "path", p, "err", err)
			continue
		}
		log.Info("objectstore: removed stale "+what+" of a dead process", "path", p, "pid", pid)
	}
}

// openArena creates dir/phobos-<name>-<pid>.arena with O_EXCL, reserves
// capacity bytes for it and maps it shared and writable. On any failure it
// removes the file again.
func openArena(dir, name string, capacity int64, n names, log *slog.Logger) (_ *arena, err error) {
	path := filepath.Join(dir, arenaFileName(name, os.Getpid()))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		return nil, dag.Errorf(dag.KindInvalidArgument,
			"objectstore: create arena file %s: another store of this process already uses name %q in %s; give each store its own Name or %s: %w",
			path, name, dir, n.of("Dir"), err)
	case err != nil:
		return nil, dag.Errorf(dag.KindInvalidArgument,
			"objectstore: create arena file in %s: %w; check that %s names a writable directory", dir, err, n.of("Dir"))
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
		}
	}()

	// One header page, then capacity bytes of object space.
	dataOff := int64(os.Getpagesize())
	if err := reserve(f, dir, capacity, dataOff+capacity, n, log); err != nil {
		return nil, err
	}
	m, err := mmap.MapRegion(f, int(dataOff+capacity), mmap.RDWR, 0, 0)
	if err != nil {
		return nil, dag.Errorf(dag.KindResourceExhausted,
			"objectstore: map %d-byte arena %s: %w; choose a smaller %s or raise the process's memory limits", capacity, path, err, n.of("Capacity"))
	}
	a := &arena{path: path, file: f, mapping: m, data: m[dataOff:]}
	if _, err := rand.Read(a.id[:]); err != nil {
		_ = m.Unmap()
		return nil, dag.Errorf(dag.KindInternal, "objectstore: arena id: %w", err)
	}
	putHeader(m[:headerSize], arenaHeader{ID: a.id, DataOffset: dataOff, Capacity: capacity})
	return a, nil
}

// reserve gives f total bytes of real backing store (the header page and
// capacity bytes of object space). With fallocate a full tmpfs is an ENOSPC
// here, not a SIGBUS on first touch later.
func reserve(f *os.File, dir string, capacity, total int64, n names, log *slog.Logger) error {
	fd := int(f.Fd())
	var err error
	for {
		err = fallocate(fd, 0, 0, total)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC):
		return dag.Errorf(dag.KindResourceExhausted,
			"objectstore: reserve %d-byte arena in %s: %w (%s); choose a %s with more space or a smaller %s",
			capacity, dir, err, freeSpace(dir), n.of("Dir"), n.of("Capacity"))
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		log.Warn("objectstore: the store dir's filesystem cannot preallocate (no fallocate); the arena is sparse, "+
			"so if the filesystem fills up the process dies with SIGBUS instead of getting an error; prefer a tmpfs such as /dev/shm for the store directory",
			"setting", n.of("Dir"),
			"dir", dir, "capacity", capacity)
		if err := f.Truncate(total); err != nil {
			return dag.Errorf(dag.KindResourceExhausted,
				"objectstore: size %d-byte arena in %s: %w (%s); choose another %s or a smaller %s",
				capacity, dir, err, freeSpace(dir), n.of("Dir"), n.of("Capacity"))
		}
		return nil
	default:
		return dag.Errorf(dag.KindUnavailable, "objectstore: reserve %d-byte arena in %s: %w", capacity, dir, err)
	}
}

// freeSpace describes how much room dir's filesystem has left, for error
// messages.
func freeSpace(dir string) string { return fsFreeSpace(OSFS{}, dir) }

// fsFreeSpace is freeSpace on fsys, if it knows (SpaceFS), else on the
// operating system's file system.
func fsFreeSpace(fsys FS, dir string) string {
	sp, ok := fsys.(SpaceFS)
	if !ok {
		sp = OSFS{}
	}
	free, total, err := sp.Space(dir)
	if err != nil {
		return "free space unknown"
	}
	return fmt.Sprintf("%d bytes free of %d on that filesystem", free, total)
}

// close unmaps the arena, closes and removes its file. All three are
// attempted; the first failure is returned.
func (a *arena) close() error {
	var errs []error
	if err := a.mapping.Unmap(); err != nil {
		errs = append(errs, fmt.Errorf("unmap %s: %w", a.path, err))
	}
	if err := a.file.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close %s: %w", a.path, err))
	}
	if err := os.Remove(a.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove %s: %w", a.path, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("objectstore: close arena: %w", errors.Join(errs...))
	}
	return nil
}
