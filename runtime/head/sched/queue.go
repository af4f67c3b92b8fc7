package sched

import "slices"

// readyQueue is a raylet's queue of READY subtasks: best priority first,
// then newest enqueued. It is typed (container/heap would box every entry
// into an interface: an allocation per push and per pop).
//
// It is two parts. The stack holds entries in order, each better than the
// one below it, so its top (the last) is its best; the heap, a binary
// heap, holds the rest. An entry goes onto the stack when it beats the
// stack's top, into the heap otherwise; a pop takes the better of the two
// tops. Entries mostly arrive in the order they should leave in: a stage
// queued at once has one priority and rising sequence numbers, so its
// entries all go onto the stack, and a subtask made ready by a finished
// one is usually deeper, so it beats what is queued. Those pushes and pops
// cost O(1) where a heap alone sifts through log₂(queue) levels, a cache
// miss a level once a queue holds a large job: 15 % of the leader's CPU
// with two raylets and a million subtasks queued on each.
type readyQueue struct {
	stack []entry
	heap  []entry
}

// better reports whether a leaves the queue before b.
func better(a, b *entry) bool {
	if a.prio != b.prio {
		return a.prio.Before(b.prio)
	}
	return a.seq > b.seq
}

func (q *readyQueue) Len() int { return len(q.stack) + len(q.heap) }

func (q *readyQueue) push(e entry) {
	if n := len(q.stack); n == 0 || better(&e, &q.stack[n-1]) {
		q.stack = append(q.stack, e)
		return
	}
	q.heap = append(q.heap, e)
	heapUp(q.heap, len(q.heap)-1)
}

// pop removes and returns the best entry. The queue must not be empty.
func (q *readyQueue) pop() entry {
	n := len(q.stack)
	if n > 0 && (len(q.heap) == 0 || better(&q.stack[n-1], &q.heap[0])) {
		e := q.stack[n-1]
		q.stack[n-1] = entry{}
		q.stack = q.stack[:n-1]
		return e
	}
	h := q.heap
	top := h[0]
	m := len(h) - 1
	h[0] = h[m]
	h[m] = entry{}
	h = h[:m]
	heapDown(h, 0)
	q.heap = h
	return top
}

// room returns space for k entries past the end of the stack, to be filled
// and then taken in with adopt. The queue's length does not change until
// then (it is its raylet's key in the heaps of raylets).
func (q *readyQueue) room(k int) []entry {
	q.stack = slices.Grow(q.stack, k)
	return q.stack[len(q.stack) : len(q.stack)+k]
}

// adopt takes in the k entries written into room(k), in order, as k pushes
// would; those that go into the heap are fixed all at once (heapifying the
// whole heap when they are many beside it, O(n) rather than O(k log n)).
func (q *readyQueue) adopt(k int) {
	base := len(q.stack)
	s := q.stack[:base+k]
	w := base
	added := 0
	for r := base; r < base+k; r++ {
		e := s[r]
		if w == 0 || better(&e, &s[w-1]) {
			s[w] = e // w <= r: nothing unread is overwritten
			w++
		} else {
			q.heap = append(q.heap, e)
			added++
		}
	}
	clear(s[w:])
	q.stack = s[:w]
	h := q.heap
	if added < len(h)/8 {
		for i := len(h) - added; i < len(h); i++ {
			heapUp(h, i)
		}
		return
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

// entries calls f with every entry, in no particular order.
func (q *readyQueue) entries(f func(entry)) {
	for _, e := range q.stack {
		f(e)
	}
	for _, e := range q.heap {
		f(e)
	}
}

// reset empties the queue and keeps its memory; shrink empties it and lets
// go of memory beyond keep entries a part (a big job's).
func (q *readyQueue) reset() {
	clear(q.stack)
	clear(q.heap)
	q.stack, q.heap = q.stack[:0], q.heap[:0]
}

func (q *readyQueue) shrink(keep int) {
	q.reset()
	q.stack, q.heap = shrink(q.stack, keep), shrink(q.heap, keep)
}

// check reports the first entry out of the queue's order: a stack entry
// not better than the one below it, or a heap entry better than its
// parent.
func (q *readyQueue) check() (part string, k int, ok bool) {
	for k := 1; k < len(q.stack); k++ {
		if !better(&q.stack[k], &q.stack[k-1]) {
			return "stack", k, false
		}
	}
	for k := 1; k < len(q.heap); k++ {
		if better(&q.heap[k], &q.heap[(k-1)/2]) {
			return "heap", k, false
		}
	}
	return "", 0, true
}

func heapUp(h []entry, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !better(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func heapDown(h []entry, i int) {
	n := len(h)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && better(&h[l], &h[m]) {
			m = l
		}
		if r < n && better(&h[r], &h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
