package bench_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/bench"
)

func pt(iters int64, gran, eff float64) bench.Point {
	return bench.Point{Iterations: iters, Granularity: gran, Efficiency: eff}
}

// METG on synthetic curves, against values worked out by hand from Task
// Bench's definition (scripts/chart_metg.py: the smallest granularity at or
// above the threshold, interpolated toward the next point when that one is
// finer).
func TestMETGSyntheticCurves(t *testing.T) {
	cases := []struct {
		name   string
		points []bench.Point
		want   float64
		upper  bool
	}{
		{"interpolated between the straddling points",
			[]bench.Point{pt(8, 20, 0.9), pt(4, 10, 0.8), pt(2, 6, 0.6), pt(1, 5, 0.4)},
			5.5, false}, // 6 + (0.6-0.5)/(0.6-0.4) × (5-6)
		{"a point exactly at the threshold",
			[]bench.Point{pt(4, 10, 0.8), pt(2, 6, 0.5), pt(1, 5, 0.3)},
			6, false},
		{"order of the points does not matter",
			[]bench.Point{pt(1, 5, 0.4), pt(4, 10, 0.8), pt(8, 20, 0.9), pt(2, 6, 0.6)},
			5.5, false},
		{"a noisy efficient point past a dip counts",
			[]bench.Point{pt(8, 20, 0.9), pt(4, 10, 0.45), pt(2, 7, 0.55), pt(1, 6.5, 0.2)},
			7 + (0.55-0.5)/(0.55-0.2)*(6.5-7), false},
		{"no interpolation when the next point is coarser",
			[]bench.Point{pt(4, 10, 0.8), pt(2, 6, 0.6), pt(1, 9, 0.1)},
			6, false},
		{"every point efficient: an upper bound",
			[]bench.Point{pt(4, 10, 0.8), pt(2, 6, 0.7)},
			6, true},
	}
	for _, c := range cases {
		got, upper, err := bench.METG(c.points, 0.5)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if math.Abs(got-c.want) > 1e-12 || upper != c.upper {
			t.Errorf("%s: METG = %v (upper %v), want %v (upper %v)", c.name, got, upper, c.want, c.upper)
		}
	}
	if _, _, err := bench.METG([]bench.Point{pt(4, 10, 0.4), pt(2, 6, 0.2)}, 0.5); !errors.Is(err, bench.ErrNoEfficientPoint) {
		t.Errorf("no efficient point: err = %v", err)
	}
	if _, _, err := bench.METG(nil, 0.5); !errors.Is(err, bench.ErrNoEfficientPoint) {
		t.Errorf("no points: err = %v", err)
	}
}

// PointOf is Task Bench's arithmetic: granularity = wall × cores ÷ tasks,
// efficiency = FLOPs ÷ wall ÷ peak.
func TestPointOf(t *testing.T) {
	g := bench.TaskGraph{Pattern: bench.Stencil1D, Width: 4, Steps: 10, Iterations: 1000}
	p := bench.PointOf(g, 2*time.Second, 4, 1e6)
	if p.Tasks != 40 || p.Granularity != 2*4/40.0 {
		t.Errorf("tasks %d, granularity %v", p.Tasks, p.Granularity)
	}
	if want := 40 * 1000 * 128 / 2 / 1e6; math.Abs(p.Efficiency-want) > 1e-12 {
		t.Errorf("efficiency %v, want %v", p.Efficiency, want)
	}
}

// A sweep of a runtime modelled as o seconds of core time per task on top of
// the kernel: efficiency is x/(x+o) for a kernel of x seconds, so 50% falls
// at granularity 2o. The sweep must halve down past it and stop two points
// below, and METG's chord between the straddling points lies at or above
// the true curve (which is convex) and at or below the point chosen.
func TestSweepOnModel(t *testing.T) {
	const (
		cores   = 4
		perIter = 50e-9 // kernel seconds per iteration
		o       = 30e-6 // overhead, core seconds per task
	)
	peak := cores * bench.FLOPsPerIteration / perIter
	run := func(_ context.Context, g bench.TaskGraph) (time.Duration, error) {
		x := float64(g.Iterations) * perIter
		return time.Duration(float64(g.Tasks()) * (x + o) / cores * 1e9), nil
	}
	for _, start := range []int64{1 << 14, 64} { // above the threshold, and below it (climbs twice)
		s := bench.Sweep{Graph: bench.TaskGraph{Pattern: bench.Stencil1D, Width: cores, Steps: 100}, Cores: cores, Peak: peak, Start: start, Reps: 2}
		var seen []bench.Point
		points, err := s.Run(context.Background(), run, func(p bench.Point) { seen = append(seen, p) })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seen, points) {
			t.Fatalf("each saw %v, Run returned %v", seen, points)
		}
		iters := map[int64]bool{}
		for _, p := range points {
			if iters[p.Iterations] {
				t.Fatalf("start %d: %d iterations measured twice", start, p.Iterations)
			}
			iters[p.Iterations] = true
		}
		byIters := slices.SortedFunc(slices.Values(points), func(a, b bench.Point) int { return int(b.Iterations - a.Iterations) })
		if n := len(byIters); byIters[n-1].Efficiency >= 0.5 || byIters[n-2].Efficiency >= 0.5 {
			t.Fatalf("start %d: the finest points are %+v, not two below 50%%", start, byIters[n-2:])
		}
		metg, upper, err := bench.METG(points, 0.5)
		if err != nil || upper {
			t.Fatalf("start %d: METG %v upper %v err %v", start, metg, upper, err)
		}
		best := math.Inf(1)
		for _, p := range points {
			if p.Efficiency >= 0.5 {
				best = min(best, p.Granularity)
			}
		}
		if metg < 2*o*(1-1e-9) || metg > best {
			t.Errorf("start %d: METG %v, want in [%v, %v]", start, metg, 2*o, best)
		}
	}
}

func TestSweepRefusesBadConfig(t *testing.T) {
	run := func(context.Context, bench.TaskGraph) (time.Duration, error) { return time.Second, nil }
	g := bench.TaskGraph{Pattern: bench.Trivial, Width: 1, Steps: 1}
	for _, s := range []bench.Sweep{{Graph: g, Cores: 0, Peak: 1, Start: 1}, {Graph: g, Cores: 1, Peak: 0, Start: 1}, {Graph: g, Cores: 1, Peak: 1, Start: 0}} {
		if _, err := s.Run(context.Background(), run, nil); err == nil {
			t.Errorf("%+v: ran", s)
		}
	}
}

// Repeak raises the sweep's peak to the highest measured, never lowers it,
// and WithPeak puts the points on the final one.
func TestSweepRepeak(t *testing.T) {
	peaks := []float64{2e9, 5e9, 3e9, 4e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9}
	calls := 0
	s := bench.Sweep{
		Graph: bench.TaskGraph{Pattern: bench.Trivial, Width: 2, Steps: 10}, Cores: 2, Peak: 1e9, Start: 1 << 10,
		Repeak: func(context.Context) (float64, error) { calls++; return peaks[calls-1], nil },
	}
	run := func(_ context.Context, g bench.TaskGraph) (time.Duration, error) {
		return time.Duration(float64(g.Tasks())*(float64(g.Iterations)*50e-9+20e-6)/2*1e9) + 1, nil
	}
	points, err := s.Run(context.Background(), run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if calls != len(points) || s.Peak != 5e9 {
		t.Fatalf("%d points, %d measurements, peak %g; want one measurement per point and peak 5e9", len(points), calls, s.Peak)
	}
	for _, p := range points {
		q := p.WithPeak(s.Peak)
		if want := p.FLOPs / p.Seconds / 5e9; math.Abs(q.Efficiency-want) > 1e-12 {
			t.Fatalf("WithPeak: efficiency %v, want %v", q.Efficiency, want)
		}
	}
	failing := bench.Sweep{Graph: s.Graph, Cores: 2, Peak: 1e9, Start: 4,
		Repeak: func(context.Context) (float64, error) { return 0, context.Canceled }}
	if _, err := failing.Run(context.Background(), run, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a failing Repeak: err = %v", err)
	}
}

// A burst of other work that spoils every repetition of one point in the
// first pass (the finest point that is efficient on a quiet machine) puts
// METG a factor of two too high; a second pass measures that point again
// and keeps its fastest run, and the sweep goes on down from it as it
// would have.
func TestSweepPassesOutlastABurst(t *testing.T) {
	const (
		cores   = 2
		perIter = 50e-9
		o       = 30e-6
	)
	peak := cores * bench.FLOPsPerIteration / perIter
	model := func(g bench.TaskGraph) time.Duration {
		return time.Duration(float64(g.Tasks()) * (float64(g.Iterations)*perIter + o) / cores * 1e9)
	}
	g := bench.TaskGraph{Pattern: bench.Stencil1D, Width: cores, Steps: 100}
	quiet := bench.Sweep{Graph: g, Cores: cores, Peak: peak, Start: 1 << 12, Reps: 2}
	points, err := quiet.Run(context.Background(), func(_ context.Context, g bench.TaskGraph) (time.Duration, error) { return model(g), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := bench.METG(points, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// The finest efficient point on a quiet machine.
	var finest int64
	for _, p := range points {
		if p.Efficiency >= 0.5 && (finest == 0 || p.Iterations < finest) {
			finest = p.Iterations
		}
	}
	onePass := map[int64]bool{} // the points the first pass measures
	for _, passes := range []int{1, 2} {
		runs := map[int64]int{}
		burst := func(_ context.Context, g bench.TaskGraph) (time.Duration, error) {
			runs[g.Iterations]++
			d := model(g)
			if g.Iterations == finest && runs[g.Iterations] <= 2 { // the first pass's two repetitions
				d *= 3
			}
			return d, nil
		}
		s := bench.Sweep{Graph: g, Cores: cores, Peak: peak, Start: 1 << 12, Reps: 2, Passes: passes}
		points, err := s.Run(context.Background(), burst, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, upper, err := bench.METG(points, 0.5)
		if err != nil || upper {
			t.Fatalf("passes %d: METG %v, upper %v, err %v", passes, got, upper, err)
		}
		switch {
		case passes == 1 && !(got > 1.5*want):
			t.Fatalf("one pass through the burst: METG %.1f µs; want it spoiled, well over the quiet %.1f µs (is the test's burst missing the point?)", got*1e6, want*1e6)
		case passes == 2 && math.Abs(got-want) > 1e-9:
			t.Fatalf("two passes: METG %.1f µs, want the quiet machine's %.1f µs", got*1e6, want*1e6)
		}
		if passes == 1 {
			for _, p := range points {
				onePass[p.Iterations] = true
			}
			continue
		}
		// Every point of the first pass ran again; a finer one the
		// second pass went on to ran in that pass alone.
		for it, n := range runs {
			if want := map[bool]int{true: 4, false: 2}[onePass[it]]; n != want {
				t.Errorf("two passes of 2 repetitions ran %d iterations %d times, want %d", it, n, want)
			}
		}
		if len(runs) <= len(onePass) {
			t.Errorf("the second pass measured no finer point (%d points, %d in the first pass)", len(runs), len(onePass))
		}
	}
}
