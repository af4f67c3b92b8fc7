package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
)

// taskBenchPoint is one JSON line of `phobos bench taskbench --json`.
type taskBenchPoint struct {
	Name    string `json:"name"` // "taskbench"
	Cluster string `json:"cluster"`
	Pattern string `json:"pattern"`
	Width   int64  `json:"width"`
	Steps   int64  `json:"steps"`
	bench.Point
}

// taskBenchMETG is the summary line of one pattern.
type taskBenchMETG struct {
	Name      string  `json:"name"` // "taskbench.metg"
	Cluster   string  `json:"cluster"`
	Pattern   string  `json:"pattern"`
	Width     int64   `json:"width"`
	Steps     int64   `json:"steps"`
	Threshold float64 `json:"threshold"`
	METGus    float64 `json:"metg_us,omitempty"`
	// Upper: the sweep ended above the threshold, so METG may be lower.
	Upper     bool    `json:"upper_bound,omitempty"`
	Error     string  `json:"error,omitempty"`
	Cores     int     `json:"cores"`
	PeakFLOPS float64 `json:"peak_flops"`
}

func newTaskBenchCmd() *cobra.Command {
	cmd, fs := newCommand("taskbench", "run Task Bench's patterns and report METG at 50% efficiency (see docs/operations.md)", nil)
	var lf logFlags
	lf.register(fs)
	connect := fs.String("connect", "", "run on a running cluster at these head addresses (on this machine) instead of an embedded one")
	var sec tlsFlags
	sec.register(fs)
	patterns := fs.String("patterns", "trivial,no_comm,stencil_1d,fft,tree,all_to_all", "comma-separated Task Bench dependence patterns")
	cores := fs.Int("cores", runtime.NumCPU(), "cores the cluster runs on: granularity is wall time × cores ÷ tasks, and the peak is measured on this many")
	width := fs.Int64("width", 0, "points per timestep (default --cores)")
	steps := fs.Int64("steps", 1000, "timesteps")
	output := fs.Int64("output", bench.MinTaskBenchOutputBytes, "bytes each task outputs")
	start := fs.Duration("start", time.Millisecond, "kernel time of a task at the sweep's first point (halved at each next point)")
	reps := fs.Int("reps", 3, "runs per point (the fastest counts)")
	passes := fs.Int("passes", 2, "times the whole sweep runs, every point --reps times in each; a point's fastest run of all counts (a burst of other work then has to meet every pass to spoil a point)")
	threshold := fs.Float64("threshold", 0.5, "efficiency at which METG is taken")
	peakFlag := fs.Float64("peak-flops", 0, "peak FLOP/s of the cores (default: measured here, the kernel alone on --cores goroutines, before every point; the highest counts)")
	raylets := fs.Int("raylets", 1, "raylets of the embedded cluster")
	slots := fs.Int("slots", 0, "slots per embedded raylet (default --cores shared among raylets)")
	asJSON := fs.Bool("json", false, "print one JSON line per point and per pattern's METG")
	prof := registerProfileFlags(fs, false)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		var pats []bench.Pattern
		for _, n := range strings.Split(*patterns, ",") {
			p, err := bench.ParsePattern(strings.TrimSpace(n))
			if err != nil {
				return usagef("--patterns: %v", err)
			}
			pats = append(pats, p)
		}
		switch {
		case *cores < 1:
			return usagef("--cores %d must be at least 1", *cores)
		case *threshold <= 0 || *threshold > 1:
			return usagef("--threshold %g must be in (0, 1]", *threshold)
		case *start <= 0 || *reps < 1:
			return usagef("--start and --reps must be positive")
		case *passes < 1:
			return usagef("--passes %d: run the sweep at least once (1; 2 by default)", *passes)
		}
		if *width == 0 {
			*width = int64(*cores)
		}
		for _, p := range pats {
			if err := (bench.TaskGraph{Pattern: p, Width: *width, Steps: *steps, OutputBytes: *output}).Validate(); err != nil {
				return usagef("%v (--width, --steps, --output)", err)
			}
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		peak := *peakFlag
		if peak <= 0 {
			if peak, err = bench.MeasurePeak(ctx, *cores, 300*time.Millisecond); err != nil {
				return err
			}
		}
		// Profiles cover the sweep, peak measurements included (the kernel
		// alone shows as such), not the checks above.
		stopProfiles, err := prof.start()
		if err != nil {
			return err
		}
		defer stopProfiles()
		local := phobos.LocalConfig{Raylets: *raylets, Slots: *slots, StoreSize: 512 << 20}
		if *slots == 0 {
			local.Slots = max(1, *cores / *raylets)
		}
		// Fusion off: each task is a subtask, as Task Bench counts them.
		c, err := sec.client(ctx, *connect, phobos.Options{Logger: log, Fusion: "none"}, local, log)
		if err != nil {
			return err
		}
		defer c.Close()
		cluster := "embedded"
		if *connect != "" {
			cluster = "connect"
		}
		run := func(ctx context.Context, g bench.TaskGraph) (time.Duration, error) {
			job, err := g.Graph()
			if err != nil {
				return 0, err
			}
			t0 := time.Now()
			j, err := c.Submit(ctx, job)
			if err != nil {
				return 0, err
			}
			if _, err := j.Done(ctx); err != nil {
				return 0, err
			}
			d := time.Since(t0)
			return d, j.Release(ctx)
		}
		// The peak is measured again before each point and the highest counts,
		// for every point: on a shared machine one measurement may catch the
		// cores busy. So the points print once every sweep is done.
		repeak := func(ctx context.Context) (float64, error) { return bench.MeasurePeak(ctx, *cores, 50*time.Millisecond) }
		type sweep struct {
			g      bench.TaskGraph
			points []bench.Point
		}
		var sweeps []sweep
		for _, p := range pats {
			g := bench.TaskGraph{Pattern: p, Width: *width, Steps: *steps, OutputBytes: *output}
			perIter := float64(*cores) * bench.FLOPsPerIteration / peak // seconds per iteration on one core
			s := bench.Sweep{Graph: g, Cores: *cores, Peak: peak, Threshold: *threshold, Reps: *reps, Passes: *passes,
				Start: max(1, int64(start.Seconds()/perIter)), Repeak: repeak}
			if *peakFlag > 0 {
				s.Repeak = nil
			}
			points, err := s.Run(ctx, run, nil)
			if err != nil {
				return err
			}
			peak = s.Peak
			sweeps = append(sweeps, sweep{g, points})
		}

		var tw *tabwriter.Writer
		if !*asJSON {
			fmt.Printf("peak %.3g FLOP/s on %d cores (%.1f ns per kernel iteration per core); %s cluster\n",
				peak, *cores, float64(*cores)*bench.FLOPsPerIteration/peak*1e9, cluster)
			tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "pattern\titerations\ttasks\tseconds\tgranularity µs\tefficiency\t")
		}
		for _, sw := range sweeps {
			g, p := sw.g, sw.g.Pattern
			for i, pt := range sw.points {
				pt = pt.WithPeak(peak)
				sw.points[i] = pt
				if *asJSON {
					json.NewEncoder(os.Stdout).Encode(taskBenchPoint{"taskbench", cluster, p.String(), g.Width, g.Steps, pt})
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.1f\t%.3f\t\n", p, pt.Iterations, pt.Tasks, pt.Seconds, pt.Granularity*1e6, pt.Efficiency)
			}
			m := taskBenchMETG{Name: "taskbench.metg", Cluster: cluster, Pattern: p.String(), Width: g.Width, Steps: g.Steps, Threshold: *threshold, Cores: *cores, PeakFLOPS: peak}
			metg, upper, err := bench.METG(sw.points, *threshold)
			if err != nil {
				m.Error = err.Error()
			} else {
				m.METGus, m.Upper = metg*1e6, upper
			}
			if *asJSON {
				json.NewEncoder(os.Stdout).Encode(m)
				continue
			}
			switch {
			case err != nil:
				fmt.Fprintf(tw, "%s\tMETG(%.0f%%)\t%s\t\t\t\t\n", p, *threshold*100, err)
			case upper:
				fmt.Fprintf(tw, "%s\tMETG(%.0f%%)\t≤\t\t%.1f\t\t\n", p, *threshold*100, m.METGus)
			default:
				fmt.Fprintf(tw, "%s\tMETG(%.0f%%)\t\t\t%.1f\t\t\n", p, *threshold*100, m.METGus)
			}
		}
		if tw != nil {
			return tw.Flush()
		}
		return nil
	}
	return cmd
}
