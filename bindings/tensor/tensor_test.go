package tensor

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// heapAlloc is an OutputAllocator backed by the Go heap, for tests.
type heapAlloc struct{ out []dag.Value }

func (h *heapAlloc) Output(i int, m dag.Meta, n int) ([]byte, error) {
	for len(h.out) <= i {
		h.out = append(h.out, dag.Value{})
	}
	f := make([]float64, (n+7)/8)
	b := dag.Float64sAsBytes(f)[:n]
	h.out[i] = dag.Value{Meta: m, Data: b}
	return b, nil
}

// execute runs every chunk of a tiled graph in index order in this process
// and returns the value of each output tileable, assembled from its chunks.
func execute(t *testing.T, ts ...*Tensor) [][]float64 {
	t.Helper()
	g, err := Graph(ts...)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := lowering.Tile(g, dag.Ops)
	if err != nil {
		t.Fatal(err)
	}
	cg := tl.Chunks
	vals := make([]dag.Value, cg.Len())
	for c := int32(0); c < int32(cg.Len()); c++ {
		op, _ := dag.Ops.Lookup(cg.Nodes[c].Op)
		k, ok := op.(dag.Kernel)
		if !ok {
			t.Fatalf("chunk %d: op %s has no kernel", c, op.Name())
		}
		var ins []dag.Value
		for _, in := range cg.Inputs(c) {
			ins = append(ins, vals[in])
		}
		h := &heapAlloc{}
		kc := &dag.KernelCall{Ctx: context.Background(), Args: cg.NodeArgs(c), Index: cg.Index(c),
			Shape: cg.Shape(c), DType: cg.Nodes[c].DType, Inputs: ins, Outputs: h}
		if err := k.Exec(kc); err != nil {
			t.Fatalf("chunk %d (%s): %v", c, op.Name(), err)
		}
		vals[c] = h.out[0]
	}
	var res [][]float64
	for _, o := range g.Outputs {
		res = append(res, assemble(g.Nodes[o].Shape, tl.Grids[o], vals))
	}
	return res
}

// assemble copies chunk values into one row-major array.
func assemble(shape []int64, grid *dag.Grid, vals []dag.Value) []float64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	out := make([]float64, n)
	if len(shape) == 0 {
		out[0] = vals[grid.Chunks[0]].Float64s()[0]
		return out
	}
	offs := make([][]int64, len(shape))
	for d, s := range grid.NSplits {
		offs[d] = make([]int64, len(s))
		for i := 1; i < len(s); i++ {
			offs[d][i] = offs[d][i-1] + s[i-1]
		}
	}
	k := 0
	_ = forEachChunk(grid.NSplits, func(idx []int32, cshape []int64) error {
		v := vals[grid.Chunks[k]].Float64s()
		k++
		cidx := make([]int64, len(cshape))
		for e := range v {
			rem := int64(e)
			for d := len(cshape) - 1; d >= 0; d-- {
				cidx[d] = rem % cshape[d]
				rem /= cshape[d]
			}
			flat := int64(0)
			for d := range shape {
				flat = flat*shape[d] + offs[d][idx[d]] + cidx[d]
			}
			out[flat] = v[e]
		}
		return nil
	})
	return out
}

func TestSplits(t *testing.T) {
	for _, c := range []struct {
		n, c int64
		want []int64
	}{
		{10, 3, []int64{3, 3, 3, 1}},
		{9, 3, []int64{3, 3, 3}},
		{2, 5, []int64{2}},
		{0, 4, []int64{0}},
	} {
		got := splits(c.n, c.c)
		if !sameShape(got, c.want) {
			t.Errorf("splits(%d,%d) = %v, want %v", c.n, c.c, got, c.want)
		}
	}
}

func TestSeedExampleValues(t *testing.T) {
	const n = 1000
	for _, chunk := range []int64{1, 3, 7, 100, 1000, 5000} {
		ones := execute(t, Ones([]int64{n}, Chunks(chunk)).Add(Ones([]int64{n}, Chunks(chunk))).Sum())
		if ones[0][0] != 2*n {
			t.Errorf("chunk %d: (ones+ones).sum() = %v, want %d", chunk, ones[0][0], 2*n)
		}
	}
	a := Rand([]int64{n}, Chunks(64), Seed(7))
	b := Rand([]int64{n}, Chunks(64), Seed(8))
	got := execute(t, a, b, a.Add(b).Sum())
	want := 0.0
	for i := range got[0] {
		if got[0][i] < 0 || got[0][i] >= 1 {
			t.Fatalf("rand value %v outside [0,1)", got[0][i])
		}
		want += got[0][i] + got[1][i]
	}
	if math.Abs(got[2][0]-want) > 1e-9*n {
		t.Fatalf("sum = %v, plain Go = %v", got[2][0], want)
	}
	// Per-chunk seeding: a chunk's values depend on the seed and its index only.
	again := execute(t, Rand([]int64{n}, Chunks(64), Seed(7)))
	for i := range again[0] {
		if again[0][i] != got[0][i] {
			t.Fatalf("rand with the same seed differs at %d", i)
		}
	}
}

func TestElementwise2D(t *testing.T) {
	a := Rand([]int64{7, 5}, Chunks(3, 2), Seed(1))
	b := Full([]int64{7, 5}, 2, Chunks(3, 2))
	res := execute(t, a, a.Sub(b), a.Mul(b), a.Div(b))
	for i, x := range res[0] {
		if res[1][i] != x-2 || res[2][i] != x*2 || res[3][i] != x/2 {
			t.Fatalf("element %d: %v %v %v from %v", i, res[1][i], res[2][i], res[3][i], x)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name string
		t    *Tensor
		want string
	}{
		{"chunk 0", Ones([]int64{10}, Chunks(0)), "chunk size 0"},
		{"shape mismatch", Ones([]int64{10}).Add(Ones([]int64{11})), "shapes [10] and [11] differ"},
		{"chunk dims", Ones([]int64{4, 4}, Chunks(1, 2, 3)), "3 chunk sizes"},
		{"negative", Ones([]int64{-3}), "negative"},
		{"combine", Ones([]int64{4}).SumCombine(1), "combine size 1"},
		{"nil", (*Tensor)(nil).Add(Ones([]int64{1})), "nil"},
	}
	for _, c := range cases {
		_, err := Graph(c.t)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want error mentioning %q", c.name, err, c.want)
		}
	}
}

func TestTileErrorsNameTheNode(t *testing.T) {
	a := Ones([]int64{10}, Chunks(3))
	b := Ones([]int64{10}, Chunks(4))
	g, err := Graph(a.Add(b).Label("total"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lowering.Tile(g, dag.Ops)
	if err == nil || !strings.Contains(err.Error(), `"total"`) || !strings.Contains(err.Error(), "chunked differently") {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("kind = %v", dag.KindOf(err))
	}
	g.Nodes[0].Op = dag.OpIDOf("tensor.nope")
	_, err = lowering.Tile(g, dag.Ops)
	if err == nil || !strings.Contains(err.Error(), "unknown op") || !strings.Contains(err.Error(), "node 0") {
		t.Fatalf("unknown op: %v", err)
	}
	g.Nodes[0].Op = dag.OpIDOf(sumCombineName)
	_, err = lowering.Tile(g, dag.Ops)
	if err == nil || !strings.Contains(err.Error(), "cannot be tiled") {
		t.Fatalf("chunk-level op: %v", err)
	}
}
