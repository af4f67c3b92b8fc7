package main

import (
	"math"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/examples/internal/exrun"
)

type graph struct{ ts []*tensor.Tensor }

func (g graph) TileableGraph() (*dag.TileableGraph, error) { return tensor.Graph(g.ts...) }

func TestMatmul(t *testing.T) {
	c, ctx := exrun.Local(t)
	n, block = 300, 70
	out, err := run(ctx, c)
	if err != nil || !strings.Contains(out, "300x300 in 70x70 blocks") {
		t.Fatalf("run: %q, %v", out, err)
	}
	// The same product, checked against plain Go.
	a := tensor.Rand([]int64{n, n}, tensor.Chunks(block), tensor.Seed(1))
	b := tensor.Rand([]int64{n, n}, tensor.Chunks(block), tensor.Seed(2))
	j, err := c.Submit(ctx, graph{[]*tensor.Tensor{a, b, a.Matmul(b)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	av, bv, cv := res.Values[0].Float64s(), res.Values[1].Float64s(), res.Values[2].Float64s()
	for i := int64(0); i < n; i += 37 {
		for k := int64(0); k < n; k += 41 {
			want := 0.0
			for x := int64(0); x < n; x++ {
				want += av[i*n+x] * bv[x*n+k]
			}
			if got := cv[i*n+k]; math.Abs(got-want) > 1e-9*float64(n) {
				t.Fatalf("C[%d,%d] = %v, want %v", i, k, got, want)
			}
		}
	}
}
