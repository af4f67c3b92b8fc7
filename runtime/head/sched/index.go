package sched

// Placement and stealing ask two questions of every raylet: which has the
// most free slots (then the shortest queue), and which has the longest
// queue it cannot start. Scanning the raylets for each subtask made the
// leader O(raylets) per subtask; these heaps answer in O(1) and move a
// raylet in O(log raylets) when its counts change. (They are reordered at
// once: letting several keys change and fixing them afterwards one by one
// does not restore a binary heap.) A pull moves its raylet once, not once
// per subtask.
//
// Each heap orders raylets totally (the raylet's handle breaks ties), so
// its top is exactly the raylet the full scan picked: placement did not
// change, only its cost.

// rayletHeap is an indexed binary heap of raylet handles: pos[r] is r's
// place in heap, so a raylet whose key changed is moved in O(log n).
//
// Each entry carries its raylet's key, computed when the raylet is
// touched, so that sifting compares entries of one small array: compared
// through the raylets' own records, every step of a sift read two of a
// thousand raylets' records, out of the caches by then (touch was 9 % of
// the leader's loop at 1,000 simulated raylets, 4 % at 10). A raylet
// touched without a change of key costs one comparison.
type rayletHeap struct {
	heap []heapEntry
	pos  []int32
	key  func(r Raylet) (a, b int64) // smaller first; the handle breaks ties
}

// heapEntry is a raylet and its key in a rayletHeap.
type heapEntry struct {
	a, b int64
	r    Raylet
}

// before orders entries by key, then by handle.
func (x heapEntry) before(y heapEntry) bool {
	if x.a != y.a {
		return x.a < y.a
	}
	if x.b != y.b {
		return x.b < y.b
	}
	return x.r < y.r
}

// entry is r's entry with its key as it is now.
func (h *rayletHeap) entry(r Raylet) heapEntry {
	a, b := h.key(r)
	return heapEntry{a: a, b: b, r: r}
}

// less reports whether a comes before b by their keys as they are now.
func (h *rayletHeap) less(a, b Raylet) bool { return h.entry(a).before(h.entry(b)) }

// add puts r in the heap, or moves it after its key changed.
func (h *rayletHeap) add(r Raylet) {
	for int(r) >= len(h.pos) {
		h.pos = append(h.pos, -1)
	}
	e := h.entry(r)
	if i := h.pos[r]; i >= 0 {
		if old := &h.heap[i]; old.a != e.a || old.b != e.b {
			*old = e
			if !h.down(int(i)) {
				h.up(int(i))
			}
		}
		return
	}
	h.heap = append(h.heap, e)
	h.pos[r] = int32(len(h.heap) - 1)
	h.up(len(h.heap) - 1)
}

// top is the best raylet, NoRaylet when there is none.
func (h *rayletHeap) top() Raylet {
	if len(h.heap) == 0 {
		return NoRaylet
	}
	return h.heap[0].r
}

// second is the best raylet other than the top (the better of the
// root's children), NoRaylet when there is none.
func (h *rayletHeap) second() Raylet {
	switch len(h.heap) {
	case 0, 1:
		return NoRaylet
	case 2:
		return h.heap[1].r
	}
	if h.heap[2].before(h.heap[1]) {
		return h.heap[2].r
	}
	return h.heap[1].r
}

func (h *rayletHeap) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.pos[h.heap[i].r] = int32(i)
	h.pos[h.heap[j].r] = int32(j)
}

func (h *rayletHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.heap[i].before(h.heap[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (h *rayletHeap) down(i0 int) bool {
	i, n := i0, len(h.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.heap[r].before(h.heap[l]) {
			m = r
		}
		if !h.heap[m].before(h.heap[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > i0
}

// rayletIndex keeps the scheduler's two heaps over raylets.
type rayletIndex struct {
	free  rayletHeap // alive first, then most free slots, shortest queue, lowest handle
	steal rayletHeap // raylets with more queued than they can start first, then longest queue, lowest handle
}

func (s *scheduler) initIndex() {
	s.idx.free.key = s.freeKey
	s.idx.steal.key = s.stealKey
}

// notFirst puts a key after every key without it: counts stay far below
// 2^61, so a raylet without the flag sorts after every raylet with it.
const notFirst = 1 << 62

// freeKey is r's key in the placement heap, which orders raylets for
// placement when inputs do not decide: alive (and not draining), then more
// free slots (counting queued work, or every tie in a burst of placements
// would go to the same raylet), then the shorter queue (then the lower
// handle).
func (s *scheduler) freeKey(r Raylet) (a, b int64) {
	rv := s.raylets[r]
	free := int64(rv.slots - rv.running - rv.queue.Len())
	if !rv.placeable() {
		a = notFirst
	}
	return a - free, int64(rv.queue.Len())
}

// stealKey is r's key in the stealing heap, which orders raylets as victims
// of stealing: stealable first, then the longer queue (then the lower
// handle).
func (s *scheduler) stealKey(r Raylet) (a, b int64) {
	rv := s.raylets[r]
	if !stealable(rv) {
		a = notFirst
	}
	return a - int64(rv.queue.Len()), 0
}

// freer reports whether a comes before b in the placement order (freeKey).
func (s *scheduler) freer(a, b Raylet) bool { return s.idx.free.less(a, b) }

// stealable reports whether rv has more queued than it will take at once:
// more than it can start, and, while it has a pull waiting at the head,
// more than that pull's credits. An idle raylet may take the rest. A pull
// waits with work queued for it only until the head serves it (parked
// pulls are served as a stage's work arrives, at most maxWaveSpecs a
// step): stealing that work meanwhile only moves it, away from the inputs
// it was placed beside, to whichever raylet happened to pull first.
func stealable(rv *raylet) bool {
	return rv.alive && rv.queue.Len() > max(rv.slots-rv.running, rv.parked.credits)
}

// touch reorders r after its alive or draining flag, slots, running count or queue
// changed.
func (s *scheduler) touch(r Raylet) {
	s.idx.free.add(r)
	s.idx.steal.add(r)
}

// freest returns the alive raylet placement prefers when inputs do not
// decide, NoRaylet when none is alive.
func (s *scheduler) freest() Raylet {
	r := s.idx.free.top()
	if r < 0 || !s.raylets[r].placeable() {
		return NoRaylet
	}
	return r
}

// victim returns the raylet thief should steal from, NoRaylet when no
// other raylet has more queued than it can start.
func (s *scheduler) victim(thief Raylet) Raylet {
	v := s.idx.steal.top()
	if v == thief {
		v = s.idx.steal.second()
	}
	if v < 0 || !stealable(s.raylets[v]) {
		return NoRaylet
	}
	return v
}
