package head

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/objclient"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
)

// webHead is the head as the web service sees it (web.Head): a thin
// adapter that asks the leader machine through the event loop, as binary
// calls do, and never touches the machine from an HTTP goroutine.
type webHead struct {
	s *Server

	mu         sync.Mutex
	leaderID   string // whose HTTP URL leaderHTTP is
	leaderHTTP string
	raylets    map[string]*web.RayletClient // by base URL, for logs
}

var _ web.Head = (*webHead)(nil)

// callerOfPrincipal is the web caller as the machine knows callers.
func callerOfPrincipal(p web.Principal) caller {
	return caller{name: p.Name, role: p.Role}
}

// Leader reports "" on the leader, else the leader's web service URL,
// which it asks the leader for once per leader.
func (h *webHead) Leader(ctx context.Context) (string, error) {
	s := h.s
	if s.node.IsLeader() {
		return "", nil
	}
	id, addr := s.node.Leader()
	if id == "" || id == s.cfg.ID {
		return "", dag.Errorf(dag.KindUnavailable, "head %s: no leader elected yet; retry shortly", s.cfg.ID)
	}
	h.mu.Lock()
	if h.leaderID == id && h.leaderHTTP != "" {
		u := h.leaderHTTP
		h.mu.Unlock()
		return u, nil
	}
	h.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sess, err := s.peerSession(cctx, addr)
	if err != nil {
		return "", dag.Errorf(dag.KindUnavailable, "head %s: reach the leader %s: %w", s.cfg.ID, id, err)
	}
	var self wire.HeadSelf
	if err := sess.Call(cctx, wire.MethodHeadInfo, wire.HeadInfoRequest{}, &self); err != nil {
		return "", dag.Errorf(dag.KindUnavailable, "head %s: ask the leader %s for its web service: %w", s.cfg.ID, id, err)
	}
	if self.Head.HTTP == "" {
		return "", dag.Errorf(dag.KindUnavailable, "the leader %s serves no HTTP; start it with an HTTP address to use the API through other heads", id)
	}
	h.mu.Lock()
	h.leaderID, h.leaderHTTP = id, self.Head.HTTP
	h.mu.Unlock()
	return self.Head.HTTP, nil
}

// ask asks the leader machine on behalf of an HTTP caller.
func (h *webHead) ask(ctx context.Context, mk func(sched.Call) sched.Event) (any, error) {
	call := h.s.newCall()
	return h.s.ask(ctx, mk(call), call)
}

func (h *webHead) Cluster(ctx context.Context, p web.Principal) (web.ClusterStatus, error) {
	s := h.s
	cs, err := s.clusterStatusFor(ctx, defaultStatusTimeout)
	if err != nil {
		return web.ClusterStatus{}, err
	}
	out := web.ClusterStatus{Leader: cs.Leader, Term: cs.Term, Time: time.Now()}
	for _, hd := range cs.Heads {
		out.Heads = append(out.Heads, web.HeadStatus{ID: hd.ID, Addr: hd.Addr, HTTP: hd.HTTP, Role: hd.Role, Term: hd.Term,
			CommitIndex: hd.CommitIndex, AppliedIndex: hd.AppliedIndex, Error: hd.Error})
	}
	for _, r := range cs.Raylets {
		out.Raylets = append(out.Raylets, web.RayletStatus{ID: r.ID, Addr: r.Addr, HTTP: r.HTTP, State: r.State, Slots: r.Slots,
			Busy: min(r.Busy, r.Slots), Queue: r.Queued, Time: out.Time,
			Store: web.StoreStatus{Capacity: r.Store.Capacity, Used: r.Store.Used, Objects: r.Store.Objects, Pinned: r.Store.Pinned,
				SpilledBytes: r.Store.SpilledBytes, SpillBytes: r.Store.SpillBytes, Spills: r.Store.Spills, Restores: r.Store.Restores},
			Transfers: web.TransferStatus{BytesIn: r.Store.BytesIn, BytesOut: r.Store.BytesOut, In: r.Store.TransfersIn, Out: r.Store.TransfersOut, Errors: r.Store.TransferErrs}})
		out.Queued += r.Queued
	}
	if s.node.IsLeader() {
		v, err := h.ask(ctx, func(c sched.Call) sched.Event { return &sched.CountsQuery{Call: c} })
		if err == nil {
			jc := v.(sched.Counts).Jobs
			out.Jobs = web.JobCounts{Submitted: jc[dag.JobSubmitted], Running: jc[dag.JobRunning], Succeeded: jc[dag.JobSucceeded],
				Failed: jc[dag.JobFailed], Cancelled: jc[dag.JobCancelled]}
		}
	}
	return out, nil
}

func (h *webHead) Jobs(ctx context.Context, p web.Principal, q web.JobQuery) (web.JobPage, error) {
	c := callerOfPrincipal(p)
	v, err := h.ask(ctx, func(call sched.Call) sched.Event { return &sched.ListJobs{Call: call, Caller: c.machine()} })
	if err != nil {
		return web.JobPage{}, err
	}
	jobs := v.(wire.ListJobs).Jobs
	slices.SortFunc(jobs, func(a, b wire.JobStatus) int { return int(b.Task) - int(a.Task) }) // newest first
	limit := q.Limit
	if limit <= 0 {
		limit = web.DefaultJobsPage
	}
	page := web.JobPage{Jobs: []web.JobSummary{}}
	for _, st := range jobs {
		if q.Before != 0 && st.Task >= q.Before {
			continue
		}
		sum := jobSummary(st)
		if len(q.States) > 0 && !slices.Contains(q.States, sum.State) {
			continue
		}
		if len(page.Jobs) == limit {
			page.Next = page.Jobs[len(page.Jobs)-1].ID
			break
		}
		page.Jobs = append(page.Jobs, sum)
	}
	return page, nil
}

// jobSummary converts a job's wire status.
func jobSummary(st wire.JobStatus) web.JobSummary {
	sum := web.JobSummary{ID: st.Task, Name: st.Name, Owner: st.Owner, State: st.Status.String(), Subtasks: st.Subtasks,
		Finished: st.Finished, Submitted: st.Submitted, Ended: st.Ended, Released: st.Released}
	if st.Error != "" && st.Status != dag.JobSucceeded { // a succeeded job's note (results released) is no error
		sum.Error = &web.JobError{Kind: st.Kind.Error(), Code: uint16(st.Kind), Message: st.Error}
		if st.Cause != 0 {
			sum.Error.Cause = st.Cause.Error()
		}
	}
	return sum
}

func (h *webHead) Job(ctx context.Context, p web.Principal, id dag.TaskID) (web.Job, error) {
	c := callerOfPrincipal(p)
	v, err := h.ask(ctx, func(call sched.Call) sched.Event {
		return &sched.JobDetailQuery{Call: call, Caller: c.machine(), Task: id}
	})
	if err != nil {
		return web.Job{}, err
	}
	d := v.(sched.JobDetail)
	out := web.Job{JobSummary: jobSummary(d.Status), Stages: []web.Stage{}, Groups: []web.OpGroup{}, Raylets: []web.JobRaylet{}}
	if out.Error != nil && d.Failed != (dag.SubtaskID{}) {
		out.Error.Subtask, out.Error.Raylet, out.Error.Attempts = d.Failed.String(), d.FailedRaylet, d.FailedAttempts
	}
	for _, sd := range d.Stages {
		st := web.Stage{ID: sd.Stage, Counts: stateCounts(&sd.Counts)}
		for _, n := range sd.Counts {
			st.Subtasks += n
		}
		addCounts(&out.Counts, &st.Counts)
		out.Stages = append(out.Stages, st)
		base := len(out.Groups)
		for _, gd := range sd.Groups {
			g := web.OpGroup{Stage: sd.Stage, Ops: gd.Ops, Counts: stateCounts(&gd.Counts)}
			for _, n := range gd.Counts {
				g.Subtasks += n
			}
			for _, in := range gd.Inputs {
				g.Inputs = append(g.Inputs, base+in)
			}
			out.Groups = append(out.Groups, g)
		}
	}
	for _, r := range d.Raylets {
		out.Raylets = append(out.Raylets, web.JobRaylet{Raylet: r.Raylet, Queued: r.Queued, Running: r.Running, Finished: r.Finished, Failed: r.Failed})
	}
	return out, nil
}

func stateCounts(c *[sched.NumStates]int) web.StateCounts {
	return web.StateCounts{Unscheduled: c[sched.Unscheduled], Ready: c[sched.Ready], Running: c[sched.Running], Finished: c[sched.Finished],
		Freed: c[sched.Freed], Fatal: c[sched.Fatal], Cancelling: c[sched.Cancelling], Cancelled: c[sched.Cancelled]}
}

func addCounts(dst, src *web.StateCounts) {
	dst.Unscheduled += src.Unscheduled
	dst.Ready += src.Ready
	dst.Running += src.Running
	dst.Finished += src.Finished
	dst.Freed += src.Freed
	dst.Fatal += src.Fatal
	dst.Cancelling += src.Cancelling
	dst.Cancelled += src.Cancelled
}

func (h *webHead) Submit(ctx context.Context, p web.Principal, g *dag.TileableGraph, o web.SubmitOptions) (web.JobSummary, error) {
	s := h.s
	select {
	case s.graphSlots <- struct{}{}:
		defer func() { <-s.graphSlots }()
	case <-ctx.Done():
		return web.JobSummary{}, ctx.Err()
	}
	req := wire.SubmitJob{RequestID: o.RequestID, Graph: *g,
		Options: wire.JobOptions{Retries: o.Retries, ResultTTL: o.ResultTTL, Fusion: o.Fusion, Name: o.Name}}
	v, err := s.submit(ctx, callerOfPrincipal(p), req)
	if err != nil {
		return web.JobSummary{}, err
	}
	task := v.(wire.SubmitReply).Task
	return web.JobSummary{ID: task, Name: o.Name, Owner: p.Name, State: web.StateSubmitted, Submitted: time.Now()}, nil
}

func (h *webHead) Cancel(ctx context.Context, p web.Principal, id dag.TaskID) (web.JobSummary, error) {
	c := callerOfPrincipal(p)
	v, err := h.ask(ctx, func(call sched.Call) sched.Event { return &sched.CancelJob{Call: call, Caller: c.machine(), Task: id} })
	if err != nil {
		return web.JobSummary{}, err
	}
	return jobSummary(v.(wire.JobStatus)), nil
}

func (h *webHead) Release(ctx context.Context, p web.Principal, id dag.TaskID) error {
	c := callerOfPrincipal(p)
	_, err := h.ask(ctx, func(call sched.Call) sched.Event { return &sched.ReleaseJob{Call: call, Caller: c.machine(), Task: id} })
	return err
}

// maxHTTPResult bounds a result the head reads to serve it over HTTP.
const maxHTTPResult = 1 << 30

// Result reads a one-chunk result from a raylet holding it. Results of
// several chunks are refused: assembling them is the driver's work
// (phobos.Job.Fetch, `phobos get`).
func (h *webHead) Result(ctx context.Context, p web.Principal, id dag.TaskID, i int) (*web.Result, error) {
	s := h.s
	c := callerOfPrincipal(p)
	v, err := h.ask(ctx, func(call sched.Call) sched.Event {
		return &sched.WaitJob{Call: call, Caller: c.machine(), WaitJob: wire.WaitJob{Task: id, Results: true}}
	})
	if err != nil {
		return nil, err
	}
	st := v.(wire.JobStatus)
	switch st.Status {
	case dag.JobSucceeded:
	case dag.JobFailed:
		return nil, dag.Errorf(dag.KindFatal, "job %d failed; it has no results", id)
	case dag.JobCancelled:
		return nil, dag.Errorf(dag.KindCancelled, "job %d was cancelled; it has no results", id)
	default:
		return nil, dag.Errorf(dag.KindUnavailable, "job %d is %s; its results are served once it succeeds: retry then", id, st.Status)
	}
	if i < 0 || i >= len(st.Results) {
		return nil, dag.Errorf(dag.KindNotFound, "job %d has %d results; there is no result %d", id, len(st.Results), i)
	}
	ref := st.Results[i]
	if len(ref.Chunks) != 1 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "result %d of job %d is in %d chunks; the HTTP API serves one-chunk results, fetch this one with the Go driver or `phobos get`", i, id, len(ref.Chunks))
	}
	ch := ref.Chunks[0]
	if ch.Size > maxHTTPResult {
		return nil, dag.Errorf(dag.KindResourceExhausted, "result %d of job %d holds %d bytes, more than the %d the head relays; fetch it with the Go driver", i, id, ch.Size, maxHTTPResult)
	}
	tk, err := s.resultTicket(ctx, c, id)
	if err != nil {
		return nil, err
	}
	var last error = dag.Errorf(dag.KindUnavailable, "result %d of job %d is on no live raylet", i, id)
	for _, loc := range ch.Locations {
		data, err := h.fetch(ctx, loc, ch.ID, tk)
		if err != nil {
			last = err
			continue
		}
		return &web.Result{Meta: ref.Meta, Size: int64(len(data)), Body: io.NopCloser(bytes.NewReader(data))}, nil
	}
	return nil, last
}

// fetch reads one object from the raylet at addr.
func (h *webHead) fetch(ctx context.Context, addr string, id dag.ObjectID, tk *ticket.Ticket) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sess, err := transport.Dial(cctx, addr, h.s.tcfg)
	if err != nil {
		return nil, dag.Errorf(dag.KindUnavailable, "reach raylet %s: %w", addr, err)
	}
	defer sess.Close()
	sess.Serve(nil)
	data, _, err := objclient.FetchObject(cctx, sess, id, nil, tk)
	if err != nil {
		return nil, fmt.Errorf("fetch %s from raylet %s: %w", id, addr, err)
	}
	return data, nil
}

func (h *webHead) Timeline(ctx context.Context, p web.Principal, id dag.TaskID) (timeline.Snapshot, error) {
	if _, err := h.Job(ctx, p, id); err != nil { // owner and existence
		return timeline.Snapshot{}, err
	}
	snap, _ := h.s.rec.Snapshot(id, nil)
	snap.Task = id
	return snap, nil
}

func (h *webHead) Logs(ctx context.Context, p web.Principal, id dag.TaskID, q web.LogQuery) (web.LogPage, error) {
	if _, err := h.Job(ctx, p, id); err != nil { // owner and existence
		return web.LogPage{}, err
	}
	infos := h.s.rayletInfos(ctx)
	sources := map[string]web.LogSource{}
	h.mu.Lock()
	if h.raylets == nil {
		h.raylets = map[string]*web.RayletClient{}
	}
	for _, r := range infos {
		if r.HTTP == "" {
			continue
		}
		rc := h.raylets[r.HTTP]
		if rc == nil {
			var src *pki.Source
			if !h.s.tcfg.Insecure {
				src = h.s.tcfg.TLS
			}
			rc = web.NewRayletClient(r.HTTP, src, h.s.httpToken)
			h.raylets[r.HTTP] = rc
		}
		sources[r.ID] = rc
	}
	h.mu.Unlock()
	if len(sources) == 0 {
		return web.LogPage{Lines: nil, Cursor: q.Cursor}, nil
	}
	return web.MergeLogs(ctx, sources, p, id, q)
}

// close drops the raylet clients' idle connections.
func (h *webHead) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, rc := range h.raylets {
		rc.Close()
	}
}

// startWeb starts the head's web service when cfg.HTTP is set: HTTPS with
// the head's certificate under TLS, plain HTTP with the bearer token on a
// plaintext cluster.
func (s *Server) startWeb() error {
	if s.cfg.HTTP == "" {
		return nil
	}
	reg := metrics.NewRegistry()
	met, err := metrics.NewHead(reg)
	if err != nil {
		return err
	}
	if err := metrics.InstallGoMetrics(reg); err != nil {
		// One go-metrics sink per process: an embedded cluster's other
		// heads' Raft figures show on the first head's /metrics.
		s.log.Debug("raft metrics go to another registry of this process", "err", err)
	}
	s.met = met
	s.rec = timeline.NewRecorder(s.cfg.Timeline)
	wc := web.Config{Addr: s.cfg.HTTP, TokenFile: s.cfg.HTTPTokenFile, TokenHint: s.cfg.HTTPTokenFile,
		Head: s.webHead, Metrics: reg, Logger: s.log}
	if s.tcfg.Insecure {
		wc.Plaintext = true
	} else {
		wc.TLS = s.tcfg.TLS
	}
	srv, err := web.New(wc)
	if err != nil {
		return fmt.Errorf("head %s: web service: %w", s.cfg.ID, err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("head %s: %w", s.cfg.ID, err)
	}
	if s.cfg.HTTPTokenFile != "" {
		tok, err := transport.ReadTokenFile(s.cfg.HTTPTokenFile)
		if err != nil {
			srv.Close()
			return fmt.Errorf("head %s: web service: %w", s.cfg.ID, err)
		}
		s.httpToken = tok
	}
	s.web = srv
	return nil
}

// HTTPURL returns the base URL of the head's web service, or "" when it
// serves none.
func (s *Server) HTTPURL() string {
	if s.web == nil {
		return ""
	}
	return s.web.URL()
}

// closeWeb stops the web service.
func (s *Server) closeWeb() {
	if s.web != nil {
		s.web.Close()
		s.webHead.close()
	}
}

// jobLogs answers a driver's MethodJobLogs: the lines the raylets that
// serve HTTP keep of the job, merged (as the web service's logs endpoint).
func (s *Server) jobLogs(ctx context.Context, c caller, req wire.JobLogs) (any, error) {
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	p := web.Principal{Name: c.name, Role: c.role}
	page, err := s.webHead.Logs(ctx, p, req.Task, web.LogQuery{Subtask: req.Subtask, Cursor: req.Cursor, Limit: req.Limit,
		Wait: min(req.Wait, web.MaxLogWait)})
	if err != nil {
		return nil, err
	}
	out := wire.LogPage{Cursor: page.Cursor, Dropped: page.Dropped, Unreachable: page.Unreachable}
	for _, l := range page.Lines {
		out.Lines = append(out.Lines, wire.LogLine{Time: l.Time, Subtask: l.Subtask, Attempt: l.Attempt, Level: int(l.Level), Text: l.Text})
	}
	return out, nil
}

// jobTimeline answers a driver's MethodJobTimeline.
func (s *Server) jobTimeline(ctx context.Context, c caller, task dag.TaskID) (any, error) {
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	if s.rec == nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "head %s records no timelines: it serves no HTTP (start it with an HTTP address)", s.cfg.ID)
	}
	snap, err := s.webHead.Timeline(ctx, web.Principal{Name: c.name, Role: c.role}, task)
	if err != nil {
		return nil, err
	}
	out := wire.Timeline{Dropped: snap.Dropped, Events: make([]wire.TimelineEvent, len(snap.Events))}
	for i, e := range snap.Events {
		out.Events[i] = wire.TimelineEvent{Time: e.Time, Subtask: e.Subtask, Kind: uint8(e.Kind), Attempt: e.Attempt, Slot: e.Slot,
			Raylet: e.Raylet, Ops: e.Ops, BytesRead: e.BytesRead, BytesWritten: e.BytesWritten, Fetch: e.Fetch}
	}
	return out, nil
}
