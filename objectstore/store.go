package objectstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"

	"github.com/phobos-project/phobos/dag"
)

// MaxMetaSize bounds the meta bytes stored beside one object. Meta lives on
// the Go heap, so it is for small descriptors (dtype, shape), not data.
const MaxMetaSize = 64 << 10

// Config configures Open. Zero values mean the documented default.
type Config struct {
	// Dir is the directory for the arena file. Default: /dev/shm if it is a
	// directory, else os.TempDir().
	Dir string
	// Name goes into the file name <Dir>/phobos-<Name>-<pid>.arena. Bytes
	// other than [A-Za-z0-9_.-] become '_'; it is cut to 64 bytes. Default
	// "store". Two stores of one process in one Dir need distinct Names.
	Name string
	// Capacity is the arena size in bytes; required, > 0, rounded up to the
	// page size. The whole of it (plus one header page) is reserved on the
	// filesystem at Open.
	Capacity int64
	// SpillDir is where objects go when the arena is full. Open creates the
	// directory <SpillDir>/phobos-<Name>-<random>.spill (0700) for this
	// store's files and Close removes it; directories left by stores that
	// are gone are removed by Open (see spilldir.go for how it tells).
	// Default os.TempDir(). It should be on a disk, not on the tmpfs that
	// holds the arena.
	SpillDir string
	// SpillFS is the file system spill files are written to and read
	// from; nil means the operating system's (OSFS). Tests give a LimitFS
	// to simulate a full or failing disk. The spill directory itself is
	// always made on the operating system's file system.
	SpillFS FS
	// DisableSpill turns spilling off: a Create that does not fit fails with
	// ErrFull (CreateCtx waits), as it would with only pinned objects.
	DisableSpill bool
	// Logger receives the store's few log lines (open, close, stale files,
	// spill failures, misuse). Nil discards them.
	Logger *slog.Logger
	// SettingNames says how errors name this Config's fields to whoever
	// set them, as the head's Config does: a program that fills the Config
	// from flags maps a field ("Capacity") to its flag ("--store-size").
	// An unmapped field is named Config.Field.
	SettingNames map[string]string
}

// names names Config fields in errors (see Config.SettingNames).
type names map[string]string

func (n names) of(field string) string {
	if s, ok := n[field]; ok {
		return s
	}
	return "Config." + field
}

// Stats is a snapshot of the store's occupancy and of its spill counters.
type Stats struct {
	Capacity    int64 // arena bytes
	Used        int64 // arena bytes reserved by objects, each rounded up to 64; includes unsealed, deleted-but-pinned, spilling and restoring objects
	Free        int64 // Capacity - Used
	LargestFree int64 // the largest object that fits right now without spilling
	FreeExtents int   // free space is in this many pieces; more than 1 means fragmentation

	Objects       int // objects holding an ID: unsealed, sealed (in the arena or spilled), and deleted-but-pinned
	Sealed        int // sealed objects, including spilled and deleted-but-pinned ones
	Pinned        int // objects with at least one Get not yet Released
	PendingDelete int // deleted objects whose space waits for their last Release or spill I/O

	Spilled        int   // objects whose only copy is a spill file
	SpilledBytes   int64 // their bytes
	SpillFileBytes int64 // bytes in spill files: spilled objects and clean copies of restored ones
	Spills         int64 // objects written to spill files since Open
	SpillWritten   int64 // bytes written to spill files since Open
	Restores       int64 // objects read back from spill files since Open
	Restored       int64 // bytes read back since Open
	Waits          int64 // creates and restores that had to wait for space since Open
}

// Object is a pinned, sealed object returned by Get.
//
// Data is a view straight into the arena (no copy); Meta is the store's own
// copy of the meta given to Create, shared with objects of the same meta.
// Both are read-only by contract and valid only until the matching
// Release: after that the space may be reused by another object. Offset is
// where Data starts in the arena (the offset a Reader in another process
// takes); a zero-size object has no arena space and Offset 0.
type Object struct {
	ID     dag.ObjectID
	Data   []byte
	Meta   []byte
	Offset int64
}

// Store is one raylet's object store: a memory-mapped arena, its allocator,
// the spill directory and the lifecycle of every object in it (see the
// package doc).
//
// All methods are safe for concurrent use. One mutex guards the object table
// and the allocator; it is never held while object bytes are copied or
// while spill files are written, read or removed: Create and Get hand out
// views and the caller copies, and spill I/O runs with the mutex released
// on objects marked as moving. Path is immutable.
type Store struct {
	path     string
	arenaID  [16]byte
	capacity int64
	names    names
	log      *slog.Logger
	spillDir string    // this store's own directory; "" when spilling is off
	spill    *spillDir // it and its lock; nil when spilling is off
	fs       FS        // where spill files are written and read

	mu      sync.Mutex
	closed  bool
	arena   *arena
	data    []byte // the mapped object space; nil after Close
	alloc   *allocator
	objects objectTable
	spare   []*entry          // recycled entries, so steady-state Create does not allocate one
	metas   map[string][]byte // recent metas, shared read-only by the entries that have them

	lru        lru           // sealed, unpinned objects in the arena, least recently used first
	wake       chan struct{} // closed at the next change a waiter may care about; nil if nobody waits
	io         int           // spills and restores in flight
	spilling   int64         // arena bytes of objects being spilled; free once those finish
	doomed     []string      // spill files to remove once the mutex is released
	spillSeq   uint64        // makes every spill file name new
	spillStats struct {
		spilled                                    int
		spilledBytes, fileBytes                    int64
		spills, written, restores, restored, waits int64
	}

	sealed, pinned, pendingDelete int
}

type state uint8

const (
	stateCreated state = iota + 1 // space reserved; the creator is writing
	stateSealed                   // immutable and readable
)

// where says where a sealed object's bytes are. Only inArena and spilled
// are at rest; the other two mean one goroutine is doing file I/O on the
// object with the mutex released.
type where uint8

const (
	inArena   where = iota // in the arena at off
	spilling               // in the arena at off, and being written to a spill file; readable
	spilled                // only in the spill file; no arena space
	restoring              // being read from the spill file into arena space at off; not readable yet
)

// entry is the per-object state. The small fields come last, together,
// so that an entry takes 112 bytes rather than 136 (TestEntrySize).
type entry struct {
	id    dag.ObjectID
	off   int64 // arena offset of the block (0 when size is 0 or spilled)
	size  int64 // object bytes as given to Create
	block int64 // arena bytes it takes when in the arena: size rounded up to Alignment
	meta  []byte
	file  string // a spill file holding a complete copy, or ""

	prev, next *entry // links in Store.lru

	pins    int    // Gets not yet Released
	crc     uint32 // CRC-32C of the bytes in file
	state   state
	where   where
	deleted bool // Delete was called while pinned or moving; freed when both end
	inLRU   bool
}

// maxSpare bounds the recycled-entry list: a store that held a job of up
// to this many objects creates the next one's without allocating entries
// (TestWarmJobDoesNotAllocate), and keeps at most 7 MiB of them after a
// bigger one. At 4,096 a raylet running 100,000-object jobs allocated an
// entry for nearly every object of every job.
const maxSpare = 1 << 16

// Open creates the arena file, reserves Capacity bytes for it on the
// filesystem and maps it, and creates the store's spill directory. It
// first removes arena files and spill directories of the same Name left by
// processes that no longer exist. If the filesystem has too little space
// Open returns an error (kind dag.KindResourceExhausted, wrapping ENOSPC)
// naming the directory and sizes; it never maps pages that lack backing
// store.
func Open(cfg Config) (*Store, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	page := int64(os.Getpagesize())
	switch {
	case cfg.Capacity <= 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: capacity %d bytes: must be greater than 0; set %s", cfg.Capacity, names(cfg.SettingNames).of("Capacity"))
	case cfg.Capacity > math.MaxInt-2*page:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: capacity %d bytes is more than this platform can map; choose a smaller %s", cfg.Capacity, names(cfg.SettingNames).of("Capacity"))
	}
	capacity := (cfg.Capacity + page - 1) / page * page
	dir := cfg.Dir
	if dir == "" {
		dir = defaultDir()
	}
	name := sanitizeName(cfg.Name)

	var spill *spillDir
	if !cfg.DisableSpill {
		root := cfg.SpillDir
		if root == "" {
			root = os.TempDir()
		}
		removeDeadSpillDirs(root, log)
		removeStale(root, name, spillSuffix, log) // directories named by pid, of older releases
		var err error
		if spill, err = createSpillDir(root, name, names(cfg.SettingNames), log); err != nil {
			return nil, err
		}
	}
	removeStale(dir, name, arenaSuffix, log)
	ar, err := openArena(dir, name, capacity, names(cfg.SettingNames), log)
	if err != nil {
		if spill != nil {
			_ = spill.close()
		}
		return nil, err
	}
	alloc, err := newAllocator(capacity)
	if err != nil {
		_ = ar.close()
		if spill != nil {
			_ = spill.close()
		}
		return nil, dag.Errorf(dag.KindInternal, "objectstore: %w", err)
	}
	fsys := cfg.SpillFS
	if fsys == nil {
		fsys = OSFS{}
	}
	spillPath := ""
	if spill != nil {
		spillPath = spill.path
	}
	log.Info("objectstore: opened", "path", ar.path, "capacity", capacity, "spill_dir", spillPath)
	return &Store{
		path:     ar.path,
		arenaID:  ar.id,
		capacity: capacity,
		names:    names(cfg.SettingNames),
		log:      log,
		spillDir: spillPath,
		spill:    spill,
		fs:       fsys,
		arena:    ar,
		data:     ar.data,
		alloc:    alloc,
	}, nil
}

// Path returns the arena file's path.
func (s *Store) Path() string { return s.path }

// SpillDir returns this store's own spill directory ("" when spilling is
// off).
func (s *Store) SpillDir() string { return s.spillDir }

// Create reserves size bytes for id and returns a writable view of exactly
// size bytes, starting 64-byte aligned. The view belongs to the caller until
// it calls Seal or Abort; the object is invisible to Get and Contains until
// Seal. meta is copied. A size of 0 is allowed and takes no arena space.
//
// When the object does not fit, Create spills the least recently used
// sealed, unpinned objects to the spill directory until it does. It does
// not wait for pins to be released: if spilling cannot make room it fails
// with ErrFull. CreateCtx waits instead.
//
// Errors: ErrExists if id is in the store (including a deleted object still
// pinned by readers), ErrTooLarge if size exceeds the whole capacity,
// ErrFull if no room can be made now, ErrSpill if the spill directory
// failed (the objects that were to be spilled stay in the arena), ErrClosed
// after Close, and dag.ErrInvalidArgument for a zero id, a negative size or
// oversized meta.
func (s *Store) Create(id dag.ObjectID, size int64, meta []byte) ([]byte, error) {
	return s.create(noWait, id, size, meta)
}

// noWait is the context of Create and Get: nil, which create, get and
// reserveLocked take to mean "fail with ErrFull rather than wait for
// pins to end".
var noWait context.Context

// CreateCtx is Create that, when nothing can be spilled (everything in the
// arena is pinned or being written), waits for space until ctx ends, and
// then fails with an error wrapping ErrFull and ctx.Err(). An object larger
// than the whole store still fails at once with ErrTooLarge.
func (s *Store) CreateCtx(ctx context.Context, id dag.ObjectID, size int64, meta []byte) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return s.create(ctx, id, size, meta)
}

// create is Create (ctx nil: do not wait for pins) and CreateCtx.
func (s *Store) create(ctx context.Context, id dag.ObjectID, size int64, meta []byte) ([]byte, error) {
	switch {
	case id.IsZero():
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create: object id is zero; ids start at 1")
	case size < 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create %s: size %d is negative", id, size)
	case len(meta) > MaxMetaSize:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create %s: meta is %d bytes, more than the %d allowed; keep data in the object, not its meta", id, len(meta), MaxMetaSize)
	case size > s.capacity:
		return nil, storeError(dag.KindResourceExhausted, ErrTooLarge,
			"objectstore: create %s: object is %d bytes, larger than the whole store (%d bytes); raise its capacity (%s)", id, size, s.capacity, s.names.of("Capacity"))
	}
	block := blockSize(size)

	s.mu.Lock()
	m := s.internMetaLocked(meta)
	off, err := s.reserveLocked(ctx, "create", id, block, func() error {
		if e := s.objects.get(id); e != nil {
			return errExists("create", id, e)
		}
		return nil
	})
	if err != nil {
		s.unlock()
		return nil, err
	}
	e := s.newEntry()
	*e = entry{id: id, off: off, size: size, block: block, meta: m, state: stateCreated}
	s.objects.put(id, e)
	view := s.data[off : off+size : off+size]
	s.unlock()
	return view, nil
}

// Seal makes id immutable and readable. The creator must not write to its
// view after Seal. Errors: ErrNotFound, ErrSealed, ErrClosed.
func (s *Store) Seal(id dag.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed("seal", id)
	}
	e := s.objects.get(id)
	switch {
	case e == nil:
		return errNotFound("seal", id)
	case e.state == stateSealed:
		return errSealed("seal", id, "seal each object once")
	}
	e.state = stateSealed
	s.sealed++
	s.touch(e)
	return nil
}

// Abort frees an unsealed object, for a writer that failed. The creator's
// view is invalid afterwards. Errors: ErrNotFound, ErrSealed (use Delete),
// ErrClosed.
func (s *Store) Abort(id dag.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed("abort", id)
	}
	e := s.objects.get(id)
	switch {
	case e == nil:
		return errNotFound("abort", id)
	case e.state == stateSealed:
		return errSealed("abort", id, "use Delete to remove a sealed object")
	}
	s.remove(e) // unsealed objects have no spill file
	return nil
}

// Get pins a sealed object and returns a view of it; the view stays valid
// until the matching Release. Every successful Get needs exactly one
// Release. Get of an object in the arena does not allocate.
//
// A spilled object is read back into the arena first (restored), spilling
// others to make room if needed; other Gets of it wait for that one
// restore. Get does not wait for pins to be released: if no room can be
// made it fails with ErrFull (GetCtx waits). An object being spilled is
// read from the arena and stays there while pinned.
//
// Errors: ErrNotFound (also for a deleted object), ErrNotSealed (still
// being written; retry after Seal), ErrFull, ErrSpill (its spill file could
// not be read back or was corrupt), ErrClosed.
func (s *Store) Get(id dag.ObjectID) (Object, error) { return s.get(noWait, id) }

// GetCtx is Get that waits for space to restore a spilled object until ctx
// ends (see CreateCtx).
func (s *Store) GetCtx(ctx context.Context, id dag.ObjectID) (Object, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return s.get(ctx, id)
}

func (s *Store) get(ctx context.Context, id dag.ObjectID) (Object, error) {
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return Object{}, errClosed("get", id)
		}
		e := s.objects.get(id)
		switch {
		case e == nil || e.deleted:
			s.unlock()
			return Object{}, errNotFound("get", id)
		case e.state != stateSealed:
			s.mu.Unlock()
			return Object{}, errNotSealed("get", id, "retry after its writer seals it")
		}
		switch e.where {
		case inArena, spilling:
			obj := s.pinLocked(e)
			s.mu.Unlock()
			return obj, nil
		case restoring:
			// Another Get is reading it back; that ends without waiting for
			// anything but its own I/O, so even a Get without ctx waits.
			if err := s.waitLocked(ctx, "get", id, e.block); err != nil {
				s.mu.Unlock()
				return Object{}, err
			}
		case spilled:
			obj, err := s.restoreLocked(ctx, e)
			if err == errRetry {
				continue
			}
			s.unlock()
			return obj, err
		}
	}
}

// pinLocked takes one pin on e, which is readable in the arena.
func (s *Store) pinLocked(e *entry) Object {
	e.pins++
	if e.pins == 1 {
		s.pinned++
		if e.inLRU {
			s.lru.remove(e)
		}
	}
	return Object{ID: e.id, Data: s.data[e.off : e.off+e.size : e.off+e.size], Meta: e.meta, Offset: e.off}
}

// Release drops one pin taken by Get. After the last Release of a deleted
// object its space is freed. A Release without a matching Get (or after
// Close) changes nothing and is logged as a warning.
func (s *Store) Release(id dag.ObjectID) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	e := s.objects.get(id)
	if e == nil || e.pins == 0 {
		s.mu.Unlock()
		s.log.Warn("objectstore: Release without a matching Get; ignored", "object", id)
		return
	}
	e.pins--
	if e.pins == 0 {
		s.pinned--
		if e.deleted && e.where == inArena {
			s.remove(e)
		} else {
			s.touch(e)
		}
	}
	s.unlock()
}

// Delete removes a sealed object, wherever its bytes are. If readers pin
// it, it disappears from Get and Contains now and its space is freed at the
// last Release; until then its id cannot be created again. Errors:
// ErrNotFound (also when already deleted), ErrNotSealed (the writer must
// Seal or Abort it), ErrClosed.
func (s *Store) Delete(id dag.ObjectID) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed("delete", id)
	}
	e := s.objects.get(id)
	switch {
	case e == nil || e.deleted:
		s.mu.Unlock()
		return errNotFound("delete", id)
	case e.state != stateSealed:
		s.mu.Unlock()
		return errNotSealed("delete", id, "its writer must Seal or Abort it first")
	case e.pins > 0 || e.where == spilling || e.where == restoring:
		// Readers hold views, or a spill or restore is using the entry; the
		// last of them frees it.
		e.deleted = true
		s.pendingDelete++
		if e.inLRU {
			s.lru.remove(e)
		}
		s.mu.Unlock()
		return nil
	}
	s.remove(e)
	s.unlock()
	return nil
}

// Contains reports whether id is sealed and not deleted (in the arena or
// spilled).
func (s *Store) Contains(id dag.ObjectID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objects.get(id)
	return e != nil && e.state == stateSealed && !e.deleted
}

// IDs appends the ids of all sealed, not deleted objects to dst (spilled
// ones included), in no particular order, and returns it: what this raylet
// can serve, for a head that rebuilds its object directory.
func (s *Store) IDs(dst []dag.ObjectID) []dag.ObjectID {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.objects.all() {
		if e.state == stateSealed && !e.deleted {
			dst = append(dst, id)
		}
	}
	return dst
}

// Stats returns a snapshot of the store's occupancy. After Close only
// Capacity is set.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Stats{Capacity: s.capacity}
	}
	sp := &s.spillStats
	return Stats{
		Capacity:       s.capacity,
		Used:           s.alloc.used,
		Free:           s.capacity - s.alloc.used,
		LargestFree:    s.alloc.largestFree(),
		FreeExtents:    s.alloc.freeExtents(),
		Objects:        s.objects.len(),
		Sealed:         s.sealed,
		Pinned:         s.pinned,
		PendingDelete:  s.pendingDelete,
		Spilled:        sp.spilled,
		SpilledBytes:   sp.spilledBytes,
		SpillFileBytes: sp.fileBytes,
		Spills:         sp.spills,
		SpillWritten:   sp.written,
		Restores:       sp.restores,
		Restored:       sp.restored,
		Waits:          sp.waits,
	}
}

// Close waits for spill I/O in flight to end, then unmaps the arena,
// closes and removes its file and removes the spill directory. Every view
// handed out by Create or Get becomes invalid: touching one afterwards
// faults, so stop all readers and writers first. Creates and Gets waiting
// for space fail with ErrClosed. Pins or unsealed objects still present are
// logged as a warning. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return storeError(dag.KindUnavailable, ErrClosed, "objectstore: close %s: store already closed", s.path)
	}
	s.closed = true
	s.changed()
	for s.io > 0 {
		// Spill writers read the arena and restorers write it: unmapping
		// under them would fault. Their I/O ends on its own.
		ch := s.wakeChan()
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	pinned, unsealed := s.pinned, s.objects.len()-s.sealed
	ar := s.arena
	s.arena, s.data, s.objects, s.spare, s.doomed, s.lru = nil, nil, objectTable{}, nil, nil, lru{}
	s.mu.Unlock()

	if pinned > 0 || unsealed > 0 {
		s.log.Warn("objectstore: closing with objects in use; their views are now invalid",
			"path", s.path, "pinned", pinned, "unsealed", unsealed)
	}
	var errs []error
	if err := ar.close(); err != nil {
		errs = append(errs, err)
	}
	if s.spill != nil {
		if err := s.spill.close(); err != nil {
			errs = append(errs, fmt.Errorf("objectstore: remove spill directory: %w", err))
		}
	}
	if len(errs) > 0 {
		return dag.Errorf(dag.KindInternal, "%w", errors.Join(errs...))
	}
	s.log.Info("objectstore: closed", "path", s.path)
	return nil
}

// remove frees e's arena space and spill file and forgets it. e must be at
// rest (inArena or spilled) and unpinned. Caller holds s.mu, and must
// release it with unlock so the spill file is removed.
func (s *Store) remove(e *entry) {
	if e.block > 0 && e.where == inArena {
		if err := s.alloc.free(e.off, e.block); err != nil {
			// The table and the allocator disagree: a bug in this package.
			// Leaking the block is safer than handing it out twice.
			s.log.Error("objectstore: internal error freeing object; its space is leaked", "object", e.id, "err", err)
		}
		s.changed()
	}
	if e.inLRU {
		s.lru.remove(e)
	}
	if e.where == spilled {
		s.spillStats.spilled--
		s.spillStats.spilledBytes -= e.size
	}
	if e.file != "" {
		s.doomed = append(s.doomed, e.file)
		s.spillStats.fileBytes -= e.size
	}
	if e.state == stateSealed {
		s.sealed--
	}
	if e.deleted {
		s.pendingDelete--
	}
	s.objects.remove(e.id)
	if len(s.spare) < maxSpare {
		*e = entry{}
		s.spare = append(s.spare, e)
	}
}

// unlock releases s.mu and then removes the spill files of objects removed
// meanwhile, so no file I/O happens under the mutex.
func (s *Store) unlock() {
	if len(s.doomed) == 0 {
		s.mu.Unlock()
		return
	}
	doomed := s.doomed
	s.doomed = nil
	s.mu.Unlock()
	s.removeFiles(doomed)
}

func (s *Store) removeFiles(paths []string) {
	for _, p := range paths {
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("objectstore: cannot remove spill file; it wastes disk until the store closes", "path", p, "err", err)
		}
	}
}

// maxMetas bounds the metas a store remembers; a job's chunks share a
// handful of shapes.
const maxMetas = 1024

// internMetaLocked returns a copy of meta the store owns, shared with
// other objects of the same meta, so that storing a chunk of a common
// shape does not allocate. Caller holds s.mu.
func (s *Store) internMetaLocked(meta []byte) []byte {
	if len(meta) == 0 {
		return nil
	}
	if m, ok := s.metas[string(meta)]; ok {
		return m
	}
	if s.metas == nil || len(s.metas) >= maxMetas {
		s.metas = make(map[string][]byte, 64)
	}
	m := append(make([]byte, 0, len(meta)), meta...)
	s.metas[string(m)] = m
	return m
}

// newEntry returns a recycled entry or a new one. Caller holds s.mu.
func (s *Store) newEntry() *entry {
	if n := len(s.spare); n > 0 {
		e := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return e
	}
	return new(entry)
}
