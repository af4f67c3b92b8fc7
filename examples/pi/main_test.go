package main

import (
	"math"
	"testing"

	"github.com/phobos-project/phobos/examples/internal/exrun"
)

func TestPi(t *testing.T) {
	c, ctx := exrun.Local(t)
	tasks, darts = 10_000, 1_000 // 10,000 tasks, as the example's default
	pi, err := estimate(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// 10^7 darts: the standard error is about 0.0005.
	if math.Abs(pi-math.Pi) > 0.005 {
		t.Fatalf("π ≈ %v", pi)
	}
}
