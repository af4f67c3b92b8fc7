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

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/spf13/cobra"
)

type benchResult struct {
	Name    string  `json:"name"`
	N       int64   `json:"n"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	// HeapPerSubtask is the process heap held per subtask of the finished,
	// unreleased job (embedded cluster only: head and raylets share it).
	HeapPerSubtask float64 `json:"heap_bytes_per_subtask,omitempty"`
	// RTTPerSec is the machine's 64-byte round trips per second measured
	// in the same run (chain only): over loopback between two processes
	// with --connect, within this one for the embedded cluster; RTTRatio
	// is PerSec over it (issue 17's target: at least 0.5).
	RTTPerSec float64 `json:"rtt_per_sec,omitempty"`
	RTTKind   string  `json:"rtt_kind,omitempty"`
	RTTRatio  float64 `json:"rtt_ratio,omitempty"`
	// WarmupRuns is how many times the job ran, unmeasured, on the same
	// cluster before this run (--warmup); ColdPerSec is the first of those
	// runs' rate, a fresh cluster's first job when the cluster was fresh.
	WarmupRuns int     `json:"warmup_runs,omitempty"`
	ColdPerSec float64 `json:"cold_per_sec,omitempty"`
}

func newBenchCmd() *cobra.Command {
	cmd, fs := newCommand("bench", "measure subtask throughput on an embedded or running cluster; bench taskbench: Task Bench's METG", nil)
	cmd.AddCommand(newTaskBenchCmd())
	var lf logFlags
	lf.register(fs)
	var clf clusterFlags
	clf.register(fs)
	only := fs.String("only", "", "comma-separated benchmarks to run: independent, chain, seed (default all)")
	scale := fs.Float64("scale", 1, "multiply every benchmark's size by this (0.1 for a quick run)")
	raylets := fs.Int("raylets", 2, "raylets of the embedded cluster")
	slots := fs.Int("slots", 0, "slots per embedded raylet (default: CPUs shared among raylets)")
	asJSON := fs.Bool("json", false, "print one JSON line per benchmark")
	idle := registerIdleFlags(fs)
	prof := registerProfileFlags(fs, true)
	echo := fs.Bool("echo", false, "internal: echo 64-byte messages for the round-trip measurement")
	_ = fs.MarkHidden("echo")
	noHTTP := fs.Bool("no-http", false, "the embedded cluster serves no web service (no metrics, timelines or task logs): to measure what they cost")
	simRaylets := fs.Int("sim-raylets", 0, "measure the head alone: run it against this many simulated raylets in this process (jobs independent and seed, 1M subtasks × --scale)")
	simSlots := fs.Int("sim-slots", 16, "slots of each simulated raylet")
	heads := fs.Int("heads", 1, "heads of the --sim-raylets cluster (Raft on disk)")
	warmup := fs.Int("warmup", 0, "runs of each benchmark before the measured one, on the same cluster: a cluster in service has run jobs before, and a fresh one's first job also pays for memory it touches for the first time (the first run's rate is reported as cold_per_sec)")
	simWarmup := fs.Int("sim-warmup", 1, "runs of each --sim-raylets job before the measured one, as a head in service has run jobs before (0: measure a fresh process's first job; the warm-up's rate is reported as cold_per_sec)")
	simRuns := fs.Int("sim-runs", 3, "measured runs of each --sim-raylets job after the warm-up: the fastest is reported (on a shared machine other work only slows a run down), each one's rate beside it")
	simBaseline := fs.Int("sim-baseline", 0, "also run the --sim-raylets jobs on this many simulated raylets, alternating with --sim-raylets, and report the rate at --sim-raylets as a ratio of the rate at this many, pair by pair (issue 17 asks 1,000 against 10)")
	simPairs := fs.Int("sim-pairs", 3, "with --sim-baseline: how many pairs of runs, the two sizes' order alternating from pair to pair")
	var simJobBudget int64
	fs.Var(byteSize{&simJobBudget}, "sim-job-budget", "the --sim-raylets heads' per-job memory budget, e.g. 12GiB (default: the head's, a quarter of the machine's memory)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *echo {
			return runEcho()
		}
		// With --sim-raylets, each job's CPU profile goes to
		// --cpuprofile's file, named after the job: a profile of the
		// whole process would mix in the thousand raylets' registration
		// and goodbyes, which dwarf a job.
		simProfile, simHeap := "", ""
		if *simRaylets > 0 {
			simProfile, prof.cpu = prof.cpu, ""
			simHeap, prof.mem = prof.mem, ""
		}
		stopProfiles, err := prof.start()
		if err != nil {
			return err
		}
		defer stopProfiles()
		if idle.on {
			return idle.run(ctx, clf.sec.insecure, *asJSON)
		}
		if *scale <= 0 {
			return usagef("--scale must be positive")
		}
		if *warmup < 0 {
			return usagef("--warmup must be at least 0")
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			if n = strings.TrimSpace(n); n != "" {
				if n != "independent" && n != "chain" && n != "seed" {
					return usagef("--only: unknown benchmark %q (want independent, chain or seed)", n)
				}
				want[n] = true
			}
		}
		run := func(name string) bool { return len(want) == 0 || want[name] }
		open := func(fusion string) (*phobos.Client, error) {
			opts := phobos.Options{Logger: log, Fusion: fusion}
			return clf.client(ctx, opts, phobos.LocalConfig{Raylets: *raylets, Slots: *slots, StoreSize: 512 << 20, NoHTTP: *noHTTP}, log)
		}
		embedded := !clf.remote()
		size := func(n int64) int64 { return max(1, int64(float64(n)**scale)) }
		if *simRaylets > 0 {
			if clf.remote() {
				return usagef("--sim-raylets runs its own heads; it does not take --connect")
			}
			if fs.Changed("warmup") {
				return usagef("--warmup is for the cluster benchmarks; with --sim-raylets use --sim-warmup")
			}
			switch {
			case *simSlots < 1:
				return usagef("--sim-slots %d: each simulated raylet needs at least 1 slot", *simSlots)
			case *heads != 1 && *heads != 3 && *heads != 5:
				return usagef("--heads %d: run 1, 3 or 5 heads", *heads)
			case *simWarmup < 0:
				return usagef("--sim-warmup %d: give 0 (measure a fresh process's first job) or more", *simWarmup)
			case *simRuns < 1:
				return usagef("--sim-runs %d: measure each job at least once (1; 3 by default)", *simRuns)
			case *simBaseline < 0 || *simBaseline == *simRaylets:
				return usagef("--sim-baseline %d: give another number of raylets to compare --sim-raylets %d with, such as 10", *simBaseline, *simRaylets)
			case fs.Changed("sim-pairs") && *simBaseline == 0:
				return usagef("--sim-pairs goes with --sim-baseline: the pairs are of --sim-raylets and --sim-baseline")
			case *simBaseline > 0 && *simPairs < 1:
				return usagef("--sim-pairs %d: run at least one pair", *simPairs)
			case *simBaseline > 0 && (simProfile != "" || simHeap != ""):
				return usagef("--cpuprofile and --memprofile take one size of cluster at a time; leave out --sim-baseline to profile")
			}
			b := simBench{raylets: *simRaylets, slots: *simSlots, heads: *heads, jobBudget: simJobBudget, n: size(1_000_000), warmup: *simWarmup, runs: *simRuns, json: *asJSON, log: log, profile: simProfile, heapProfile: simHeap}
			for _, j := range []string{"independent", "seed"} {
				if run(j) {
					b.jobs = append(b.jobs, j)
				}
			}
			if len(b.jobs) == 0 {
				return usagef("--sim-raylets runs independent and seed; --only named neither")
			}
			if *simBaseline > 0 {
				return runSimPairs(ctx, b, *simBaseline, *simPairs)
			}
			return runSimBench(ctx, b)
		}
		if fs.Changed("sim-baseline") || fs.Changed("sim-pairs") {
			return usagef("--sim-baseline and --sim-pairs go with --sim-raylets")
		}

		measure := func(c *phobos.Client, name string, n int64, g phobos.Graph, opts ...phobos.JobOptions) (benchResult, error) {
			return measureJob(ctx, c, *warmup, name, n, g, embedded, opts...)
		}
		var results []benchResult
		emit := func(r benchResult) {
			results = append(results, r)
			if *asJSON {
				json.NewEncoder(os.Stdout).Encode(r)
			}
		}
		if run("independent") || run("seed") {
			c, err := open("")
			if err != nil {
				return err
			}
			if run("independent") {
				n := size(200_000)
				r, err := measure(c, "independent", n, bench.Independent(n))
				if err != nil {
					c.Close()
					return err
				}
				emit(r)
			}
			if run("seed") {
				chunks := size(85_000)
				a := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(1))
				b := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(2))
				r, err := measure(c, "seed", 0, a.Add(b).Sum())
				if err != nil {
					c.Close()
					return err
				}
				emit(r)
			}
			c.Close()
		}
		if run("chain") {
			c, err := open("none")
			if err != nil {
				return err
			}
			// The chain as it runs (each raylet sent links ahead of the
			// links they read), and with every hop through the head.
			n := size(20_000)
			r, err := measure(c, "chain", n, bench.Chain(n))
			var rh benchResult
			if err == nil {
				rh, err = measure(c, "chain-via-head", n, bench.Chain(n), phobos.JobOptions{NoPipeline: true})
			}
			c.Close()
			if err != nil {
				return err
			}
			if err := addRTT(ctx, &r, embedded); err != nil {
				return err
			}
			rh.RTTPerSec, rh.RTTKind, rh.RTTRatio = r.RTTPerSec, r.RTTKind, rh.PerSec/r.RTTPerSec
			emit(r)
			emit(rh)
		}
		if *asJSON {
			return nil
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		cold := ""
		if *warmup > 0 {
			cold = "first run's rate\t"
		}
		fmt.Fprintln(tw, "benchmark\tsubtasks\tseconds\tper second\t"+cold+"heap B/subtask\tround trips/s\tratio\t")
		for _, r := range results {
			heap := "-"
			if r.HeapPerSubtask > 0 {
				heap = fmt.Sprintf("%.0f", r.HeapPerSubtask)
			}
			unit := "subtasks"
			if strings.HasPrefix(r.Name, "chain") {
				unit = "hops"
			}
			rtt, ratio := "-", "-"
			if r.RTTPerSec > 0 {
				rtt, ratio = fmt.Sprintf("%.0f (%s)", r.RTTPerSec, r.RTTKind), fmt.Sprintf("%.2f", r.RTTRatio)
			}
			if *warmup > 0 {
				cold = fmt.Sprintf("%.0f\t", r.ColdPerSec)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.0f %s\t%s%s\t%s\t%s\t\n", r.Name, r.N, r.Seconds, r.PerSec, unit, cold, heap, rtt, ratio)
		}
		return tw.Flush()
	}
	return cmd
}

// measureJob runs a job warmup times, unmeasured, and then once more,
// measured, all on c's cluster. The result carries the number of warm-up
// runs and the first one's rate (ColdPerSec).
func measureJob(ctx context.Context, c *phobos.Client, warmup int, name string, n int64, g phobos.Graph, embedded bool, opts ...phobos.JobOptions) (benchResult, error) {
	var cold float64
	for i := range warmup {
		r, err := timeJob(ctx, c, name, n, g, embedded, opts...)
		if err != nil {
			return r, fmt.Errorf("warm-up %d: %w", i+1, err)
		}
		if i == 0 {
			cold = r.PerSec
		}
	}
	r, err := timeJob(ctx, c, name, n, g, embedded, opts...)
	r.WarmupRuns, r.ColdPerSec = warmup, cold
	return r, err
}

// timeJob runs one job end to end (submit, wait for it to finish, release)
// and reports its subtasks per second. n, when not 0, is the subtask count
// to report; otherwise the job's own count is used.
func timeJob(ctx context.Context, c *phobos.Client, name string, n int64, g phobos.Graph, embedded bool, opts ...phobos.JobOptions) (benchResult, error) {
	var before, after runtime.MemStats
	if embedded {
		runtime.GC()
		runtime.ReadMemStats(&before)
	}
	start := time.Now()
	j, err := c.Submit(ctx, g, opts...)
	if err != nil {
		return benchResult{}, fmt.Errorf("%s: %w", name, err)
	}
	st, err := j.Done(ctx)
	if err != nil {
		return benchResult{}, fmt.Errorf("%s: %w", name, err)
	}
	secs := time.Since(start).Seconds()
	if n == 0 {
		n = int64(st.Subtasks)
	}
	r := benchResult{Name: name, N: n, Seconds: secs, PerSec: float64(n) / secs}
	if embedded {
		runtime.GC()
		runtime.ReadMemStats(&after)
		r.HeapPerSubtask = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(st.Subtasks)
	}
	if err := j.Release(ctx); err != nil {
		return r, fmt.Errorf("%s: release: %w", name, err)
	}
	return r, nil
}
