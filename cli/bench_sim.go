package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/internal/simraylets"
)

// simBench are the settings of `phobos bench --sim-raylets`: real heads
// against simulated raylets in this process (internal/simraylets).
type simBench struct {
	raylets, slots, heads int
	jobBudget             int64    // 0: the head's default
	jobs                  []string // "independent", "seed"
	n                     int64    // subtasks per job
	warmup                int      // unmeasured runs of each job before the measured ones
	runs                  int      // measured runs of each job (the fastest is reported)
	json                  bool
	profile               string // each job's CPU profile goes to profile + "." + job ("": none)
	heapProfile           string // and a heap profile after its measured runs to heapProfile + "." + job
	log                   *slog.Logger
}

// runSimBench starts the simulated cluster, runs each job on it and prints
// one result per job.
func runSimBench(ctx context.Context, b simBench) error {
	results, err := measureSim(ctx, b)
	if err != nil || b.json {
		return err
	}
	return printSimResults(results)
}

// measureSim starts the simulated cluster, runs each job on it and
// returns their results (with --json, printing each as it comes); the
// cluster is closed when it returns.
func measureSim(ctx context.Context, b simBench) ([]simraylets.Result, error) {
	dir, err := os.MkdirTemp("", "phobos-simbench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	c, err := simraylets.Start(ctx, simraylets.Config{Raylets: b.raylets, Slots: b.slots, Heads: b.heads, JobBudget: b.jobBudget, Dir: dir, Logger: b.log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer c.Close()
	cl, err := c.Client(ctx, phobos.Options{Logger: b.log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var results []simraylets.Result
	for _, job := range b.jobs {
		g, err := simraylets.Job(job, b.n)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		var prof io.Writer
		if b.profile != "" {
			f, err := os.Create(b.profile + "." + job)
			if err != nil {
				return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
			}
			defer f.Close()
			prof = f
		}
		// The warm-up runs are the job as a fresh head meets it: the
		// heap grows to its size, every raylet's session grows its
		// buffers, the machine's tables are made. Their rate is
		// reported beside the measured run's, not mixed into it.
		var cold *simraylets.Result
		for range b.warmup {
			r, err := c.Run(ctx, cl, job, g, nil)
			if err != nil {
				return nil, fmt.Errorf("bench: warm-up: %w", err)
			}
			if cold == nil {
				cold = &r
			}
		}
		// The measured runs: the fastest is reported, each one's rate
		// beside it. The CPU profile is of the first.
		var r simraylets.Result
		var rates []float64
		for k := range max(b.runs, 1) {
			m, err := c.Run(ctx, cl, job, g, prof)
			if err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			prof = nil
			rates = append(rates, m.PerSec)
			if k == 0 || m.Seconds < r.Seconds {
				r = m
			}
		}
		if b.heapProfile != "" {
			if err := writeHeapProfile(b.heapProfile + "." + job); err != nil {
				return nil, fmt.Errorf("bench: --memprofile: %w", err)
			}
		}
		r.Runs, r.RunsPerSec = len(rates), rates
		r.WarmupRuns = b.warmup
		if cold != nil {
			r.ColdSeconds, r.ColdPerSec, r.ColdHeadCPUPerSubtask = cold.Seconds, cold.PerSec, cold.HeadCPUPerSubtask
		}
		if b.json {
			json.NewEncoder(os.Stdout).Encode(r)
		}
		results = append(results, r)
	}
	return results, nil
}

// printSimResults prints results as a table.
func printSimResults(results []simraylets.Result) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\traylets\tsubtasks\tseconds\tper second\thead µs CPU/subtask\thead B/subtask\theap B/subtask\tpull p50 µs\tpull p99 µs\tfirst run: per second\thead µs CPU/subtask\t")
	for _, r := range results {
		cold := "-\t-"
		if r.WarmupRuns > 0 {
			cold = fmt.Sprintf("%.0f\t%.2f", r.ColdPerSec, r.ColdHeadCPUPerSubtask*1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", r.Job, r.SimRaylets, r.N, r.Seconds, r.PerSec,
			r.HeadCPUPerSubtask*1e6, r.HeadBytesPerSubtask, r.HeapPerSubtask, r.PullP50, r.PullP99, cold)
	}
	return tw.Flush()
}

// simRatio is the line `phobos bench --sim-raylets N --sim-baseline B`
// prints per job after its pairs: the rate at N raylets as a ratio of the
// rate at B, pair by pair (each the fastest of its runs), and their median.
type simRatio struct {
	Name        string    `json:"name"` // "sim_ratio"
	Job         string    `json:"job"`
	SimRaylets  int       `json:"sim_raylets"`
	Baseline    int       `json:"baseline_raylets"`
	Ratios      []float64 `json:"ratios"`
	MedianRatio float64   `json:"median_ratio"`
}

// runSimPairs runs b's jobs on b.raylets and on baseline raylets, pairs
// times each, the order of the two sizes alternating from pair to pair
// (the machine drifts: a fast hour favours whichever size it meets), a
// fresh cluster of each size every time; it prints every result, then
// each job's ratios.
func runSimPairs(ctx context.Context, b simBench, baseline, pairs int) error {
	rates := map[string][2][]float64{} // job -> rates at baseline, at b.raylets
	for k := range pairs {
		sizes := []int{baseline, b.raylets}
		if k%2 == 1 {
			sizes[0], sizes[1] = sizes[1], sizes[0]
		}
		for _, n := range sizes {
			bb := b
			bb.raylets = n
			results, err := measureSim(ctx, bb)
			if err != nil {
				return err
			}
			if !b.json {
				if err := printSimResults(results); err != nil {
					return err
				}
			}
			for _, r := range results {
				v := rates[r.Job]
				i := 0
				if n == b.raylets {
					i = 1
				}
				v[i] = append(v[i], r.PerSec)
				rates[r.Job] = v
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	if !b.json {
		fmt.Fprintf(tw, "job\t%d raylets ÷ %d, pair by pair\tmedian\t\n", b.raylets, baseline)
	}
	for _, job := range b.jobs {
		v := rates[job]
		r := simRatio{Name: "sim_ratio", Job: job, SimRaylets: b.raylets, Baseline: baseline}
		for k := range v[0] {
			r.Ratios = append(r.Ratios, v[1][k]/v[0][k])
		}
		r.MedianRatio = median(r.Ratios)
		if b.json {
			json.NewEncoder(os.Stdout).Encode(r)
			continue
		}
		var each []string
		for _, x := range r.Ratios {
			each = append(each, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t\n", job, strings.Join(each, " "), r.MedianRatio)
	}
	return tw.Flush()
}

// median returns the median of xs (the mean of the middle two of an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}
