package lowering_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

func seedExample(t testing.TB, n, chunk int64) *dag.TileableGraph {
	a := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(1))
	b := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(2))
	g, err := tensor.Graph(a.Add(b).Sum())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func opNames(sg *dag.SubtaskGraph, s int32) string {
	var names []string
	for _, c := range sg.ChunksOf(s) {
		names = append(names, dag.Ops.Name(sg.Chunks.Nodes[c].Op))
	}
	return strings.Join(names, "+")
}

func TestSeedExampleFusion(t *testing.T) {
	p, err := lowering.Lower(seedExample(t, 100, 100), 1, lowering.Options{Slots: []int{1}}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	sg := p.Stage
	var got []string
	for s := range sg.Subtasks {
		got = append(got, opNames(sg, int32(s)))
	}
	want := "tensor.rand,tensor.rand,tensor.add+tensor.sum"
	if strings.Join(got, ",") != want {
		t.Fatalf("subtasks %v, want %s", got, want)
	}
	if sg.ID(0).String() != "010000000100010000000000" {
		t.Fatalf("first subtask id %s", sg.ID(0))
	}
	if len(p.Results) != 1 || p.Results[0].Objects[0].Subtask() != sg.ID(2) {
		t.Fatalf("results %+v", p.Results)
	}
}

func TestFusionScalarChain(t *testing.T) {
	// (t+1)*2 on a 9×9 tensor in 3×3 chunks: the scalars fold into the ops'
	// args, so each chunk is one chain: 9 subtasks of [RAND, ADD, MUL].
	x := tensor.Rand([]int64{9, 9}, tensor.Chunks(3), tensor.Seed(1))
	g, err := tensor.Graph(x.Add(tensor.Scalar(1)).Mul(tensor.Scalar(2)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := lowering.Lower(g, 1, lowering.Options{Slots: []int{2, 2}}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	sg := p.Stage
	if sg.Len() != 9 {
		t.Fatalf("%d subtasks, want 9", sg.Len())
	}
	for s := int32(0); s < 9; s++ {
		if got := opNames(sg, s); got != "tensor.rand+tensor.add+tensor.mul" {
			t.Fatalf("subtask %d is %s", s, got)
		}
		if len(sg.OutputsOf(s)) != 1 || sg.Subtasks[s].Raylet < 0 {
			t.Fatalf("subtask %d: outputs %v, raylet %d", s, sg.OutputsOf(s), sg.Subtasks[s].Raylet)
		}
	}
	// Colouring also puts two initial chunks of a raylet in one colour
	// (Mars's initial_same_color_num): 4 subtasks of two chains (run in
	// chunk order), one of one.
	p, err = lowering.Lower(g, 1, lowering.Options{Fusion: lowering.FuseColoring, Slots: []int{2, 2}}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for s := range p.Stage.Subtasks {
		got = append(got, opNames(p.Stage, int32(s)))
	}
	two := "tensor.rand+tensor.rand+tensor.add+tensor.add+tensor.mul+tensor.mul"
	if want := strings.Repeat(two+",", 4) + "tensor.rand+tensor.add+tensor.mul"; strings.Join(got, ",") != want {
		t.Fatalf("colouring: subtasks %v", got)
	}
}

func TestSeedExampleColoring(t *testing.T) {
	// With colouring, each pair of RANDs is fused with its ADD+SUM on one
	// raylet; the combines stay alone.
	p, err := lowering.Lower(seedExample(t, 800, 100), 1, lowering.Options{Fusion: lowering.FuseColoring, Slots: []int{1, 1}}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for s := range p.Stage.Subtasks {
		got = append(got, opNames(p.Stage, int32(s)))
	}
	want := strings.Repeat("tensor.rand+tensor.rand+tensor.add+tensor.sum,", 8) + "tensor.sum.combine,tensor.sum.combine,tensor.sum.combine"
	if strings.Join(got, ",") != want {
		t.Fatalf("subtasks %v", got)
	}
}

func TestSeedExampleSize(t *testing.T) {
	// 100 chunks per input: 200 RANDs, 100 ADD+SUMs, and combines of up to 4
	// partials: 100 -> 25 -> 7 (6 combines, one partial carried up) -> 2 -> 1.
	p, err := lowering.Lower(seedExample(t, 1e7, 1e5), 3, lowering.Options{Slots: []int{2, 2}}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Stage.Len(); got != 334 {
		t.Fatalf("%d subtasks, want 334", got)
	}
	perRaylet := [2]int{}
	for s, st := range p.Stage.Subtasks {
		initial := len(p.Stage.Preds.Row(int32(s))) == 0
		if initial != (st.Raylet >= 0) {
			t.Fatalf("subtask %d initial=%v raylet=%d", s, initial, st.Raylet)
		}
		if initial {
			perRaylet[st.Raylet]++
		}
	}
	if perRaylet != [2]int{100, 100} {
		t.Fatalf("initial subtasks per raylet %v, want [100 100]", perRaylet)
	}
	// Locality: most fused ADD+SUMs read both inputs from one raylet.
	local := 0
	for s := range p.Stage.Subtasks {
		preds := p.Stage.Preds.Row(int32(s))
		if len(preds) == 2 && p.Stage.Subtasks[preds[0]].Raylet >= 0 && p.Stage.Subtasks[preds[0]].Raylet == p.Stage.Subtasks[preds[1]].Raylet {
			local++
		}
	}
	if local < 90 {
		t.Fatalf("only %d of 100 adds have both inputs on one raylet", local)
	}
}

func TestLoweringIsDeterministic(t *testing.T) {
	// The same job with the same committed IDs lowers to byte-identical
	// subtask graphs, with every fusion.
	for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseNone, lowering.FuseColoring} {
		enc := func() []byte {
			p, err := lowering.Lower(seedExample(t, 10000, 37), 9, lowering.Options{Fusion: fusion, Slots: []int{3, 1, 2}}, dag.Ops, lowering.Counter())
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		a, b := enc(), enc()
		if !bytes.Equal(a, b) {
			t.Fatalf("%v: two lowerings of the same job differ", fusion)
		}
		if len(a) < 1000 {
			t.Fatalf("%v: canonical form of %d bytes is too small to hold the plan", fusion, len(a))
		}
	}
}

func TestLowerBadGraphs(t *testing.T) {
	g := seedExample(t, 10, 3)
	g.Nodes[1].ChunkSize = []int64{0}
	if _, err := lowering.Lower(g, 1, lowering.Options{}, dag.Ops, lowering.Counter()); err == nil || !strings.Contains(err.Error(), "chunk size 0") {
		t.Fatalf("chunk size 0: %v", err)
	}
	g = seedExample(t, 10, 3)
	g.Nodes[0].Inputs = []int32{2}
	if _, err := lowering.Lower(g, 1, lowering.Options{}, dag.Ops, lowering.Counter()); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle: %v", err)
	}
}
