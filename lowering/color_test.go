package lowering

import (
	"math/rand/v2"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

// colorGroups colours a hand-made chunk graph with the given raylet per
// initial chunk (others -1).
func colorGroups(t *testing.T, inputs [][]int32, raylet map[int32]int32, per, bcast int) [][]int32 {
	t.Helper()
	g := chunks(t, inputs...)
	r := make([]int32, g.Len())
	for i := range r {
		r[i] = -1
	}
	for c, x := range raylet {
		r[c] = x
	}
	return rows(fuseColoring(g, g.Users(), 0, r, per, bcast))
}

func TestColoring(t *testing.T) {
	// Mars's test graphs (services/task/analyzer/tests/test_fusion.py).
	twoLines := [][]int32{nil, nil, {0, 1}, {2}, nil, nil, {4, 5}, {6}}
	// Mars's complex graph renumbered topologically (Mars's 8, 9, 10 are
	// 5, 6, 7 here; its 5, 6, 7 are 8, 9, 10).
	complex := [][]int32{
		nil, nil, {0, 1}, {2}, {3}, // 0-4
		nil, nil, {5, 6}, {2, 7}, {8}, {4, 9}, {7}, {9, 11}, // 5-12
	}
	cases := []struct {
		name   string
		graph  [][]int32
		raylet map[int32]int32
		per    int
		bcast  int
		want   [][]int32
	}{
		// 0,1 on raylet A and 4,5 on raylet B: exactly two subtasks.
		{"two lines", twoLines, map[int32]int32{0: 0, 1: 0, 4: 1, 5: 1}, 0, 0,
			[][]int32{{0, 1, 2, 3}, {4, 5, 6, 7}}},
		// One initial chunk per colour: the initial chunks stay apart, and
		// the add starts its own colour with its successor.
		{"one per colour", twoLines, map[int32]int32{0: 0, 1: 0, 4: 1, 5: 1}, 1, 0,
			[][]int32{{0}, {1}, {2, 3}, {4}, {5}, {6, 7}}},
		// 2 is read by 3 (its colour) and 8 (another): 3 starts a new
		// colour; likewise 11 after 7. Seven colours, as in Mars.
		{"complex", complex, map[int32]int32{0: 0, 1: 0, 5: 1, 6: 1}, 0, 0,
			[][]int32{{0, 1, 2}, {3, 4}, {5, 6, 7}, {8, 9}, {10}, {11}, {12}}},
		// A chunk read twice is not a broadcaster by default...
		{"fan-out", [][]int32{nil, {0}, {0}}, map[int32]int32{0: 0}, 0, 0,
			[][]int32{{0, 1, 2}}},
		// ...but is with a threshold of 1: each reader takes a new colour.
		{"broadcaster", [][]int32{nil, {0}, {0}}, map[int32]int32{0: 0}, 0, 1,
			[][]int32{{0}, {1}, {2}}},
		// Initial chunks read together share a colour even when their
		// indexes are far apart (the seed example: a_i and b_i).
		{"pairs", [][]int32{nil, nil, nil, nil, {0, 2}, {1, 3}, {4}, {5}}, map[int32]int32{0: 0, 1: 0, 2: 0, 3: 0}, 0, 0,
			[][]int32{{0, 2, 4, 6}, {1, 3, 5, 7}}},
		// Chunks on different raylets never share a colour, and neither do
		// their readers.
		{"split raylets", [][]int32{nil, nil, {0, 1}}, map[int32]int32{0: 0, 1: 1}, 0, 0,
			[][]int32{{0}, {1}, {2}}},
	}
	for _, c := range cases {
		got := colorGroups(t, c.graph, c.raylet, c.per, c.bcast)
		if !equalRows(got, c.want) {
			t.Errorf("%s: groups %v, want %v", c.name, got, c.want)
		}
	}
}

func TestColoringLowersTwoLines(t *testing.T) {
	// The same two lines through the whole pipeline: chunk-level initial
	// assignment on two raylets, then colouring.
	g := chunks(t, nil, nil, []int32{0, 1}, []int32{2}, nil, nil, []int32{4, 5}, []int32{6})
	users := g.Users()
	raylet := assignChunks(g, users, 0, []int{1, 1})
	if raylet[0] != raylet[1] || raylet[4] != raylet[5] || raylet[0] == raylet[4] {
		t.Fatalf("chunk raylets %v: want 0,1 together and 4,5 together elsewhere", raylet)
	}
	groups := fuseColoring(g, users, 0, raylet, 0, 0)
	if got, want := rows(groups), [][]int32{{0, 1, 2, 3}, {4, 5, 6, 7}}; !equalRows(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	sg, err := buildSubtasks(g, groups, make([]bool, g.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if sg.Len() != 2 || len(sg.Preds.Row(0)) != 0 || len(sg.Preds.Row(1)) != 0 {
		t.Fatalf("%d subtasks, preds %v %v", sg.Len(), sg.Preds.Row(0), sg.Preds.Row(1))
	}
}

// TestColoringIsAcyclic colours random DAGs with random placements and
// checks what colouring promises: every chunk in exactly one group, groups
// in topological order, each in execution order, a subtask graph that
// links (no cycle), and each colour's chunks on one raylet.
func TestColoringIsAcyclic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 2 + rng.IntN(60)
		inputs := make([][]int32, n)
		for i := 1; i < n; i++ {
			if rng.IntN(4) == 0 {
				continue // a source
			}
			for k := 1 + rng.IntN(3); k > 0; k-- {
				inputs[i] = append(inputs[i], int32(rng.IntN(i)))
			}
		}
		g := chunks(t, inputs...)
		users := g.Users()
		raylets := 1 + rng.IntN(3)
		slots := make([]int, raylets)
		for i := range slots {
			slots[i] = 1 + rng.IntN(4)
		}
		raylet := assignChunks(g, users, 0, slots)
		groups := fuseColoring(g, users, 0, raylet, 1+rng.IntN(4), 1+rng.IntN(8))
		seen := make([]int, n)
		last := int32(-1)
		for gi := 0; gi < groups.Rows(); gi++ {
			row := groups.Row(int32(gi))
			if row[0] <= last {
				t.Fatalf("trial %d: groups out of order: %v", trial, rows(groups))
			}
			last = row[0]
			for k, c := range row {
				seen[c]++
				if k > 0 && c <= row[k-1] {
					t.Fatalf("trial %d: group %v not in execution order", trial, row)
				}
			}
			r := int32(-2)
			for _, c := range row {
				if isInitial(g, c, 0) {
					if r != -2 && raylet[c] != r {
						t.Fatalf("trial %d: group %v spans raylets", trial, row)
					}
					r = raylet[c]
				}
			}
		}
		for c, k := range seen {
			if k != 1 {
				t.Fatalf("trial %d: chunk %d in %d groups", trial, c, k)
			}
		}
		if _, err := buildSubtasks(g, groups, make([]bool, n)); err != nil {
			t.Fatalf("trial %d: %v (graph %v, groups %v)", trial, err, inputs, rows(groups))
		}
	}
}

func TestColoringSeedExample(t *testing.T) {
	// a_i, b_i -> add_i -> sum_i; the partial sums combine 4 at a time.
	// Colouring fuses each rand pair with its add and partial sum, on one
	// raylet, and leaves the combines alone.
	b := &fg{}
	a := b.src(80, 10)
	c := b.src(80, 10)
	g := b.out(b.sum(b.add(a, c)))
	tl, err := Tile(g, fakes)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tl.NextStage(1, Options{Fusion: FuseColoring, Slots: []int{2, 2}}, Counter())
	if err != nil {
		t.Fatal(err)
	}
	sg := p.Stage
	// 8 fused groups [a_i b_i add_i sum_i] + combines 8 -> 2 -> 1.
	if sg.Len() != 11 {
		t.Fatalf("%d subtasks, want 11", sg.Len())
	}
	perRaylet := map[int32]int{}
	for s := int32(0); s < 8; s++ {
		names := ""
		for _, c := range sg.ChunksOf(s) {
			names += fakes.Name(sg.Chunks.Nodes[c].Op) + " "
		}
		if names != "f.src f.src f.add f.sum " {
			t.Fatalf("subtask %d is %q", s, names)
		}
		if r := sg.Subtasks[s].Raylet; r < 0 {
			t.Fatalf("initial subtask %d not placed", s)
		} else {
			perRaylet[r]++
		}
	}
	if perRaylet[0] != 4 || perRaylet[1] != 4 {
		t.Fatalf("initial subtasks per raylet %v, want 4 and 4", perRaylet)
	}
	for s := int32(8); s < 11; s++ {
		if sg.Subtasks[s].Raylet != -1 || len(sg.ChunksOf(s)) != 1 {
			t.Fatalf("subtask %d: raylet %d, %d chunks", s, sg.Subtasks[s].Raylet, len(sg.ChunksOf(s)))
		}
	}
	_ = dag.Float64
}
