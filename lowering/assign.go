package lowering

import (
	"github.com/phobos-project/phobos/dag"
)

// quotas splits n initial subtasks among raylets in proportion to their
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
	// stable sort by slots descending (insertion sort: raylet lists are short)
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && slots[order[j]] > slots[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for k := 0; given < n; k = (k + 1) % len(order) {
		if slots[order[k]] > 0 {
			q[order[k]]++
			given++
		}
	}
	return q
}

// assignInitial gives every initial subtask (one without predecessors) a
// raylet, following the seeds: take the raylet with the largest remaining
// quota, walk the undirected subtask graph breadth-first from the next
// unassigned initial subtask, and give that raylet the initial subtasks met,
// stopping once (all subtasks ÷ raylets) new subtasks were visited or its
// quota is spent; repeat while quotas remain.
func assignInitial(sg *dag.SubtaskGraph, slots []int) {
	if len(slots) == 0 {
		return
	}
	var initial []int32
	for s := range sg.Subtasks {
		if len(sg.Preds.Row(int32(s))) == 0 {
			initial = append(initial, int32(s))
		}
	}
	q := quotas(len(initial), slots)
	spread := (sg.Len() + len(slots) - 1) / len(slots)
	visited := make([]bool, sg.Len())
	seen := make([]uint32, sg.Len()) // walk number that queued each subtask
	walk := uint32(0)
	queue := make([]int32, 0, sg.Len())
	next := 0
	for {
		for next < len(initial) && sg.Subtasks[initial[next]].Raylet >= 0 {
			next++
		}
		if next == len(initial) {
			return
		}
		r := -1
		for i := range q {
			if q[i] > 0 && (r < 0 || q[i] > q[r]) {
				r = i
			}
		}
		if r < 0 {
			// Quotas are spent but subtasks remain (only with zero-slot
			// raylets); place the rest round-robin.
			for i, s := range initial[next:] {
				if sg.Subtasks[s].Raylet < 0 {
					sg.Subtasks[s].Raylet = int32((next + i) % len(slots))
				}
			}
			return
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
				if len(sg.Preds.Row(s)) == 0 && sg.Subtasks[s].Raylet < 0 {
					sg.Subtasks[s].Raylet = int32(r)
					assigned++
				}
				if walked >= spread || assigned >= q[r] {
					break bfs
				}
			}
			for _, nb := range sg.Preds.Row(s) {
				if seen[nb] != walk {
					seen[nb] = walk
					queue = append(queue, nb)
				}
			}
			for _, nb := range sg.Succs.Row(s) {
				if seen[nb] != walk {
					seen[nb] = walk
					queue = append(queue, nb)
				}
			}
		}
		q[r] -= assigned
	}
}
