package objectstore

import (
	"encoding/binary"
	"iter"
	"math/rand/v2"

	"github.com/phobos-project/phobos/dag"
)

// objectTable maps object IDs to their entries. It is a hash table with
// open addressing and linear probing, laid out so that the objects of one
// stage with consecutive subtask indexes sit in consecutive slots: a run of
// tableRun indexes hashes to one place, and each index takes the next slot.
//
// A Go map scatters every ID over the whole table. A raylet creates a
// stage's outputs and deletes them in about index order, so with a hundred
// thousand live objects nearly every existence check in create and every
// lookup in Delete waited for memory: a seventh of the CPU of a raylet
// running short independent subtasks. Here the next index's slot is almost
// always next to the last one, in a cache line just read. (On its own, with
// nothing else evicting it, a Go map is faster: BenchmarkObjectTable. The
// table wins where the rest of a raylet's work keeps the map out of the
// caches: docs/performance.md.)
//
// Deletion shifts later entries of the probe sequence back (no tombstones,
// so probes do not lengthen as objects come and go). Like a Go map the
// table never shrinks: a raylet runs job after job of similar size, and a
// table that halved when a job's objects were freed grew again through
// the next job, 27 MiB of allocations a job of 200,000 objects. The table
// is not safe for concurrent use; the Store calls it under its mutex.
type objectTable struct {
	slots []tableSlot // len is 0 or a power of two, at most half full
	n     int
	seed  uint64
}

type tableSlot struct {
	id dag.ObjectID
	e  *entry // nil: the slot is empty
}

const (
	// tableRun is how many consecutive subtask indexes share a place: 16
	// slots of 24 bytes are six cache lines.
	tableRun     = 16
	tableMinSize = 4 * tableRun
)

// home is id's first slot, before masking.
func (t *objectTable) home(id dag.ObjectID) uint64 {
	// An ObjectID is the task (4 bytes), stage (2), subtask index (6) and
	// output (4), little-endian.
	w0 := binary.LittleEndian.Uint64(id[0:8])
	w1 := binary.LittleEndian.Uint64(id[8:16])
	index := w0>>48 | (w1&0xffff_ffff)<<16
	key := w0&0xffff_ffff_ffff ^ (w1>>32)<<48 ^ (w1>>48)<<32
	h := mix64(key^t.seed) ^ mix64(index/tableRun+t.seed)
	return h*tableRun + index%tableRun
}

// mix64 is SplitMix64's finaliser: every bit of x moves every bit of the
// result.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (t *objectTable) len() int { return t.n }

// get returns id's entry, nil if it has none.
func (t *objectTable) get(id dag.ObjectID) *entry {
	if i, ok := t.find(id); ok {
		return t.slots[i].e
	}
	return nil
}

// find returns id's slot: its probe from home ends at id or at an empty
// slot.
func (t *objectTable) find(id dag.ObjectID) (uint64, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(id) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return 0, false
		}
		if s.id == id {
			return i, true
		}
	}
}

// put sets id's entry to e, which must not be nil.
func (t *objectTable) put(id dag.ObjectID, e *entry) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(tableMinSize, 2*len(t.slots)))
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(id) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			s.id, s.e = id, e
			t.n++
			return
		}
		if s.id == id {
			s.e = e
			return
		}
	}
}

// remove deletes id's entry, if it has one.
func (t *objectTable) remove(id dag.ObjectID) {
	i, ok := t.find(id)
	if !ok {
		return
	}
	mask := uint64(len(t.slots) - 1)
	// Move back every later entry of the run of full slots that may live
	// in slot i: one whose home is not cyclically within (i, j].
	for j := (i + 1) & mask; t.slots[j].e != nil; j = (j + 1) & mask {
		if (j-t.home(t.slots[j].id))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot{}
	t.n--
}

// resize moves every entry into a table of size slots.
func (t *objectTable) resize(size int) {
	old := t.slots
	if t.seed == 0 {
		t.seed = rand.Uint64() | 1 // no ID order another node chooses can pile runs onto each other
	}
	t.slots, t.n = make([]tableSlot, size), 0
	for _, s := range old {
		if s.e != nil {
			t.put(s.id, s.e)
		}
	}
}

// all yields every ID and entry, in no particular order. The table must
// not change while it runs.
func (t *objectTable) all() iter.Seq2[dag.ObjectID, *entry] {
	return func(yield func(dag.ObjectID, *entry) bool) {
		for _, s := range t.slots {
			if s.e != nil && !yield(s.id, s.e) {
				return
			}
		}
	}
}
