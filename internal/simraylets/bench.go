package simraylets

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
)

// Jobs are the jobs Job builds.
var Jobs = []string{"independent", "seed"}

// Job builds a benchmark job of about n subtasks: "independent" is n
// subtasks reading nothing; "seed" is the seed example (RAND, RAND -> ADD
// -> SUM over chunks of 100 elements) with n/3 chunks per input, which
// lowers to about n subtasks (two RANDs and an ADD+SUM per chunk, and the
// tree of partial sums).
func Job(name string, n int64) (phobos.Graph, error) {
	switch name {
	case "independent":
		return bench.Independent(max(n, 1)), nil
	case "seed":
		chunks := max(n/3, 1)
		a := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(1))
		b := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(2))
		return a.Add(b).Sum(), nil
	}
	return nil, fmt.Errorf("simraylets: unknown job %q (want %s)", name, strings.Join(Jobs, " or "))
}

// Result is one run of a job on simulated raylets, as the JSON line
// `phobos bench --sim-raylets` prints.
type Result struct {
	Name       string  `json:"name"` // "sim_raylets"
	Job        string  `json:"job"`
	SimRaylets int     `json:"sim_raylets"`
	Slots      int     `json:"sim_slots"`
	Heads      int     `json:"heads"`
	N          int64   `json:"n"` // subtasks
	Seconds    float64 `json:"seconds"`
	PerSec     float64 `json:"per_sec"`
	// HeadCPUPerSubtask is the CPU seconds of the heads' goroutines per
	// subtask, from a CPU profile's labels (0 when another CPU profile
	// was running); ProcessCPUPerSubtask is the whole process's (heads,
	// simulated raylets, driver and garbage collector).
	HeadCPUPerSubtask    float64 `json:"head_cpu_s_per_subtask,omitempty"`
	ProcessCPUPerSubtask float64 `json:"process_cpu_s_per_subtask"`
	// HeadBytesPerSubtask is the bytes through the heads' connections.
	HeadBytesPerSubtask float64 `json:"head_bytes_per_subtask"`
	// PageFaults is the process's minor page faults while the job ran:
	// memory touched for the first time (or again, after the runtime gave
	// it back to the system), each a trip into the kernel.
	PageFaults int64 `json:"page_faults"`
	// HeapPerSubtask is the process heap held per subtask once the job
	// finished, before it is released; HeapAfterRelease what is left of it
	// after (0: back to the baseline). Both are the whole process's: the
	// simulated raylets' buffers for the last batch they pulled count
	// until they next find no work.
	HeapPerSubtask   float64 `json:"heap_bytes_per_subtask"`
	HeapAfterRelease float64 `json:"heap_bytes_after_release"`
	// HeapAfterFrees is the heap once the raylets have taken every free
	// (each subtask of these jobs makes one object, so N of them): the
	// in-memory network between head and raylets, which
	// HeapAfterRelease counts, is drained by then. 0 when they had not
	// within a minute.
	HeapAfterFrees float64 `json:"heap_bytes_after_frees"`
	// PeakRSS is the process's peak resident set (VmHWM) so far.
	PeakRSS int64 `json:"peak_rss_bytes"`
	// Goroutines is the process's goroutines as the job finished: the
	// heads' and the simulated raylets' (each raylet's session has some at
	// both ends), a cost every collection pays to scan their stacks.
	Goroutines int `json:"goroutines"`
	// GCCPUPerSubtask is the collector's CPU seconds per subtask while
	// the job ran, as the runtime estimates them (marking by its own
	// workers and by allocating goroutines, and its pauses), GCCycles
	// the collections that ran, and ScanBytes what each of them had to
	// scan before the job came: the heap the collector must read for
	// pointers (memory of types without them it only marks), the
	// goroutines' stacks and globals. All are the whole process's.
	GCCPUPerSubtask float64 `json:"gc_cpu_s_per_subtask"`
	GCCycles        int64   `json:"gc_cycles"`
	ScanBytes       int64   `json:"gc_scan_bytes"`
	PullP50         float64 `json:"pull_p50_us"`
	PullP99         float64 `json:"pull_p99_us"`
	Pulls           int64   `json:"pulls"`
	// FreeMessages is the FreeObjects messages the raylets were sent:
	// frees that did not ride on a pull reply.
	FreeMessages int64 `json:"free_messages"`
	// WarmupRuns is how many times the job ran before this run on the
	// same heads and raylets (phobos bench --sim-warmup); the Cold
	// fields are the first of those runs, the job as a fresh process
	// meets it (0 without a warm-up).
	WarmupRuns            int     `json:"warmup_runs"`
	ColdSeconds           float64 `json:"cold_seconds,omitempty"`
	ColdPerSec            float64 `json:"cold_per_sec,omitempty"`
	ColdHeadCPUPerSubtask float64 `json:"cold_head_cpu_s_per_subtask,omitempty"`
	// Runs is how many measured runs there were (phobos bench
	// --sim-runs): the figures above are the fastest one's, as a
	// best-of-N on a shared machine, where other work only ever slows a
	// run down; RunsPerSec is each run's rate, in the order run.
	Runs       int       `json:"runs"`
	RunsPerSec []float64 `json:"runs_per_sec,omitempty"`
}

// Run submits g through cl, waits for it to finish and releases it,
// measuring the heads as it goes. The CPU profile of the run (while the job
// runs, of the whole process, labelled as Start says) is also written to
// prof unless it is nil.
func (c *Cluster) Run(ctx context.Context, cl *phobos.Client, job string, g phobos.Graph, prof io.Writer) (Result, error) {
	r := Result{Name: "sim_raylets", Job: job, SimRaylets: c.cfg.Raylets, Slots: c.cfg.Slots, Heads: c.cfg.Heads}
	var before, done, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	gc0 := readGC()
	c.ResetStats()
	cpu0, faults0 := processCPU()
	var (
		j     *phobos.Job
		st    phobos.JobStatus
		start time.Time
		secs  float64
	)
	run := func() error {
		start = time.Now()
		var err error
		if j, err = cl.Submit(ctx, g); err != nil {
			return fmt.Errorf("%s: %w", job, err)
		}
		if st, err = j.Done(ctx); err != nil {
			return fmt.Errorf("%s: %w", job, err)
		}
		secs = time.Since(start).Seconds()
		return nil
	}
	buf, profErr := startCPUProfile() // fails if another one runs (go test -cpuprofile)
	err := run()
	var byLabel map[string]float64
	if profErr == nil {
		pprof.StopCPUProfile()
		if err == nil {
			if byLabel, err = parseCPUByLabel(buf.Bytes(), Label); err != nil {
				return r, err
			}
		}
		if err == nil && prof != nil {
			if _, err := prof.Write(buf.Bytes()); err != nil {
				return r, fmt.Errorf("%s: write the CPU profile: %w", job, err)
			}
		}
	}
	if err != nil {
		return r, err
	}
	cpu, faults := processCPU()
	cpu, faults = cpu-cpu0, faults-faults0
	gc1 := readGC()
	stats := c.Stats()
	goroutines := runtime.NumGoroutine()
	runtime.GC()
	runtime.ReadMemStats(&done)
	if err := j.Release(ctx); err != nil {
		return r, fmt.Errorf("%s: release: %w", job, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	var freed runtime.MemStats
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	err = c.WaitFreed(wctx, int64(st.Subtasks))
	wcancel()
	if err == nil {
		runtime.GC()
		runtime.ReadMemStats(&freed)
	}
	n := float64(st.Subtasks)
	r.N, r.Seconds, r.PerSec = int64(st.Subtasks), secs, n/secs
	r.ProcessCPUPerSubtask = cpu / n
	r.PageFaults = faults
	r.GCCPUPerSubtask = (gc1.cpu - gc0.cpu) / n
	r.GCCycles = int64(gc1.cycles - gc0.cycles)
	r.ScanBytes = int64(gc0.scan)
	if byLabel != nil {
		r.HeadCPUPerSubtask = byLabel[LabelHead] / n
	}
	r.HeadBytesPerSubtask = float64(stats.HeadBytes) / n
	r.HeapPerSubtask = float64(int64(done.HeapAlloc)-int64(before.HeapAlloc)) / n
	r.HeapAfterRelease = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	if freed.HeapAlloc > 0 {
		r.HeapAfterFrees = float64(int64(freed.HeapAlloc)-int64(before.HeapAlloc)) / n
	}
	r.PeakRSS = peakRSS()
	r.Goroutines = goroutines
	r.PullP50, r.PullP99 = float64(stats.PullP50)/1e3, float64(stats.PullP99)/1e3
	r.Pulls = stats.Pulls
	r.FreeMessages = stats.FreeMessages
	return r, nil
}

// gcStats are the collector's counters (runtime/metrics).
type gcStats struct {
	cpu    float64 // CPU seconds, estimated
	cycles uint64
	scan   uint64 // bytes a collection scans: heap, stacks and globals
}

var gcMetrics = []string{"/cpu/classes/gc/total:cpu-seconds", "/gc/cycles/total:gc-cycles",
	"/gc/scan/heap:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

func readGC() gcStats {
	ms := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		ms[i].Name = name
	}
	metrics.Read(ms)
	var g gcStats
	for _, m := range ms {
		switch m.Value.Kind() {
		case metrics.KindFloat64:
			g.cpu = m.Value.Float64()
		case metrics.KindUint64:
			if m.Name == "/gc/cycles/total:gc-cycles" {
				g.cycles = m.Value.Uint64()
			} else {
				g.scan += m.Value.Uint64()
			}
		}
	}
	return g
}

// processCPU is the process's user and system CPU seconds so far, and
// its minor page faults.
func processCPU() (float64, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, ru.Minflt
}

// peakRSS reads VmHWM from /proc/self/status (0 where there is none).
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
