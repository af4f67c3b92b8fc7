package phobos_test

import (
	"math"
	"sort"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
)

// TestMultiStageJobs runs jobs whose tiling needs computed data (Unique,
// a mask selection), so the head lowers and runs them in several stages.
func TestMultiStageJobs(t *testing.T) {
	c, ctx := local(t, 2)
	data := make([]int64, 1000)
	for i := range data {
		data[i] = int64((i * 7919) % 97)
	}
	x := tensor.FromInts(data, []int64{1000}, tensor.Chunks(64))

	// Unique: a data-dependent length, then more work on the result.
	j, err := c.Submit(ctx, graphOf(x.Unique(tensor.Chunks(10)), x.Unique().Sum()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	var want []int64
	var wantSum int64
	for _, v := range data {
		if !seen[v] {
			seen[v] = true
			want = append(want, v)
			wantSum += v
		}
	}
	sort.Slice(want, func(a, b int) bool { return want[a] < want[b] })
	got := res.Values[0].Int64s()
	if len(got) != len(want) {
		t.Fatalf("unique: %d values, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("unique[%d] = %d, want %d", i, got[i], want[i])
		}
	}
	if s := res.Values[1].Int64s(); len(s) != 1 || s[0] != wantSum {
		t.Fatalf("unique().sum() = %v, want %d", s, wantSum)
	}

	// Select: x[x > 50]-style, with a mask computed in the graph, then +1.
	f := tensor.Rand([]int64{5000}, tensor.Chunks(700), tensor.Seed(3))
	mask := f.Sub(tensor.Scalar(0.5)).Maximum(tensor.Scalar(0)) // > 0 where f > 0.5
	sel := f.Select(mask).Add(tensor.Scalar(1))
	j, err = c.Submit(ctx, graphOf(f, sel))
	if err != nil {
		t.Fatal(err)
	}
	res, err = j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fv := res.Values[0].Float64s()
	var wantSel []float64
	for _, v := range fv {
		if v > 0.5 {
			wantSel = append(wantSel, v+1)
		}
	}
	gotSel := res.Values[1].Float64s()
	if len(gotSel) != len(wantSel) || len(wantSel) == 0 {
		t.Fatalf("select: %d values, want %d", len(gotSel), len(wantSel))
	}
	for i := range wantSel {
		if math.Abs(gotSel[i]-wantSel[i]) > 1e-15 {
			t.Fatalf("select[%d] = %v, want %v", i, gotSel[i], wantSel[i])
		}
	}
	if res.Subtasks == 0 {
		t.Fatal("no subtasks reported")
	}
}
