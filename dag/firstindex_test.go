package dag

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFirstIndexMatchesScan: over lists that grow between searches, with
// repeats, Find answers what a scan of the list as it stands answers (the
// first position of the value, or -1), and after Reset it serves another
// list the same way, whether it kept its map or let it go.
func TestFirstIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var x FirstIndex[int32]
	for list := range 300 {
		var l []int32
		universe := int32(1 + rng.IntN(200))
		for range rng.IntN(400) {
			v := rng.Int32N(universe)
			want := slices.Index(l, v)
			got := x.Find(len(l), func(i int) int32 { return l[i] }, v)
			if got != want {
				t.Fatalf("list %d of %d entries: Find(%d) = %d, a scan finds %d", list, len(l), v, got, want)
			}
			if rng.IntN(4) > 0 { // most values are appended whether seen or not: repeats
				l = append(l, v)
			}
		}
		const keep = 64
		indexed := x.n
		x.Reset(keep)
		switch {
		case x.n != 0 || len(x.at) != 0:
			t.Fatalf("list %d: Reset left %d entries indexed, %d keys", list, x.n, len(x.at))
		case indexed > keep && x.at != nil:
			t.Fatalf("list %d: Reset(%d) kept the map of %d entries", list, keep, indexed)
		case indexed > 0 && indexed <= keep && x.at == nil:
			t.Fatalf("list %d: Reset(%d) let go of the map of %d entries", list, keep, indexed)
		}
	}
}
