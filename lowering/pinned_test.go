package lowering_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/kv"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// TestLoweringPinned pins the canonical plans of a few single-stage jobs,
// with every fusion, to what lowering produced before its passes were made
// cheaper (issue 17): those changes must not change a plan. A deliberate
// change of what lowering produces updates the hashes (run with -v to see
// the new ones) and says so in its commit.
func TestLoweringPinned(t *testing.T) {
	graph := func(ts ...*tensor.Tensor) *dag.TileableGraph {
		g, err := tensor.Graph(ts...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	m := tensor.Rand([]int64{60, 60}, tensor.Chunks(7), tensor.Seed(3))
	kvg, err := kv.Words(kv.Text(40, 1, 1)).GroupBy(7).Sum().TileableGraph()
	if err != nil {
		t.Fatal(err)
	}
	ind, err := bench.Independent(500).TileableGraph()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		g     *dag.TileableGraph
		slots []int
	}{
		{"seed", seedExample(t, 3000, 37), []int{3, 1, 2}},
		{"independent", ind, []int{4, 4, 4, 2, 0, 1}},
		{"2d-chain-axis", graph(m.Add(tensor.Scalar(1)).Mul(m).Sum(tensor.Axis(1))), []int{2, 2}},
		{"rechunk", graph(m.Rechunk(4)), []int{1, 5}},
		{"matmul", graph(tensor.Matmul(tensor.Rand([]int64{30, 30}, tensor.Chunks(7), tensor.Seed(4)), tensor.Rand([]int64{30, 30}, tensor.Chunks(7), tensor.Seed(5)))), []int{3, 3, 3}},
		{"kv-shuffle", kvg, []int{2, 1}},
		{"3d-transpose", graph(tensor.Rand([]int64{12, 12, 12}, tensor.Chunks(5), tensor.Seed(6)).Transpose(2, 0, 1).Neg()), []int{4}},
		{"no-slots", seedExample(t, 500, 10), nil},
	}
	want := map[string]string{}
	for _, c := range cases {
		for _, fusion := range []lowering.Fusion{lowering.FuseChain, lowering.FuseNone, lowering.FuseColoring} {
			name := c.name + "/" + fusion.String()
			p, err := lowering.Lower(c.g, 7, lowering.Options{Fusion: fusion, Slots: c.slots}, dag.Ops, lowering.Counter())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b, err := p.Canonical()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			sum := sha256.Sum256(b)
			got := hex.EncodeToString(sum[:8])
			t.Logf("%q: %q,", name, got)
			if w, ok := pinned[name]; !ok || w != got {
				want[name] = got
			}
		}
	}
	for name, got := range want {
		t.Errorf("%s: plan hash %s, pinned %s", name, got, pinned[name])
	}
}

var pinned = map[string]string{
	"seed/chain":             "661ad4420b4c009c",
	"seed/none":              "eba16c7bf8999f7f",
	"seed/coloring":          "bb7134dd6247527f",
	"independent/chain":      "1d77d043ef381134",
	"independent/none":       "1d77d043ef381134",
	"independent/coloring":   "4c6242c1f5db0057",
	"2d-chain-axis/chain":    "5a8d1013aa9ba4d0",
	"2d-chain-axis/none":     "15130e144f44706b",
	"2d-chain-axis/coloring": "c1575ec33c5f8b93",
	"rechunk/chain":          "78f12f3f1ba39b2a",
	"rechunk/none":           "78f12f3f1ba39b2a",
	"rechunk/coloring":       "9383d42fca053e07",
	"matmul/chain":           "476a0cef4c958609",
	"matmul/none":            "476a0cef4c958609",
	"matmul/coloring":        "93dd66636ab7fcb5",
	"kv-shuffle/chain":       "97195e97bd5ba028",
	"kv-shuffle/none":        "e5e3ac1ad55bde8d",
	"kv-shuffle/coloring":    "1f4d1cd128253d82",
	"3d-transpose/chain":     "6d55c4eccc223944",
	"3d-transpose/none":      "2b80c93195e002d8",
	"3d-transpose/coloring":  "27a333a7b5b4c6b2",
	"no-slots/chain":         "d12c20ac7b83d2f0",
	"no-slots/none":          "4d49fa961153cfed",
	"no-slots/coloring":      "0b78933043715358",
}
