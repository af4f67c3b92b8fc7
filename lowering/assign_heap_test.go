package lowering

import (
	"math/rand/v2"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

// TestAssignWalkHeapMatchesScan: finding the raylet with the largest
// quota by a heap picks exactly what the scan of every raylet picked, on
// random graphs and slot lists.
func TestAssignWalkHeapMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for it := 0; it < 300; it++ {
		n := int32(1 + rng.IntN(200))
		preds := make([][]int32, n)
		succs := make([][]int32, n)
		var initial []int32
		for i := int32(0); i < n; i++ {
			if i > 0 && rng.IntN(3) > 0 {
				p := int32(rng.IntN(int(i)))
				preds[i] = append(preds[i], p)
				succs[p] = append(succs[p], i)
			} else {
				initial = append(initial, i)
			}
		}
		slots := make([]int, 1+rng.IntN(40))
		for i := range slots {
			slots[i] = rng.IntN(5)
		}
		g := walkGraph{n: n, pred: csrOf(preds), succ: csrOf(succs)}
		got := assignWalk(g, initial, slots)
		want := assignWalkScan(g, initial, slots)
		if err := sameButDealt(g, got, want, len(slots)); err != "" {
			t.Fatalf("iteration %d: %s: heap %v, scan %v", it, err, got, want)
		}
	}
}

// csrOf packs rows into a CSR table.
func csrOf(rows [][]int32) dag.CSR {
	t := dag.CSR{Off: make([]int32, 1, len(rows)+1)}
	for _, r := range rows {
		t.Dst = append(t.Dst, r...)
		t.Off = append(t.Off, int32(len(t.Dst)))
	}
	return t
}

// assignWalkScan is assignWalk as it was, scanning every raylet per walk.
func assignWalkScan(g walkGraph, initial []int32, slots []int) []int32 {
	raylet := make([]int32, g.n)
	for i := range raylet {
		raylet[i] = -1
	}
	if len(slots) == 0 || len(initial) == 0 {
		return raylet
	}
	isInit := make([]bool, g.n)
	for _, s := range initial {
		isInit[s] = true
	}
	q := quotas(len(initial), slots)
	spread := (int(g.n-g.lo) + len(slots) - 1) / len(slots)
	visited := make([]bool, g.n)
	seen := make([]uint32, g.n) // walk number that queued each node
	walk := uint32(0)
	queue := make([]int32, 0, 64)
	next := 0
	enqueue := func(nb int32) {
		if nb >= g.lo && seen[nb] != walk {
			seen[nb] = walk
			queue = append(queue, nb)
		}
	}
	for {
		for next < len(initial) && raylet[initial[next]] >= 0 {
			next++
		}
		if next == len(initial) {
			return raylet
		}
		r := -1
		for i := range q {
			if q[i] > 0 && (r < 0 || q[i] > q[r]) {
				r = i
			}
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
		assigned, walked := 0, 0
		walk++
		queue = append(queue[:0], initial[next])
		seen[initial[next]] = walk
	bfs:
		for h := 0; h < len(queue); h++ {
			s := queue[h]
			if !visited[s] {
				visited[s] = true
				walked++
				if isInit[s] && raylet[s] < 0 {
					raylet[s] = int32(r)
					assigned++
				}
				if walked >= spread || assigned >= q[r] {
					break bfs
				}
			}
			for _, nb := range g.preds(s) {
				enqueue(nb)
			}
			for _, nb := range g.succs(s) {
				enqueue(nb)
			}
		}
		q[r] -= assigned
	}
}
