package dag

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestTileableValidate(t *testing.T) {
	ok := &TileableGraph{
		Nodes: []TileableNode{
			{Op: 1, Shape: []int64{10}, ChunkSize: []int64{3}},
			{Op: 1, Shape: []int64{10}, ChunkSize: []int64{3}},
			{Op: 2, Inputs: []int32{0, 1}, Shape: []int64{10}},
		},
		Outputs: []int32{2},
	}
	order, err := ok.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[2] != 2 {
		t.Fatalf("order = %v", order)
	}
	bad := []struct {
		name string
		g    TileableGraph
		want string
	}{
		{"empty", TileableGraph{}, "empty"},
		{"no outputs", TileableGraph{Nodes: []TileableNode{{}}}, "no outputs"},
		{"output range", TileableGraph{Nodes: []TileableNode{{}}, Outputs: []int32{4}}, "output 4"},
		{"input range", TileableGraph{Nodes: []TileableNode{{Inputs: []int32{7}}}, Outputs: []int32{0}}, "input 7"},
		{"cycle", TileableGraph{Nodes: []TileableNode{{Inputs: []int32{2}}, {Inputs: []int32{0}}, {Inputs: []int32{1}}}, Outputs: []int32{2}}, "cycle"},
		{"self loop", TileableGraph{Nodes: []TileableNode{{}, {Inputs: []int32{1}, Label: "x"}}, Outputs: []int32{1}}, `node 1 "x"`},
		{"chunk 0", TileableGraph{Nodes: []TileableNode{{Shape: []int64{10}, ChunkSize: []int64{0}}}, Outputs: []int32{0}}, "chunk size 0"},
		{"chunk dims", TileableGraph{Nodes: []TileableNode{{Shape: []int64{10, 2}, ChunkSize: []int64{3}}}, Outputs: []int32{0}}, "1 chunk sizes"},
		{"negative", TileableGraph{Nodes: []TileableNode{{Shape: []int64{-1}}}, Outputs: []int32{0}}, "negative"},
		{"elements overflow", TileableGraph{Nodes: []TileableNode{{Shape: []int64{1 << 62, 4}, Label: "big"}}, Outputs: []int32{0}},
			`node 0 "big" (op#00000000): shape [4611686018427387904 4] has more than 9007199254740992 (2^53) elements`},
		{"zero does not excuse", TileableGraph{Nodes: []TileableNode{{Shape: []int64{0, 1 << 31, 1 << 31, 1 << 31}}}, Outputs: []int32{0}}, "(2^53) elements"},
		{"dims", TileableGraph{Nodes: []TileableNode{{Shape: make([]int64, 65)}}, Outputs: []int32{0}}, "65 dimensions"},
	}
	for _, c := range bad {
		_, err := c.g.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument mentioning %q", c.name, err, c.want)
		}
	}
}

func TestChunkGraph(t *testing.T) {
	g := NewChunkGraph(4)
	a := g.AddArgs([]byte{1})
	c0, _ := g.AddNode(1, 0, a, Float64, nil, []int32{0}, []int64{3})
	c1, _ := g.AddNode(1, 0, a, Float64, nil, []int32{1}, []int64{3})
	c2, err := g.AddNode(2, 1, a, Float64, []int32{c0, c1}, []int32{0}, []int64{3})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Inputs(c2); len(got) != 2 || got[0] != c0 || got[1] != c1 {
		t.Fatalf("inputs = %v", got)
	}
	if g.Shape(c1)[0] != 3 || g.Index(c1)[0] != 1 {
		t.Fatalf("shape %v index %v", g.Shape(c1), g.Index(c1))
	}
	if _, err := g.AddNode(2, 1, a, Float64, []int32{5}, nil, nil); err == nil {
		t.Fatal("forward edge accepted")
	}
	if _, err := g.AddNode(2, 1, a, Float64, nil, []int32{0}, nil); err == nil {
		t.Fatal("index/shape mismatch accepted")
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	g.inputs[0] = 2 // corrupt: chunk 2 reads itself
	if err := g.Validate(); err == nil {
		t.Fatal("cycle not detected")
	}
	users := g.Users()
	if got := users.Row(c0); len(got) != 0 {
		t.Fatalf("users of c0 after corruption = %v", got)
	}
}

func TestSubtaskGraphLink(t *testing.T) {
	g := NewChunkGraph(4)
	a := g.AddArgs(nil)
	r0, _ := g.AddNode(1, 0, a, Float64, nil, []int32{0}, []int64{3})
	r1, _ := g.AddNode(1, 1, a, Float64, nil, []int32{0}, []int64{3})
	add, _ := g.AddNode(2, 2, a, Float64, []int32{r0, r1}, []int32{0}, []int64{3})
	sum, _ := g.AddNode(3, 3, a, Float64, []int32{add}, nil, nil)
	sg := NewSubtaskGraph(g, 3)
	sg.Task, sg.Stage, sg.Base = 5, 1, 10
	sg.AddSubtask([]int32{r0}, []int32{r0})
	sg.AddSubtask([]int32{r1}, []int32{r1})
	sg.AddSubtask([]int32{add, sum}, []int32{sum})
	if err := sg.Link(); err != nil {
		t.Fatal(err)
	}
	if p := sg.Preds.Row(2); len(p) != 2 || p[0] != 0 || p[1] != 1 {
		t.Fatalf("preds of fused subtask = %v", p)
	}
	if s := sg.Succs.Row(0); len(s) != 1 || s[0] != 2 {
		t.Fatalf("succs of rand = %v", s)
	}
	if o, ok := sg.ObjectOf(sum); !ok || o.Subtask() != sg.ID(2) || o.Output() != 0 || o.Subtask().Index() != 12 {
		t.Fatalf("object of sum = %s, %v", o, ok)
	}
	if _, ok := sg.ObjectOf(add); ok {
		t.Fatal("fused intermediate has an object")
	}
	for _, base := range []uint64{10, 1<<40 + 7} { // indexes past 32 bits too
		sg.Base = base
		out := make([]ObjectID, 3)
		if n := sg.ObjectsOf([]int32{sum, r1, r0}, out); n != 3 {
			t.Fatalf("ObjectsOf wrote %d of 3", n)
		}
		for i, c := range []int32{sum, r1, r0} {
			if want, _ := sg.ObjectOf(c); out[i] != want {
				t.Fatalf("base %d: ObjectsOf gives chunk %d %s, ObjectOf %s", base, c, out[i], want)
			}
		}
		if n := sg.ObjectsOf([]int32{r1, add, sum}, out); n != 1 {
			t.Fatalf("ObjectsOf stopped after %d chunks, want 1 (add has no object)", n)
		}
	}
	sg.Base = 10

	bad := NewSubtaskGraph(g, 2)
	bad.AddSubtask([]int32{r0, r1}, []int32{r0})
	bad.AddSubtask([]int32{add, sum}, []int32{sum})
	if err := bad.Link(); err == nil || !strings.Contains(err.Error(), "does not export") {
		t.Fatalf("unexported read: %v", err)
	}
	cyc := NewSubtaskGraph(g, 2)
	cyc.AddSubtask([]int32{r0, sum}, []int32{r0})
	cyc.AddSubtask([]int32{r1, add}, []int32{r1, add})
	if err := cyc.Link(); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cyclic grouping: %v", err)
	}
}

func TestValidateManyInputs(t *testing.T) {
	// More edges than nodes, including repeated inputs (x+x).
	g := &TileableGraph{
		Nodes:   []TileableNode{{}, {Inputs: []int32{0, 0, 0}}, {Inputs: []int32{0, 1, 1, 0}}},
		Outputs: []int32{2},
	}
	order, err := g.Validate()
	if err != nil || len(order) != 3 || order[0] != 0 || order[2] != 2 {
		t.Fatalf("order %v, err %v", order, err)
	}
}

func TestCheckShapeAndSaturation(t *testing.T) {
	for _, ok := range [][]int64{nil, {0}, {1 << 53}, {1 << 26, 1 << 27}, {-1, 1 << 53}, {0, 1 << 53}} {
		if err := CheckShape(ok); err != nil {
			t.Errorf("CheckShape(%v) = %v", ok, err)
		}
	}
	for _, bad := range [][]int64{{1<<53 + 1}, {1 << 62, 4}, {1 << 32, 1 << 32}, {-2}, {3, 1 << 62, 1 << 62, 0}} {
		if err := CheckShape(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CheckShape(%v) = %v, want invalid argument", bad, err)
		}
	}
	m := Meta{DType: Int64, Shape: []int64{1 << 62, 4}}
	if m.Elements() != math.MaxInt64 || m.Bytes() != math.MaxInt64 {
		t.Errorf("meta %v: %d elements, %d bytes; want both saturated, not wrapped to 0", m.Shape, m.Elements(), m.Bytes())
	}
	if u := (Meta{DType: Float64, Shape: []int64{3, -1}}); u.Elements() != -1 || u.Bytes() != -1 {
		t.Errorf("unknown meta: %d elements, %d bytes", u.Elements(), u.Bytes())
	}
	if (Meta{DType: Float64, Shape: []int64{1 << 53}}).Bytes() != 1<<56 {
		t.Error("2^53 float64s are not 2^56 bytes")
	}
	if SatMul(1<<32, 1<<31) != 1<<63-1 || SatMul(1<<31, 1<<31) != 1<<62 || SatAdd(math.MaxInt64, 1) != math.MaxInt64 || SatMul(0, math.MaxInt64) != 0 {
		t.Error("saturating arithmetic")
	}
	for _, c := range []struct{ n, c, want int64 }{{0, 5, 1}, {10, 3, 4}, {9, 3, 3}, {math.MaxInt64, math.MaxInt64, 1}, {1 << 53, 1, 1 << 53}, {5, 0, 5}} {
		if got := ChunksAlong(c.n, c.c); got != c.want {
			t.Errorf("ChunksAlong(%d, %d) = %d, want %d", c.n, c.c, got, c.want)
		}
	}
	for _, c := range []struct{ leaves, combine, want int64 }{{1, 4, 0}, {2, 4, 1}, {4, 4, 1}, {5, 4, 2}, {16, 4, 5}, {17, 4, 6}, {8, 2, 7}, {1 << 25, 4, 11184811}} {
		if got := TreeNodes(c.leaves, c.combine); got != c.want {
			t.Errorf("TreeNodes(%d, %d) = %d, want %d", c.leaves, c.combine, got, c.want)
		}
	}
}

// TestGroupSubtasksMatchesLink checks GroupSubtasks against AddSubtask and
// Link on random graphs, random groupings (in topological order and not)
// and random exports: the same subtasks, outputs, owners, output indexes,
// predecessors and successors.
func TestGroupSubtasksMatchesLink(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(40)
		if trial >= 296 {
			n = 3 * parallelGroup // big enough to link successors on a goroutine
		}
		maxIn := 4
		if trial%10 == 9 {
			// Gathers: subtasks with more predecessors than are scanned
			// for repeats (scanPreds), many of them read twice.
			n, maxIn = 300, 120
		}
		g := NewChunkGraph(n)
		a := g.AddArgs(nil)
		lo := rng.IntN(n) / 4 // chunks below lo are in no group (fetched)
		for i := 0; i < n; i++ {
			var in []int32
			for k := rng.IntN(maxIn); k > 0 && i > 0; k-- {
				in = append(in, int32(rng.IntN(i)))
			}
			if _, err := g.AddNode(1, int32(i), a, Float64, in, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		// Random groups of consecutive chunks lo…n-1, sometimes shuffled.
		var rowsOf [][]int32
		for c := lo; c < n; {
			k := 1 + rng.IntN(3)
			var row []int32
			for ; k > 0 && c < n; k-- {
				row = append(row, int32(c))
				c++
			}
			rowsOf = append(rowsOf, row)
		}
		if trial%3 == 0 {
			rng.Shuffle(len(rowsOf), func(i, j int) { rowsOf[i], rowsOf[j] = rowsOf[j], rowsOf[i] })
		}
		groups := CSR{Off: []int32{0}}
		for _, r := range rowsOf {
			groups.Dst = append(groups.Dst, r...)
			groups.Off = append(groups.Off, int32(len(groups.Dst)))
		}
		export := make([]bool, n)
		for i := range export {
			export[i] = rng.IntN(5) == 0
		}

		// The reference: AddSubtask with the outputs computed from users.
		users := g.Users()
		groupOf := make([]int32, n)
		for i := range groupOf {
			groupOf[i] = -1
		}
		for s, r := range rowsOf {
			for _, c := range r {
				groupOf[c] = int32(s)
			}
		}
		want := NewSubtaskGraph(g, len(rowsOf))
		for s, r := range rowsOf {
			var outs []int32
			for _, c := range r {
				ex := export[c]
				for _, u := range users.Row(c) {
					ex = ex || groupOf[u] != int32(s)
				}
				if ex {
					outs = append(outs, c)
				}
			}
			want.AddSubtask(r, outs)
		}
		werr := want.Link()
		// then must see the final Preds and Succs, and run only on success.
		seen := make(chan [2]CSR, 1)
		got, gerr := GroupSubtasksThen(g, groups, export, func(sg *SubtaskGraph) {
			seen <- [2]CSR{sg.Preds, sg.Succs}
		})
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("trial %d: Link says %v, GroupSubtasks says %v", trial, werr, gerr)
		}
		if werr != nil {
			if !strings.Contains(gerr.Error(), "cycle") {
				t.Fatalf("trial %d: %v, want a cycle", trial, gerr)
			}
			select {
			case <-seen:
				t.Fatalf("trial %d: then ran although grouping failed", trial)
			default:
			}
			continue
		}
		if linked := <-seen; !reflect.DeepEqual(linked[0], want.Preds) || !reflect.DeepEqual(linked[1], want.Succs) {
			t.Fatalf("trial %d: then saw preds %v succs %v, want %v %v", trial, linked[0], linked[1], want.Preds, want.Succs)
		}
		if !reflect.DeepEqual(got.Subtasks, want.Subtasks) || !reflect.DeepEqual(got.Owner, want.Owner) ||
			!reflect.DeepEqual(got.OutIndex, want.OutIndex) || !reflect.DeepEqual(got.Preds, want.Preds) ||
			!reflect.DeepEqual(got.Succs, want.Succs) {
			t.Fatalf("trial %d: GroupSubtasks differs from AddSubtask+Link:\n got %+v\nwant %+v", trial, got, want)
		}
		for s := range rowsOf {
			if !slices.Equal(got.ChunksOf(int32(s)), want.ChunksOf(int32(s))) || !slices.Equal(got.OutputsOf(int32(s)), want.OutputsOf(int32(s))) {
				t.Fatalf("trial %d: subtask %d: chunks %v outputs %v, want %v %v", trial, s,
					got.ChunksOf(int32(s)), got.OutputsOf(int32(s)), want.ChunksOf(int32(s)), want.OutputsOf(int32(s)))
			}
		}
	}
}

// TestInvertMatchesInvertCSR holds CSR.Invert, which fills its rows through
// its own offsets, to invertCSR on random tables of n rows over n nodes
// (empty rows, repeated entries, nodes nothing points at, none at all).
func TestInvertMatchesInvertCSR(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 300; trial++ {
		n := rng.IntN(20)
		rows := n
		c := CSR{Off: make([]int32, 1, rows+1)}
		for i := 0; i < rows; i++ {
			for k := rng.IntN(4); k > 0 && n > 0; k-- {
				c.Dst = append(c.Dst, int32(rng.IntN(n)))
			}
			c.Off = append(c.Off, int32(len(c.Dst)))
		}
		got, want := c.Invert(n), invertCSR(n, func(i int) []int32 { return c.Row(int32(i)) })
		if !slices.Equal(got.Off, want.Off) || !slices.Equal(got.Dst, want.Dst) {
			t.Fatalf("trial %d: %v inverted to %v, want %v", trial, c, got, want)
		}
	}
}

// invertCSR, the reference TestInvertMatchesInvertCSR holds CSR.Invert to,
// builds, for n nodes whose edges point at row(i), the reverse
// table: for each node, the nodes whose rows contain it, in ascending order.
func invertCSR(n int, row func(i int) []int32) CSR {
	off := make([]int32, n+1)
	for i := 0; i < n; i++ {
		for _, d := range row(i) {
			off[d+1]++
		}
	}
	for i := 0; i < n; i++ {
		off[i+1] += off[i]
	}
	dst := make([]int32, off[n])
	fill := make([]int32, n)
	copy(fill, off[:n])
	for i := 0; i < n; i++ {
		for _, d := range row(i) {
			dst[fill[d]] = int32(i)
			fill[d]++
		}
	}
	return CSR{Off: off, Dst: dst}
}
