package objectstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

// TestObjectTableAgreesWithMap applies random puts, gets and removes to an
// objectTable and to a Go map, and checks after each that they agree: the
// entry found (or not) for the ID touched, the count, and, every so often,
// the whole contents through all. IDs come from a few stages with dense
// runs of indexes, as a raylet's do, and some from anywhere, so that runs
// collide and probe sequences wrap around the table's end; the table fills
// and drains three times over.
func TestObjectTableAgreesWithMap(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var tab objectTable
		ref := map[dag.ObjectID]*entry{}
		randomID := func() dag.ObjectID {
			if rng.IntN(8) == 0 { // anywhere
				var id dag.ObjectID
				for k := range id {
					id[k] = byte(rng.Uint32())
				}
				id[0] |= 1 // never zero
				return id
			}
			st := dag.PackSubtaskID(dag.TaskID(1+rng.IntN(3)), dag.StageID(rng.IntN(2)), uint64(rng.IntN(3000)))
			return dag.NewObjectID(st, uint32(rng.IntN(2)))
		}
		// Grow to thousands of objects, drain to a few, three times.
		for phase := 0; phase < 6; phase++ {
			grow := phase%2 == 0
			for step := 0; step < 20000; step++ {
				id := randomID()
				switch r := rng.IntN(10); {
				case r < 5 && grow, r < 2:
					e := &entry{id: id}
					tab.put(id, e)
					ref[id] = e
				case r < 8:
					tab.remove(id)
					delete(ref, id)
				}
				if got, want := tab.get(id), ref[id]; got != want {
					t.Fatalf("seed %d phase %d step %d: get %v = %p, want %p", seed, phase, step, id, got, want)
				}
				if tab.len() != len(ref) {
					t.Fatalf("seed %d phase %d step %d: len %d, want %d", seed, phase, step, tab.len(), len(ref))
				}
				if len(tab.slots) > 0 && 2*tab.n > len(tab.slots) {
					t.Fatalf("%d entries in %d slots: more than half full", tab.n, len(tab.slots))
				}
				if step%997 == 0 {
					checkTable(t, &tab, ref)
				}
			}
			checkTable(t, &tab, ref)
		}
		for id := range ref {
			tab.remove(id)
		}
		if tab.len() != 0 {
			t.Fatalf("seed %d: emptied table holds %d entries", seed, tab.len())
		}
		checkTable(t, &tab, map[dag.ObjectID]*entry{})
	}
}

// checkTable checks that all yields exactly ref and that every entry can
// be reached from its home without crossing an empty slot.
func checkTable(t *testing.T, tab *objectTable, ref map[dag.ObjectID]*entry) {
	t.Helper()
	seen := map[dag.ObjectID]bool{}
	for id, e := range tab.all() {
		if seen[id] {
			t.Fatalf("all yields %v twice", id)
		}
		seen[id] = true
		if ref[id] != e {
			t.Fatalf("all yields %v = %p, want %p", id, e, ref[id])
		}
	}
	if len(seen) != len(ref) {
		t.Fatalf("all yields %d entries, want %d", len(seen), len(ref))
	}
	mask := uint64(len(tab.slots) - 1)
	for i, s := range tab.slots {
		if s.e == nil {
			continue
		}
		for j := tab.home(s.id) & mask; j != uint64(i); j = (j + 1) & mask {
			if tab.slots[j].e == nil {
				t.Fatalf("%v in slot %d is cut off from its home by empty slot %d", s.id, i, j)
			}
		}
	}
}

// TestObjectTableRuns: consecutive indexes of one stage take consecutive
// slots, which is what the table is for.
func TestObjectTableRuns(t *testing.T) {
	var tab objectTable
	st := func(i uint64) dag.ObjectID { return dag.NewObjectID(dag.PackSubtaskID(5, 1, i), 0) }
	for i := uint64(0); i < 1000; i++ {
		tab.put(st(i), &entry{})
	}
	mask := uint64(len(tab.slots) - 1)
	adjacent := 0
	for i := uint64(1); i < 1000; i++ {
		if tab.home(st(i))&mask == (tab.home(st(i-1))+1)&mask {
			adjacent++
		}
	}
	if want := 999 - 999/tableRun; adjacent < want {
		t.Fatalf("%d of 999 next indexes have the next home slot, want at least %d", adjacent, want)
	}
}

// FuzzObjectTable runs a sequence of puts and removes decoded from the
// input against an objectTable and a Go map, then checks they agree. Each
// operation is three bytes: the op, and a stage and index kept small so
// that runs fill, collide and wrap around the table.
func FuzzObjectTable(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 1, 0, 1, 0, 1, 17})
	f.Add([]byte{0, 3, 200, 0, 4, 200, 1, 3, 200, 0, 3, 201})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var tab objectTable
		ref := map[dag.ObjectID]*entry{}
		for k := 0; k+3 <= len(ops); k += 3 {
			st := dag.PackSubtaskID(1, dag.StageID(ops[k+1]%4), uint64(ops[k+2]))
			id := dag.NewObjectID(st, uint32(ops[k+1]>>6))
			if ops[k]%3 == 0 {
				tab.remove(id)
				delete(ref, id)
			} else {
				e := &entry{id: id}
				tab.put(id, e)
				ref[id] = e
			}
			if got, want := tab.get(id), ref[id]; got != want {
				t.Fatalf("op %d: get %v = %p, want %p", k/3, id, got, want)
			}
		}
		if tab.len() != len(ref) {
			t.Fatalf("len %d, want %d", tab.len(), len(ref))
		}
		for id, e := range ref {
			if tab.get(id) != e {
				t.Fatalf("%v lost", id)
			}
		}
		checkTable(t, &tab, ref)
	})
}

// BenchmarkObjectTable: a job's worth of objects of one stage created
// (looked up first, as create checks), looked up and deleted, job after
// job (two jobs' IDs, alternately), in a Go map and in an objectTable,
// with few and with many objects live. ns/object is the cost of one
// object's four operations.
func BenchmarkObjectTable(b *testing.B) {
	for _, live := range []int{1_000, 100_000} {
		var jobs [2][]dag.ObjectID
		for j := range jobs {
			for i := range live {
				jobs[j] = append(jobs[j], dag.NewObjectID(dag.PackSubtaskID(dag.TaskID(j+1), 0, uint64(i)), 0))
			}
		}
		e := &entry{}
		b.Run(fmt.Sprintf("impl=map/live=%d", live), func(b *testing.B) {
			m := map[dag.ObjectID]*entry{}
			n := 0
			for b.Loop() {
				ids := jobs[n%2]
				n++
				for _, id := range ids {
					if m[id] != nil {
						b.Fatal("exists")
					}
					m[id] = e
				}
				for _, id := range ids {
					if m[id] == nil {
						b.Fatal("lost")
					}
					delete(m, id)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*live), "ns/object")
		})
		b.Run(fmt.Sprintf("impl=table/live=%d", live), func(b *testing.B) {
			var t objectTable
			n := 0
			for b.Loop() {
				ids := jobs[n%2]
				n++
				for _, id := range ids {
					if t.get(id) != nil {
						b.Fatal("exists")
					}
					t.put(id, e)
				}
				for _, id := range ids {
					if t.get(id) == nil {
						b.Fatal("lost")
					}
					t.remove(id)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*live), "ns/object")
		})
	}
}
