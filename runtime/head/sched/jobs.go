package sched

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// A job's way through the leader:
//
//	submit → (commit SubmitJob) → admitted or queued for head memory
//	  → (commit BeginLowering, when taken up again) → lower stage 0 (shell)
//	  → (commit BeginStage, asked by lowering) → stage scheduled
//	  → stage ends → more stages: (commit BeginLowering) → lower stage k → ...
//	  → last stage ends → (commit SetJobStatus) → ended; results until
//	    released or the result TTL.
//
// A new leader takes up every job Raft holds unfinished, from its record:
// the committed stages make lowering give the same subtasks, and subtasks
// whose outputs raylets report holding are not run again. A job whose
// lowering was in flight on MaxLowerings leaders that stopped is failed
// instead (it may be what took them down).

// phase is where a job is on this leader.
type phase uint8

const (
	phaseEstimating phase = iota // the shell reads its graph from Raft and estimates it
	phaseQueued                  // waits for head memory
	phaseMarking                 // its lowering mark is being committed
	phaseLowering                // the shell lowers its next stage
	phaseRunning                 // a stage runs
	phaseEnding                  // its outcome is being committed
	phaseEnded                   // Raft holds its outcome
)

var phaseNames = [...]string{"estimating", "queued", "marking", "lowering", "running", "ending", "ended"}

func (p phase) String() string { return phaseNames[p] }

// job is one job's lifecycle on this leader; its stages' subtasks are the
// scheduler's.
type job struct {
	task  dag.TaskID
	phase phase
	// marks says this leader marks the job's lowering in Raft before it
	// lowers (a job taken up again) and clears the marks after.
	marks   bool
	graph   *dag.TileableGraph // for lowering the first stage
	est     lowering.Estimate
	tiled   *lowering.Tiled // between stages; the shell's while it lowers
	retries int
	// noPipeline: the job asked for none (wire.JobOptions.NoPipeline).
	noPipeline bool
	next       int      // the stage to lower next
	rayletOf   []Raylet // the raylets lowering was given, by lowering's index
	ended      time.Time
	// cancelled: cancelled while no stage ran; what is lowered is dropped.
	cancelled bool
	// charged: admission charges the job head memory (from its admission
	// until its end is recorded).
	charged bool
	// onStart are calls waiting for the job's first stage to be scheduled
	// (or the job to fail, or to queue for head memory).
	onStart []func(error)
	onEnd   []func() // called once the job's outcome is recorded (or failed to be)
	waiters []Call   // WaitJob calls held until the job ends
	// releaseOnEnd: a release came while the job ran or its subtasks were
	// stopping; it is released once its end is recorded.
	releaseOnEnd bool
}

// started tells whoever waits for the job to start.
func (j *job) started(err error) {
	fs := j.onStart
	j.onStart = nil
	for _, f := range fs {
		f(err)
	}
}

// starting reports whether the job is on its way to its first stage (not
// waiting for head memory).
func (j *job) starting() bool {
	return j.phase != phaseQueued && j.phase <= phaseLowering && j.next == 0 && !j.cancelled
}

// waiter is a WaitJob call held until its job ends or its timeout.
type waiter struct {
	task    dag.TaskID
	results bool
}

func (l *Leader) newJob(rec *JobRecord, marks bool) *job {
	j := &job{task: rec.Task, marks: marks, retries: rec.Options.Retries, noPipeline: rec.Options.NoPipeline}
	if j.retries <= 0 {
		j.retries = l.cfg.Retries
	}
	l.jobs[rec.Task] = j
	if rec.ReleaseOnEnd {
		l.releaseOnEnd(j) // released before an earlier leader saw it end
	}
	return j
}

// forget drops a job that is no longer this leader's business, answering
// whoever still waits on it.
func (l *Leader) forget(j *job) {
	if l.jobs[j.task] != j {
		return
	}
	delete(l.jobs, j.task)
	l.clearTimer(TimerID{Kind: TimerResultTTL, Task: j.task})
	l.wakeWaiters(j)
}

// takeRecords starts this leadership from Raft's records, then waits for
// the raylets Raft knows before taking up unfinished jobs.
func (l *Leader) takeRecords(ev *Records) {
	if l.loaded {
		return
	}
	for i := range ev.Jobs {
		rec := ev.Jobs[i]
		l.records[rec.Task] = &rec
	}
	for i := range ev.Puts {
		p := ev.Puts[i]
		l.puts[p.Task] = &p
	}
	for _, id := range ev.Raylets {
		l.known[id] = true
	}
	l.loaded = true
	if l.aliveRaylets() >= len(l.known) {
		l.takeUpJobs()
		return
	}
	l.setTimer(TimerID{Kind: TimerFailover}, l.now.Add(2*l.cfg.HeartbeatInterval))
}

// takeUpJobs resumes every job Raft holds unfinished, gives every open put
// task a lease (the objects of clients that do not come back are freed
// after the grace), and frees stashed objects nobody will claim.
func (l *Leader) takeUpJobs() {
	if l.resumed {
		return
	}
	l.resumed = true
	l.lastSweep = l.now
	for _, task := range l.sortedRecords() {
		switch rec := l.records[task]; {
		case !rec.State.Terminal():
			l.resumeJob(task, true, func(err error) {
				if err != nil {
					l.log.Warn("resume job", "task", task, "err", err)
				}
			})
		case rec.ReleaseOnEnd && !rec.Released:
			// It ended after its driver released it, and the leader that
			// recorded the end did not record the release.
			l.releaseJob(task, func(err error) {
				if err != nil {
					l.log.Warn("release a job released before it ended", "task", task, "err", err)
				}
			})
		}
	}
	l.leaseOpenPuts()
	l.s.SweepHeld()
	for id := range l.known {
		if r, ok := l.s.RayletByID(id); !ok || l.s.raylets[r].session == nil {
			l.markGone(id) // not back after the failover wait: lost
		}
	}
}

func (l *Leader) sortedRecords() []dag.TaskID {
	tasks := make([]dag.TaskID, 0, len(l.records))
	for t := range l.records {
		tasks = append(tasks, t)
	}
	slices.Sort(tasks)
	return tasks
}

// keepUnknown says whether objects of a task the scheduler does not know
// may still be wanted: until unfinished jobs are taken up, all; then those
// of jobs not ended (being resumed), of succeeded jobs whose results may
// still be asked for, and of open put tasks.
func (l *Leader) keepUnknown(task dag.TaskID) bool {
	if !l.resumed {
		return true
	}
	rec, ok := l.records[task]
	if !ok {
		_, open := l.puts[task]
		return open
	}
	if rec.Released || l.releasing[task] {
		return false
	}
	return !rec.State.Terminal() || l.resultsMayExist(rec)
}

// resultsMayExist reports whether a succeeded job's results could still be
// held: not released, and the result TTL has not run out.
func (l *Leader) resultsMayExist(rec *JobRecord) bool {
	return rec.State == dag.JobSucceeded && !rec.Released && !rec.ReleaseOnEnd && l.now.Sub(rec.Finished) < l.resultTTL(rec)
}

func (l *Leader) resultTTL(rec *JobRecord) time.Duration {
	if rec.Options.ResultTTL > 0 {
		return rec.Options.ResultTTL
	}
	return l.cfg.ResultTTL
}

// submit commits a job and starts it. What can be checked without tiling
// was checked before (the shell) or is checked here, before anything
// reaches Raft: the objects the graph reads and their owners, and the head
// memory it will take. The job is committed before it is tiled, its
// lowering marked as in flight here, so that a job whose tiling takes this
// head down is not tiled blindly by every leader after it.
func (l *Leader) submit(ev *Submit) {
	if !l.loaded {
		l.reply(ev.Call, nil, l.errRecordsPending("job"))
		return
	}
	if err := l.checkExternal(ev.Caller, ev.Graph); err != nil {
		l.reply(ev.Call, nil, err)
		return
	}
	v := l.adm.precheck(ev.Estimate.PlanBytes)
	if err := l.refusal(v, ev.Estimate); err != nil {
		l.reply(ev.Call, nil, err)
		return
	}
	leader := l.cfg.Head // lowering begins at once, marked as in flight here
	if v == queued {
		leader = "" // it waits; it is marked when it starts
	}
	call, caller, graph, opts, est, now := ev.Call, ev.Caller, ev.Graph, ev.Options, ev.Estimate, l.now
	cmd := SubmitJob{Graph: ev.GraphBytes, Options: ev.OptionsBytes, Time: now, Owner: caller.Name, Leader: leader}
	l.commit(0, ev.RequestID, cmd, func(res CommitResult, err error) {
		if err != nil {
			l.reply(call, nil, fmt.Errorf("submit: %w", err))
			return
		}
		task := res.Task
		rec := l.records[task]
		switch {
		case !res.Deduped && rec == nil:
			rec = &JobRecord{Task: task, Owner: caller.Name, State: dag.JobSubmitted, Options: opts, Submitted: normTime(now)}
			if leader != "" {
				rec.Lowering = []string{leader}
				if l.cfg.OwnMarks != nil {
					l.cfg.OwnMarks[task]++
				}
			}
			l.records[task] = rec
		case rec == nil:
			l.reply(call, nil, dag.Errorf(dag.KindNotFound, "submit: job %d was deleted", task))
			return
		}
		if !caller.owns(rec.Owner) {
			l.reply(call, nil, dag.Errorf(dag.KindInvalidArgument, "submit: request id %s was used by another client's submit; pick a fresh one", ev.RequestID))
			return
		}
		done := func(err error) {
			if err != nil {
				l.reply(call, nil, err)
				return
			}
			l.reply(call, wire.SubmitReply{Task: task}, nil)
		}
		if res.Deduped || leader == "" {
			// A retry (the job runs here already, is taken up, or ended), or
			// a job that waits for room: the caller waits for it either way.
			if rec.State.Terminal() {
				done(nil)
				return
			}
			l.resumeJob(task, true, done)
			return
		}
		j := l.newJob(rec, true)
		j.graph, j.est = graph, est
		j.onStart = append(j.onStart, done)
		l.admitJob(j, true)
	})
}

// resumeJob takes up a job Raft holds that is not scheduled here: it reads
// its graph back, admits it, marks its lowering (when marks) and lowers it
// again. done hears when its first stage is scheduled, it failed, or it
// queued for head memory. A job already here is left as it is (done hears
// when it has started).
func (l *Leader) resumeJob(task dag.TaskID, marks bool, done func(error)) {
	if j := l.jobs[task]; j != nil {
		if j.starting() {
			j.onStart = append(j.onStart, done)
			return
		}
		done(nil)
		return
	}
	rec := l.records[task]
	if rec == nil {
		done(dag.Errorf(dag.KindNotFound, "job %d not found", task))
		return
	}
	j := l.newJob(rec, marks)
	j.onStart = append(j.onStart, done)
	l.estimate(j)
}

// estimate asks the shell for the job's graph and what it will cost.
func (l *Leader) estimate(j *job) {
	j.phase = phaseEstimating
	l.fx.Estimate = append(l.fx.Estimate, j.task)
}

func (l *Leader) estimated(ev *Estimated) {
	j := l.jobs[ev.Task]
	if j == nil || j.phase != phaseEstimating || j.cancelled {
		return
	}
	if ev.Err != nil {
		err := fmt.Errorf("job %d: %w", ev.Task, ev.Err)
		if j.marks {
			l.failStart(j, ev.Err, err)
		} else {
			l.forget(j)
			j.started(err)
		}
		return
	}
	j.graph, j.est = ev.Graph, ev.Estimate
	l.admitJob(j, false)
}

// admitJob charges the job its estimate, or queues it. marked says its
// lowering is marked here already (a new submission's).
func (l *Leader) admitJob(j *job, marked bool) {
	switch l.adm.admit(j.task, j.est.PlanBytes) {
	case admitted:
		j.charged = true
	case queued:
		l.log.Info("job waits for head memory", "task", j.task, "bytes", j.est.PlanBytes)
		j.phase, j.graph = phaseQueued, nil // read again when it starts
		if marked {
			// Others took the room since the submit's check: it waits, and is
			// not being lowered anywhere.
			rec := l.records[j.task]
			l.commit(j.task, l.newRequest(), EndLowering{Task: j.task}, func(_ CommitResult, err error) {
				if err != nil {
					l.log.Warn("record lowering postponed", "task", j.task, "err", err)
					return
				}
				rec.Lowering = nil
				delete(l.cfg.OwnMarks, j.task)
			})
		}
		j.started(nil)
		return
	default:
		// Over the budgets though the submit's check passed (only a job of
		// an older, larger budget gets here): run it alone rather than never.
		l.adm.force(j.task, j.est.PlanBytes)
		j.charged = true
	}
	if marked || !j.marks {
		l.lowerFirst(j)
		return
	}
	l.markLowering(j, l.lowerFirst)
}

// markLowering records that this head begins lowering the job (again),
// then calls then; or fails the job if its lowering was in flight on as
// many leaders as the head allows: a job that took leaders down while they
// lowered it must not take down this one too.
func (l *Leader) markLowering(j *job, then func(*job)) {
	rec := l.records[j.task]
	if n := l.lostLowerings(rec); n >= l.cfg.MaxLowerings && j.next == 0 {
		err := dag.Errorf(dag.KindResourceExhausted,
			"job %d was being lowered %s when each stopped; it is not lowered again, so that it cannot take this head down too (check the job's size and the logs of those heads; the limit is the head's %s, %d)",
			j.task, loweredOn(rec.Lowering), l.cfg.setting("MaxLowerings"), l.cfg.MaxLowerings)
		l.log.Warn("refused to lower a job again", "task", j.task, "lowered_on", rec.Lowering)
		l.failStart(j, err, err)
		return
	}
	j.phase = phaseMarking
	l.commit(j.task, l.newRequest(), BeginLowering{Task: j.task, Leader: l.cfg.Head}, func(_ CommitResult, err error) {
		if l.jobs[j.task] != j || j.phase != phaseMarking || j.cancelled {
			return
		}
		if err != nil {
			if j.next > 0 {
				l.s.FailTask(j.task, dag.Errorf(dag.KindFatal, "job %d: lowering its next stage: %w", j.task, err))
				return
			}
			l.releaseAdmission(j.task)
			l.forget(j)
			j.started(fmt.Errorf("job %d: mark its lowering: %w", j.task, err))
			return
		}
		rec.Lowering = append(rec.Lowering[:len(rec.Lowering):len(rec.Lowering)], l.cfg.Head)
		if l.cfg.OwnMarks != nil {
			l.cfg.OwnMarks[j.task]++
		}
		then(j)
	})
}

// lostLowerings counts the job's lowering marks left by leaders that
// stopped while lowering it: every mark, less those this head process
// made itself (it is alive, so they did not take it down: it lost its
// leadership, a pause or a partition, and leads again).
func (l *Leader) lostLowerings(rec *JobRecord) int {
	mine := 0
	for _, h := range rec.Lowering {
		if h == l.cfg.Head {
			mine++
		}
	}
	return len(rec.Lowering) - min(mine, l.cfg.OwnMarks[rec.Task])
}

// lowerFirst asks the shell to tile the job and lower its first stage.
func (l *Leader) lowerFirst(j *job) {
	rec := l.records[j.task]
	fusion, _ := lowering.ParseFusion(rec.Options.Fusion)
	index, slots := l.s.AliveSlots()
	j.phase, j.rayletOf = phaseLowering, index
	l.fx.Lower = append(l.fx.Lower, Lower{Task: j.task, Stage: 0, Graph: j.graph,
		Options: lowering.Options{Fusion: fusion, Slots: slots}, Recorded: rec.Stages, Limits: l.tileLimits()})
	j.graph = nil // the shell's now
}

// lowerNext asks the shell to lower the job's next stage: lowering is fed
// the stored sizes of the objects it waits for (or, replaying, the metas
// recorded with the stage).
func (l *Leader) lowerNext(j *job) {
	rec := l.records[j.task]
	fusion, _ := lowering.ParseFusion(rec.Options.Fusion)
	var sizes []int64
	if j.next >= len(rec.Stages) {
		need := j.tiled.Need()
		ids := make([]dag.ObjectID, len(need))
		for i, n := range need {
			ids[i] = n.Object
		}
		sizes = l.s.Sizes(ids)
	}
	index, slots := l.s.AliveSlots()
	j.phase, j.rayletOf = phaseLowering, index
	l.fx.Lower = append(l.fx.Lower, Lower{Task: j.task, Stage: j.next, Tiled: j.tiled,
		Options: lowering.Options{Fusion: fusion, Slots: slots}, Recorded: rec.Stages, Sizes: sizes, Limits: l.tileLimits()})
	j.tiled = nil // the shell's now
}

// allocStage commits a new stage for lowering and answers with its IDs.
func (l *Leader) allocStage(ev *AllocStage) {
	j := l.jobs[ev.Task]
	if j == nil || j.phase != phaseLowering || j.cancelled {
		l.reply(ev.Call, nil, dag.Errorf(dag.KindUnavailable, "job %d is no longer being lowered by this leader", ev.Task))
		return
	}
	call, metas := ev.Call, ev.Metas
	l.commit(ev.Task, l.newRequest(), BeginStage{Task: ev.Task, N: ev.N, Metas: ev.Metas}, func(res CommitResult, err error) {
		if err != nil {
			l.reply(call, nil, err)
			return
		}
		if rec := l.records[res.Task]; rec != nil {
			rec.Stages = append(rec.Stages[:len(rec.Stages):len(rec.Stages)], StageRecord{ID: res.Stage, Base: res.Base, Count: res.Count, Metas: metas})
			rec.Lowering = nil // a committed stage ends the lowering in flight
			delete(l.cfg.OwnMarks, j.task)
		}
		l.reply(call, StageIDs{Stage: res.Stage, Base: res.Base}, nil)
	})
}

// lowered schedules the stage the shell lowered, or fails the job.
func (l *Leader) lowered(ev *Lowered) {
	j := l.jobs[ev.Task]
	if j == nil || j.phase != phaseLowering || ev.Stage != j.next {
		return
	}
	if j.cancelled {
		j.tiled = nil
		return
	}
	rec := l.records[j.task]
	if ev.Err != nil {
		if ev.Stage > 0 {
			j.phase = phaseRunning
			l.s.FailTask(j.task, dag.Errorf(dag.KindFatal, "job %d: lowering its next stage: %w", j.task, ev.Err))
			return
		}
		err := fmt.Errorf("job %d: %w", j.task, ev.Err)
		if j.marks || !rec.State.Terminal() {
			l.failStart(j, ev.Err, err)
		} else {
			l.releaseAdmission(j.task)
			l.forget(j)
			j.started(err)
		}
		return
	}
	j.tiled = nil
	if !ev.Plan.Final {
		j.tiled = ev.Tiled // kept for the next stage; a final stage's would only hold memory
	}
	j.next++
	j.phase = phaseRunning
	if ev.Stage == 0 && rec.State == dag.JobSubmitted {
		l.commit(j.task, l.newRequest(), SetJobStatus{Task: j.task, State: dag.JobRunning, Time: l.now}, func(_ CommitResult, err error) {
			if err != nil {
				l.log.Warn("record job running", "task", j.task, "err", err)
				return
			}
			if !rec.State.Terminal() {
				rec.State = dag.JobRunning
			}
		})
	}
	l.s.AddJob(j.task, ev.Plan, jobPolicy{retries: j.retries, noPipeline: j.noPipeline}, j.rayletOf)
	if ev.Stage == 0 {
		l.log.Info("job started", "task", j.task, "subtasks", ev.Plan.Stage.Len(), "final", ev.Plan.Final, "raylets", len(j.rayletOf))
	} else {
		l.log.Info("job stage started", "task", j.task, "stage", ev.Plan.Stage.Stage, "subtasks", ev.Plan.Stage.Len(), "final", ev.Plan.Final)
	}
	if len(rec.Lowering) > 0 && !rec.State.Terminal() {
		// No new stage was committed (a replayed one): the lowering is done.
		l.commit(j.task, l.newRequest(), EndLowering{Task: j.task}, func(_ CommitResult, err error) {
			if err != nil {
				l.log.Warn("record lowering done", "task", j.task, "err", err)
				return
			}
			rec.Lowering = nil
			delete(l.cfg.OwnMarks, j.task)
		})
	}
	j.started(nil)
}

// stageEnded moves a job on when one of its stages ended: the next stage,
// or the job's end.
func (l *Leader) stageEnded(k StageKey) {
	j := l.jobs[k.Task]
	info, ok := l.s.Job(k.Task)
	if j == nil || !ok {
		return
	}
	if info.Status == dag.JobRunning {
		if j.phase == phaseRunning {
			l.markLowering(j, l.lowerNext) // a stage ended; the job goes on
		}
		return
	}
	var results []dag.ObjectRun
	if info.Status == dag.JobSucceeded {
		results = l.s.ResultRuns(k.Task)
	}
	l.recordEnd(j, info.Status, info.Err, causeOf(info.Err), results)
}

// failJob records a job that could not even be scheduled.
func (l *Leader) failJob(j *job, cause error) {
	l.recordEnd(j, dag.JobFailed, cause, dag.KindOf(cause), nil)
}

// failStart fails a job that could not start, and tells whoever waits for
// it once Raft holds the failure (a driver told "failed" then finds the
// record says so).
func (l *Leader) failStart(j *job, cause, told error) {
	l.failJob(j, cause)
	if j.phase == phaseEnding {
		j.onEnd = append(j.onEnd, func() { j.started(told) })
		return
	}
	j.started(told)
}

// recordEnd commits a job's outcome. Waiters hear of the end once Raft has
// it: a leader cut off from the other heads must not report an outcome it
// cannot commit. The job's head memory is released either way.
func (l *Leader) recordEnd(j *job, st dag.JobState, cause error, kind dag.Kind, results []dag.ObjectRun) {
	if j.phase >= phaseEnding {
		return
	}
	j.phase, j.ended = phaseEnding, l.now
	rec := l.records[j.task]
	finish := func(err error) {
		l.releaseAdmission(j.task)
		j.phase = phaseEnded
		defer func() {
			fs := j.onEnd
			j.onEnd = nil
			for _, f := range fs {
				f()
			}
		}()
		if err != nil {
			l.log.Warn("record job outcome", "task", j.task, "status", st, "err", err)
			return
		}
		l.clearTimer(TimerID{Kind: TimerCancelGrace, Task: j.task})
		l.fx.Ended = append(l.fx.Ended, JobEnd{Task: j.task, State: rec.State, Err: cause})
		if rec.State == dag.JobSucceeded {
			l.setTimer(TimerID{Kind: TimerResultTTL, Task: j.task}, rec.Finished.Add(l.resultTTL(rec)))
		}
		l.wakeWaiters(j)
		if len(l.s.tasks[j.task]) == 0 {
			l.forget(j) // never scheduled: the record says it all
		}
	}
	if rec.State.Terminal() {
		finish(nil)
		return
	}
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	l.commit(j.task, l.newRequest(), SetJobStatus{Task: j.task, State: st, Error: msg, Cause: kind, Results: results, Time: l.now},
		func(_ CommitResult, err error) {
			if err == nil && !rec.State.Terminal() {
				rec.State, rec.Error, rec.Cause, rec.Finished = st, msg, kind, normTime(j.ended)
			}
			finish(err)
		})
}

// expireResults releases a succeeded job's results when its TTL ran out.
func (l *Leader) expireResults(task dag.TaskID) {
	l.releaseJob(task, func(err error) {
		if err != nil {
			// Try again shortly: until Raft holds the release, a later
			// leader would keep the results.
			l.log.Warn("release expired results; retrying in 10s", "task", task, "err", err)
			l.setTimer(TimerID{Kind: TimerResultTTL, Task: task}, l.now.Add(10*time.Second))
		}
	})
}

func (l *Leader) releaseJobCall(ev *ReleaseJob) {
	if err := l.checkJobOwner(ev.Caller, ev.Task); err != nil {
		l.reply(ev.Call, nil, err)
		return
	}
	call := ev.Call
	l.releaseJob(ev.Task, func(err error) { l.reply(call, struct{}{}, err) })
}

// releaseJob frees a finished job's results and forgets it, and records
// the release so that no later leader keeps or rebuilds them. A job not
// scheduled here (a previous leader ran it) has what raylets reported
// holding for it freed.
//
// A job whose end is not recorded yet — running, cancelled with subtasks
// still stopping, or its outcome being committed — is released once it
// is: a driver that cancels and releases at once (an interrupted program)
// must not leave the job's objects on the raylets, nor its record
// running. The request is recorded first (ReleaseOnEndCmd), so that a
// leader that takes over releases the job when it ends, or at once if it
// ended; the caller is answered when Raft holds it.
func (l *Leader) releaseJob(task dag.TaskID, done func(error)) {
	if j := l.jobs[task]; j != nil && j.phase < phaseEnded {
		l.releaseOnEnd(j)
		rec := l.records[task]
		if rec == nil || rec.ReleaseOnEnd {
			done(nil)
			return
		}
		l.commit(task, l.newRequest(), ReleaseOnEndCmd{Task: task}, func(_ CommitResult, err error) {
			if err != nil {
				// This leader still releases it when it ends; a later one
				// would keep the results for their TTL. The caller hears
				// it and asks again.
				done(fmt.Errorf("release job %d once it ends: %w", task, err))
				return
			}
			rec.ReleaseOnEnd = true
			done(nil)
		})
		return
	}
	if _, ok := l.s.Release(task); ok {
		if j := l.jobs[task]; j != nil {
			l.forget(j)
		}
		clear(l.specBuf[:cap(l.specBuf)]) // the last pull's specs point into the job's graph
	} else {
		l.s.FreeHeldTask(task)
	}
	rec := l.records[task]
	if rec == nil {
		done(dag.Errorf(dag.KindNotFound, "job %d not found", task))
		return
	}
	if !rec.State.Terminal() || rec.Released {
		done(nil)
		return
	}
	// Until Raft holds the release, copies raylets report (a raylet that
	// registers late) are freed, not stashed for the result TTL.
	l.releasing[task] = true
	l.commit(task, l.newRequest(), ReleaseJobCmd{Task: task}, func(_ CommitResult, err error) {
		if err != nil {
			// Not recorded: a later leader would keep the results for their
			// TTL. The caller hears it and asks again (the driver's client
			// retries an unavailable leader); an expiry is retried by the
			// next leader's own timer.
			l.log.Warn("record release", "task", task, "err", err)
			done(fmt.Errorf("release job %d: %w", task, err))
			return
		}
		rec.Released = true
		delete(l.releasing, task)
		done(nil)
	})
}

// releaseOnEnd has j released once its end is recorded.
func (l *Leader) releaseOnEnd(j *job) {
	if j.releaseOnEnd {
		return
	}
	j.releaseOnEnd = true
	task := j.task
	j.onEnd = append(j.onEnd, func() {
		l.releaseJob(task, func(err error) {
			if err != nil {
				l.log.Warn("release a job once it ended", "task", task, "err", err)
			}
		})
	})
}

// cancelJob cancels a job: a running one's queued subtasks are dropped and
// its running ones interrupted (it ends when they stop, or after
// CancelGrace); one that waits for head memory or is being lowered ends at
// once. Cancelling an ended job is a no-op that reports its status.
func (l *Leader) cancelJob(ev *CancelJob) {
	if err := l.checkJobOwner(ev.Caller, ev.Task); err != nil {
		l.reply(ev.Call, nil, err)
		return
	}
	task, call := ev.Task, ev.Call
	if _, ok := l.s.Cancel(task); ok {
		l.setTimer(TimerID{Kind: TimerCancelGrace, Task: task}, l.now.Add(l.cfg.CancelGrace))
	} else if j := l.jobs[task]; j != nil && j.phase < phaseRunning {
		// Waiting for head memory, or being lowered with no stage running:
		// it ends here, and whatever lowering makes is dropped.
		why := fmt.Sprintf("job %d was cancelled", task)
		if j.phase == phaseQueued {
			why = fmt.Sprintf("job %d was cancelled while it waited for head memory", task)
		}
		j.cancelled = true
		j.tiled = nil
		if j.phase == phaseQueued {
			l.releaseAdmission(task) // its place in the queue goes to the next
		}
		err := dag.Errorf(dag.KindCancelled, "%s", why)
		if j.next > 0 {
			l.s.EndTask(task, dag.JobCancelled, err) // its stages so far end with it
		} else {
			l.recordEnd(j, dag.JobCancelled, err, 0, nil)
		}
		j.started(nil)
		if j.phase == phaseEnding {
			j.onEnd = append(j.onEnd, func() { l.replyStatus(call, task, false) })
			return
		}
	}
	l.replyStatus(call, task, false)
}

func (l *Leader) replyStatus(call Call, task dag.TaskID, results bool) {
	st, err := l.jobStatus(task, results)
	l.reply(call, st, err)
}

// waitJob reports a job when it ends or its timeout passes. A job not
// scheduled here that Raft holds unfinished, or that succeeded within its
// result TTL, is taken up first: its results may still be on the raylets
// (or are rebuilt if they were lost).
func (l *Leader) waitJob(ev *WaitJob) {
	if err := l.checkJobOwner(ev.Caller, ev.Task); err != nil {
		l.reply(ev.Call, nil, err)
		return
	}
	w := *ev
	then := func(err error) {
		if err != nil {
			l.reply(w.Call, nil, err)
			return
		}
		l.waitOn(&w)
	}
	j := l.jobs[ev.Task]
	rec := l.records[ev.Task]
	switch {
	case j == nil && !rec.Released && (!rec.State.Terminal() || l.resultsMayExist(rec)):
		l.resumeJob(ev.Task, !rec.State.Terminal(), then)
	case j != nil && j.starting():
		j.onStart = append(j.onStart, then)
	default:
		l.waitOn(&w)
	}
}

// waitOn answers a WaitJob now (an ended job, no timeout, nothing here to
// wait on) or holds it until the job ends or the timeout (at most a
// minute) passes.
func (l *Leader) waitOn(ev *WaitJob) {
	st, err := l.jobStatus(ev.Task, ev.Results)
	j := l.jobs[ev.Task]
	if err != nil || st.Terminal() || ev.Timeout <= 0 || j == nil {
		l.reply(ev.Call, st, err)
		return
	}
	l.waiters[ev.Call] = &waiter{task: ev.Task, results: ev.Results}
	j.waiters = append(j.waiters, ev.Call)
	l.setTimer(TimerID{Kind: TimerWait, Call: ev.Call}, l.now.Add(min(ev.Timeout, time.Minute)))
}

func (l *Leader) waitTimedOut(c Call) {
	w, ok := l.waiters[c]
	if !ok {
		return
	}
	delete(l.waiters, c)
	if j := l.jobs[w.task]; j != nil {
		j.waiters = slices.DeleteFunc(j.waiters, func(x Call) bool { return x == c })
	}
	l.replyStatus(c, w.task, w.results)
}

// wakeWaiters answers every WaitJob held on j.
func (l *Leader) wakeWaiters(j *job) {
	for _, c := range j.waiters {
		w := l.waiters[c]
		delete(l.waiters, c)
		l.clearTimer(TimerID{Kind: TimerWait, Call: c})
		l.replyStatus(c, w.task, w.results)
	}
	j.waiters = nil
}

// jobStatus reports a job from the scheduler if it is there, else from
// its record.
func (l *Leader) jobStatus(task dag.TaskID, results bool) (wire.JobStatus, error) {
	rec := l.records[task]
	info, ok := l.s.Job(task)
	if results {
		info, ok = l.s.JobResults(task)
	}
	if !ok {
		if rec == nil {
			return wire.JobStatus{}, dag.Errorf(dag.KindNotFound, "job %d not found", task)
		}
		return recordStatus(rec), nil
	}
	st := wire.JobStatus{Task: task, Status: info.Status, Subtasks: info.Subtasks, Finished: info.Done, Results: info.Results}
	if info.Err != nil {
		st.Error, st.Kind, st.Cause = info.Err.Error(), dag.KindOf(info.Err), causeOf(info.Err)
	}
	if info.Status != dag.JobRunning && (rec == nil || !rec.State.Terminal()) {
		// Ended here, not yet in Raft: not an outcome to report.
		st.Status, st.Error, st.Kind, st.Cause, st.Results = dag.JobRunning, "", 0, 0, nil
	}
	if rec != nil {
		st.Name, st.Submitted, st.Owner = rec.Options.Name, rec.Submitted, rec.Owner
		st.Released = rec.Released || rec.ReleaseOnEnd
	}
	if j := l.jobs[task]; j != nil {
		st.Ended = j.ended
	}
	return st, nil
}

// recordStatus reports a job from its Raft record.
func recordStatus(rec *JobRecord) wire.JobStatus {
	st := wire.JobStatus{Task: rec.Task, Status: rec.State, Error: rec.Error, Submitted: rec.Submitted, Ended: rec.Finished,
		Cause: rec.Cause, Owner: rec.Owner, Name: rec.Options.Name, Released: rec.Released || rec.ReleaseOnEnd}
	switch rec.State {
	case dag.JobFailed:
		st.Kind = dag.KindFatal
	case dag.JobCancelled:
		st.Kind = dag.KindCancelled
	}
	for _, stg := range rec.Stages {
		st.Subtasks += int(stg.Count)
	}
	if rec.State == dag.JobSucceeded {
		st.Finished = st.Subtasks
		st.Kind = dag.KindNotFound
		st.Error = fmt.Sprintf("job %d succeeded but its results were released or expired", rec.Task)
	}
	return st
}

// listJobs lists the caller's jobs (an admin's: every job), oldest first.
func (l *Leader) listJobs(ev *ListJobs) {
	if !l.loaded {
		l.reply(ev.Call, nil, l.errRecordsPending("job"))
		return
	}
	var out wire.ListJobs
	for _, task := range l.sortedRecords() {
		rec := l.records[task]
		if !ev.Caller.owns(rec.Owner) {
			continue
		}
		st, err := l.jobStatus(task, false)
		if err != nil {
			st = recordStatus(rec)
		}
		st.Results = nil
		out.Jobs = append(out.Jobs, st)
	}
	l.reply(ev.Call, out, nil)
}

// checkJobOwner refuses c's call on a job c does not own.
func (l *Leader) checkJobOwner(c Caller, task dag.TaskID) error {
	if !l.loaded {
		return l.errRecordsPending("job")
	}
	rec, ok := l.records[task]
	if !ok {
		return errNoJob(task)
	}
	if !c.owns(rec.Owner) {
		return notOwner(c, fmt.Sprintf("job %d", task), rec.Owner)
	}
	return nil
}

// errNoJob is the answer about a job Raft holds no record of: it never
// existed, or it ended and the retention policy purged its record.
func errNoJob(task dag.TaskID) error {
	return dag.Errorf(dag.KindNotFound, "job %d not found: no such job, or it ended and its record was purged (job retention)", task)
}

// notOwner is the error for touching another client's job or object.
func notOwner(c Caller, what, owner string) error {
	return dag.Errorf(dag.KindPermissionDenied, "%s belongs to %q, not to %q; only its owner or an admin may use it", what, owner, c.Name)
}

// causeOf is the kind of the error under a job's error (the subtask's own
// failure under "job failed"), or 0.
func causeOf(err error) dag.Kind {
	if inner := errors.Unwrap(err); inner != nil {
		if k := dag.KindOf(inner); k != dag.KindOf(err) {
			return k
		}
	}
	return 0
}

// loweredOn says where a job's lowering was in flight: "on h1 and h2",
// "on h1 twice".
func loweredOn(heads []string) string {
	count := map[string]int{}
	var order []string
	for _, h := range heads {
		if count[h] == 0 {
			order = append(order, h)
		}
		count[h]++
	}
	parts := make([]string, len(order))
	for i, h := range order {
		switch n := count[h]; n {
		case 1:
			parts[i] = h
		case 2:
			parts[i] = h + " twice"
		default:
			parts[i] = fmt.Sprintf("%s %d times", h, n)
		}
	}
	return "on " + strings.Join(parts, " and ")
}

// normTime is a time as Raft keeps it: to the microsecond, in UTC.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Round(time.Microsecond).UTC()
}
