package lowering

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// assignWalkRef is assignWalk as it was before isolated nodes were dealt
// (commit acac790), the reference TestAssignWalkMatchesReference holds it to.
func assignWalkRef(g walkGraph, initial []int32, slots []int) []int32 {
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
	byQuota := newQuotaHeap(q)
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
		byQuota.down(0) // r was the top; only its quota changed
	}
}

// TestAssignWalkMatchesReference compares assignWalk with the walk it
// replaced on random graphs mixing isolated nodes (runs of them shorter and
// longer than the raylets) with connected ones, under random slots
// (zeros included, and fewer slots than nodes).
func TestAssignWalkMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 400; trial++ {
		n := 1 + rng.IntN(300)
		inputs := make([][]int32, n)
		for i := 1; i < n; i++ {
			if rng.IntN(3) == 0 { // a third of the nodes read earlier ones
				for k := 1 + rng.IntN(2); k > 0; k-- {
					inputs[i] = append(inputs[i], int32(rng.IntN(i)))
				}
			}
		}
		g := chunks(t, inputs...)
		users := g.Users()
		wg := walkGraph{n: int32(n), pred: g.InputTable(), succ: users}
		var initial []int32
		for c := int32(0); c < int32(n); c++ {
			if len(g.Inputs(c)) == 0 {
				initial = append(initial, c)
			}
		}
		slots := make([]int, 1+rng.IntN(12))
		for i := range slots {
			slots[i] = rng.IntN(5)
		}
		got, want := assignWalk(wg, initial, slots), assignWalkRef(wg, initial, slots)
		if err := sameButDealt(wg, got, want, len(slots)); err != "" {
			t.Fatalf("trial %d: slots %v, graph %v: %s:\n got %v\nwant %v", trial, slots, inputs, err, got, want)
		}
		if it := g.InputTable(); !slices.Equal(it.Off, csrOf(inputs).Off) || !slices.Equal(it.Dst, csrOf(inputs).Dst) {
			t.Fatalf("trial %d: input table %v of graph %v", trial, it, inputs)
		}
	}
}

// sameButDealt compares two initial assignments that may differ only in
// which isolated node went where (deal gives each raylet a run of them
// where one-node walks gave every k-th): every connected node must be on
// the same raylet, and each raylet must hold as many isolated nodes.
func sameButDealt(g walkGraph, got, want []int32, raylets int) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d nodes, want %d", len(got), len(want))
	}
	count := make([]int, raylets+1) // by raylet+1: -1 is unassigned
	for i := range got {
		if !g.isolated(int32(i)) {
			if got[i] != want[i] {
				return fmt.Sprintf("connected node %d on raylet %d, want %d", i, got[i], want[i])
			}
			continue
		}
		count[got[i]+1]++
		count[want[i]+1]--
	}
	for r, c := range count {
		if c != 0 {
			return fmt.Sprintf("raylet %d holds %d isolated nodes more than it should", r-1, c)
		}
	}
	return ""
}

// TestDealGivesRuns checks that a job of independent subtasks is dealt in
// runs, one per raylet in raylet order, each as long as that raylet's
// share.
func TestDealGivesRuns(t *testing.T) {
	const n = 100
	none := csrOf(make([][]int32, n))
	g := walkGraph{n: n, pred: none, succ: none}
	initial := make([]int32, n)
	for i := range initial {
		initial[i] = int32(i)
	}
	slots := []int{2, 3, 0, 5}
	got := assignWalk(g, initial, slots)
	count := make([]int, len(slots))
	for i, r := range got {
		if r < 0 || (i > 0 && r < got[i-1]) {
			t.Fatalf("node %d on raylet %d after raylet %d: not dealt in runs: %v", i, r, got[max(i-1, 0)], got)
		}
		count[r]++
	}
	if want := quotas(n, slots); !slices.Equal(count, want) {
		t.Fatalf("raylets hold %v nodes, want their quotas %v", count, want)
	}
}
