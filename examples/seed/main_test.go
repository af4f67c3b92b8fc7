package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/examples/internal/exrun"
)

func TestSeed(t *testing.T) {
	c, ctx := exrun.Local(t)
	size, chunk = 2_000_000, 50_000
	out, err := run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	if _, err := fmt.Sscanf(out, "(a + b).sum() = %f", &sum); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if math.Abs(sum-float64(size)) > 0.01*float64(size) || !strings.Contains(out, "134 subtasks") {
		t.Fatalf("output %q: the sum of 2n uniform values should be near n = %d in 134 subtasks", out, size)
	}
}
