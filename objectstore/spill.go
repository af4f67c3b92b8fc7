package objectstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/phobos-project/phobos/dag"
)

// Test hooks, called with the mutex released just before a spill file is
// written or read back. Nil outside tests.
var testHookSpillWrite, testHookRestore func(dag.ObjectID)

// castagnoli is CRC-32C, which amd64 and arm64 compute in hardware.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// lru is an intrusive doubly linked list of the entries that may be
// spilled: sealed, unpinned, not deleted, in the arena, not empty. The head
// is the least recently used (sealed or released longest ago). Linking
// through the entries keeps Get and Release free of allocation.
type lru struct{ head, tail *entry }

func (l *lru) pushBack(e *entry) {
	e.prev, e.next, e.inLRU = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *lru) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.inLRU = nil, nil, false
}

// evictable reports whether e may be spilled now.
func (s *Store) evictable(e *entry) bool {
	return s.spillDir != "" && e.state == stateSealed && e.where == inArena && e.pins == 0 && !e.deleted && e.block > 0
}

// touch puts e at the most recent end of the LRU list if it may be
// spilled, and wakes waiters, for whom it is new room. Caller holds s.mu.
func (s *Store) touch(e *entry) {
	if !s.evictable(e) {
		if e.inLRU {
			s.lru.remove(e)
		}
		return
	}
	if e.inLRU {
		s.lru.remove(e)
	}
	s.lru.pushBack(e)
	s.changed()
}

// changed wakes every goroutine waiting for space or for spill I/O to end.
// Caller holds s.mu.
func (s *Store) changed() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// wakeChan returns the channel the next changed closes. Caller holds s.mu.
func (s *Store) wakeChan() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// waitLocked releases s.mu until the next change or the end of ctx (nil:
// no end), and returns with s.mu held. need is for the error message.
func (s *Store) waitLocked(ctx context.Context, op string, id dag.ObjectID, need int64) error {
	ch := s.wakeChan()
	s.mu.Unlock()
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-ch:
		s.mu.Lock()
		return nil
	case <-done:
		s.mu.Lock()
		k := dag.KindCancelled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			k = dag.KindDeadlineExceeded
		}
		return &dag.Error{Kind: k, Err: errors.Join(ErrFull, ctx.Err()), Msg: fmt.Sprintf(
			"objectstore: %s %s: gave up waiting for %d bytes of space (%d free, largest free block %d, %d pinned objects): %v",
			op, id, need, s.capacity-s.alloc.used, s.alloc.largestFree(), s.pinned, ctx.Err())}
	}
}

// errRetry tells get that the entry changed while reserve had released the
// mutex (another Get started restoring it, or it was deleted): look again.
var errRetry = errors.New("objectstore: retry")

// reserveLocked allocates block bytes of arena and returns their offset,
// making room by spilling least recently used objects. When nothing can be
// spilled it waits for a change if ctx is non-nil (until ctx ends), or
// else fails with ErrFull unless spill I/O of others is in flight (which
// ends on its own). check runs under the mutex before every attempt, since
// the mutex is released for spill I/O and waiting; its error is returned
// as is. Caller holds s.mu; it is held again on return.
func (s *Store) reserveLocked(ctx context.Context, op string, id dag.ObjectID, block int64, check func() error) (int64, error) {
	droppedCopies, waited := false, false
	for {
		if s.closed {
			return 0, errClosed(op, id)
		}
		if err := check(); err != nil {
			return 0, err
		}
		if block == 0 {
			return 0, nil
		}
		if off, ok := s.alloc.alloc(block); ok {
			return off, nil
		}
		jobs, evicted := s.pickVictimsLocked(block)
		if len(jobs) > 0 {
			s.mu.Unlock()
			for _, j := range jobs {
				j.write()
			}
			s.mu.Lock()
			err := s.finishSpillsLocked(jobs)
			if err == nil {
				continue
			}
			if errNoSpace(err) && !droppedCopies && s.dropCleanCopiesLocked() {
				droppedCopies = true
				continue
			}
			return 0, dag.Errorf(dag.KindOf(err), "objectstore: %s %s: make room for %d bytes: %w", op, id, block, err)
		}
		if evicted {
			continue
		}
		if ctx == nil && s.io == 0 {
			return 0, s.errFull(op, id, block)
		}
		if !waited {
			waited = true
			s.spillStats.waits++
		}
		if err := s.waitLocked(ctx, op, id, block); err != nil {
			return 0, err
		}
	}
}

func (s *Store) errFull(op string, id dag.ObjectID, block int64) error {
	what := "release or delete objects, or raise the store's capacity (" + s.names.of("Capacity") + ")"
	if s.spillDir != "" {
		what = "every object in the arena is pinned or being written, so none can be spilled; " + what
	}
	return storeError(dag.KindResourceExhausted, ErrFull,
		"objectstore: %s %s: store full: need %d bytes, %d bytes free, largest free block %d bytes, capacity %d bytes; %s",
		op, id, block, s.capacity-s.alloc.used, s.alloc.largestFree(), s.capacity, what)
}

// spillJob is one object being written to a spill file with the mutex
// released. Only write touches it then; the fields it reads were set under
// the mutex, and the arena bytes cannot move while the entry is spilling.
type spillJob struct {
	e    *entry
	id   dag.ObjectID
	data []byte // the object's arena bytes
	path string
	dir  string
	fs   FS
	crc  uint32
	err  error
}

// pickVictimsLocked chooses objects to spill so that need bytes can be
// allocated: least recently used first, until the free space plus what
// spills already in flight will free covers need. If that is already
// covered but the allocation still failed (free space is fragmented) and
// nothing is in flight, it picks one more. Objects with a clean copy on
// disk are evicted at once, without I/O (evicted reports that); the others
// are marked spilling and returned for the caller to write.
func (s *Store) pickVictimsLocked(need int64) (jobs []*spillJob, evicted bool) {
	avail := s.capacity - s.alloc.used + s.spilling
	for e := s.lru.head; e != nil; {
		if avail >= need && (evicted || len(jobs) > 0 || s.io > 0) {
			break
		}
		next := e.next
		s.lru.remove(e)
		avail += e.block
		if e.file != "" {
			s.evictLocked(e)
			evicted = true
		} else {
			e.where = spilling
			s.spilling += e.block
			s.io++
			s.spillSeq++
			jobs = append(jobs, &spillJob{
				e: e, id: e.id, data: s.data[e.off : e.off+e.size : e.off+e.size],
				path: filepath.Join(s.spillDir, e.id.String()+"-"+strconv.FormatUint(s.spillSeq, 10)), dir: s.spillDir,
				fs: s.fs,
			})
		}
		e = next
	}
	return jobs, evicted
}

// evictLocked frees the arena copy of e, whose spill file is complete.
func (s *Store) evictLocked(e *entry) {
	if err := s.alloc.free(e.off, e.block); err != nil {
		s.log.Error("objectstore: internal error freeing spilled object; its space is leaked", "object", e.id, "err", err)
	}
	e.where, e.off = spilled, 0
	s.spillStats.spilled++
	s.spillStats.spilledBytes += e.size
	s.changed()
}

// write writes the job's bytes to a new file and computes their CRC-32C.
// On failure it removes what it wrote; the object stays in the arena.
func (j *spillJob) write() {
	if testHookSpillWrite != nil {
		testHookSpillWrite(j.id)
	}
	f, err := j.fs.Create(j.path)
	if err == nil {
		j.crc = crc32.Checksum(j.data, castagnoli)
		_, err = f.Write(j.data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = j.fs.Remove(j.path)
		}
	}
	if err != nil {
		k, hint := dag.KindUnavailable, "check the disk there"
		if errNoSpace(err) {
			k, hint = dag.KindResourceExhausted, "free space there or move the spill directory to a larger disk"
		}
		j.err = &dag.Error{Kind: k, Err: errors.Join(ErrSpill, err), Msg: fmt.Sprintf(
			"objectstore: spill %s (%d bytes) to %s: %v (%s); the object stays in memory; %s",
			j.id, len(j.data), j.dir, err, fsFreeSpace(j.fs, j.dir), hint)}
	}
}

// finishSpillsLocked records the outcome of written jobs and returns the
// first error. A spilled object whose space is no longer needed by a pin
// leaves the arena; one that was pinned meanwhile stays, with its file as
// a clean copy for the next eviction.
func (s *Store) finishSpillsLocked(jobs []*spillJob) error {
	var first error
	for _, j := range jobs {
		e := j.e
		s.io--
		s.spilling -= e.block
		e.where = inArena
		if j.err != nil {
			if first == nil {
				first = j.err
			}
			s.log.Warn("objectstore: spill failed", "object", j.id, "err", j.err)
		} else {
			e.file, e.crc = j.path, j.crc
			s.spillStats.fileBytes += e.size
			s.spillStats.spills++
			s.spillStats.written += e.size
			if e.pins == 0 && !e.deleted {
				s.evictLocked(e)
			}
		}
		switch {
		case e.deleted && e.pins == 0:
			s.remove(e)
		default:
			s.touch(e)
		}
	}
	s.changed()
	return first
}

// dropCleanCopiesLocked forgets the spill files of objects that are back
// in the arena, to make room in a full spill directory, and removes them
// (releasing and retaking s.mu). It reports whether there were any.
func (s *Store) dropCleanCopiesLocked() bool {
	var paths []string
	for _, e := range s.objects.all() {
		if e.file != "" && e.where == inArena {
			paths = append(paths, e.file)
			s.spillStats.fileBytes -= e.size
			e.file = ""
		}
	}
	if len(paths) == 0 {
		return false
	}
	s.mu.Unlock()
	s.removeFiles(paths)
	s.mu.Lock()
	return true
}

// restoreLocked reads spilled e back into the arena and pins it. It
// returns errRetry if e changed while the mutex was released. Caller holds
// s.mu; it is held again on return.
func (s *Store) restoreLocked(ctx context.Context, e *entry) (Object, error) {
	id := e.id
	off, err := s.reserveLocked(ctx, "get", id, e.block, func() error {
		if s.objects.get(id) != e || e.deleted || e.where != spilled {
			return errRetry
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSpill) && errNoSpace(err) {
			// Reading it back needs arena room, and making room needs
			// the full spill dir; the file itself is fine.
			return Object{}, &dag.Error{Kind: dag.KindResourceExhausted, Err: err, Msg: fmt.Sprintf(
				"objectstore: get %s: it is on disk, and there is no room to read it back: memory is full and the spill dir %s cannot take the objects that would make room (%s); "+
					"its spill file can still be read (OpenSpilled): %v", id, s.spillDir, fsFreeSpace(s.fs, s.spillDir), err)}
		}
		return Object{}, err
	}
	e.where, e.off = restoring, off
	s.io++
	s.spillStats.spilled--
	s.spillStats.spilledBytes -= e.size
	path, want, dst := e.file, e.crc, s.data[off:off+e.size:off+e.size]
	s.mu.Unlock()
	if testHookRestore != nil {
		testHookRestore(id)
	}
	err = readSpill(s.fs, path, dst, want)
	s.mu.Lock()
	s.io--
	s.changed()
	if err != nil {
		s.evictLocked(e) // back to spilled, arena space freed
		s.log.Warn("objectstore: restore failed", "object", id, "err", err)
		if e.deleted {
			s.remove(e)
		}
		return Object{}, &dag.Error{Kind: dag.KindUnavailable, Err: errors.Join(ErrSpill, err), Msg: fmt.Sprintf(
			"objectstore: get %s: read it back from spill file %s: %v", id, path, err)}
	}
	e.where = inArena
	s.spillStats.restores++
	s.spillStats.restored += e.size
	if e.deleted {
		s.remove(e)
		return Object{}, errNotFound("get", id)
	}
	return s.pinLocked(e), nil
}

// errCorrupt is wrapped by a restore whose bytes do not match the CRC
// taken when they were spilled.
var errCorrupt = errors.New("spill file corrupt")

// readSpill fills dst from the file at path and checks its CRC-32C.
func readSpill(fsys FS, path string, dst []byte, want uint32) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != int64(len(dst)) {
		return fmt.Errorf("%w: %d bytes, want %d", errCorrupt, fi.Size(), len(dst))
	}
	if _, err := f.ReadAt(dst, 0); err != nil {
		return err
	}
	if got := crc32.Checksum(dst, castagnoli); got != want {
		return fmt.Errorf("%w: CRC-32C %08x, want %08x", errCorrupt, got, want)
	}
	return nil
}

// SpilledObject is a sealed object read from its spill file instead of
// the arena (OpenSpilled). Its fields are read-only. ReadAt may be called
// from one goroutine at a time; Close once.
type SpilledObject struct {
	ID   dag.ObjectID
	Size int64
	Meta []byte // the store's copy, shared: read only
	CRC  uint32 // CRC-32C of all Size bytes, taken when the file was written
	f    File
	path string
}

// ReadAt reads the object's bytes at off from the file. The bytes are
// not checked here: a reader that needs them intact checks CRC over all
// of them.
func (o *SpilledObject) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	if err != nil && n < len(p) && off+int64(n) < o.Size {
		err = fmt.Errorf("read spill file %s of %s at %d: %w", o.path, o.ID, off+int64(n), err)
	}
	return n, err
}

// Close closes the file.
func (o *SpilledObject) Close() error { return o.f.Close() }

// OpenSpilled opens the spill file that holds a complete copy of sealed
// object id, so that a reader can stream the object without bringing it
// back into the arena. That is how a spilled object stays readable when
// the arena has no room for it (every object in it pinned, or the spill
// directory too full to move any out). The object is not pinned: the open
// file stays readable until Close even if the object is deleted or its
// file dropped meanwhile.
//
// Errors: ErrNotFound (also for a deleted object), ErrNotSealed,
// ErrNotSpilled (no spill file: the object is only in the arena; Get it),
// ErrSpill (the file cannot be opened), ErrClosed.
func (s *Store) OpenSpilled(id dag.ObjectID) (*SpilledObject, error) {
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errClosed("open spilled", id)
		}
		e := s.objects.get(id)
		switch {
		case e == nil || e.deleted:
			s.mu.Unlock()
			return nil, errNotFound("open spilled", id)
		case e.state != stateSealed:
			s.mu.Unlock()
			return nil, errNotSealed("open spilled", id, "retry after its writer seals it")
		case e.file == "":
			s.mu.Unlock()
			return nil, storeError(dag.KindUnavailable, ErrNotSpilled, "objectstore: open spilled %s: it has no spill file; Get it from memory", id)
		}
		o := &SpilledObject{ID: id, Size: e.size, Meta: e.meta, CRC: e.crc, path: e.file}
		s.mu.Unlock()
		f, err := s.fs.Open(o.path)
		if err == nil {
			o.f = f
			return o, nil
		}
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			continue // deleted or dropped since we looked: look again
		}
		return nil, &dag.Error{Kind: dag.KindUnavailable, Err: errors.Join(ErrSpill, err), Msg: fmt.Sprintf(
			"objectstore: open spilled %s: %v", id, err)}
	}
}
