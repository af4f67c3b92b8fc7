package lowering_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// run lowers the tensors stage by stage and runs them in this process
// (lowering.RunStages), returning the plans and the outputs.
func run(t *testing.T, opts lowering.Options, ts ...*tensor.Tensor) ([]*lowering.Plan, []dag.Value) {
	t.Helper()
	g, err := tensor.Graph(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return lowering.RunStages(t, g, dag.Ops, opts)
}

func TestUniqueStages(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 20; trial++ {
		n := 1 + rng.IntN(300)
		data := make([]int64, n)
		for i := range data {
			data[i] = rng.Int64N(int64(1 + rng.IntN(50)))
		}
		chunk := int64(1 + rng.IntN(40))
		out := int64(1 + rng.IntN(20))
		x := tensor.FromInts(data, []int64{int64(n)}, tensor.Chunks(chunk))
		fusion := []lowering.Fusion{lowering.FuseChain, lowering.FuseNone, lowering.FuseColoring}[trial%3]
		plans, vals := run(t, lowering.Options{Fusion: fusion, Slots: []int{2, 1}}, x.Unique(tensor.Chunks(out)))

		want := slices.Clone(data)
		slices.Sort(want)
		want = slices.Compact(want)
		if got := vals[0].Int64s(); !slices.Equal(got, want) {
			t.Fatalf("trial %d (n=%d chunk=%d): unique = %v, want %v", trial, n, chunk, got, want)
		}
		if len(plans) != 2 {
			t.Fatalf("trial %d: %d stages, want 2", trial, len(plans))
		}
		r := plans[1].Results[0]
		if r.Meta.Shape[0] != int64(len(want)) || r.NSplits[0][0] != min(out, int64(len(want))) {
			t.Fatalf("trial %d: result meta %v nsplits %v, want %d values in chunks of %d", trial, r.Meta, r.NSplits, len(want), out)
		}
	}
}

func TestUniqueFloatsWithNaN(t *testing.T) {
	data := []float64{3, math.NaN(), 1, 3, 2, math.NaN(), 1, -0.5, 2}
	x := tensor.FromSlice(data, []int64{int64(len(data))}, tensor.Chunks(2))
	_, vals := run(t, lowering.Options{}, x.Unique(tensor.Chunks(3)))
	got := vals[0].Float64s()
	want := []float64{-0.5, 1, 2, 3}
	if len(got) != 5 || !slices.Equal(got[:4], want) || !math.IsNaN(got[4]) {
		t.Fatalf("unique = %v, want %v then one NaN", got, want)
	}
}

func TestSelectStages(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 20; trial++ {
		n := rng.IntN(200) + 1
		data := make([]float64, n)
		mask := make([]int64, n)
		var want []float64
		keep := rng.Float64()
		for i := range data {
			data[i] = rng.Float64()
			if rng.Float64() < keep {
				mask[i] = 1 + rng.Int64N(3)
				want = append(want, data[i])
			}
		}
		chunk := int64(1 + rng.IntN(30))
		x := tensor.FromSlice(data, []int64{int64(n)}, tensor.Chunks(chunk))
		m := tensor.FromInts(mask, []int64{int64(n)}, tensor.Chunks(chunk))
		// Downstream of the selection: +1 and a sum, tiled in stage 2.
		sel := x.Select(m, tensor.Chunks(1+int64(rng.IntN(25))))
		plans, vals := run(t, lowering.Options{Slots: []int{1, 1}}, sel, sel.Add(tensor.Scalar(1)).Sum())
		if got := vals[0].Float64s(); !slices.Equal(got, want) {
			t.Fatalf("trial %d: x[mask] = %v, want %v", trial, got, want)
		}
		sum := 0.0
		for _, v := range want {
			sum += v + 1
		}
		if got := vals[1].Float64s(); len(got) != 1 || math.Abs(got[0]-sum) > 1e-9*max(1, math.Abs(sum)) {
			t.Fatalf("trial %d: sum(x[mask]+1) = %v, want %v", trial, got, sum)
		}
		if len(plans) != 2 || (len(want) > 0 && len(plans[1].Fetches) == 0) {
			t.Fatalf("trial %d: %d stages; stage 2 fetches %d objects", trial, len(plans), len(plans[len(plans)-1].Fetches))
		}
	}
}

func TestUniqueOfSelection(t *testing.T) {
	// Two data-dependent steps in a row: three stages.
	data := []int64{5, 1, 5, 2, 9, 1, 7, 2, 2, 8}
	mask := []int64{1, 1, 0, 1, 0, 1, 1, 0, 1, 0}
	x := tensor.FromInts(data, []int64{10}, tensor.Chunks(3))
	m := tensor.FromInts(mask, []int64{10}, tensor.Chunks(3))
	plans, vals := run(t, lowering.Options{Fusion: lowering.FuseColoring, Slots: []int{2}}, x.Select(m).Unique(tensor.Chunks(2)))
	if got, want := vals[0].Int64s(), []int64{1, 2, 5, 7}; !slices.Equal(got, want) {
		t.Fatalf("unique(x[mask]) = %v, want %v", got, want)
	}
	if len(plans) != 3 {
		t.Fatalf("%d stages, want 3", len(plans))
	}
}

func TestMultiStageDeterministic(t *testing.T) {
	// Two runs of the same multi-stage job give byte-identical plans at
	// every stage, with chain fusion and with colouring.
	for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseColoring} {
		enc := func() [][]byte {
			x := tensor.Rand([]int64{5000}, tensor.Chunks(100), tensor.Seed(9))
			u := x.Mul(tensor.Scalar(20)).AsType(dag.Int64).Unique(tensor.Chunks(4))
			plans, _ := run(t, lowering.Options{Fusion: fusion, Slots: []int{2, 2}}, u, x.Sum())
			var out [][]byte
			for _, p := range plans {
				b, err := p.Canonical()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, b)
			}
			return out
		}
		a, b := enc(), enc()
		if len(a) != 2 || len(a) != len(b) {
			t.Fatalf("%v: %d and %d stages", fusion, len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("%v: stage %d differs between two lowerings", fusion, i+1)
			}
		}
	}
}
