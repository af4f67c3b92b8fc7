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
type rayletHeap struct {
	heap []Raylet
	pos  []int32
	less func(a, b Raylet) bool
}

func (h *rayletHeap) add(r Raylet) {
	for int(r) >= len(h.pos) {
		h.pos = append(h.pos, -1)
	}
	if h.pos[r] >= 0 {
		h.fix(r)
		return
	}
	h.heap = append(h.heap, r)
	h.pos[r] = int32(len(h.heap) - 1)
	h.up(len(h.heap) - 1)
}

// fix restores the heap after r's key changed.
func (h *rayletHeap) fix(r Raylet) {
	i := int(h.pos[r])
	if !h.down(i) {
		h.up(i)
	}
}

// top is the best raylet, NoRaylet when there is none.
func (h *rayletHeap) top() Raylet {
	if len(h.heap) == 0 {
		return NoRaylet
	}
	return h.heap[0]
}

// second is the best raylet other than the top (the better of the
// root's children), NoRaylet when there is none.
func (h *rayletHeap) second() Raylet {
	switch len(h.heap) {
	case 0, 1:
		return NoRaylet
	case 2:
		return h.heap[1]
	}
	if h.less(h.heap[2], h.heap[1]) {
		return h.heap[2]
	}
	return h.heap[1]
}

func (h *rayletHeap) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.pos[h.heap[i]] = int32(i)
	h.pos[h.heap[j]] = int32(j)
}

func (h *rayletHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.heap[i], h.heap[p]) {
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
		if r := l + 1; r < n && h.less(h.heap[r], h.heap[l]) {
			m = r
		}
		if !h.less(h.heap[m], h.heap[i]) {
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
	s.idx.free.less = s.freer
	s.idx.steal.less = s.richer
}

// freer orders raylets for placement when inputs do not decide: alive,
// then more free slots (counting queued work, or every tie in a burst of
// placements would go to the same raylet), then the shorter queue, then
// the lower handle.
func (s *scheduler) freer(a, b Raylet) bool {
	ra, rb := s.raylets[a], s.raylets[b]
	if pa, pb := ra.placeable(), rb.placeable(); pa != pb {
		return pa // alive and not draining
	}
	fa, fb := ra.slots-ra.running-ra.queue.Len(), rb.slots-rb.running-rb.queue.Len()
	if fa != fb {
		return fa > fb
	}
	if ra.queue.Len() != rb.queue.Len() {
		return ra.queue.Len() < rb.queue.Len()
	}
	return a < b
}

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

// richer orders raylets as victims of stealing: stealable first, then the
// longer queue, then the lower handle.
func (s *scheduler) richer(a, b Raylet) bool {
	ra, rb := s.raylets[a], s.raylets[b]
	if sa, sb := stealable(ra), stealable(rb); sa != sb {
		return sa
	}
	if ra.queue.Len() != rb.queue.Len() {
		return ra.queue.Len() > rb.queue.Len()
	}
	return a < b
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
