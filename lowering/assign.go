package lowering

import (
	"cmp"
	"slices"

	"github.com/phobos-project/phobos/dag"
)

// quotas splits n initial nodes among raylets in proportion to their
// slots: floor shares first, then the remainder one at a time to the raylets
// with the most slots (ties to the lower index). Slots [4,4,4] and n=10 give
// [4,3,3].
func quotas(n int, slots []int) []int {
	q := make([]int, len(slots))
	total := 0
	for _, s := range slots {
		total += max(s, 0)
	}
	if total == 0 || n == 0 {
		return q
	}
	given := 0
	for i, s := range slots {
		q[i] = n * max(s, 0) / total
		given += q[i]
	}
	order := make([]int, len(slots))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(slots[b], slots[a]) }) // most slots first
	for k := 0; given < n; k = (k + 1) % len(order) {
		if slots[order[k]] > 0 {
			q[order[k]]++
			given++
		}
	}
	return q
}

// walkGraph is the undirected view initial assignment walks: nodes lo…n-1
// with their predecessors (rows of pred) and successors (rows of succ);
// nodes below lo are outside.
type walkGraph struct {
	n, lo      int32
	pred, succ dag.CSR
}

func (g walkGraph) preds(i int32) []int32 { return g.pred.Row(i) }
func (g walkGraph) succs(i int32) []int32 { return g.succ.Row(i) }

// What assignWalk knows of a node, a byte each.
const (
	nodeVisited uint8 = 1 << iota // a walk counted it
	nodeWaiting                   // initial, without a raylet yet
)

// assignWalk gives every initial node a raylet, following the seeds: take
// the raylet with the largest remaining quota, walk the undirected graph
// breadth-first from the next unassigned initial node, and give that raylet
// the initial nodes met, stopping once (all nodes ÷ raylets) new nodes were
// visited or its quota is spent; repeat while quotas remain. A node visited
// by one walk is not counted again by later walks (Mars's assigned record),
// but walks still pass through it. It returns each node's raylet (-1 for
// nodes that are not initial, and for all when slots is empty).
//
// A walk takes each node as it is first met, rather than when it comes off
// the queue: the nodes are taken in the same order, but the walk stops
// without having queued the neighbours of the nodes it never reaches
// (a third of the queueing, on the seed example), and the nodes met in a
// walk are the queue itself, so a bitset of them is cleared from it.
func assignWalk(g walkGraph, initial []int32, slots []int) []int32 {
	raylet := dag.HugePages(make([]int32, g.n))
	for i := range raylet {
		raylet[i] = -1
	}
	if len(slots) == 0 || len(initial) == 0 {
		return raylet
	}
	state := dag.HugePages(make([]uint8, g.n))
	for _, s := range initial {
		state[s] = nodeWaiting
	}
	q := quotas(len(initial), slots)
	byQuota := newQuotaHeap(q)
	spread := (int(g.n-g.lo) + len(slots) - 1) / len(slots)
	var met []uint64 // nodes met by the current walk
	var queue []int32
	next := 0
	for {
		for next < len(initial) && raylet[initial[next]] >= 0 {
			next++
		}
		if next == len(initial) {
			return raylet
		}
		r := -1
		if len(byQuota.h) > 0 && q[byQuota.h[0]] > 0 {
			r = int(byQuota.h[0])
		}
		if r < 0 {
			// Quotas are spent but nodes remain (only with zero-slot
			// raylets); place the rest round-robin.
			for i, s := range initial[next:] {
				if raylet[s] < 0 {
					raylet[s] = int32((next + i) % len(slots))
				}
			}
			return raylet
		}
		if g.isolated(initial[next]) {
			// A run of isolated nodes: each one's walk would visit it
			// alone and no other walk can reach it, so neither visited
			// nor seen matters, and the run takes the raylets in the
			// order the walks would (most nodes of a job of
			// independent subtasks).
			end := next + 1
			for end < len(initial) && g.isolated(initial[end]) {
				end++
			}
			if end-next >= len(q) { // dealing costs a sort of the raylets
				next += byQuota.deal(initial[next:end], raylet)
				continue
			}
			raylet[initial[next]] = int32(r)
			q[r]--
			byQuota.down(0)
			continue
		}
		if met == nil {
			// A walk meets each node once at most; growing the queue
			// by appending cost a fifth of the walks on the seed
			// example. (A job of independent subtasks never walks.)
			met = make([]uint64, (g.n+63)/64)
			queue = dag.HugePages(make([]int32, 0, g.n-g.lo))
		}
		q[r] -= g.walk(initial[next], int32(r), q[r], spread, state, raylet, met, &queue)
		byQuota.down(0) // r was the top; only its quota changed
	}
}

// walk is one walk of assignWalk from start for raylet r with quota
// quota: it returns how many initial nodes it gave r. It takes each node
// (counts it, gives it r if it is initial) as the walk first meets it.
// It reads the tables through local slices, a node's predecessors and
// then its successors in two loops of the same body, and queues into the
// queue's whole capacity by index (a walk meets a node once at most):
// with fewer values live in the loop, fewer spill to the stack
// (callgrind: a tenth fewer instructions than one loop switching rows).
func (g walkGraph) walk(start, r int32, quota, spread int, state []uint8, raylet []int32, met []uint64, queue *[]int32) int {
	lo := g.lo
	poff, pdst, soff, sdst := g.pred.Off, g.pred.Dst, g.succ.Off, g.succ.Dst
	qu := (*queue)[:cap(*queue)]
	qu[0] = start
	tail := 1
	met[start>>6] |= 1 << (start & 63)
	// start is initial and unvisited: an initial node a walk visits gets a
	// raylet then.
	state[start] = nodeVisited
	raylet[start] = r
	assigned, walked := 1, 1
	if walked >= spread || assigned >= quota {
		tail = 0
	}
	for h := 0; h < tail; h++ {
		s := qu[h]
		for _, nb := range pdst[poff[s]:poff[s+1]] {
			if nb < lo {
				continue
			}
			w, bit := uint32(nb)>>6, uint64(1)<<(uint32(nb)&63)
			if met[w]&bit != 0 {
				continue
			}
			met[w] |= bit
			qu[tail] = nb
			tail++
			f := state[nb]
			if f&nodeVisited != 0 {
				continue // passed through, not counted again
			}
			state[nb] = nodeVisited
			walked++
			if f&nodeWaiting != 0 {
				raylet[nb] = r
				assigned++
			}
			if walked >= spread || assigned >= quota {
				goto done
			}
		}
		for _, nb := range sdst[soff[s]:soff[s+1]] { // the same, over the successors
			if nb < lo {
				continue
			}
			w, bit := uint32(nb)>>6, uint64(1)<<(uint32(nb)&63)
			if met[w]&bit != 0 {
				continue
			}
			met[w] |= bit
			qu[tail] = nb
			tail++
			f := state[nb]
			if f&nodeVisited != 0 {
				continue
			}
			state[nb] = nodeVisited
			walked++
			if f&nodeWaiting != 0 {
				raylet[nb] = r
				assigned++
			}
			if walked >= spread || assigned >= quota {
				goto done
			}
		}
	}
done:
	qu = qu[:tail]
	if len(qu) > len(met)/8 {
		clear(met)
	} else {
		met[start>>6] = 0
		for _, s := range qu {
			met[s>>6] = 0 // every node met is in qu (but start, when it ended the walk)
		}
	}
	*queue = qu
	return assigned
}

// quotaHeap orders raylets by remaining quota, largest first, ties to the
// lower index: the raylet each walk starts from, found in O(1) rather than
// by a scan of every raylet for every walk (a graph without edges walks
// once per node).
type quotaHeap struct {
	q []int
	h []int32
}

func newQuotaHeap(q []int) quotaHeap {
	h := quotaHeap{q: q, h: make([]int32, len(q))}
	for i := range h.h {
		h.h[i] = int32(i)
	}
	for i := len(h.h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return h
}

func (h quotaHeap) less(a, b int32) bool {
	if h.q[a] != h.q[b] {
		return h.q[a] > h.q[b]
	}
	return a < b
}

func (h quotaHeap) down(i int) {
	n := len(h.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(h.h[r], h.h[l]) {
			m = r
		}
		if !h.less(h.h[m], h.h[i]) {
			return
		}
		h.h[i], h.h[m] = h.h[m], h.h[i]
		i = m
	}
}

// isolated reports whether node s of g has no edges at all.
func (g walkGraph) isolated(s int32) bool {
	return g.succ.Off[s] == g.succ.Off[s+1] && g.pred.Off[s] == g.pred.Off[s+1]
}

// deal gives nodes one raylet each, each raylet as many as that many
// one-node walks would give it (each walk takes the raylet with the
// largest remaining quota, ties to the lower index, whose quota drops by
// one), until the nodes or the quotas run out. It returns how many nodes
// it placed. Rather than a heap step a node, it counts the raylets level
// by level: with the quotas at most L, the raylets at L take one node each
// and drop to L-1, where those already at L-1 join them; then the heap is
// rebuilt.
//
// Each raylet takes a run of consecutive nodes (the first raylet the
// first run), not every k-th node as the walks would have: the nodes are
// independent, so either balances the same, but the leader reads each
// raylet's subtasks in the order of its queue, and a thousand raylets each
// reading every thousandth subtask missed the cache on every spec and
// completion (1M independent subtasks on 1,000 simulated raylets: 1.8× as
// fast dealt in runs).
func (h *quotaHeap) deal(nodes []int32, raylet []int32) int {
	q := h.q
	order := make([]int32, len(q)) // by quota, largest first, ties by index
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(q[b], q[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var level []int32          // the raylets at the current level, by index
	got := make([]int, len(q)) // nodes each raylet takes
	k, done := 0, 0
	for done < len(nodes) {
		if len(level) == 0 && (k == len(order) || q[order[k]] <= 0) {
			break // every quota is spent
		}
		top := 0
		if len(level) > 0 {
			top = q[level[0]]
		} else {
			top = q[order[k]]
		}
		for k < len(order) && q[order[k]] == top && top > 0 {
			r := order[k]
			i, _ := slices.BinarySearch(level, r)
			level = slices.Insert(level, i, r)
			k++
		}
		for _, r := range level {
			if done == len(nodes) {
				break
			}
			got[r]++
			q[r]--
			done++
		}
		if top == 1 {
			level = level[:0] // spent; the raylets below wait their turn
		}
	}
	at := 0
	for r, n := range got {
		for _, s := range nodes[at : at+n] {
			raylet[s] = int32(r)
		}
		at += n
	}
	for i := range h.h {
		h.h[i] = int32(i)
	}
	for i := len(h.h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return done
}

// assignSubtasks sets Raylet on every initial subtask (one without
// predecessors in its stage) of sg.
func assignSubtasks(sg *dag.SubtaskGraph, slots []int) {
	setRaylets(sg, initialRaylets(sg, slots))
}

// initialRaylets returns the raylet of every subtask of sg: the initial
// ones' (without predecessors in the stage), -1 for the others. It reads
// only sg's Preds, Succs and len(Subtasks).
func initialRaylets(sg *dag.SubtaskGraph, slots []int) []int32 {
	n := len(sg.Subtasks)
	initial := dag.HugePages(make([]int32, 0, n)) // at most all; freed once assigned
	for s := range n {
		if sg.Preds.Off[s] == sg.Preds.Off[s+1] {
			initial = append(initial, int32(s))
		}
	}
	return assignWalk(walkGraph{n: int32(n), pred: sg.Preds, succ: sg.Succs}, initial, slots)
}

// setRaylets writes raylet into the subtasks of sg.
func setRaylets(sg *dag.SubtaskGraph, raylet []int32) {
	for s, r := range raylet {
		sg.Subtasks[s].Raylet = r
	}
}

// assignChunks places the initial chunks (no input inside the stage) of
// chunks lo… of cg, for colouring fusion, which groups them per raylet.
func assignChunks(cg *dag.ChunkGraph, users dag.CSR, lo int32, slots []int) []int32 {
	var initial []int32
	n := int32(cg.Len())
	for c := lo; c < n; c++ {
		if isInitial(cg, c, lo) {
			initial = append(initial, c)
		}
	}
	return assignWalk(walkGraph{n: n, lo: lo, pred: cg.InputTable(), succ: users}, initial, slots)
}
