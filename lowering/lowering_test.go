package lowering

import (
	"math/rand/v2"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

// chunks builds a chunk graph from input lists (node i reads inputs[i]).
func chunks(t *testing.T, inputs ...[]int32) *dag.ChunkGraph {
	t.Helper()
	g := dag.NewChunkGraph(len(inputs))
	a := g.AddArgs(nil)
	for i, in := range inputs {
		if _, err := g.AddNode(dag.OpID(i), int32(i), a, dag.Float64, in, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func rows(c dag.CSR) [][]int32 {
	var out [][]int32
	for i := 0; i < c.Rows(); i++ {
		out = append(out, append([]int32{}, c.Row(int32(i))...))
	}
	return out
}

func equalRows(a, b [][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func TestFuseChains(t *testing.T) {
	cases := []struct {
		name   string
		graph  [][]int32
		mode   Fusion
		groups [][]int32
	}{
		// RAND, RAND -> ADD -> SUM: ADD and SUM fuse, the RANDs stay alone.
		{"seed example", [][]int32{nil, nil, {0, 1}, {2}}, FuseChain, [][]int32{{0}, {1}, {2, 3}}},
		{"no fusion", [][]int32{nil, nil, {0, 1}, {2}}, FuseNone, [][]int32{{0}, {1}, {2}, {3}}},
		// A chain of four with x+x in the middle (two edges, one predecessor).
		{"chain", [][]int32{nil, {0}, {1, 1}, {2}}, FuseChain, [][]int32{{0, 1, 2, 3}}},
		// A node with two users ends its chain.
		{"fork", [][]int32{nil, {0}, {0}, {1}}, FuseChain, [][]int32{{0}, {1, 3}, {2}}},
	}
	for _, c := range cases {
		g := chunks(t, c.graph...)
		got := rows(fuseChains(g, soleUsers(g), 0, c.mode))
		if !equalRows(got, c.groups) {
			t.Errorf("%s: groups %v, want %v", c.name, got, c.groups)
		}
	}
}

func TestQuotas(t *testing.T) {
	cases := []struct {
		n     int
		slots []int
		want  []int
	}{
		{10, []int{4, 4, 4}, []int{4, 3, 3}},
		{12, []int{4, 4, 4}, []int{4, 4, 4}},
		{10, []int{2, 8}, []int{2, 8}},
		{7, []int{1, 2, 4}, []int{1, 2, 4}},
		{5, []int{1, 1, 3}, []int{1, 1, 3}},
		{3, []int{0, 2}, []int{0, 3}},
	}
	for _, c := range cases {
		got := quotas(c.n, c.slots)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("quotas(%d, %v) = %v, want %v", c.n, c.slots, got, c.want)
				break
			}
		}
	}
}

// lowerChunks lowers a hand-made chunk graph (every chunk a result, so all
// are exported) with the given fusion and raylet slots.
func lowerChunks(t *testing.T, g *dag.ChunkGraph, mode Fusion, slots []int) *dag.SubtaskGraph {
	t.Helper()
	isResult := make([]bool, g.Len())
	sg, err := buildSubtasks(g, fuseChains(g, soleUsers(g), 0, mode), isResult)
	if err != nil {
		t.Fatal(err)
	}
	prioritize(sg)
	assignSubtasks(sg, slots)
	return sg
}

func TestAssignPairs(t *testing.T) {
	// 12 initial nodes paired into 6 adds, on 3 equal raylets: each pair on
	// one raylet, 4 initial nodes per raylet.
	var graph [][]int32
	for p := 0; p < 6; p++ {
		graph = append(graph, nil, nil)
	}
	for p := int32(0); p < 6; p++ {
		graph = append(graph, []int32{2 * p, 2*p + 1})
	}
	sg := lowerChunks(t, chunks(t, graph...), FuseChain, []int{4, 4, 4})
	count := map[int32]int{}
	for p := int32(0); p < 6; p++ {
		a, b := sg.Subtasks[2*p].Raylet, sg.Subtasks[2*p+1].Raylet
		if a < 0 || a != b {
			t.Fatalf("pair %d split across raylets %d and %d", p, a, b)
		}
		count[a] += 2
	}
	for r := int32(0); r < 3; r++ {
		if count[r] != 4 {
			t.Fatalf("raylet %d got %d initial subtasks, want 4 (all: %v)", r, count[r], count)
		}
	}
	for s := 12; s < 18; s++ {
		if sg.Subtasks[s].Raylet != -1 {
			t.Fatalf("non-initial subtask %d was assigned", s)
		}
	}
}

func TestAssignIndependent(t *testing.T) {
	// 10 independent subtasks on slots [4,4,4]: quotas 4,3,3.
	graph := make([][]int32, 10)
	sg := lowerChunks(t, chunks(t, graph...), FuseChain, []int{4, 4, 4})
	count := make([]int, 3)
	for _, s := range sg.Subtasks {
		count[s.Raylet]++
	}
	if count[0] != 4 || count[1] != 3 || count[2] != 3 {
		t.Fatalf("counts %v, want [4 3 3]", count)
	}
}

func TestPriorities(t *testing.T) {
	// 0,1 -> 2 ; 2,3 -> 4 (no fusion): depths 0,0,1,0,2.
	g := chunks(t, nil, nil, []int32{0, 1}, nil, []int32{2, 3})
	sg := lowerChunks(t, g, FuseNone, nil)
	want := []dag.Priority{
		{Depth: 0, DemandDepth: 1, Succs: 1},
		{Depth: 0, DemandDepth: 1, Succs: 1},
		{Depth: 1, DemandDepth: 2, Succs: 1},
		{Depth: 0, DemandDepth: 2, Succs: 1},
		{Depth: 2, DemandDepth: 0, Succs: 0},
	}
	for i, w := range want {
		if sg.Subtasks[i].Priority != w {
			t.Errorf("subtask %d priority %+v, want %+v", i, sg.Subtasks[i].Priority, w)
		}
	}
	// Deeper first, then demanded by deeper, then fewer successors.
	if !want[2].Before(want[0]) || !want[3].Before(want[0]) || want[0].Before(want[1]) {
		t.Fatal("Before disagrees with the policy")
	}
	if !(dag.Priority{Succs: 1}).Before(dag.Priority{Succs: 2}) {
		t.Fatal("fewer successors should go first")
	}
}

func TestAssignSpread(t *testing.T) {
	// 8 initial chunks feeding one reduction, slots [3,1]: quotas 6 and 2,
	// spread ceil(9/2) = 5. Raylet 0's first walk stops after 5 visits
	// (0, the reduction, 1, 2, 3); its second walk, from 4, takes 4 and 5
	// and spends its quota; raylet 1 gets 6 and 7.
	graph := make([][]int32, 8)
	graph = append(graph, []int32{0, 1, 2, 3, 4, 5, 6, 7})
	g := chunks(t, graph...)
	got := assignChunks(g, g.Users(), 0, []int{3, 1})
	want := []int32{0, 0, 0, 0, 0, 0, 1, 1, -1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("raylets %v, want %v", got, want)
		}
	}
}

func TestAssignChunkLevelPairs(t *testing.T) {
	// The pairs test at chunk level (what colouring uses), and with
	// one raylet of zero slots, which gets nothing.
	var graph [][]int32
	for p := 0; p < 6; p++ {
		graph = append(graph, nil, nil)
	}
	for p := int32(0); p < 6; p++ {
		graph = append(graph, []int32{2 * p, 2*p + 1})
	}
	g := chunks(t, graph...)
	for _, slots := range [][]int{{4, 4, 4}, {4, 0, 4, 4}} {
		r := assignChunks(g, g.Users(), 0, slots)
		count := map[int32]int{}
		for p := 0; p < 6; p++ {
			if r[2*p] < 0 || r[2*p] != r[2*p+1] {
				t.Fatalf("slots %v: pair %d on %d and %d", slots, p, r[2*p], r[2*p+1])
			}
			count[r[2*p]] += 2
		}
		for i, s := range slots {
			if want := map[bool]int{true: 4, false: 0}[s > 0]; count[int32(i)] != want {
				t.Fatalf("slots %v: raylet %d got %d, want %d", slots, i, count[int32(i)], want)
			}
		}
	}
}

func TestAssignNoRaylets(t *testing.T) {
	g := chunks(t, nil, nil, []int32{0, 1})
	sg := lowerChunks(t, g, FuseNone, nil)
	for s := range sg.Subtasks {
		if sg.Subtasks[s].Raylet != -1 {
			t.Fatalf("subtask %d placed on %d without raylets", s, sg.Subtasks[s].Raylet)
		}
	}
}

// TestSoleUsers checks soleUsers against the users table on random graphs:
// a chunk's sole user is its one distinct reader, else -1.
func TestSoleUsers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(30)
		inputs := make([][]int32, n)
		for i := 1; i < n; i++ {
			for k := rng.IntN(4); k > 0; k-- {
				inputs[i] = append(inputs[i], int32(rng.IntN(i)))
			}
		}
		g := chunks(t, inputs...)
		users := g.Users()
		sole := soleUsers(g)
		for c := int32(0); c < int32(n); c++ {
			want, ok := only(users.Row(c))
			if !ok {
				want = -1
			}
			if sole[c] != want {
				t.Fatalf("trial %d: sole user of %d is %d, want %d (graph %v)", trial, c, sole[c], want, inputs)
			}
		}
	}
}
