package bench

import (
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// TestSumNodeWantsOneInput: a hand-built graph whose sum reads no tensor
// is refused when it is tiled, with an error that says what the op
// wants, and a well-formed one lowers to the tree SumNode describes.
func TestSumNodeWantsOneInput(t *testing.T) {
	bad := &dag.TileableGraph{Nodes: []dag.TileableNode{{Op: dag.OpIDOf(isumName), DType: dag.Int64}}, Outputs: []int32{0}}
	if _, err := lowering.Lower(bad, 1, lowering.Options{}, dag.Ops, lowering.Counter()); err == nil || !strings.Contains(err.Error(), "wants one input") {
		t.Fatalf("a sum of no input lowered with error %v; want one saying it wants one input", err)
	}
	g, _ := SleepSum(16, 0).TileableGraph()
	p, err := lowering.Lower(g, 1, lowering.Options{}, dag.Ops, lowering.Counter())
	if err != nil {
		t.Fatal(err)
	}
	// 16 sleeps, each fused with its partial, then combines of 4 and 1.
	if got := len(p.Stage.Subtasks); got != 16+4+1 {
		t.Fatalf("SleepSum(16) lowered to %d subtasks, want 21", got)
	}
}
