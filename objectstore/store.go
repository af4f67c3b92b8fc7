package objectstore

import (
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
	// page size. The whole of it is reserved on the filesystem at Open.
	Capacity int64
	// Logger receives the store's few log lines (open, close, stale files,
	// misuse). Nil discards them.
	Logger *slog.Logger
}

// Stats is a snapshot of the store's occupancy.
type Stats struct {
	Capacity    int64 // arena bytes
	Used        int64 // bytes reserved by objects, each rounded up to 64; includes unsealed and deleted-but-pinned objects
	Free        int64 // Capacity - Used
	LargestFree int64 // the largest object that fits right now
	FreeExtents int   // free space is in this many pieces; more than 1 means fragmentation

	Objects       int // objects holding an ID: unsealed, sealed, and deleted-but-pinned
	Sealed        int // sealed objects, including deleted-but-pinned ones
	Pinned        int // objects with at least one Get not yet Released
	PendingDelete int // deleted objects whose space waits for their last Release
}

// Object is a pinned, sealed object returned by Get.
//
// Data is a view straight into the arena (no copy); Meta is the store's own
// copy of the meta given to Create. Both are read-only by contract and valid
// only until the matching Release: after that the space may be reused by
// another object. Offset is where Data starts in the arena, for a later
// transfer or spill step; a zero-size object has no arena space and Offset 0.
type Object struct {
	ID     dag.ObjectID
	Data   []byte
	Meta   []byte
	Offset int64
}

// Store is one raylet's object store: a memory-mapped arena, its allocator
// and the lifecycle of every object in it (see the package doc).
//
// All methods are safe for concurrent use. One mutex guards the object table
// and the allocator; it is never held while object bytes are copied, since
// Create and Get hand out views and the caller copies. Path is immutable.
type Store struct {
	path     string
	capacity int64
	log      *slog.Logger

	mu      sync.Mutex
	closed  bool
	arena   *arena
	data    []byte // the mapped arena; nil after Close
	alloc   *allocator
	objects map[dag.ObjectID]*entry
	spare   []*entry // recycled entries, so steady-state Create does not allocate one
	clock   uint64   // logical time for entry.lastUse

	sealed, pinned, pendingDelete int
}

type state uint8

const (
	stateCreated state = iota + 1 // space reserved; the creator is writing
	stateSealed                   // immutable and readable
)

// entry is the per-object state. It is what a spill step will need: where
// the bytes are (off, size, block), whether they may move (state, pins,
// deleted), and how recently they were used (lastUse).
type entry struct {
	off     int64 // arena offset of the block (0 when size is 0)
	size    int64 // object bytes as given to Create
	block   int64 // arena bytes reserved: size rounded up to Alignment
	meta    []byte
	state   state
	pins    int    // Gets not yet Released
	deleted bool   // Delete was called while pinned; freed at the last Release
	lastUse uint64 // store clock at the last Seal or Get; oldest is the first to spill
}

// maxSpare bounds the recycled-entry list.
const maxSpare = 4096

// Open creates the arena file, reserves Capacity bytes for it on the
// filesystem and maps it. It first removes arena files of the same Name in
// Dir left by processes that no longer exist. If the filesystem has too
// little space Open returns an error (kind dag.KindResourceExhausted,
// wrapping ENOSPC) naming the directory and sizes; it never maps pages
// that lack backing store.
func Open(cfg Config) (*Store, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	page := int64(os.Getpagesize())
	switch {
	case cfg.Capacity <= 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: capacity %d bytes: must be greater than 0; set --store-size", cfg.Capacity)
	case cfg.Capacity > math.MaxInt-page:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: capacity %d bytes is more than this platform can map; choose a smaller --store-size", cfg.Capacity)
	}
	capacity := (cfg.Capacity + page - 1) / page * page
	dir := cfg.Dir
	if dir == "" {
		dir = defaultDir()
	}
	name := sanitizeName(cfg.Name)

	removeStale(dir, name, log)
	ar, err := openArena(dir, name, capacity, log)
	if err != nil {
		return nil, err
	}
	alloc, err := newAllocator(capacity)
	if err != nil {
		_ = ar.close()
		return nil, dag.Errorf(dag.KindInternal, "objectstore: %w", err)
	}
	log.Info("objectstore: opened", "path", ar.path, "capacity", capacity)
	return &Store{
		path:     ar.path,
		capacity: capacity,
		log:      log,
		arena:    ar,
		data:     ar.data,
		alloc:    alloc,
		objects:  make(map[dag.ObjectID]*entry),
	}, nil
}

// Path returns the arena file's path.
func (s *Store) Path() string { return s.path }

// Create reserves size bytes for id and returns a writable view of exactly
// size bytes, starting 64-byte aligned. The view belongs to the caller until
// it calls Seal or Abort; the object is invisible to Get and Contains until
// Seal. meta is copied. A size of 0 is allowed and takes no arena space.
//
// Errors: ErrExists if id is in the store (including a deleted object still
// pinned by readers), ErrTooLarge if size exceeds the whole capacity,
// ErrFull if no free block is large enough now, ErrClosed after Close, and
// dag.ErrInvalidArgument for a zero id, a negative size or oversized meta.
func (s *Store) Create(id dag.ObjectID, size int64, meta []byte) ([]byte, error) {
	switch {
	case id.IsZero():
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create: object id is zero; ids start at 1")
	case size < 0:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create %s: size %d is negative", id, size)
	case len(meta) > MaxMetaSize:
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: create %s: meta is %d bytes, more than the %d allowed; keep data in the object, not its meta", id, len(meta), MaxMetaSize)
	case size > s.capacity:
		return nil, storeError(dag.KindResourceExhausted, ErrTooLarge,
			"objectstore: create %s: object is %d bytes, larger than the whole store (%d bytes); raise --store-size", id, size, s.capacity)
	}
	var m []byte
	if len(meta) > 0 {
		m = append(make([]byte, 0, len(meta)), meta...)
	}
	block := blockSize(size)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed("create", id)
	}
	if e := s.objects[id]; e != nil {
		pins, deleted := e.pins, e.deleted
		s.mu.Unlock()
		if deleted {
			return nil, storeError(dag.KindInvalidArgument, ErrExists,
				"objectstore: create %s: object was deleted but %d readers still pin it; create it again after they Release it", id, pins)
		}
		return nil, storeError(dag.KindInvalidArgument, ErrExists, "objectstore: create %s: object already exists", id)
	}
	var off int64
	if block > 0 {
		var ok bool
		if off, ok = s.alloc.alloc(block); !ok {
			free, largest := s.capacity-s.alloc.used, s.alloc.largestFree()
			s.mu.Unlock()
			rounded := ""
			if block != size {
				rounded = fmt.Sprintf(" (%d rounded up to a multiple of %d)", size, Alignment)
			}
			return nil, storeError(dag.KindResourceExhausted, ErrFull,
				"objectstore: create %s: store full: need %d bytes%s, %d bytes free, largest free block %d bytes, capacity %d bytes; "+
					"release or delete objects, or raise --store-size", id, block, rounded, free, largest, s.capacity)
		}
	}
	e := s.newEntry()
	*e = entry{off: off, size: size, block: block, meta: m, state: stateCreated}
	s.objects[id] = e
	view := s.data[off : off+size : off+size]
	s.mu.Unlock()
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
	e := s.objects[id]
	switch {
	case e == nil:
		return errNotFound("seal", id)
	case e.state == stateSealed:
		return errSealed("seal", id, "seal each object once")
	}
	e.state = stateSealed
	s.sealed++
	s.clock++
	e.lastUse = s.clock
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
	e := s.objects[id]
	switch {
	case e == nil:
		return errNotFound("abort", id)
	case e.state == stateSealed:
		return errSealed("abort", id, "use Delete to remove a sealed object")
	}
	s.remove(id, e)
	return nil
}

// Get pins a sealed object and returns a view of it; the view stays valid
// until the matching Release. Every successful Get needs exactly one
// Release. Get does not allocate. Errors: ErrNotFound (also for a deleted
// object), ErrNotSealed (still being written; retry after Seal), ErrClosed.
func (s *Store) Get(id dag.ObjectID) (Object, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Object{}, errClosed("get", id)
	}
	e := s.objects[id]
	switch {
	case e == nil || e.deleted:
		s.mu.Unlock()
		return Object{}, errNotFound("get", id)
	case e.state != stateSealed:
		s.mu.Unlock()
		return Object{}, errNotSealed("get", id, "retry after its writer seals it")
	}
	e.pins++
	if e.pins == 1 {
		s.pinned++
	}
	s.clock++
	e.lastUse = s.clock
	obj := Object{ID: id, Data: s.data[e.off : e.off+e.size : e.off+e.size], Meta: e.meta, Offset: e.off}
	s.mu.Unlock()
	return obj, nil
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
	e := s.objects[id]
	if e == nil || e.pins == 0 {
		s.mu.Unlock()
		s.log.Warn("objectstore: Release without a matching Get; ignored", "object", id)
		return
	}
	e.pins--
	if e.pins == 0 {
		s.pinned--
		if e.deleted {
			s.remove(id, e)
		}
	}
	s.mu.Unlock()
}

// Delete removes a sealed object. If readers pin it, it disappears from Get
// and Contains now and its space is freed at the last Release; until then
// its id cannot be created again. Errors: ErrNotFound (also when already
// deleted), ErrNotSealed (the writer must Seal or Abort it), ErrClosed.
func (s *Store) Delete(id dag.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed("delete", id)
	}
	e := s.objects[id]
	switch {
	case e == nil || e.deleted:
		return errNotFound("delete", id)
	case e.state != stateSealed:
		return errNotSealed("delete", id, "its writer must Seal or Abort it first")
	case e.pins > 0:
		e.deleted = true
		s.pendingDelete++
		return nil
	}
	s.remove(id, e)
	return nil
}

// Contains reports whether id is sealed and not deleted.
func (s *Store) Contains(id dag.ObjectID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objects[id]
	return e != nil && e.state == stateSealed && !e.deleted
}

// IDs appends the ids of all sealed, not deleted objects to dst, in no
// particular order, and returns it: what this raylet can serve, for a head
// that rebuilds its object directory.
func (s *Store) IDs(dst []dag.ObjectID) []dag.ObjectID {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.objects {
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
	return Stats{
		Capacity:      s.capacity,
		Used:          s.alloc.used,
		Free:          s.capacity - s.alloc.used,
		LargestFree:   s.alloc.largestFree(),
		FreeExtents:   s.alloc.freeExtents(),
		Objects:       len(s.objects),
		Sealed:        s.sealed,
		Pinned:        s.pinned,
		PendingDelete: s.pendingDelete,
	}
}

// Close unmaps the arena, closes and removes its file. Every view handed
// out by Create or Get becomes invalid: touching one afterwards faults, so
// stop all readers and writers first. Pins or unsealed objects still present
// are logged as a warning. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return storeError(dag.KindUnavailable, ErrClosed, "objectstore: close %s: store already closed", s.path)
	}
	s.closed = true
	pinned, unsealed := s.pinned, len(s.objects)-s.sealed
	ar := s.arena
	s.arena, s.data, s.objects, s.spare = nil, nil, nil, nil
	s.mu.Unlock()

	if pinned > 0 || unsealed > 0 {
		s.log.Warn("objectstore: closing with objects in use; their views are now invalid",
			"path", s.path, "pinned", pinned, "unsealed", unsealed)
	}
	if err := ar.close(); err != nil {
		return dag.Errorf(dag.KindInternal, "%w", err)
	}
	s.log.Info("objectstore: closed", "path", s.path)
	return nil
}

// remove frees e's space and forgets id. Caller holds s.mu.
func (s *Store) remove(id dag.ObjectID, e *entry) {
	if e.block > 0 {
		if err := s.alloc.free(e.off, e.block); err != nil {
			// The table and the allocator disagree: a bug in this package.
			// Leaking the block is safer than handing it out twice.
			s.log.Error("objectstore: internal error freeing object; its space is leaked", "object", id, "err", err)
		}
	}
	if e.state == stateSealed {
		s.sealed--
	}
	if e.deleted {
		s.pendingDelete--
	}
	delete(s.objects, id)
	if len(s.spare) < maxSpare {
		*e = entry{}
		s.spare = append(s.spare, e)
	}
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
