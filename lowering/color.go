package lowering

import (
	"slices"

	"github.com/phobos-project/phobos/dag"
)

// Defaults of colouring fusion (Options.ColorInitial, Options.Broadcast).
const (
	// DefaultColorInitial is how many initial chunks of one raylet share a
	// colour: Mars's combine size ÷ 2.
	DefaultColorInitial = 2
	// DefaultBroadcast: a chunk read by more than this many chunks is a
	// broadcaster; each reader starts a colour of its own, so the readers
	// spread over the cluster instead of piling into the broadcaster's
	// subtask. It matches the scheduler's broadcast threshold.
	DefaultBroadcast = 8
	// colorRounds bounds the split passes (see fuseColoring).
	colorRounds = 8
)

// fuseColoring groups chunks lo… of cg by colouring (Mars's Coloring, in
// services/task/analyzer/fusion.py):
//
//  1. Initial chunks (no input inside the stage) take colours per raylet:
//     raylet[c] is where initial assignment put chunk c. They are taken in
//     the order their first reader lists them, so chunks read together
//     share a colour, at most per chunks to a colour.
//  2. In topological order, a chunk whose inputs all have one colour
//     inherits it, unless an input is a broadcaster (more than broadcast
//     distinct readers) or is split (below); any other chunk starts a new
//     colour.
//  3. A chunk read both by chunks of its own colour and of another colour
//     is split: its output leaves the group, and an object leaves a
//     subtask only when the whole subtask ends, so its other readers
//     would wait for the rest of the group. Its same-colour readers start
//     new colours in the next pass. Passes repeat until nothing splits
//     (at most colorRounds; a split left over costs latency, not
//     correctness).
//
// Every colour is acyclic by construction: a non-initial chunk joins a
// colour only if all its inputs are in it, so a colour's only chunk with
// inputs outside it is the chunk that started it, which precedes every
// other member. A cycle between colours would need an edge into a colour
// other than into that first chunk, and so a cycle in the chunk graph.
// Link checks it anyway.
//
// Groups come out ordered by their first chunk (topologically), each in
// execution order.
func fuseColoring(cg *dag.ChunkGraph, users dag.CSR, lo int32, raylet []int32, per, broadcast int) dag.CSR {
	n := int32(cg.Len())
	if per <= 0 {
		per = DefaultColorInitial
	}
	if broadcast <= 0 {
		broadcast = DefaultBroadcast
	}
	color := make([]int32, n)
	for i := range color {
		color[i] = -1
	}
	initial := make([]bool, n)
	for c := lo; c < n; c++ {
		initial[c] = isInitial(cg, c, lo)
	}

	// 1. Initial colours, per raylet, in reader order.
	next := int32(0)
	type bucket struct {
		raylet int32
		color  int32
		size   int
	}
	// The colour being filled on each raylet seen, found by raylet
	// (openAt[r+1] indexes open; 0 for none, r = -1 for no raylet): a scan
	// of open for every batch was O(raylets) a chunk, 0.15 s of lowering
	// the seed example's million subtasks for 1,000 raylets.
	var open []bucket
	var openAt []int32
	var batch []int32
	fill := func(cs []int32) {
		// cs are uncoloured initial chunks met together; keep each
		// raylet's share in one colour when it fits.
		for len(cs) > 0 {
			r := raylet[cs[0]]
			if int(r)+1 >= len(openAt) {
				openAt = append(openAt, make([]int32, int(r)+2-len(openAt))...)
			}
			k := int(openAt[r+1]) - 1
			if k < 0 {
				open = append(open, bucket{raylet: r, color: -1})
				k = len(open) - 1
				openAt[r+1] = int32(len(open))
			}
			cnt := 0
			for _, c := range cs {
				if raylet[c] == r {
					cnt++
				}
			}
			b := &open[k]
			if b.color < 0 || b.size >= per || (b.size > 0 && b.size+cnt > per) {
				b.color, b.size = next, 0
				next++
			}
			rest := cs[:0]
			for _, c := range cs {
				if raylet[c] != r {
					rest = append(rest, c)
					continue
				}
				if b.size >= per {
					b.color, b.size = next, 0
					next++
				}
				color[c] = b.color
				b.size++
			}
			cs = rest
		}
	}
	for c := lo; c < n; c++ {
		if initial[c] {
			continue
		}
		batch = batch[:0]
		for _, in := range cg.Inputs(c) {
			if in >= lo && initial[in] && color[in] < 0 && !slices.Contains(batch, in) {
				batch = append(batch, in)
			}
		}
		fill(batch)
	}
	for c := lo; c < n; c++ {
		if initial[c] && color[c] < 0 {
			fill(append(batch[:0], c))
		}
	}
	firstNew := next

	// 2 and 3. Propagate; split; repeat.
	bcast := make([]bool, n)
	for c := lo; c < n; c++ {
		bcast[c] = distinct(users.Row(c)) > broadcast
	}
	split := make([]bool, n)
	for round := 0; round < colorRounds; round++ {
		next = firstNew
		for c := lo; c < n; c++ {
			if initial[c] {
				continue
			}
			col, fresh := int32(-1), false
			for _, p := range cg.Inputs(c) {
				if p < lo {
					continue // fetched from an earlier stage
				}
				if bcast[p] || split[p] || (col >= 0 && color[p] != col) {
					fresh = true
					break
				}
				col = color[p]
			}
			if fresh || col < 0 {
				col = next
				next++
			}
			color[c] = col
		}
		changed := false
		for c := lo; c < n; c++ {
			if split[c] || bcast[c] {
				continue
			}
			same, other := false, false
			for _, u := range users.Row(c) {
				if color[u] == color[c] {
					same = true
				} else {
					other = true
				}
			}
			if same && other {
				split[c] = true
				changed = true
			}
		}
		if !changed {
			break
		}
	}

	// Number colours by first appearance, then bucket chunks by colour.
	group := make([]int32, next)
	for i := range group {
		group[i] = -1
	}
	ng := int32(0)
	off := make([]int32, 1, n-lo+1)
	for c := lo; c < n; c++ {
		if group[color[c]] < 0 {
			group[color[c]] = ng
			ng++
			off = append(off, 0)
		}
		off[group[color[c]]+1]++
	}
	for g := int32(0); g < ng; g++ {
		off[g+1] += off[g]
	}
	dst := make([]int32, n-lo)
	pos := append([]int32(nil), off[:ng]...)
	for c := lo; c < n; c++ {
		g := group[color[c]]
		dst[pos[g]] = c
		pos[g]++
	}
	return dag.CSR{Off: off, Dst: dst}
}

// isInitial reports whether chunk c has no input inside the stage
// (chunks below lo come from earlier stages).
func isInitial(cg *dag.ChunkGraph, c, lo int32) bool {
	for _, in := range cg.Inputs(c) {
		if in >= lo {
			return false
		}
	}
	return true
}

// distinct counts the distinct values of an ascending slice (a row of
// ChunkGraph.Users).
func distinct(s []int32) int {
	n := 0
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			n++
		}
	}
	return n
}
