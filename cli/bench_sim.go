package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	dir, err := os.MkdirTemp("", "phobos-simbench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	c, err := simraylets.Start(ctx, simraylets.Config{Raylets: b.raylets, Slots: b.slots, Heads: b.heads, JobBudget: b.jobBudget, Dir: dir, Logger: b.log})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer c.Close()
	cl, err := c.Client(ctx, phobos.Options{Logger: b.log})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var results []simraylets.Result
	for _, job := range b.jobs {
		g, err := simraylets.Job(job, b.n)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		var prof io.Writer
		if b.profile != "" {
			f, err := os.Create(b.profile + "." + job)
			if err != nil {
				return fmt.Errorf("bench: --cpuprofile: %w", err)
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
				return fmt.Errorf("bench: warm-up: %w", err)
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
				return fmt.Errorf("bench: %w", err)
			}
			prof = nil
			rates = append(rates, m.PerSec)
			if k == 0 || m.Seconds < r.Seconds {
				r = m
			}
		}
		if b.heapProfile != "" {
			if err := writeHeapProfile(b.heapProfile + "." + job); err != nil {
				return fmt.Errorf("bench: --memprofile: %w", err)
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
	if b.json {
		return nil
	}
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
