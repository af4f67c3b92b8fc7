package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/chaos/idseq"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/cluster"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport/faultnet"
)

const sigCont = syscall.SIGCONT

// faultLoop strikes the planned faults one after another, each at its
// point of the workload.
func (r *runner) faultLoop(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		f, ok := r.plan.fault(i)
		if !ok {
			return
		}
		reached := false
		if err := r.waitUntil(ctx, func() bool { reached = r.steps >= f.Step; return reached || r.stepsDone }); err != nil || !reached {
			return // the workload ended before this point
		}
		r.strike(ctx, f)
	}
}

func (r *runner) markInjected() {
	r.mu.Lock()
	r.injected++
	r.notify()
	r.mu.Unlock()
}

func (r *runner) addFault(rec FaultRecord) {
	r.mu.Lock()
	r.faults = append(r.faults, rec)
	r.completed++
	r.notify()
	r.mu.Unlock()
	r.log.Info("chaos: fault done", "kind", rec.Kind, "target", rec.Target, "at", rec.At, "recovery", rec.Recovery, "skipped", rec.Skipped, "note", rec.Note)
}

// waitProgress waits until the first job of the fault's step has finished
// f.Pct percent of its subtasks, and says so if it ended first.
func (r *runner) waitProgress(ctx context.Context, f Fault) string {
	r.mu.Lock()
	jobs := r.stepJobs[f.Step]
	r.mu.Unlock()
	if len(jobs) == 0 || jobs[0].job == nil {
		return "its job was not acknowledged"
	}
	jr := jobs[0]
	for {
		st, err := r.obs.Job(jr.job.Task).Status(ctx)
		if err == nil {
			if st.Terminal() {
				return fmt.Sprintf("job %d ended (%s) before %d%%", jr.n, strings.ToLower(st.Status.String()), f.Pct)
			}
			if st.Subtasks > 0 && st.Finished*100 >= f.Pct*st.Subtasks {
				return ""
			}
		}
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-jr.done:
			return fmt.Sprintf("job %d ended before %d%%", jr.n, f.Pct)
		case <-time.After(20 * time.Millisecond): // polling progress
		}
	}
}

// strike injects one fault, measures how the cluster copes, holds it,
// undoes it and waits until the cluster is whole again.
func (r *runner) strike(ctx context.Context, f Fault) {
	rec := FaultRecord{Kind: f.Kind, At: f.Point()}
	info, _ := kindInfo(f.Kind)
	skip := func(why string) {
		rec.Skipped = why
		r.markInjected()
		r.addFault(rec)
	}
	switch {
	case len(r.c.Heads) < info.MinHeads:
		skip(fmt.Sprintf("needs %d heads", info.MinHeads))
		return
	case info.Root && !r.spill.tmpfs:
		skip("needs the raylets' spill dirs on a tmpfs: " + r.spill.why)
		return
	}
	if f.Pct > 0 {
		rec.Note = r.waitProgress(ctx, f)
	}
	if jobs := r.stepJobs[f.Step]; len(jobs) > 0 {
		rec.At += fmt.Sprintf(" (job %d)", jobs[0].n)
	}

	var target *cluster.Proc
	var err error
	isHead, isRaylet := false, false
	switch f.Kind {
	case KillLeader, PauseLeader, PartitionLeader, BlackholeLeader:
		target, err = r.leader(ctx)
		isHead = true
	case KillFollower, PauseFollower, PartitionFollower:
		target, err = r.follower(ctx, f.Pick)
		isHead = true
	case KillRaylet, PauseRaylet, IsolateRaylet, BlackholeRaylet, SpillFull, SpillReadOnly:
		target = r.c.Raylets[f.Pick%len(r.c.Raylets)]
		isRaylet = f.Kind != SpillFull && f.Kind != SpillReadOnly
	}
	if err != nil {
		skip(err.Error())
		return
	}
	if target != nil {
		rec.Target = target.ID
	} else {
		rec.Target = "cluster"
	}
	survivable := !(isHead && len(r.c.Heads) == 1) && !(isRaylet && len(r.c.Raylets) == 1)

	t0 := time.Now()
	rec.Time = secs(r.since())
	undo, err := r.inject(ctx, f, target, &rec)
	if err != nil {
		r.violate(InvHarness, fmt.Sprintf("%s of %s at %s: could not inject: %v", f.Kind, rec.Target, rec.At, err), "")
		skip("could not inject: " + err.Error())
		return
	}
	if f.Kind == FillStores || f.Kind == SpillFull || f.Kind == SpillReadOnly {
		// The fault is in force once the hog's results fill the stores.
		t0 = time.Now()
		rec.Time = secs(r.since())
	}
	r.markInjected()
	r.log.Info("chaos: fault injected", "kind", f.Kind, "target", rec.Target, "at", rec.At)

	// Measure while the fault holds (after undoing it, if the cluster
	// cannot serve without its target).
	mctx, stopMeasure := context.WithCancel(ctx)
	var detectedAt time.Duration
	var dwg sync.WaitGroup
	if isRaylet {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			detectedAt = r.detectLost(mctx, target, t0)
		}()
	}
	var m serveTimes
	if survivable {
		m = r.measureServe(ctx, t0, isHead || target == nil && f.Kind != FillStores)
	}
	r.hold(ctx, t0.Add(f.Hold))
	undoAt := time.Now()
	if err := undo(ctx); err != nil && ctx.Err() == nil {
		r.violate(InvServing, fmt.Sprintf("undo %s of %s: %v", f.Kind, rec.Target, err), "")
	}
	rec.Undone = secs(r.since())
	if !survivable {
		m = r.measureServe(ctx, t0, isHead)
	}
	stopMeasure()
	dwg.Wait()

	rec.Alloc, rec.Job = m.alloc, m.job
	rec.Recovery = max(m.alloc, m.job)
	if m.alloc < 0 || m.job < 0 {
		rec.Recovery = -1
	}
	if detectedAt > 0 {
		rec.Detected = secs(detectedAt)
		if rec.Recovery >= 0 {
			rec.Recovery = max(rec.Recovery, rec.Detected)
		}
	}
	switch {
	case rec.Recovery < 0 && ctx.Err() != nil:
		// The run was interrupted before the cluster was seen serving:
		// nothing was measured, nothing broken (the teardown lifts what
		// the undo could not).
		rec.Note = "interrupted before the cluster was seen serving again"
	case rec.Recovery < 0:
		r.violate(InvServing, fmt.Sprintf("the cluster did not serve again within %v of %s of %s at %s", serveDeadline, f.Kind, rec.Target, rec.At), r.logTail(target))
	}
	if isHead && (f.Kind == KillLeader || f.Kind == PauseLeader || f.Kind == PartitionLeader || f.Kind == BlackholeLeader) {
		if st, err := r.status(ctx); err == nil {
			rec.NewLeader = st.Leader
		}
	}
	if target != nil {
		rec.Rejoined = r.rejoin(ctx, target, undoAt, f.Kind)
	}
	r.healthy(ctx, fmt.Sprintf("%s of %s", f.Kind, rec.Target))
	r.addFault(rec)
}

// inject makes the fault happen and returns how to undo it.
func (r *runner) inject(ctx context.Context, f Fault, target *cluster.Proc, rec *FaultRecord) (func(context.Context) error, error) {
	switch f.Kind {
	case KillLeader, KillFollower, KillRaylet:
		r.mu.Lock()
		r.down[target] = true
		r.mu.Unlock()
		if err := target.Kill(); err != nil {
			return nil, err
		}
		return func(context.Context) error {
			err := r.c.Restart(target)
			r.mu.Lock()
			delete(r.down, target)
			r.mu.Unlock()
			return err
		}, nil
	case PauseLeader, PauseFollower, PauseRaylet:
		if err := target.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.paused[target] = true
		r.mu.Unlock()
		return func(context.Context) error {
			r.mu.Lock()
			delete(r.paused, target)
			r.mu.Unlock()
			return target.Signal(syscall.SIGCONT)
		}, nil
	case PartitionLeader, PartitionFollower:
		return r.netFault(ctx, r.cutOff(target, r.c.Heads, faultnet.CutReset))
	case IsolateRaylet:
		return r.netFault(ctx, r.cutOff(target, r.allProcs(), faultnet.CutReset))
	case BlackholeLeader, BlackholeRaylet:
		return r.netFault(ctx, r.cutOff(target, r.allProcs(), faultnet.CutDrop))
	case SlowNetwork:
		rules := map[string][]faultnet.Link{}
		for _, p := range r.allProcs() {
			rules[p.ID] = []faultnet.Link{{Peer: faultnet.AnyPeer, Delay: faultnet.Duration(30 * time.Millisecond),
				Jitter: faultnet.Duration(20 * time.Millisecond), Loss: 0.02}}
		}
		return r.netFault(ctx, rules)
	case FillStores:
		return r.hog(ctx, rec)
	case SpillFull, SpillReadOnly:
		var lift func() error
		var err error
		if f.Kind == SpillFull {
			lift, err = r.spill.fill(target.ID)
		} else {
			lift, err = r.spill.readOnly(target.ID)
		}
		if err != nil {
			return nil, err
		}
		release, err := r.hog(ctx, rec)
		if err != nil {
			lift()
			return nil, err
		}
		return func(ctx context.Context) error {
			return errors.Join(lift(), release(ctx))
		}, nil
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (r *runner) netFault(ctx context.Context, rules map[string][]faultnet.Link) (func(context.Context) error, error) {
	if err := r.applyNet(ctx, rules); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return r.applyNet(ctx, nil) }, nil
}

// hog submits a job whose results, held unreleased, are half as large
// again as every store together, and waits until it has ended.
func (r *runner) hog(ctx context.Context, rec *FaultRecord) (func(context.Context) error, error) {
	size := r.cfg.StoreSize * int64(len(r.c.Raylets)) * 3 / 2
	jr := &jobRun{n: r.nextProbe(), spec: hogJob(size, r.cfg.StoreSize/8), done: make(chan struct{}), hold: make(chan struct{}), released: make(chan struct{})}
	r.track(jr)
	r.submit(ctx, jr, r.obs)
	go r.await(ctx, jr, r.obs)
	select {
	case <-jr.done:
	case <-ctx.Done():
	}
	if jr.outcome != outSucceeded {
		rec.Note = strings.TrimSpace(rec.Note + fmt.Sprintf(" the hog job %s: %s", jr.outcome, jr.err))
	} else {
		// Show that the stores are full: the hog's results fill them and
		// the rest went to disk (as the next heartbeats report it).
		var used, capacity, spilled int64
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; r.hold(ctx, time.Now().Add(100*time.Millisecond)) {
			st, err := r.status(ctx)
			if err != nil {
				continue
			}
			used, capacity, spilled = 0, 0, 0
			for _, rl := range st.Raylets {
				used, capacity, spilled = used+rl.Store.Used, capacity+rl.Store.Capacity, spilled+rl.Store.SpilledBytes
			}
			if used+spilled >= size {
				break
			}
		}
		rec.Note = strings.TrimSpace(rec.Note + fmt.Sprintf(" stores %d of %d MiB used, %d MiB spilled", used>>20, capacity>>20, spilled>>20))
	}
	return func(context.Context) error {
		r.releaseHog(jr)
		return nil
	}, nil
}

func (r *runner) releaseHog(jr *jobRun) {
	jr.holdOnce.Do(func() { close(jr.hold) })
	if jr.job != nil {
		<-jr.released
	}
}

func (r *runner) track(jr *jobRun) {
	r.mu.Lock()
	r.jobs = append(r.jobs, jr)
	r.inflight++
	r.mu.Unlock()
}

func (r *runner) nextProbe() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return 10000 + len(r.jobs)
}

// hold waits until t (the fault's duration, not synchronisation).
func (r *runner) hold(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

type serveTimes struct{ alloc, job Seconds }

// measureServe times, from t0, an ID allocation through any head (if
// alloc) and a small job, run at once; -1 for one that did not succeed
// within serveDeadline.
func (r *runner) measureServe(ctx context.Context, t0 time.Time, alloc bool) serveTimes {
	var m serveTimes
	var wg sync.WaitGroup
	if alloc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.allocProbe(ctx, t0.Add(serveDeadline)) {
				m.alloc = secs(time.Since(t0))
			} else {
				m.alloc = -1
			}
		}()
	}
	// The probe is one of the run's jobs, checked like every other however
	// long it takes; recovery only waits serveDeadline for it.
	jr := r.probeJob(ctx)
	t := time.NewTimer(time.Until(t0.Add(serveDeadline)))
	defer t.Stop()
	select {
	case <-jr.done:
		m.job = -1
		if jr.outcome == outSucceeded {
			m.job = secs(jr.endedAt.Sub(t0))
		}
	case <-t.C:
		m.job = -1
	case <-ctx.Done():
		m.job = -1
	}
	wg.Wait()
	return m
}

// allocProbe allocates one task ID through the heads in turn until one
// answers, recording it in the history.
func (r *runner) allocProbe(ctx context.Context, deadline time.Time) bool {
	req := raftmeta.NewRequestID()
	call := r.rec.Now()
	heads := r.headAddrs()
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		var a wire.Allocated
		err := r.heads.call(actx, heads[i%len(heads)], wire.MethodAllocTask, wire.AllocTask{RequestID: req, Wait: 250 * time.Millisecond}, &a)
		cancel()
		if err == nil {
			r.rec.Record(200, idseq.Input{Key: idseq.Key{Kind: idseq.Tasks}, N: 1}, idseq.Output{Value: uint64(a.Task)}, call, r.rec.Now())
			return true
		}
		r.hold(ctx, time.Now().Add(20*time.Millisecond))
	}
	r.rec.Record(200, idseq.Input{Key: idseq.Key{Kind: idseq.Tasks}, N: 1}, idseq.Output{Unknown: true}, call, -1)
	return false
}

// probeJob starts a small job through the observer; its done channel
// closes when its outcome is known.
func (r *runner) probeJob(ctx context.Context) *jobRun {
	jr := &jobRun{n: r.nextProbe(), spec: probeJob(), done: make(chan struct{})}
	r.track(jr)
	go func() {
		r.submit(ctx, jr, r.obs)
		r.await(ctx, jr, r.obs)
	}()
	return jr
}

// detectLost waits until the leader no longer counts raylet p alive and
// returns how long after t0 that was (0 if it never happened before ctx
// ended: the raylet came back first).
func (r *runner) detectLost(ctx context.Context, p *cluster.Proc, t0 time.Time) time.Duration {
	for {
		st, err := r.status(ctx)
		if err == nil {
			alive := false
			for _, rl := range st.Raylets {
				if rl.ID == p.ID && rl.State == "alive" {
					alive = true
				}
			}
			if !alive {
				return time.Since(t0)
			}
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(20 * time.Millisecond): // polling the leader
		}
	}
}

// rejoin waits until p is back: a head caught up with the leader's commit
// index as it was at undo, a raylet registered and alive. It returns the
// time from undo, or -1.
func (r *runner) rejoin(ctx context.Context, p *cluster.Proc, undoAt time.Time, kind string) Seconds {
	ctx, cancel := context.WithTimeout(ctx, rejoinDeadline)
	defer cancel()
	var want uint64
	var last string
	for {
		st, err := r.status(ctx)
		if err == nil {
			last = ""
			if p.Kind == "raylet" {
				for _, rl := range st.Raylets {
					if rl.ID == p.ID {
						last = "state " + rl.State
						if rl.State == "alive" {
							return secs(time.Since(undoAt))
						}
					}
				}
			} else {
				for _, h := range st.Heads {
					if h.ID == st.Leader && want == 0 {
						want = h.CommitIndex
					}
				}
				for _, h := range st.Heads {
					if h.ID == p.ID {
						last = fmt.Sprintf("role %s, applied %d of %d %s", h.Role, h.AppliedIndex, want, h.Error)
						if want > 0 && (h.Role == "follower" || h.Role == "leader") && h.AppliedIndex >= want {
							return secs(time.Since(undoAt))
						}
					}
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				r.violate(InvServing, fmt.Sprintf("%s %s did not rejoin within %v of the end of %s (%s)", p.Kind, p.ID, rejoinDeadline, kind, last), r.logTail(p))
			}
			return -1
		case <-time.After(50 * time.Millisecond): // polling the leader
		}
	}
}

// healthy waits until every process is up and the cluster has a leader,
// every raylet and every head; a process that died without the harness
// killing it is a violation, and is restarted so the run goes on.
func (r *runner) healthy(ctx context.Context, after string) {
	r.checkAlive(after)
	wctx, cancel := context.WithTimeout(ctx, rejoinDeadline)
	defer cancel()
	if err := r.c.WaitReady(wctx); err != nil && ctx.Err() == nil {
		r.violate(InvServing, fmt.Sprintf("the cluster was not whole again %v after %s: %v", rejoinDeadline, after, err), "")
		return
	}
	for wctx.Err() == nil {
		st, err := r.status(wctx)
		if err == nil {
			ok := len(st.Heads) == len(r.c.Heads)
			for _, h := range st.Heads {
				if h.Role != "leader" && h.Role != "follower" {
					ok = false
				}
			}
			if ok {
				return
			}
		}
		r.hold(wctx, time.Now().Add(50*time.Millisecond))
	}
	if ctx.Err() == nil {
		r.violate(InvServing, fmt.Sprintf("not every head was a leader or follower %v after %s", rejoinDeadline, after), "")
	}
}

// checkAlive reports and restarts processes that exited by themselves.
func (r *runner) checkAlive(after string) {
	for _, p := range r.allProcs() {
		r.mu.Lock()
		expected := r.down[p]
		r.mu.Unlock()
		if expected || p.Running() {
			continue
		}
		r.violate(InvProcesses, fmt.Sprintf("%s %s exited by itself (noticed after %s)", p.Kind, p.ID, after), r.logTail(p))
		if err := r.c.Restart(p); err != nil {
			r.log.Warn("chaos: restart", "proc", p.ID, "err", err)
		}
	}
}

func (r *runner) allProcs() []*cluster.Proc {
	return append(append([]*cluster.Proc{}, r.c.Heads...), r.c.Raylets...)
}

func (r *runner) status(ctx context.Context) (phobos.ClusterStatus, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.obs.Status(sctx)
}

// leader returns the head leader's process.
func (r *runner) leader(ctx context.Context) (*cluster.Proc, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := r.status(ctx)
		if err == nil {
			for _, h := range r.c.Heads {
				if h.ID == st.Leader && h.Running() {
					return h, nil
				}
			}
		}
		r.hold(ctx, time.Now().Add(50*time.Millisecond))
	}
	return nil, errors.New("no leader to strike")
}

// follower returns a running follower, the pick-th of them.
func (r *runner) follower(ctx context.Context, pick int) (*cluster.Proc, error) {
	l, err := r.leader(ctx)
	if err != nil {
		return nil, err
	}
	var fs []*cluster.Proc
	for _, h := range r.c.Heads {
		if h != l && h.Running() {
			fs = append(fs, h)
		}
	}
	if len(fs) == 0 {
		return nil, errors.New("no follower running")
	}
	return fs[pick%len(fs)], nil
}

// logTail returns the end of p's log (nil p: nothing).
func (r *runner) logTail(p *cluster.Proc) string {
	if p == nil {
		return ""
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return p.LogPath + ":\n" + strings.Join(lines, "\n")
}

// scanLogs reports data races, panics and fatal runtime errors in any
// process's log.
func (r *runner) scanLogs() {
	for _, p := range r.allProcs() {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			var what string
			switch {
			case strings.HasPrefix(l, "WARNING: DATA RACE"):
				what = "a data race"
			case strings.HasPrefix(l, "panic: "):
				what = "a panic"
			case strings.HasPrefix(l, "fatal error: "):
				what = "a fatal runtime error"
			default:
				continue
			}
			end := min(i+30, len(lines))
			r.violate(InvProcesses, fmt.Sprintf("%s %s reported %s (%s line %d)", p.Kind, p.ID, what, p.LogPath, i+1), strings.Join(lines[i:end], "\n"))
			break
		}
	}
}
