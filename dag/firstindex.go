package dag

// FirstIndex finds where values first occur in a list that only grows
// while it is searched, such as the inputs listed so far of a subtask
// being described: a search indexes the entries appended since the last
// one, then looks the value up, so that listing n values once each costs
// time linear in n, not quadratic as scanning the list for each would. A
// few entries are quicker to scan: callers scan short lists and use a
// FirstIndex past a length of their choosing. The zero value is empty.
type FirstIndex[K comparable] struct {
	at map[K]int32
	n  int // entries indexed
}

// Find returns the position of k among the n entries key(0), …,
// key(n-1) of the list as it stands, the first if it occurs more than
// once, or -1. The entries indexed before must be the list's first ones,
// unchanged: n never falls between Resets.
func (x *FirstIndex[K]) Find(n int, key func(int) K, k K) int {
	if x.at == nil {
		x.at = make(map[K]int32)
	}
	for i := x.n; i < n; i++ {
		e := key(i)
		if _, ok := x.at[e]; !ok { // the first holds, as a scan finds it
			x.at[e] = int32(i)
		}
	}
	x.n = max(x.n, n)
	if i, ok := x.at[k]; ok {
		return int(i)
	}
	return -1
}

// Reset empties x for another list. An index of more than keep entries
// is let go rather than kept for reuse.
func (x *FirstIndex[K]) Reset(keep int) {
	switch {
	case x.n == 0:
	case x.n > keep:
		x.at = nil
	default:
		clear(x.at)
	}
	x.n = 0
}
