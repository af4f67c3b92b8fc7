package objectstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/phobos-project/phobos/dag"
)

// A store's spill directory is <SpillDir>/phobos-<Name>-<32 hex>.spill:
// the hex is 128 random bits, so no other user can create the path first
// (the default SpillDir is the shared /tmp), and it is made with mkdir,
// which fails rather than reuse a path that exists, then checked to be a
// directory of this user with mode 0700. Inside, the lock file "owner"
// (0600, naming the process) is held with an exclusive flock for the life
// of the store. A directory whose lock can be taken belongs to a store
// that is gone (a crash, kill -9), and the next store to open under the
// same SpillDir removes it; a directory without that lock file, or that
// another user owns, is never touched.

const (
	spillLock   = "owner"
	spillRandom = 32 // hex digits in the directory name
)

// spillDir is a store's own spill directory and its held lock.
type spillDir struct {
	path string
	lock *os.File
}

// createSpillDir makes this store's spill directory under root.
func createSpillDir(root, name string, n names, log *slog.Logger) (*spillDir, error) {
	fi, err := os.Stat(root)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory", root)
	}
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: spill directory %s: %w; check that %s names a writable directory", root, err, n.of("SpillDir"))
	}
	var path string
	for range 10 {
		var b [spillRandom / 2]byte
		rand.Read(b[:])
		path = filepath.Join(root, "phobos-"+name+"-"+hex.EncodeToString(b[:])+spillSuffix)
		if err = os.Mkdir(path, 0o700); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create spill directory in %s: %w; check that %s names a writable directory", root, err, n.of("SpillDir"))
	}
	d, err := claimSpillDir(path, log)
	if err != nil {
		_ = os.RemoveAll(path)
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: spill directory %s: %w", path, err)
	}
	return d, nil
}

// claimSpillDir checks that path, which this process just created, is a
// directory of this user, fixes its mode to 0700 whatever the umask, and
// creates and locks its lock file.
func claimSpillDir(path string, log *slog.Logger) (*spillDir, error) {
	if err := ownedBy(path, true); err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(path, spillLock), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// A file system without flock (some network or FUSE ones): no
		// lock, so no other store can take the directory for a dead
		// one's either; after a crash it stays until removed by hand.
		log.Warn("objectstore: cannot lock the spill directory; if this raylet crashes, remove it by hand", "path", path, "err", err)
	}
	if _, err := fmt.Fprintf(f, "phobos object store spill directory; pid %d\n", os.Getpid()); err != nil {
		f.Close()
		return nil, err
	}
	return &spillDir{path: path, lock: f}, nil
}

// ownedBy checks that path (not followed if a symbolic link) is a
// directory (dir) or a regular file of this process's effective user.
func ownedBy(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return ownedInfo(path, fi, dir)
}

func ownedInfo(path string, fi fs.FileInfo, dir bool) error {
	switch {
	case dir && !fi.IsDir():
		return fmt.Errorf("%s is a %v, not a directory", path, fi.Mode().Type())
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is a %v, not a regular file", path, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", path)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s belongs to uid %d, not to this process's uid %d", path, st.Uid, euid)
	}
	return nil
}

// close removes the directory and then releases the lock.
func (d *spillDir) close() error {
	err := os.RemoveAll(d.path)
	d.lock.Close()
	return err
}

// parseSpillDir reports whether file is a spill directory name of the
// current form, phobos-<name>-<32 hex>.spill, of any store.
func parseSpillDir(file string) bool {
	rest, ok := strings.CutPrefix(file, "phobos-")
	if !ok {
		return false
	}
	rest, ok = strings.CutSuffix(rest, spillSuffix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 || len(rest)-i-1 != spillRandom {
		return false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// removeDeadSpillDirs removes from root the spill directories of stores
// that are gone: named like one, a directory of this user, holding a lock
// file of this user that nobody holds. Failures are logged, never fatal: a
// stale directory only wastes space.
func removeDeadSpillDirs(root string, log *slog.Logger) {
	entries, err := os.ReadDir(root)
	if err != nil {
		log.Warn("objectstore: cannot list the spill directory for stale files", "dir", root, "err", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !parseSpillDir(e.Name()) {
			continue
		}
		p := filepath.Join(root, e.Name())
		if err := removeIfDead(p); err != nil {
			log.Debug("objectstore: left a spill directory alone", "path", p, "why", err)
			continue
		}
		log.Info("objectstore: removed the spill directory of a store that is gone", "path", p)
	}
}

// errAlive says a spill directory's store still holds its lock.
var errAlive = errors.New("its store is running")

// removeIfDead removes the spill directory p if it passes the checks of
// removeDeadSpillDirs, holding its lock while it does.
func removeIfDead(p string) error {
	if err := ownedBy(p, true); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(p, spillLock), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("no lock file of ours: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := ownedInfo(f.Name(), fi, false); err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return errAlive
		}
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return os.RemoveAll(p)
}
