package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/runtime/cluster"
)

// idleResult is one process's CPU while its cluster does nothing.
type idleResult struct {
	Name    string  `json:"name"` // "idle"
	Process string  `json:"process"`
	Role    string  `json:"role"` // leader, follower or raylet
	PID     int     `json:"pid"`
	Seconds float64 `json:"seconds"`
	// CPUPercent is user+system CPU over the window, in percent of one core.
	CPUPercent float64 `json:"cpu_percent"`
	// Switches is the context switches per second of all the process's
	// threads over the window, voluntary and not: each is a thread that
	// slept and was woken, so this counts wake-ups, and it varies less with
	// the machine's load than CPUPercent does.
	Switches float64 `json:"ctx_switches_per_s"`
	// CPUPerSwitch is the CPU the process used per context switch, in
	// microseconds: what a wake-up cost it. On a virtual machine it moves
	// with the host's load while Switches stays put, so it tells a run
	// that did more from one whose every wake-up cost more.
	CPUPerSwitch float64 `json:"cpu_us_per_switch"`
}

// newIdleResult is one process's figures from its CPU seconds and
// context switches over a window of secs seconds.
func newIdleResult(process, role string, pid int, secs, cpu float64, switches int64) idleResult {
	r := idleResult{Name: "idle", Process: process, Role: role, PID: pid, Seconds: secs,
		CPUPercent: 100 * cpu / secs, Switches: float64(switches) / secs}
	if switches > 0 {
		r.CPUPerSwitch = 1e6 * cpu / float64(switches)
	}
	return r
}

// runIdleBench starts a cluster as `phobos up` does (heads and raylets
// as child processes of this binary), waits settle for elections and
// registrations to end, and reports each process's CPU over window (from
// the scheduler's count, /proc/PID/task/*/schedstat, else /proc/PID/stat)
// and its context switches (/proc/PID/task/*/status).
// Like `phobos up`, every process serves its web service (and so collects
// metrics) unless noHTTP. Issue 17's targets: leader ≤ 1% of a core, each
// follower ≤ 0.5%, each raylet ≤ 0.2%.
func runIdleBench(ctx context.Context, binary string, heads, raylets int, settle, window time.Duration, headFlags []string, noHTTP, insecure, asJSON bool) error {
	dir, err := os.MkdirTemp("", "phobos-idle-")
	if err != nil {
		return err
	}
	keep := false // the heads' logs, when the error sends the reader to them
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := cluster.Start(startCtx, cluster.Spec{Binary: binary, Dir: dir, Heads: heads, Raylets: raylets, Insecure: insecure, HTTP: !noHTTP,
		HeadArgs: append([]string{"--log-level", "warn"}, headFlags...), RayletArgs: []string{"--log-level", "warn"}})
	cancel()
	if err != nil {
		return fmt.Errorf("bench --idle: start a cluster of %d heads and %d raylets: %w", heads, raylets, err)
	}
	defer c.Stop()

	var cred phobos.Credentials
	if insecure {
		cred, err = phobos.TokenFile(c.TokenFile)
	} else {
		id := c.Identity("admin")
		cred, err = phobos.TLSFiles(id.CA, id.Cert, id.Key)
	}
	if err != nil {
		return err
	}
	leader := func() string {
		cl, err := phobos.Connect(ctx, c.HeadAddrs(), cred)
		if err != nil {
			return ""
		}
		defer cl.Close()
		st, err := cl.Status(ctx)
		if err != nil {
			return ""
		}
		return st.Leader
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	before := leader() // the status call itself is outside the window

	procs := append(append([]*cluster.Proc{}, c.Heads...), c.Raylets...)
	// The scheduler's own count where the kernel gives it, else ticks.
	cpu := schedCPUSeconds
	if _, err := cpu(os.Getpid()); err != nil {
		cpu = cpuSeconds
	}
	start := make([]float64, len(procs))
	startSw := make([]int64, len(procs))
	for i, p := range procs {
		if start[i], err = cpu(p.PID()); err != nil {
			return err
		}
		if startSw[i], err = ctxSwitches(p.PID()); err != nil {
			return err
		}
	}
	t0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return ctx.Err()
	}
	secs := time.Since(t0).Seconds()
	var results []idleResult
	for i, p := range procs {
		end, err := cpu(p.PID())
		if err != nil {
			return err
		}
		endSw, err := ctxSwitches(p.PID())
		if err != nil {
			return err
		}
		role := "raylet"
		if p.Kind == "head" {
			role = "follower"
			if p.ID == before {
				role = "leader"
			}
		}
		results = append(results, newIdleResult(p.ID, role, p.PID(), secs, end-start[i], endSw-startSw[i]))
	}
	if after := leader(); after != before {
		keep = true
		return fmt.Errorf("bench --idle: the leader changed during the window (%q, then %q): an idle cluster should keep its leader; see the heads' logs in %s", before, after, dir)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range results {
			enc.Encode(r)
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "process\trole\tpid\tCPU %% of a core over %.0fs\tcontext switches/s\tµs CPU a switch\t\n", secs)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.0f\t\n", r.Process, r.Role, r.PID, r.CPUPercent, r.Switches, r.CPUPerSwitch)
	}
	return tw.Flush()
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the user+system CPU time process pid has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("bench --idle: read the CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench --idle: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // utime and stime are fields 14 and 15: 12 and 13 after the name
		return 0, fmt.Errorf("bench --idle: /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench --idle: /proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// schedCPUSeconds is the CPU time process pid's live threads have used,
// as the scheduler counts it in nanoseconds (the first field of
// /proc/PID/task/TID/schedstat). /proc/PID/stat's utime and stime are
// clock ticks, charged to whichever thread runs when the tick comes: a
// process that wakes for 100 µs dozens of times a second is charged by
// luck, and 20 s of 1 % of a core is only 20 such ticks.
func schedCPUSeconds(pid int) (float64, error) {
	ns, err := sumThreads(pid, "schedstat", func(b []byte) (int64, error) {
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, errors.New("empty")
		}
		return strconv.ParseInt(f[0], 10, 64)
	})
	return float64(ns) / 1e9, err
}

// ctxSwitches is the number of context switches, voluntary and
// involuntary, that process pid's live threads have had.
func ctxSwitches(pid int) (int64, error) {
	return sumThreads(pid, "status", func(b []byte) (int64, error) {
		var n int64
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches" {
				continue
			}
			c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s %q: %w", k, v, err)
			}
			n += c
		}
		return n, nil
	})
}

// sumThreads adds up what parse reads from file of each of process pid's
// live threads (/proc/PID/task/TID/file); a thread that ended meanwhile
// counts nothing.
func sumThreads(pid int, file string, parse func([]byte) (int64, error)) (int64, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("bench --idle: list the threads of process %d: %w", pid, err)
	}
	var sum int64
	for _, t := range tasks {
		path := filepath.Join(dir, t.Name(), file)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("bench --idle: read %s: %w", path, err)
		}
		n, err := parse(b)
		if err != nil {
			return 0, fmt.Errorf("bench --idle: %s: %w", path, err)
		}
		sum += n
	}
	return sum, nil
}

// idleFlags are bench's flags for the idle measurement.
type idleFlags struct {
	on, noHTTP     bool
	binary         string
	headFlags      string
	heads, raylets int
	settle, window time.Duration
}

func registerIdleFlags(fs interface {
	BoolVar(*bool, string, bool, string)
	IntVar(*int, string, int, string)
	StringVar(*string, string, string, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}) *idleFlags {
	f := &idleFlags{}
	fs.BoolVar(&f.on, "idle", false, "instead of the benchmarks: start a cluster of --idle-heads heads and --idle-raylets raylets, let it settle, and report each process's CPU over --idle-for")
	fs.StringVar(&f.binary, "idle-binary", "", "the phobos binary the --idle cluster runs (default this one): to compare releases side by side")
	fs.BoolVar(&f.noHTTP, "idle-no-http", false, "the --idle cluster's processes serve no web service (and collect no metrics); by default they do, as under phobos up")
	fs.StringVar(&f.headFlags, "idle-head-flags", "", "more flags for every head of the --idle cluster, separated by spaces (\"--raft-heartbeat 1s --raft-election 1s --raft-lease 500ms\"): to see what other settings cost")
	fs.IntVar(&f.heads, "idle-heads", 3, "heads of the --idle cluster")
	fs.IntVar(&f.raylets, "idle-raylets", 2, "raylets of the --idle cluster")
	fs.DurationVar(&f.settle, "idle-settle", 5*time.Second, "how long the --idle cluster runs before the window")
	fs.DurationVar(&f.window, "idle-for", 20*time.Second, "the --idle measurement window")
	return f
}

func (f *idleFlags) run(ctx context.Context, insecure, asJSON bool) error {
	if f.heads != 1 && f.heads != 3 && f.heads != 5 {
		return usagef("--idle-heads %d: run 1, 3 or 5 heads", f.heads)
	}
	if f.raylets < 0 || f.window <= 0 || f.settle < 0 {
		return usagef("--idle-raylets, --idle-for and --idle-settle must not be negative (and --idle-for not zero)")
	}
	return runIdleBench(ctx, f.binary, f.heads, f.raylets, f.settle, f.window, strings.Fields(f.headFlags), f.noHTTP, insecure, asJSON)
}
