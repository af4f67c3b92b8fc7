// Package webtest has an in-memory web.Head: a pretend cluster whose jobs
// progress when a test says so (Step) or on a timer (Run), recording
// timelines and log lines as they go. Tests of the web service, of
// clients of the HTTP API and of the dashboard run against it; it runs no
// kernels.
package webtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/runtime/tasklog"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/transport/pki"
)

// Raylets and slots of the pretend cluster.
const (
	Raylets = 2
	Slots   = 4
)

// maxGroupSubtasks bounds one group's pretend subtasks, and maxResult a
// pretend result's elements.
const (
	maxGroupSubtasks = 1 << 22
	maxResult        = 1 << 20
)

// Head is a web.Head over pretend jobs. All methods are safe for
// concurrent use.
type Head struct {
	Recorder *timeline.Recorder
	Store    *tasklog.Store

	mu      sync.Mutex
	leader  string
	leadErr error
	next    dag.TaskID
	jobs    map[dag.TaskID]*job
	byReq   map[[16]byte]dag.TaskID
	calls   map[string]int
	block   chan struct{} // when set, Job waits on it (a slow head)
}

type group struct {
	ops             string
	inputs          []int
	n               int
	done, failed    int
	stage           dag.StageID
	firstSubtaskIdx uint64
}

type job struct {
	sum     web.JobSummary
	groups  []group
	outputs []int // group index of each output
	metas   []dag.Meta
	names   []string
	started time.Time
}

// NewHead returns an empty pretend head that leads.
func NewHead() *Head {
	return &Head{
		Recorder: timeline.NewRecorder(timeline.Config{}),
		Store:    tasklog.NewStore(tasklog.Config{}),
		next:     1,
		jobs:     make(map[dag.TaskID]*job),
		byReq:    make(map[[16]byte]dag.TaskID),
		calls:    make(map[string]int),
	}
}

// SetLeader makes the head a follower of the leader whose web service is
// at url ("" makes it lead again), or, with err, a head that knows no
// leader.
func (h *Head) SetLeader(url string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leader, h.leadErr = url, err
}

// Calls reports how many times method was called (by the server).
func (h *Head) Calls(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[method]
}

// Block makes Job wait until the returned function is called: a head
// that answers slowly.
func (h *Head) Block() (unblock func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.block = ch
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.block = nil
			h.mu.Unlock()
			close(ch)
		})
	}
}

func (h *Head) count(method string) {
	h.mu.Lock()
	h.calls[method]++
	h.mu.Unlock()
}

// Leader implements web.Head.
func (h *Head) Leader(ctx context.Context) (string, error) {
	h.count("Leader")
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leader, h.leadErr
}

// may checks that p may touch j.
func may(p web.Principal, j *job) error {
	if p.Role != pki.RoleClient && p.Role != pki.RoleAdmin {
		return dag.Errorf(dag.KindPermissionDenied, "%q (role %s) may not use jobs", p.Name, p.Role)
	}
	if !p.Admin() && j.sum.Owner != p.Name {
		return dag.Errorf(dag.KindPermissionDenied, "job %d belongs to %q, not to %q; only its owner or an admin may use it", j.sum.ID, j.sum.Owner, p.Name)
	}
	return nil
}

func (h *Head) lookup(p web.Principal, id dag.TaskID) (*job, error) {
	j, ok := h.jobs[id]
	if !ok {
		return nil, dag.Errorf(dag.KindNotFound, "job %d does not exist", id)
	}
	return j, may(p, j)
}

// Cluster implements web.Head: one leading head and two raylets of four
// slots, busy with the running subtasks.
func (h *Head) Cluster(ctx context.Context, p web.Principal) (web.ClusterStatus, error) {
	h.count("Cluster")
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	st := web.ClusterStatus{Leader: "h1", Term: 1, Time: now,
		Heads: []web.HeadStatus{{ID: "h1", Addr: "127.0.0.1:7070", Role: "leader", Term: 1, CommitIndex: 10, AppliedIndex: 10}}}
	running := 0
	var moved int64
	for _, j := range h.jobs {
		switch j.sum.State {
		case web.StateSubmitted:
			st.Jobs.Submitted++
		case web.StateRunning:
			st.Jobs.Running++
			running += min(j.sum.Subtasks-j.sum.Finished, Raylets*Slots)
			st.Queued += max(j.sum.Subtasks-j.sum.Finished-Raylets*Slots, 0)
		case web.StateSucceeded:
			st.Jobs.Succeeded++
		case web.StateFailed:
			st.Jobs.Failed++
		case web.StateCancelled:
			st.Jobs.Cancelled++
		}
		moved += int64(j.sum.Finished) * 4096
	}
	running = min(running, Raylets*Slots)
	for r := range Raylets {
		busy := min(max(running-r*Slots, 0), Slots)
		st.Raylets = append(st.Raylets, web.RayletStatus{
			ID: fmt.Sprintf("r%d", r+1), Addr: fmt.Sprintf("127.0.0.1:%d", 7071+r), State: "alive",
			Slots: Slots, Busy: busy, Queue: st.Queued / Raylets, Time: now,
			Store:     web.StoreStatus{Capacity: 1 << 30, Used: moved % (1 << 30), Objects: int(moved / 4096 % 1000)},
			Transfers: web.TransferStatus{BytesIn: moved / 2, BytesOut: moved / 2},
		})
	}
	return st, nil
}

// Jobs implements web.Head.
func (h *Head) Jobs(ctx context.Context, p web.Principal, q web.JobQuery) (web.JobPage, error) {
	h.count("Jobs")
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []dag.TaskID
	for id, j := range h.jobs {
		if may(p, j) != nil || (q.Before != 0 && id >= q.Before) {
			continue
		}
		if len(q.States) > 0 && !slices.Contains(q.States, j.sum.State) {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	var page web.JobPage
	for i, id := range ids {
		if i == q.Limit {
			page.Next = ids[i-1]
			break
		}
		page.Jobs = append(page.Jobs, h.jobs[id].sum)
	}
	return page, nil
}

// Job implements web.Head.
func (h *Head) Job(ctx context.Context, p web.Principal, id dag.TaskID) (web.Job, error) {
	h.count("Job")
	h.mu.Lock()
	block := h.block
	h.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return web.Job{}, ctx.Err()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	j, err := h.lookup(p, id)
	if err != nil {
		return web.Job{}, err
	}
	out := web.Job{JobSummary: j.sum}
	stages := map[dag.StageID]*web.Stage{}
	rayletCounts := make([]web.JobRaylet, Raylets)
	for r := range rayletCounts {
		rayletCounts[r].Raylet = fmt.Sprintf("r%d", r+1)
	}
	slots := Raylets * Slots // the running subtasks fill the pretend slots
	for i := range j.groups {
		g := &j.groups[i]
		ready := true
		for _, in := range g.inputs {
			if in >= 0 && in < len(j.groups) && j.groups[in].done < j.groups[in].n {
				ready = false
			}
		}
		c := g.counts(j.sum.State, ready, &slots)
		out.Groups = append(out.Groups, web.OpGroup{Stage: g.stage, Ops: g.ops, Subtasks: g.n, Counts: c, Inputs: g.inputs})
		addCounts(&out.Counts, c)
		st := stages[g.stage]
		if st == nil {
			st = &web.Stage{ID: g.stage}
			stages[g.stage] = st
		}
		st.Subtasks += g.n
		addCounts(&st.Counts, c)
		for r := range rayletCounts {
			rayletCounts[r].Finished += (g.done + Raylets - 1 - r) / Raylets
			rayletCounts[r].Running += (c.Running + Raylets - 1 - r) / Raylets
			rayletCounts[r].Queued += (c.Ready + Raylets - 1 - r) / Raylets
			rayletCounts[r].Failed += (g.failed + Raylets - 1 - r) / Raylets
		}
	}
	for _, st := range stages {
		out.Stages = append(out.Stages, *st)
	}
	slices.SortFunc(out.Stages, func(a, b web.Stage) int { return int(a.ID) - int(b.ID) })
	out.Raylets = rayletCounts
	if j.sum.State == web.StateSucceeded {
		for i, m := range j.metas {
			out.Results = append(out.Results, web.ResultInfo{Index: i, Name: j.names[i], DType: m.DType.String(), Shape: m.Shape, Bytes: resultBytes(m)})
		}
	}
	return out, nil
}

// counts splits a group's subtasks into states: done ones finished,
// failed ones fatal; of a running job's, as many running as slots are
// left (ready says its inputs are finished), the rest ready, or
// unscheduled while an input group is unfinished.
func (g *group) counts(state string, ready bool, slots *int) web.StateCounts {
	var c web.StateCounts
	c.Finished = g.done
	c.Fatal = g.failed
	left := g.n - g.done - g.failed
	switch {
	case state == web.StateRunning && ready:
		c.Running = min(left, *slots)
		*slots -= c.Running
		c.Ready = left - c.Running
	case state == web.StateRunning:
		c.Unscheduled = left
	case state == web.StateCancelled:
		c.Cancelled = left
	default:
		c.Unscheduled = left
	}
	return c
}

func addCounts(a *web.StateCounts, b web.StateCounts) {
	a.Unscheduled += b.Unscheduled
	a.Ready += b.Ready
	a.Running += b.Running
	a.Finished += b.Finished
	a.Freed += b.Freed
	a.Fatal += b.Fatal
	a.Cancelling += b.Cancelling
	a.Cancelled += b.Cancelled
}

// Submit implements web.Head: each node of g becomes an op group of as
// many subtasks as it has chunks; the job runs when stepped.
func (h *Head) Submit(ctx context.Context, p web.Principal, g *dag.TileableGraph, o web.SubmitOptions) (web.JobSummary, error) {
	h.count("Submit")
	if p.Role != pki.RoleClient && p.Role != pki.RoleAdmin {
		return web.JobSummary{}, dag.Errorf(dag.KindPermissionDenied, "%q (role %s) may not submit jobs", p.Name, p.Role)
	}
	groups, outputs, metas, names, err := plan(g)
	if err != nil {
		return web.JobSummary{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := h.byReq[o.RequestID]; ok {
		return h.jobs[id].sum, nil
	}
	js := h.addLocked(p.Name, o.Name, groups, outputs, metas, names)
	h.byReq[o.RequestID] = js.ID
	return js, nil
}

// AddJob adds a running job of owner with one op group per entry of
// subtasks, each reading the one before: a job as big as a test wants
// without a graph (200,000 subtasks, say).
func (h *Head) AddJob(owner, name string, subtasks ...int) dag.TaskID {
	groups := make([]group, len(subtasks))
	for i, n := range subtasks {
		groups[i] = group{ops: fmt.Sprintf("tensor.op%d", i), n: n, stage: 1}
		if i > 0 {
			groups[i].inputs = []int{i - 1}
		}
	}
	m := dag.Meta{DType: dag.Float64, Shape: []int64{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addLocked(owner, name, groups, []int{len(groups) - 1}, []dag.Meta{m}, []string{"out"}).ID
}

func (h *Head) addLocked(owner, name string, groups []group, outputs []int, metas []dag.Meta, names []string) web.JobSummary {
	id := h.next
	h.next++
	total := 0
	for i := range groups {
		groups[i].firstSubtaskIdx = uint64(total) + 1
		total += groups[i].n
	}
	now := time.Now()
	j := &job{sum: web.JobSummary{ID: id, Name: name, Owner: owner, State: web.StateRunning, Subtasks: total, Submitted: now},
		groups: groups, outputs: outputs, metas: metas, names: names, started: now}
	h.jobs[id] = j
	return j.sum
}

// plan turns a graph into op groups: a source has one subtask per chunk,
// another node as many as its largest input (one for a scalar).
func plan(g *dag.TileableGraph) ([]group, []int, []dag.Meta, []string, error) {
	n := len(g.Nodes)
	counts := make([]int, n)
	var count func(i int, depth int) int
	count = func(i, depth int) int {
		if counts[i] > 0 {
			return counts[i]
		}
		if depth > n {
			return 1 // a cycle: the real head refuses it; pretend one subtask
		}
		nd := &g.Nodes[i]
		c := 1
		switch {
		case len(nd.Inputs) == 0 && len(nd.ChunkSize) > 0:
			for d, s := range nd.Shape {
				cs := nd.ChunkSize[min(d, len(nd.ChunkSize)-1)]
				if cs > 0 && s > 0 {
					c = min(c*int((s+cs-1)/cs), maxGroupSubtasks)
				}
			}
		case len(nd.Shape) == 0:
			c = 1
		default:
			for _, in := range nd.Inputs {
				c = max(c, count(int(in), depth+1))
			}
		}
		counts[i] = c
		return c
	}
	groups := make([]group, n)
	for i := range g.Nodes {
		nd := &g.Nodes[i]
		groups[i] = group{ops: dag.Ops.Name(nd.Op), n: count(i, 0), stage: 1}
		for _, in := range nd.Inputs {
			groups[i].inputs = append(groups[i].inputs, int(in))
		}
	}
	var outputs []int
	var metas []dag.Meta
	var names []string
	for _, o := range g.Outputs {
		nd := &g.Nodes[o]
		shape := slices.Clone(nd.Shape)
		for d := range shape {
			if shape[d] < 0 {
				shape[d] = 1
			}
		}
		m := dag.Meta{DType: nd.DType, Shape: shape}
		if m.DType != dag.Bytes && m.Elements() > maxResult {
			return nil, nil, nil, nil, dag.Errorf(dag.KindResourceExhausted, "the pretend cluster keeps results of at most %d elements; output %q has %d", maxResult, nd.Label, m.Elements())
		}
		outputs = append(outputs, int(o))
		metas = append(metas, m)
		names = append(names, nd.Label)
	}
	return groups, outputs, metas, names, nil
}

// Step finishes up to n more subtasks of job id, group by group,
// recording each attempt in the timeline (on the pretend raylets' slots)
// and a log line per group touched; the job succeeds with its last
// subtask. It reports how many it finished.
func (h *Head) Step(id dag.TaskID, n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.jobs[id]
	if j == nil || j.sum.State != web.StateRunning {
		return 0
	}
	now := time.Now()
	stepped := 0
	var events []timeline.Event
	for gi := range j.groups {
		g := &j.groups[gi]
		k := min(n-stepped, g.n-g.done-g.failed)
		if k <= 0 {
			continue
		}
		for i := range k {
			idx := g.firstSubtaskIdx + uint64(g.done+i)
			st := dag.PackSubtaskID(id, g.stage, idx)
			lane := int(idx) % (Raylets * Slots)
			raylet, slot := rayletName(lane/Slots), int16(lane%Slots)
			end := now.Add(-time.Duration(k-i) * 100 * time.Microsecond)
			events = append(events,
				timeline.Event{Time: end.Add(-3 * time.Millisecond).UnixNano(), Subtask: st, Kind: timeline.Queued, Attempt: 1, Slot: timeline.NoSlot, Raylet: raylet},
				timeline.Event{Time: end.Add(-2 * time.Millisecond).UnixNano(), Subtask: st, Kind: timeline.Started, Attempt: 1, Slot: slot, Raylet: raylet, Ops: g.ops},
				timeline.Event{Time: end.UnixNano(), Subtask: st, Kind: timeline.Finished, Attempt: 1, Slot: slot, Raylet: raylet,
					BytesRead: 8192, BytesWritten: 4096, Fetch: 200 * time.Microsecond})
			if len(events) >= 3*1024 {
				h.Recorder.RecordBatch(id, events)
				events = events[:0]
			}
		}
		first := dag.PackSubtaskID(id, g.stage, g.firstSubtaskIdx+uint64(g.done))
		h.Store.Append(tasklog.Line{Job: id, Subtask: first, Attempt: 1, Level: slog.LevelInfo, Text: fmt.Sprintf("%s: finished %d subtasks (%d of %d)", g.ops, k, g.done+k, g.n)})
		g.done += k
		stepped += k
		if stepped == n {
			break
		}
	}
	h.Recorder.RecordBatch(id, events)
	j.sum.Finished += stepped
	if j.sum.Finished == j.sum.Subtasks {
		j.sum.State, j.sum.Ended = web.StateSucceeded, now
	}
	return stepped
}

func rayletName(r int) string {
	return [...]string{"r1", "r2"}[r%Raylets]
}

// Fail fails job id at its next unfinished subtask, as the head would
// after its retries: with kind task failed caused by cause.
func (h *Head) Fail(id dag.TaskID, cause dag.Kind, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.jobs[id]
	if j == nil || j.sum.State != web.StateRunning {
		return
	}
	var st dag.SubtaskID
	ops := ""
	for gi := range j.groups {
		g := &j.groups[gi]
		if g.done+g.failed < g.n {
			g.failed++
			st = dag.PackSubtaskID(id, g.stage, g.firstSubtaskIdx+uint64(g.done))
			ops = g.ops
			break
		}
	}
	text := fmt.Sprintf("subtask %s (%s) failed on raylet r1 after 1 attempt (not retried: %s): %s", st, ops, cause, msg)
	j.sum.State, j.sum.Ended = web.StateFailed, time.Now()
	j.sum.Error = &web.JobError{Kind: dag.KindFatal.Error(), Code: dag.KindFatal.WireCode(), Cause: cause.Error(), Message: text,
		Subtask: st.String(), Ops: ops, Raylet: "r1", Attempts: 1}
	h.Store.Append(tasklog.Line{Job: id, Subtask: st, Attempt: 1, Level: slog.LevelError, Text: msg})
	now := time.Now()
	h.Recorder.RecordBatch(id, []timeline.Event{
		{Time: now.Add(-time.Millisecond).UnixNano(), Subtask: st, Kind: timeline.Started, Attempt: 1, Slot: 0, Raylet: "r1", Ops: ops},
		{Time: now.UnixNano(), Subtask: st, Kind: timeline.Failed, Attempt: 1, Slot: 0, Raylet: "r1"},
	})
}

// Run steps every running job by perStep subtasks every interval until
// ctx ends: a cluster that makes progress by itself.
func (h *Head) Run(ctx context.Context, every time.Duration, perStep int) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		var ids []dag.TaskID
		for id, j := range h.jobs {
			if j.sum.State == web.StateRunning {
				ids = append(ids, id)
			}
		}
		h.mu.Unlock()
		for _, id := range ids {
			h.Step(id, perStep)
		}
	}
}

// Cancel implements web.Head.
func (h *Head) Cancel(ctx context.Context, p web.Principal, id dag.TaskID) (web.JobSummary, error) {
	h.count("Cancel")
	h.mu.Lock()
	defer h.mu.Unlock()
	j, err := h.lookup(p, id)
	if err != nil {
		return web.JobSummary{}, err
	}
	if j.sum.State == web.StateRunning || j.sum.State == web.StateSubmitted {
		j.sum.State, j.sum.Ended = web.StateCancelled, time.Now()
		j.sum.Error = &web.JobError{Kind: dag.KindCancelled.Error(), Code: dag.KindCancelled.WireCode(), Message: fmt.Sprintf("job %d was cancelled", id)}
	}
	return j.sum, nil
}

// Release implements web.Head.
func (h *Head) Release(ctx context.Context, p web.Principal, id dag.TaskID) error {
	h.count("Release")
	h.mu.Lock()
	defer h.mu.Unlock()
	j, err := h.lookup(p, id)
	if err != nil {
		return err
	}
	j.metas, j.names = nil, nil
	j.sum.Released = true
	return nil
}

// Result implements web.Head: element k of a numeric result is k (cast to
// its dtype); a bytes result is the CBOR of "ok".
func (h *Head) Result(ctx context.Context, p web.Principal, id dag.TaskID, i int) (*web.Result, error) {
	h.count("Result")
	h.mu.Lock()
	defer h.mu.Unlock()
	j, err := h.lookup(p, id)
	if err != nil {
		return nil, err
	}
	if j.sum.State != web.StateSucceeded {
		return nil, dag.Errorf(dag.KindUnavailable, "job %d is %s; its results are ready when it succeeds", id, j.sum.State)
	}
	if i >= len(j.metas) {
		return nil, dag.Errorf(dag.KindNotFound, "job %d has %d outputs; there is no output %d", id, len(j.metas), i)
	}
	m := j.metas[i]
	data := resultData(m)
	return &web.Result{Meta: m, Size: int64(len(data)), Body: io.NopCloser(bytes.NewReader(data))}, nil
}

func resultBytes(m dag.Meta) int64 { return int64(len(resultData(m))) }

func resultData(m dag.Meta) []byte {
	if m.DType == dag.Bytes {
		b, _ := codec.Marshal("ok")
		return b
	}
	n := int(m.Elements())
	size := m.DType.Size()
	data := make([]byte, n*size)
	for k := range n {
		b := data[k*size:]
		switch m.DType {
		case dag.Float64:
			binary.LittleEndian.PutUint64(b, math.Float64bits(float64(k)))
		case dag.Float32:
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(k)))
		case dag.Int64:
			binary.LittleEndian.PutUint64(b, uint64(k))
		case dag.Bool:
			b[0] = byte(k % 2)
		}
	}
	return data
}

// Timeline implements web.Head.
func (h *Head) Timeline(ctx context.Context, p web.Principal, id dag.TaskID) (timeline.Snapshot, error) {
	h.count("Timeline")
	h.mu.Lock()
	_, err := h.lookup(p, id)
	h.mu.Unlock()
	if err != nil {
		return timeline.Snapshot{}, err
	}
	s, _ := h.Recorder.Snapshot(id, nil)
	return s, nil
}

// Logs implements web.Head, from its one Store.
func (h *Head) Logs(ctx context.Context, p web.Principal, id dag.TaskID, q web.LogQuery) (web.LogPage, error) {
	h.count("Logs")
	h.mu.Lock()
	_, err := h.lookup(p, id)
	h.mu.Unlock()
	if err != nil {
		return web.LogPage{}, err
	}
	return web.StoreLogs(ctx, h.Store, id, q)
}

var _ web.Head = (*Head)(nil)

// Raylet is a web.Raylet over a Store.
type Raylet struct {
	ID    string
	Store *tasklog.Store
}

// Status implements web.Raylet.
func (r *Raylet) Status(ctx context.Context) (web.RayletStatus, error) {
	return web.RayletStatus{ID: r.ID, State: "alive", Slots: Slots, Time: time.Now(), Store: web.StoreStatus{Capacity: 1 << 30}}, nil
}

// Logs implements web.Raylet.
func (r *Raylet) Logs(ctx context.Context, p web.Principal, id dag.TaskID, q web.LogQuery) (web.LogPage, error) {
	return web.StoreLogs(ctx, r.Store, id, q)
}

var _ web.Raylet = (*Raylet)(nil)
