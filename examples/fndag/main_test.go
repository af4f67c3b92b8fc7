package main

import (
	"context"
	"math"
	"testing"

	"github.com/phobos-project/phobos/examples/internal/exrun"
)

func TestFnDAG(t *testing.T) {
	c, ctx := exrun.Local(t)
	sensors = 5
	got, err := reports(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != sensors {
		t.Fatalf("%d reports, want %d", len(got), sensors)
	}
	// The same functions called directly give the same reports.
	for s := 1; s <= sensors; s++ {
		xs, _ := readings(context.Background(), s, 1000)
		cal, meas := split(xs)
		want, _ := calibrate(context.Background(), s, cal, meas)
		r := got[s-1]
		if r.Sensor != s || math.Abs(r.Mean-want.Mean) > 1e-12 || r.Max != want.Max || r.Offset != want.Offset {
			t.Fatalf("sensor %d: %+v, want %+v", s, r, want)
		}
	}
}
