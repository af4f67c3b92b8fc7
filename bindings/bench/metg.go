package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// Point is one run of a task graph in a METG sweep, with the two numbers
// Task Bench derives from it.
type Point struct {
	Iterations int64   `json:"iterations"`
	Tasks      int64   `json:"tasks"`
	Seconds    float64 `json:"seconds"` // wall time of the whole graph
	// Granularity is Task Bench's task granularity in seconds: the wall
	// time × cores ÷ tasks, the core time each task took, overheads
	// included.
	Granularity float64 `json:"granularity_seconds"`
	FLOPs       float64 `json:"flops"`
	// Efficiency is the FLOP/s achieved ÷ the peak FLOP/s of the cores.
	Efficiency float64 `json:"efficiency"`
}

// WithPeak returns p with its efficiency against peak FLOP/s.
func (p Point) WithPeak(peak float64) Point {
	p.Efficiency = p.FLOPs / p.Seconds / peak
	return p
}

// PointOf derives a sweep point from one run of g that took elapsed on
// cores cores whose peak (all of them together) is peak FLOP/s.
func PointOf(g TaskGraph, elapsed time.Duration, cores int, peak float64) Point {
	s := elapsed.Seconds()
	tasks := g.Tasks()
	return Point{
		Iterations:  g.Iterations,
		Tasks:       tasks,
		Seconds:     s,
		Granularity: s * float64(cores) / float64(tasks),
		FLOPs:       g.FLOPs(),
	}.WithPeak(peak)
}

// ErrNoEfficientPoint is returned by METG when no point reached the
// threshold.
var ErrNoEfficientPoint = errors.New("bench: no point of the sweep reached the efficiency threshold")

// METG returns the minimum effective task granularity at threshold (0.5 for
// METG(50%)) as Task Bench defines it: the smallest granularity among the
// points whose efficiency is at least threshold; when the point with the
// next fewer iterations has a smaller granularity (it fell below the
// threshold), the granularity at which efficiency crosses threshold,
// interpolated linearly between the two. Points may come in any order.
//
// upper reports that no point with fewer iterations follows the one
// chosen, so the true METG may be smaller: the sweep stopped too early.
func METG(points []Point, threshold float64) (metg float64, upper bool, err error) {
	ps := slices.Clone(points)
	slices.SortStableFunc(ps, func(a, b Point) int { return -cmpInt(a.Iterations, b.Iterations) })
	best := -1
	for i, p := range ps {
		if p.Efficiency >= threshold && (best < 0 || p.Granularity < ps[best].Granularity) {
			best = i
		}
	}
	if best < 0 {
		return 0, false, fmt.Errorf("%w (%.0f%%): start it with more iterations", ErrNoEfficientPoint, threshold*100)
	}
	metg = ps[best].Granularity
	if best+1 == len(ps) {
		return metg, true, nil
	}
	if next := ps[best+1]; next.Granularity < metg && next.Efficiency < ps[best].Efficiency {
		// Efficiency falls from the chosen point's to next's across
		// threshold; find the granularity where it equals threshold.
		a := ps[best]
		f := (a.Efficiency - threshold) / (a.Efficiency - next.Efficiency)
		metg = a.Granularity + f*(next.Granularity-a.Granularity)
	}
	return metg, false, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Sweep runs a task graph at falling kernel iterations, as Task Bench's
// METG experiments do, until efficiency has stayed below Threshold for two
// points (or the tasks are empty).
type Sweep struct {
	Graph TaskGraph // Iterations is set by the sweep
	Cores int       // cores the graph runs on (granularity counts their time)
	// Peak is the FLOP/s of those cores running Compute alone. Run raises
	// it to what Repeak measures.
	Peak float64
	// Repeak, if set, measures the peak again before each point: on a
	// machine shared with other work one measurement may catch the cores
	// busy, and efficiency must not be taken against a peak too low.
	// Efficiencies are then against the highest peak seen so far; once the
	// sweep is done, WithPeak puts every point on the final one.
	Repeak func(ctx context.Context) (float64, error)
	// Threshold is the efficiency METG is taken at; 0 means 0.5.
	Threshold float64
	// Start is the first iteration count; each next point halves it. When
	// the first point is below Threshold the sweep first climbs ×4 (up to
	// twice: a busy machine must not make it run tasks of seconds) to find
	// one above.
	Start int64
	// Reps runs each point this many times and keeps the fastest; 0 means
	// 1. (Task Bench's scripts take the mean, on dedicated nodes; on a
	// shared machine other work only ever slows a run down, and the peak is
	// a best-of too.)
	Reps int
	// Passes, when more than 1, runs the whole sweep again that many times
	// over, every point Reps times more, and keeps each point's fastest
	// run of all. A point's repetitions follow one another within a
	// fraction of a second, so a burst of other work lasting longer
	// spoils all of them, and one spoiled point near the threshold moves
	// METG by a factor of two; runs of one point a sweep apart rarely all
	// meet one burst. If the finer points then reach the threshold, the
	// sweep goes on down as the first pass would have.
	Passes int
}

// Run calls run for each point (the graph with its iteration count set;
// run returns the wall time of the graph alone) and each with the point,
// and returns the points in the order run.
func (s *Sweep) Run(ctx context.Context, run func(ctx context.Context, g TaskGraph) (time.Duration, error), each func(Point)) ([]Point, error) {
	threshold := s.Threshold
	if threshold == 0 {
		threshold = 0.5
	}
	if s.Cores < 1 || s.Peak <= 0 || s.Start < 1 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "task bench sweep: cores %d, peak %g and start %d must be positive", s.Cores, s.Peak, s.Start)
	}
	reps := max(s.Reps, 1)
	measure := func(iters int64) (Point, error) {
		if s.Repeak != nil {
			peak, err := s.Repeak(ctx)
			if err != nil {
				return Point{}, fmt.Errorf("task bench: measure the peak: %w", err)
			}
			s.Peak = max(s.Peak, peak)
		}
		g := s.Graph
		g.Iterations = iters
		var best time.Duration
		for i := range reps {
			d, err := run(ctx, g)
			if err != nil {
				return Point{}, fmt.Errorf("task bench %s, %d iterations: %w", g.Pattern, iters, err)
			}
			if i == 0 || d < best {
				best = d
			}
		}
		return PointOf(g, best, s.Cores, s.Peak), nil
	}
	point := func(iters int64) (Point, error) {
		p, err := measure(iters)
		if err == nil && each != nil {
			each(p)
		}
		return p, err
	}
	var points []Point
	iters := s.Start
	p, err := point(iters)
	if err != nil {
		return nil, err
	}
	points = append(points, p)
	for climb := 0; p.Efficiency < threshold && climb < 2; climb++ {
		iters *= 4
		if p, err = point(iters); err != nil {
			return points, err
		}
		points = append(points, p)
	}
	if p.Efficiency < threshold {
		return points, nil // METG reports that none was efficient
	}
	// descend halves the iterations from the start until two points in a
	// row fall below the threshold (or the tasks are empty), measuring
	// those not measured yet.
	descend := func() error {
		below := 0
		for it := iters; it > 0 && below < 2; {
			it /= 2
			var p Point
			if i := slices.IndexFunc(points, func(q Point) bool { return q.Iterations == it }); i >= 0 {
				p = points[i] // measured while climbing, or in an earlier pass
			} else {
				var err error
				if p, err = point(it); err != nil {
					return err
				}
				points = append(points, p)
			}
			if p.WithPeak(s.Peak).Efficiency < threshold {
				below++
			} else {
				below = 0
			}
		}
		return nil
	}
	if err := descend(); err != nil {
		return points, err
	}
	for pass := 1; pass < s.Passes; pass++ {
		for i := range points {
			q, err := measure(points[i].Iterations)
			if err != nil {
				return points, err
			}
			if q.Seconds < points[i].Seconds {
				points[i] = q
			}
		}
		if err := descend(); err != nil {
			return points, err
		}
	}
	return points, nil
}
