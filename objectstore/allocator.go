package objectstore

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
)

// Alignment is the start alignment and size granule of every object in the
// arena: one cache line, so two objects never share a line.
const Alignment = 64

// allocator hands out 64-byte-aligned extents of [0, capacity). It does no
// I/O and knows nothing of objects; the Store calls it under its mutex.
//
// Free space is a set of maximal free extents (neighbours are always merged,
// so no two free extents touch). Each free extent is one node in:
//
//   - a treap ordered by (size, offset), for best fit: the smallest extent
//     that fits, lowest offset among equals. Best fit keeps large extents
//     whole for large objects, and the offset tie-break makes every choice
//     deterministic (so tests and golden traces are reproducible).
//   - two hash maps, start→node and end→node, for coalescing: a freed block
//     [off, off+n) finds its left neighbour in byEnd[off] and its right one in
//     byStart[off+n] without any ordered search.
//
// Cost, with F the number of free extents (not the number of objects):
// alloc is O(log F) expected, free is O(log F) expected plus O(1) map work,
// largestFree is O(log F). Nodes live in a slice and are recycled through a
// free list, so steady-state alloc/free does not allocate.
//
// Allocated blocks are not recorded here: the caller keeps (offset, size)
// of each block, as the Store does per object, and passes both to free.
type allocator struct {
	capacity int64 // bytes, a multiple of Alignment
	used     int64 // bytes in allocated blocks

	nodes    []extent
	spare    int32 // head of the recycled-node list (linked through left), or none
	root     int32 // treap root, or none
	byStart  map[int64]int32
	byEnd    map[int64]int32
	prioSeed uint64 // xorshift state for treap priorities
}

// none marks an absent node index.
const none int32 = -1

type extent struct {
	off, size   int64
	prio        uint32
	left, right int32
}

// newAllocator returns an allocator whose whole capacity is one free extent.
// capacity must be a positive multiple of Alignment.
func newAllocator(capacity int64) (*allocator, error) {
	if capacity <= 0 || capacity%Alignment != 0 {
		return nil, fmt.Errorf("objectstore: allocator capacity %d is not a positive multiple of %d", capacity, Alignment)
	}
	a := &allocator{
		capacity: capacity,
		spare:    none,
		root:     none,
		byStart:  make(map[int64]int32),
		byEnd:    make(map[int64]int32),
		prioSeed: 0x9e3779b97f4a7c15,
	}
	a.insertFree(0, capacity)
	return a, nil
}

// blockSize is the space an object of size bytes occupies: size rounded up
// to Alignment. size must be in [0, capacity].
func blockSize(size int64) int64 {
	return (size + Alignment - 1) &^ (Alignment - 1)
}

// alloc reserves a block of size bytes (a positive multiple of Alignment)
// and returns its offset, or ok=false when no free extent is large enough.
func (a *allocator) alloc(size int64) (off int64, ok bool) {
	if size <= 0 || size%Alignment != 0 || size > a.capacity {
		return 0, false
	}
	best := none
	for t := a.root; t != none; {
		if a.nodes[t].size >= size {
			best = t
			t = a.nodes[t].left
		} else {
			t = a.nodes[t].right
		}
	}
	if best == none {
		return 0, false
	}
	e := a.nodes[best]
	a.root = a.remove(a.root, best)
	delete(a.byStart, e.off)
	if e.size == size {
		delete(a.byEnd, e.off+e.size)
		a.release(best)
	} else {
		// Keep the tail free in the same node; its end (and byEnd) is unchanged.
		n := &a.nodes[best]
		n.off, n.size = e.off+size, e.size-size
		n.left, n.right = none, none
		a.byStart[n.off] = best
		a.root = a.insert(a.root, best)
	}
	a.used += size
	return e.off, true
}

// free returns the block [off, off+size) and merges it with free
// neighbours. The caller must pass exactly what alloc returned, once. It
// rejects a block that is misaligned, out of range, larger than what is
// allocated, or that starts or ends where a free extent does (the usual
// double free); a partly overlapping bad block is not detected, since that
// would need an index ordered by offset that nothing else needs.
func (a *allocator) free(off, size int64) error {
	switch {
	case size <= 0 || size%Alignment != 0 || off < 0 || off%Alignment != 0 || off > a.capacity-size:
		return fmt.Errorf("objectstore: free [%d,+%d): not an aligned block inside capacity %d", off, size, a.capacity)
	case size > a.used:
		return fmt.Errorf("objectstore: free [%d,+%d): only %d bytes are allocated", off, size, a.used)
	}
	if _, dup := a.byStart[off]; dup {
		return fmt.Errorf("objectstore: free [%d,+%d): offset %d is already free", off, size, off)
	}
	if _, dup := a.byEnd[off+size]; dup {
		return fmt.Errorf("objectstore: free [%d,+%d): end %d is already free", off, size, off+size)
	}
	a.used -= size
	start, end := off, off+size
	if l, ok := a.byEnd[start]; ok {
		start = a.nodes[l].off
		a.removeFree(l)
	}
	if r, ok := a.byStart[end]; ok {
		end = a.nodes[r].off + a.nodes[r].size
		a.removeFree(r)
	}
	a.insertFree(start, end-start)
	return nil
}

// largestFree returns the size of the largest free extent (0 when full).
func (a *allocator) largestFree() int64 {
	t := a.root
	if t == none {
		return 0
	}
	for a.nodes[t].right != none {
		t = a.nodes[t].right
	}
	return a.nodes[t].size
}

// freeExtents returns how many free extents there are: 1 means no
// fragmentation, many means free space is split between objects.
func (a *allocator) freeExtents() int { return len(a.byStart) }

func (a *allocator) insertFree(off, size int64) {
	i := a.node()
	a.nodes[i] = extent{off: off, size: size, prio: a.nextPrio(), left: none, right: none}
	a.byStart[off] = i
	a.byEnd[off+size] = i
	a.root = a.insert(a.root, i)
}

func (a *allocator) removeFree(i int32) {
	e := a.nodes[i]
	a.root = a.remove(a.root, i)
	delete(a.byStart, e.off)
	delete(a.byEnd, e.off+e.size)
	a.release(i)
}

func (a *allocator) node() int32 {
	if a.spare != none {
		i := a.spare
		a.spare = a.nodes[i].left
		return i
	}
	a.nodes = append(a.nodes, extent{})
	return int32(len(a.nodes) - 1)
}

func (a *allocator) release(i int32) {
	a.nodes[i] = extent{left: a.spare, right: none}
	a.spare = i
}

func (a *allocator) nextPrio() uint32 {
	x := a.prioSeed
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	a.prioSeed = x
	return uint32(x >> 32)
}

// less orders treap nodes by (size, offset); offsets are unique.
func (a *allocator) less(i, j int32) bool {
	x, y := &a.nodes[i], &a.nodes[j]
	return x.size < y.size || (x.size == y.size && x.off < y.off)
}

// insert adds node n to the treap rooted at t and returns the new root.
func (a *allocator) insert(t, n int32) int32 {
	l, r := a.split(t, n)
	return a.merge(a.merge(l, n), r)
}

// split divides t into the nodes ordered before key and the rest.
func (a *allocator) split(t, key int32) (int32, int32) {
	if t == none {
		return none, none
	}
	if a.less(t, key) {
		l, r := a.split(a.nodes[t].right, key)
		a.nodes[t].right = l
		return t, r
	}
	l, r := a.split(a.nodes[t].left, key)
	a.nodes[t].left = r
	return l, t
}

// merge joins two treaps where every node of l orders before every node of r.
func (a *allocator) merge(l, r int32) int32 {
	if l == none {
		return r
	}
	if r == none {
		return l
	}
	if a.nodes[l].prio > a.nodes[r].prio {
		a.nodes[l].right = a.merge(a.nodes[l].right, r)
		return l
	}
	a.nodes[r].left = a.merge(l, a.nodes[r].left)
	return r
}

// remove unlinks node n from the treap rooted at t and returns the new root.
func (a *allocator) remove(t, n int32) int32 {
	if t == none {
		return none
	}
	if t == n {
		return a.merge(a.nodes[t].left, a.nodes[t].right)
	}
	if a.less(n, t) {
		a.nodes[t].left = a.remove(a.nodes[t].left, n)
	} else {
		a.nodes[t].right = a.remove(a.nodes[t].right, n)
	}
	return t
}

// check verifies every invariant of the allocator and returns the first one
// broken. It walks everything, so only tests call it.
func (a *allocator) check() error {
	var (
		count    int
		freeSum  int64
		prevKey  = none
		extents  = make(map[int64]int64) // off → size
		maxDepth int
	)
	var walk func(t int32, depth int) error
	walk = func(t int32, depth int) error {
		if t == none {
			return nil
		}
		if depth > maxDepth {
			maxDepth = depth
		}
		n := a.nodes[t]
		for _, c := range [2]int32{n.left, n.right} {
			if c != none && a.nodes[c].prio > n.prio {
				return fmt.Errorf("heap order broken at node %d", t)
			}
		}
		if err := walk(n.left, depth+1); err != nil {
			return err
		}
		if prevKey != none && !a.less(prevKey, t) {
			return fmt.Errorf("treap order broken at node %d", t)
		}
		prevKey = t
		if n.size <= 0 || n.size%Alignment != 0 || n.off%Alignment != 0 || n.off < 0 || n.off+n.size > a.capacity {
			return fmt.Errorf("bad free extent [%d,+%d)", n.off, n.size)
		}
		if a.byStart[n.off] != t || a.byEnd[n.off+n.size] != t {
			return fmt.Errorf("maps disagree with free extent [%d,+%d)", n.off, n.size)
		}
		count++
		freeSum += n.size
		extents[n.off] = n.size
		return walk(n.right, depth+1)
	}
	if err := walk(a.root, 1); err != nil {
		return err
	}
	if count != len(a.byStart) || count != len(a.byEnd) {
		return fmt.Errorf("treap has %d extents, maps %d and %d", count, len(a.byStart), len(a.byEnd))
	}
	if freeSum+a.used != a.capacity {
		return fmt.Errorf("free %d + used %d != capacity %d", freeSum, a.used, a.capacity)
	}
	offs := slices.Sorted(maps.Keys(extents))
	for i := 1; i < len(offs); i++ {
		prevEnd := offs[i-1] + extents[offs[i-1]]
		if prevEnd > offs[i] {
			return fmt.Errorf("free extents at %d and %d overlap", offs[i-1], offs[i])
		}
		if prevEnd == offs[i] {
			return fmt.Errorf("free extents at %d and %d touch but were not merged", offs[i-1], offs[i])
		}
	}
	// A treap of n nodes is O(log n) deep with high probability; a depth
	// far beyond that means the priorities are not doing their job.
	if limit := 4*bits.Len(uint(count)) + 8; maxDepth > limit {
		return fmt.Errorf("treap depth %d for %d nodes", maxDepth, count)
	}
	return nil
}
