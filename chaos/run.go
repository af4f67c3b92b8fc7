package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/chaos/idseq"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/cluster"
	"github.com/phobos-project/phobos/transport"
)

// Deadlines of the harness's own waits.
const (
	submitTimeout  = time.Minute      // one Submit, retries included
	serveDeadline  = time.Minute      // fault → serving again, while the fault is held
	rejoinDeadline = time.Minute      // undo → the target back
	drainDeadline  = 30 * time.Second // last job → stores back to their starting use
	startDeadline  = 2 * time.Minute  // cluster start
)

// Run starts a cluster of phobos processes on loopback, runs the
// workload while injecting the planned faults, checks the invariants and
// returns the report. An error means the harness itself could not run (a
// bad config, no cluster); broken invariants are in the report, whose
// Violations are then not empty. Cancelling ctx stops the run early: jobs
// in flight are cancelled and the report is marked interrupted.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p, err := newPlan(cfg.Seed, cfg.Schedule, cfg.Faults, cfg.Drivers)
	if err != nil {
		return nil, err
	}
	if !p.random && cfg.Steps == 0 {
		last := 0
		if n := len(p.faults); n > 0 {
			last = p.faults[n-1].Step
		}
		cfg.Steps = last + 2
	}
	r := &runner{cfg: cfg, log: cfg.Logger, plan: p, down: map[*cluster.Proc]bool{}, paused: map[*cluster.Proc]bool{},
		changed: make(chan struct{}), stepJobs: map[int][]*jobRun{}}
	return r.run(ctx)
}

// runner is one run's state. Its goroutines share it under mu.
type runner struct {
	cfg   Config
	log   *slog.Logger
	plan  *plan
	start time.Time
	dir   string
	owned bool // dir was made here

	c          *cluster.Cluster
	obs        *phobos.Client   // the observer: status, probes, hogs
	drivers    []*phobos.Client // the workload's drivers
	heads      *headCaller
	rec        *idseq.Recorder
	wit        witness
	net        netFaults
	spill      spillDirs
	baseRaylet map[string]phobos.StoreStats
	// rayletAddrs are the raylets' fixed listen addresses, by index.
	rayletAddrs []string

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced when anything below changes
	jobs       []*jobRun
	stepJobs   map[int][]*jobRun
	steps      int  // steps submitted
	stepsDone  bool // no more steps will be submitted
	injected   int  // faults injected (or skipped)
	completed  int  // faults over: undone and the cluster whole again
	inflight   int
	down       map[*cluster.Proc]bool // killed by the harness, not yet restarted
	paused     map[*cluster.Proc]bool
	faults     []FaultRecord
	violations []Violation
}

func (r *runner) since() time.Duration { return time.Since(r.start) }

// notify wakes everyone waiting on r.changed. Caller holds r.mu.
func (r *runner) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitUntil waits until cond (checked under r.mu) holds or ctx ends.
func (r *runner) waitUntil(ctx context.Context, cond func() bool) error {
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *runner) violate(inv, detail, log string) {
	r.mu.Lock()
	r.violations = append(r.violations, Violation{Invariant: inv, Detail: detail, Log: log})
	r.mu.Unlock()
	r.log.Warn("chaos: violation", "invariant", inv, "detail", detail)
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	if err := r.setup(ctx); err != nil {
		r.teardown()
		return nil, err
	}
	rep := &Report{Seed: r.cfg.Seed, Schedule: r.cfg.Schedule, Heads: r.cfg.Heads, Raylets: r.cfg.Raylets, Started: time.Now()}
	r.start = time.Now()

	// ID allocations run alongside everything, through every head.
	actx, stopAlloc := context.WithCancel(context.Background())
	var awg sync.WaitGroup
	for i := range 2 {
		awg.Add(1)
		go func() {
			defer awg.Done()
			idseq.RunClient(actx, r.rec, idseq.Client{ID: i, Heads: r.headAddrs(), Call: r.heads.call, Seed: r.cfg.Seed, Gap: 20 * time.Millisecond})
		}()
	}

	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		r.faultLoop(ctx)
	}()
	r.stepLoop(ctx)
	fwg.Wait()
	r.waitJobs()
	r.sweepJobs()
	stopAlloc()
	awg.Wait()
	rep.Interrupted = ctx.Err() != nil

	r.checkStores(rep)
	r.checkIDs(rep)
	r.checkExits()

	r.mu.Lock()
	rep.Steps = r.steps
	rep.Faults = append([]FaultRecord{}, r.faults...)
	rep.Jobs, rep.Failures = r.jobCounts()
	rep.Violations = append([]Violation{}, r.violations...)
	r.mu.Unlock()
	if rep.Violations == nil {
		rep.Violations = []Violation{}
	}
	if rep.Faults == nil {
		rep.Faults = []FaultRecord{}
	}
	if rep.Stores == nil {
		rep.Stores = []StoreCheck{}
	}
	rep.Command = r.cfg.command(rep.Steps)
	rep.Duration = secs(time.Since(r.start))
	if !rep.OK() || r.cfg.Keep || !r.owned {
		rep.Dir = r.dir
	}
	r.teardown()
	if rep.OK() && r.owned && !r.cfg.Keep {
		os.RemoveAll(r.dir)
	} else if err := writeReportFile(rep); err != nil {
		r.log.Warn("chaos: cannot keep the report beside the cluster's files", "dir", rep.Dir, "err", err)
	}
	return rep, nil
}

// writeReportFile writes the report as JSON into the directory it keeps
// (report.json, 0600): a kept directory says why it was kept even when
// the report printed went nowhere (its reader gone, a terminal closed).
func writeReportFile(rep *Report) error {
	f, err := os.OpenFile(filepath.Join(rep.Dir, "report.json"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// setup makes the directories, starts the cluster and connects.
func (r *runner) setup(ctx context.Context) error {
	r.dir = r.cfg.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "phobos-chaos-")
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		r.dir, r.owned = d, true
	}
	r.net = netFaults{dir: filepath.Join(r.dir, "faults")}
	if err := os.MkdirAll(r.net.dir, 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := r.spill.setup(r); err != nil {
		return err
	}
	ports, err := cluster.FreePorts(r.cfg.Raylets)
	if err != nil {
		return err
	}
	for _, p := range ports {
		r.rayletAddrs = append(r.rayletAddrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	spec := cluster.Spec{
		Binary: r.cfg.Binary, Dir: r.dir, Heads: r.cfg.Heads, Raylets: r.cfg.Raylets, Slots: r.cfg.Slots,
		StoreSize: fmt.Sprintf("%dKiB", r.cfg.StoreSize>>10),
		HeadArgs: append([]string{"--raft-heartbeat", "200ms", "--raft-election", "200ms", "--raft-lease", "100ms",
			"--raylet-timeout", r.cfg.RayletTimeout.String(), "--result-ttl", "30m", "--log-level", "info"}, r.cfg.HeadArgs...),
		RayletArgs: append([]string{"--log-level", "info"}, r.cfg.RayletArgs...),
		Args: func(kind, id string) []string {
			a := []string{"--fault-file", r.net.path(id)}
			if kind == "raylet" {
				var i int
				fmt.Sscanf(id, "r%d", &i)
				if i >= 1 && i <= len(ports) {
					a = append(a, "--listen", r.rayletAddrs[i-1])
				}
				a = append(a, "--spill-dir", r.spill.dir(id))
			}
			return a
		},
	}
	sctx, cancel := context.WithTimeout(ctx, startDeadline)
	defer cancel()
	c, err := cluster.Start(sctx, spec)
	if err != nil {
		return fmt.Errorf("chaos: start the cluster: %w", err)
	}
	r.c = c
	r.log.Info("chaos: cluster up", "dir", r.dir, "heads", c.HeadAddrs())
	alloc, err := c.Transport("admin", transport.RoleAdmin) // raw ID allocation is an admin's
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	alloc.NodeID = "chaos-alloc"
	r.heads = newHeadCaller(alloc)
	r.rec = idseq.NewRecorder()
	creds, err := clientCredentials(c)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if r.obs, err = phobos.Connect(sctx, c.HeadAddrs(), creds, phobos.Options{Transport: transportID("chaos-observer")}); err != nil {
		return fmt.Errorf("chaos: connect: %w", err)
	}
	for i := range r.cfg.Drivers {
		// Driver 0 reads results zero-copy from the stores (all raylets
		// share this machine), so its views must be released too.
		d, err := phobos.Connect(sctx, c.HeadAddrs(), creds, phobos.Options{ZeroCopy: i == 0, Transport: transportID(fmt.Sprintf("chaos-driver-%d", i))})
		if err != nil {
			return fmt.Errorf("chaos: connect driver %d: %w", i, err)
		}
		r.drivers = append(r.drivers, d)
	}
	st, err := r.obs.Status(sctx)
	if err != nil {
		return fmt.Errorf("chaos: cluster status: %w", err)
	}
	r.baseRaylet = map[string]phobos.StoreStats{}
	for _, rl := range st.Raylets {
		r.baseRaylet[rl.ID] = rl.Store
	}
	return nil
}

func (r *runner) teardown() {
	for _, d := range r.drivers {
		d.Close()
	}
	if r.obs != nil {
		r.obs.Close()
	}
	if r.heads != nil {
		r.heads.close()
	}
	if r.c != nil {
		r.c.Stop()
	}
	r.spill.teardown()
}

func (r *runner) headAddrs() []string {
	var out []string
	for _, h := range r.c.Heads {
		out = append(out, h.Addr)
	}
	return out
}

// stepLoop submits the workload's steps in order. Step s+1 waits until
// every fault planned at a point of step s or earlier has struck, so the
// faults strike at the same points of the workload in every run.
func (r *runner) stepLoop(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.stepsDone = true
		r.notify()
		r.mu.Unlock()
	}()
	jobNo := 0
	for s := 1; ctx.Err() == nil; s++ {
		if r.cfg.Steps > 0 && s > r.cfg.Steps || r.cfg.Steps == 0 && r.since() >= r.cfg.Duration {
			return
		}
		// Faults at points before step s must have struck; and if one
		// strikes during step s, the faults before it must be over, so it
		// catches step s's job in the middle.
		due, here := 0, false
		for i := 0; ; i++ {
			f, ok := r.plan.fault(i)
			if !ok || f.Step > s {
				break
			}
			if f.Step < s {
				due = i + 1
			} else {
				here = true
			}
		}
		over := 0
		if here {
			over = due
		}
		jobs := r.plan.step(s)
		if err := r.waitUntil(ctx, func() bool {
			return r.injected >= due && r.completed >= over && r.inflight+len(jobs) <= max(r.cfg.InFlight, len(jobs))
		}); err != nil {
			return
		}
		var runs []*jobRun
		var wg sync.WaitGroup
		for i, spec := range jobs {
			jobNo++
			jr := &jobRun{n: jobNo, step: s, driver: (jobNo - 1) % len(r.drivers), spec: spec, done: make(chan struct{})}
			if len(jobs) > 1 {
				jr.driver = i % len(r.drivers) // a burst: every driver at once
			}
			runs = append(runs, jr)
			r.mu.Lock()
			r.jobs = append(r.jobs, jr)
			r.inflight++
			r.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.submit(ctx, jr, r.drivers[jr.driver])
			}()
		}
		wg.Wait()
		r.log.Info("chaos: step submitted", "step", s, "jobs", len(runs), "kind", runs[0].spec.kind)
		r.mu.Lock()
		r.steps = s
		r.stepJobs[s] = runs
		r.notify()
		r.mu.Unlock()
		for _, jr := range runs {
			go r.await(ctx, jr, r.drivers[jr.driver])
		}
	}
}

// jobRun is one job of the workload and its outcome.
type jobRun struct {
	n, step, driver int
	spec            jobSpec
	job             *phobos.Job
	submitted       time.Duration
	done            chan struct{} // closed when the outcome is known

	// Set before done is closed.
	outcome string // succeeded, failed, unacknowledged, or a bad outcome
	err     string
	ended   time.Duration // since the run started
	endedAt time.Time
	bad     bool

	late string // an unacknowledged submission that made a job anyway

	// Hogs: hold is closed to release the results, released once they are.
	hold     chan struct{}
	holdOnce sync.Once
	released chan struct{}
}

func (jr *jobRun) name() string { return fmt.Sprintf("chaos-%d-%s", jr.n, jr.spec.kind) }

// Outcomes.
const (
	outSucceeded = "succeeded"
	outFailed    = "failed"
	outUnacked   = "unacknowledged"
	outWrong     = "wrong answer"
	outLost      = "lost"
	outHung      = "hung"
	outUnclear   = "unclear error"
)

func (r *runner) submit(ctx context.Context, jr *jobRun, d *phobos.Client) {
	sctx, cancel := context.WithTimeout(ctx, submitTimeout)
	defer cancel()
	call := r.rec.Now()
	j, err := d.Submit(sctx, jr.spec.graph, phobos.JobOptions{Name: jr.name(), Fusion: jr.spec.fusion})
	jr.submitted = r.since()
	if err != nil {
		r.rec.RecordSubmit(100+jr.driver, 0, false, call, -1)
		if ctx.Err() == nil && !errors.Is(err, phobos.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dag.ErrDeadlineExceeded) {
			r.violate(InvSubmit, fmt.Sprintf("job %d (%s: %s) refused: %v", jr.n, jr.spec.kind, jr.spec.desc, err), "")
			jr.bad = true
		}
		r.finish(jr, outUnacked, err.Error())
		return
	}
	r.rec.RecordSubmit(100+jr.driver, j.Task, true, call, r.rec.Now())
	jr.job = j
	r.log.Debug("chaos: job acknowledged", "job", jr.n, "task", j.Task, "kind", jr.spec.kind, "desc", jr.spec.desc)
}

// await waits for an acknowledged job, checks its outcome and releases
// its results.
func (r *runner) await(ctx context.Context, jr *jobRun, d *phobos.Client) {
	if jr.job == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.JobTimeout)
	defer cancel()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := jr.job.Release(rctx); err != nil && !errors.Is(err, phobos.ErrNotFound) {
			r.log.Info("chaos: release", "job", jr.n, "task", jr.job.Task, "err", err)
		}
		if jr.released != nil {
			close(jr.released)
		}
	}()
	var res *phobos.Result
	var err error
	if jr.spec.check == nil {
		_, err = jr.job.Done(wctx) // results stay until the fault that holds them ends
	} else {
		res, err = jr.job.Wait(wctx)
	}
	switch {
	case err == nil && jr.spec.check == nil:
		r.finish(jr, outSucceeded, "")
		if jr.hold != nil {
			select {
			case <-jr.hold:
			case <-ctx.Done():
			}
		}
	case err == nil:
		cerr := jr.spec.check(res, &r.wit)
		for _, v := range res.Values {
			v.Release()
		}
		if cerr != nil {
			jr.bad = true
			r.violate(InvJobs, fmt.Sprintf("job %d (task %d, %s: %s) succeeded with a wrong answer: %v", jr.n, jr.job.Task, jr.spec.kind, jr.spec.desc, cerr), "")
			r.finish(jr, outWrong, cerr.Error())
			return
		}
		r.finish(jr, outSucceeded, "")
	case ctx.Err() != nil:
		r.cancelJob(jr)
		r.finish(jr, outFailed, "interrupted: "+err.Error())
	case wctx.Err() != nil:
		jr.bad = true
		r.violate(InvJobs, fmt.Sprintf("job %d (task %d, %s: %s) did not end within %v: %v", jr.n, jr.job.Task, jr.spec.kind, jr.spec.desc, r.cfg.JobTimeout, err), "")
		r.cancelJob(jr)
		r.finish(jr, outHung, err.Error())
	case errors.Is(err, phobos.ErrNotFound):
		jr.bad = true
		r.violate(InvJobs, fmt.Sprintf("job %d (task %d, %s) was acknowledged, then lost: %v", jr.n, jr.job.Task, jr.spec.kind, err), "")
		r.finish(jr, outLost, err.Error())
	case (errors.Is(err, phobos.ErrFatal) || errors.Is(err, phobos.ErrCancelled)) && clearError(err):
		if r.cfg.Strict {
			jr.bad = true
			r.violate(InvJobs, fmt.Sprintf("job %d (task %d, %s: %s) failed under a schedule it should survive: %v", jr.n, jr.job.Task, jr.spec.kind, jr.spec.desc, err), "")
		}
		r.finish(jr, outFailed, err.Error())
	default:
		jr.bad = true
		r.violate(InvJobs, fmt.Sprintf("job %d (task %d, %s) ended with an unclear error (kind %v): %v", jr.n, jr.job.Task, jr.spec.kind, dag.KindOf(err), err), "")
		r.finish(jr, outUnclear, err.Error())
	}
}

// clearError: a job's error must say what failed, not just that
// something did.
func clearError(err error) bool {
	msg := err.Error()
	_, detail, _ := strings.Cut(msg, ": job ")
	return len(strings.TrimSpace(detail)) > len("123 failed: ") && !strings.HasSuffix(strings.TrimSpace(msg), ":")
}

func (r *runner) cancelJob(jr *jobRun) {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jr.job.Cancel(cctx)
}

func (r *runner) finish(jr *jobRun, outcome, err string) {
	r.mu.Lock()
	jr.outcome, jr.err, jr.ended, jr.endedAt = outcome, err, r.since(), time.Now()
	r.inflight--
	r.notify()
	r.mu.Unlock()
	close(jr.done)
	if outcome != outSucceeded {
		r.log.Info("chaos: job did not succeed", "job", jr.n, "kind", jr.spec.kind, "outcome", outcome, "err", err)
	}
}

// waitJobs waits until every job's outcome is known (each has its own
// deadline) and hogs are released.
func (r *runner) waitJobs() {
	r.mu.Lock()
	jobs := append([]*jobRun{}, r.jobs...)
	r.mu.Unlock()
	for _, jr := range jobs {
		if jr.hold != nil {
			r.releaseHog(jr)
		}
		<-jr.done
	}
}

// sweepJobs finds jobs the cluster has that no acknowledged submission
// accounts for. A submission that gave up (its answer never came) may
// still have created its job: that is an unknown outcome, not a fault, but
// nobody would release its results, so release them here. A job no
// submission accounts for at all is a violation.
func (r *runner) sweepJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.JobTimeout)
	defer cancel()
	list, err := r.obs.Jobs(ctx)
	if err != nil {
		r.violate(InvJobs, fmt.Sprintf("list the cluster's jobs at the end: %v", err), "")
		return
	}
	r.mu.Lock()
	byName := map[string]*jobRun{}
	for _, jr := range r.jobs {
		byName[jr.name()] = jr
	}
	r.mu.Unlock()
	for _, st := range list {
		jr := byName[st.Name]
		switch {
		case jr == nil:
			r.violate(InvJobs, fmt.Sprintf("the cluster has job %d (%q, %s) that no submission made", st.Task, st.Name, st.Status), "")
			continue
		case jr.job != nil:
			if jr.job.Task != st.Task {
				r.violate(InvJobs, fmt.Sprintf("job %d (%s) was acknowledged as task %d, but the cluster also has task %d under its name", jr.n, jr.spec.kind, jr.job.Task, st.Task), "")
			}
			continue
		}
		j := r.obs.Job(st.Task)
		_, derr := j.Done(ctx)
		rerr := j.Release(ctx)
		r.mu.Lock()
		jr.late = fmt.Sprintf("its submission gave up, yet it ran as task %d (%v); released (%v)", st.Task, derr, rerr)
		r.mu.Unlock()
	}
}

func (r *runner) jobCounts() (JobCounts, []JobRecord) {
	c := JobCounts{ByKind: map[string]int{}}
	var fails []JobRecord
	for _, jr := range r.jobs {
		c.ByKind[jr.spec.kind]++
		switch {
		case jr.outcome == outUnacked && !jr.bad:
			c.Unacknowledged++
		case jr.bad:
			c.Bad++
		case jr.outcome == outSucceeded:
			c.Succeeded++
		default:
			c.Failed++
		}
		if jr.job != nil {
			c.Submitted++
		}
		if jr.outcome != outSucceeded {
			rec := JobRecord{Job: jr.n, Step: jr.step, Kind: jr.spec.kind, Desc: jr.spec.desc, Outcome: jr.outcome, Error: jr.err, Time: secs(jr.ended), Note: jr.late}
			if jr.job != nil {
				rec.Task = uint32(jr.job.Task)
			}
			fails = append(fails, rec)
		}
	}
	return c, fails
}

// checkStores waits until every raylet's store is back to its starting
// use: no objects, no bytes, nothing pinned or spilled.
func (r *runner) checkStores(rep *Report) {
	ctx, cancel := context.WithTimeout(context.Background(), drainDeadline)
	defer cancel()
	var last phobos.ClusterStatus
	var lastErr error
	for {
		st, err := r.obs.Status(ctx)
		if err == nil {
			last = st
			if r.storesDrained(st) == nil {
				break
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // heartbeats come every second
			continue
		}
		break
	}
	seen := map[string]bool{}
	for _, rl := range last.Raylets {
		seen[rl.ID] = true
		sc := StoreCheck{Raylet: rl.ID, Start: r.baseRaylet[rl.ID], End: rl.Store, Observed: true}
		if p := storeProblem(rl, r.baseRaylet[rl.ID]); p != "" {
			sc.Problem = p
			r.violate(InvStores, fmt.Sprintf("raylet %s: %s %v after every job ended and was released", rl.ID, p, drainDeadline), "")
		} else {
			sc.Drained = true
		}
		rep.Stores = append(rep.Stores, sc)
	}
	for _, p := range r.c.Raylets {
		if !seen[p.ID] {
			rep.Stores = append(rep.Stores, StoreCheck{Raylet: p.ID, Problem: "not in the cluster status"})
			r.violate(InvStores, fmt.Sprintf("raylet %s is missing from the cluster status at the end (last error: %v)", p.ID, lastErr), "")
		}
	}
	slices.SortFunc(rep.Stores, func(a, b StoreCheck) int { return strings.Compare(a.Raylet, b.Raylet) })
}

func (r *runner) storesDrained(st phobos.ClusterStatus) error {
	if len(st.Raylets) < len(r.c.Raylets) {
		return errors.New("raylets missing")
	}
	for _, rl := range st.Raylets {
		if p := storeProblem(rl, r.baseRaylet[rl.ID]); p != "" {
			return errors.New(p)
		}
	}
	return nil
}

func storeProblem(rl phobos.RayletStatus, base phobos.StoreStats) string {
	s := rl.Store
	switch {
	case rl.State != "alive":
		return "is " + rl.State
	case s.Used > base.Used || s.Objects > base.Objects:
		return fmt.Sprintf("still holds %d objects, %d bytes (at the start: %d, %d)", s.Objects, s.Used, base.Objects, base.Used)
	case s.Pinned > 0:
		return fmt.Sprintf("still has %d objects pinned", s.Pinned)
	case s.Spilled > 0 || s.SpillBytes > 0:
		return fmt.Sprintf("still has %d spilled objects, %d bytes in spill files", s.Spilled, s.SpillBytes)
	}
	return ""
}

func (r *runner) checkIDs(rep *Report) {
	v := r.rec.Check(2*time.Minute, r.dir)
	rep.IDs = IDCheck{Operations: v.Ops, Acked: r.rec.Acked(), Unknown: r.rec.Unknown(), Deduped: r.rec.Deduped(), Visualization: v.Visualization}
	switch v.Result {
	case porcupine.Ok:
		rep.IDs.Result = "linearizable"
	case porcupine.Illegal:
		rep.IDs.Result = "NOT linearizable"
		r.violate(InvIDs, fmt.Sprintf("the history of %d ID allocations is not linearizable: an ID was handed out twice or out of order (see %s)", v.Ops, v.Visualization), "")
	default:
		rep.IDs.Result = "undecided (porcupine ran out of time)"
	}
}

// checkExits stops the cluster, reporting processes that did not exit
// cleanly, and scans every log for data races and panics.
func (r *runner) checkExits() {
	r.mu.Lock()
	for p := range r.paused {
		p.Signal(sigCont)
	}
	r.mu.Unlock()
	if err := r.c.Stop(); err != nil {
		for _, e := range splitJoined(err) {
			r.violate(InvExits, e.Error(), "")
		}
	}
	r.scanLogs()
}

func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
