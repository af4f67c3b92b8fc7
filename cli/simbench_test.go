package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCLISimRayletsWarmup runs phobos bench --sim-raylets on a tiny job,
// with its default warm-up and measured runs and without: the result
// reports how many ran before the measured ones, and the first run's rate
// (cold_per_sec) exactly when there was one; how many were measured, each
// one's rate, and the fastest as its own. A negative --sim-warmup or a
// --sim-runs below 1 is a usage error, and so is the cluster benchmarks'
// --warmup, which the simulation would ignore.
func TestCLISimRayletsWarmup(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		flags  []string
		warmup int
		runs   int
	}{{nil, 1, 3}, {[]string{"--sim-warmup", "0", "--sim-runs", "1"}, 0, 1}} {
		heap := filepath.Join(t.TempDir(), "heap")
		args := append([]string{"bench", "--sim-raylets", "2", "--sim-slots", "2", "--scale", "0.001", "--only", "independent", "--json", "--memprofile", heap}, tc.flags...)
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("phobos %s: %v", strings.Join(args, " "), err)
		}
		var r struct {
			Name       string
			Job        string
			N          int64
			PerSec     float64 `json:"per_sec"`
			WarmupRuns int     `json:"warmup_runs"`
			ColdPerSec float64 `json:"cold_per_sec"`
			Runs       int
			RunsPerSec []float64 `json:"runs_per_sec"`
			GCCycles   *int64    `json:"gc_cycles"`
			ScanBytes  int64     `json:"gc_scan_bytes"`
			Goroutines int
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: output %q: %v", tc.flags, out, err)
		}
		if r.Name != "sim_raylets" || r.Job != "independent" || r.N != 1000 || r.PerSec <= 0 {
			t.Fatalf("%v: implausible result %+v", tc.flags, r)
		}
		if r.WarmupRuns != tc.warmup || (r.ColdPerSec > 0) != (tc.warmup > 0) {
			t.Fatalf("%v: warmup_runs %d, cold_per_sec %v; want %d warm-up runs", tc.flags, r.WarmupRuns, r.ColdPerSec, tc.warmup)
		}
		if r.Runs != tc.runs || len(r.RunsPerSec) != tc.runs || slices.Max(r.RunsPerSec) != r.PerSec {
			t.Fatalf("%v: runs %d, runs_per_sec %v, per_sec %v; want %d runs, the fastest reported", tc.flags, r.Runs, r.RunsPerSec, r.PerSec, tc.runs)
		}
		if r.GCCycles == nil || r.ScanBytes <= 0 {
			t.Fatalf("%v: gc_cycles %v, gc_scan_bytes %d; want the collector's figures", tc.flags, r.GCCycles, r.ScanBytes)
		}
		if r.Goroutines <= 0 {
			t.Fatalf("%v: goroutines %d; want the process's goroutines", tc.flags, r.Goroutines)
		}
		// The heap profile of the job: a gzipped protocol buffer.
		if b, err := os.ReadFile(heap + ".independent"); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%v: --memprofile wrote %d bytes (%v); want a gzipped profile in %s.independent", tc.flags, len(b), err, heap)
		}
	}
	wantBenchUsage(t, "--sim-warmup", "--sim-raylets", "3", "--sim-warmup", "-1")
	wantBenchUsage(t, "--sim-runs", "--sim-raylets", "3", "--sim-runs", "0")
	wantBenchUsage(t, "--sim-warmup", "--sim-raylets", "3", "--warmup", "1") // the cluster benchmarks' flag: it points to --sim-warmup
}

// wantBenchUsage runs phobos bench with args (in this process: a usage
// error comes before any cluster starts) and wants a usage error, exit
// status 2, whose message names flag.
func wantBenchUsage(t *testing.T, flag string, args ...string) {
	t.Helper()
	t.Setenv(envAddr, "") // no running cluster: --sim-raylets refuses --connect
	code, _, errs := runIn(t, append([]string{"bench"}, args...)...)
	if code != 2 || !strings.Contains(errs, flag) {
		t.Errorf("phobos bench %s: exit %d, stderr %q; want a usage error (exit 2) naming %s", strings.Join(args, " "), code, errs, flag)
	}
}

// TestCLISimRayletsPairs runs phobos bench --sim-raylets 3 --sim-baseline
// 2 on a tiny job: two pairs, the sizes' order alternating, a result line
// per run, then the job's ratios, each the pair's rate at 3 raylets over
// its rate at 2, and their median. Flags that cannot go together are
// usage errors.
func TestCLISimRayletsPairs(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"bench", "--sim-raylets", "3", "--sim-baseline", "2", "--sim-pairs", "2", "--sim-slots", "2", "--scale", "0.001",
		"--only", "independent", "--sim-warmup", "0", "--sim-runs", "1", "--json"}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		t.Fatalf("phobos %s: %v", strings.Join(args, " "), err)
	}
	type line struct {
		Name       string
		Job        string
		SimRaylets int     `json:"sim_raylets"`
		PerSec     float64 `json:"per_sec"`
		Baseline   int     `json:"baseline_raylets"`
		Ratios     []float64
		Median     float64 `json:"median_ratio"`
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var x line
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		lines = append(lines, x)
	}
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 4 runs and a ratio:\n%s", len(lines), out)
	}
	var sizes []int
	for _, x := range lines[:4] {
		if x.Name != "sim_raylets" || x.Job != "independent" || x.PerSec <= 0 {
			t.Fatalf("implausible run %+v", x)
		}
		sizes = append(sizes, x.SimRaylets)
	}
	if !slices.Equal(sizes, []int{2, 3, 3, 2}) {
		t.Fatalf("runs at %v raylets, want [2 3 3 2]: a pair each, the order alternating", sizes)
	}
	r := lines[4]
	want := []float64{lines[1].PerSec / lines[0].PerSec, lines[2].PerSec / lines[3].PerSec}
	if r.Name != "sim_ratio" || r.Job != "independent" || r.SimRaylets != 3 || r.Baseline != 2 || !slices.Equal(r.Ratios, want) || r.Median != (want[0]+want[1])/2 {
		t.Fatalf("ratio line %+v, want ratios %v and their median", r, want)
	}
	wantBenchUsage(t, "--sim-pairs", "--sim-raylets", "3", "--sim-pairs", "2")
	wantBenchUsage(t, "--sim-baseline", "--sim-raylets", "3", "--sim-baseline", "3")
	wantBenchUsage(t, "--sim-pairs", "--sim-raylets", "3", "--sim-baseline", "2", "--sim-pairs", "0")
	wantBenchUsage(t, "--cpuprofile", "--sim-raylets", "3", "--sim-baseline", "2", "--cpuprofile", filepath.Join(t.TempDir(), "p"))
	wantBenchUsage(t, "--sim-baseline", "--sim-baseline", "2")
}
