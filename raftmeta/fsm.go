package raftmeta

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
)

// DefaultDedupeWindow is how many request IDs the state machine remembers.
const DefaultDedupeWindow = 1 << 16

// FSM is the replicated state machine: the task ID sequence, each task's
// stage and subtask-index sequences, job records, raylet membership and the
// dedupe table. It implements raft.BatchingFSM.
//
// Raft calls Apply, ApplyBatch, Snapshot and Restore from one goroutine; the
// read methods (Job, Jobs, Raylets, NextTask) are safe to call from any
// goroutine at the same time. Apply is deterministic: it reads no clock and
// no randomness, so every replica computes the same state and results. It
// never panics on bad input: a malformed or invalid command gets an error
// Result and leaves the state unchanged.
type FSM struct {
	log *slog.Logger

	mu sync.RWMutex // guards st and dd
	st state
	dd dedupe
}

// NewFSM returns an empty state machine that remembers the last dedupeWindow
// request IDs (DefaultDedupeWindow if dedupeWindow <= 0). Every replica of
// a cluster must use the same window, or their answers to a late retry could
// differ. A nil logger discards.
func NewFSM(dedupeWindow int, logger *slog.Logger) *FSM {
	if dedupeWindow <= 0 {
		dedupeWindow = DefaultDedupeWindow
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &FSM{log: logger, st: newState(), dd: newDedupe(dedupeWindow)}
}

// state is everything Apply changes. Only the FSM goroutine writes it.
type state struct {
	nextTask uint64 // next task ID to hand out; MaxTaskID+1 when spent
	tasks    map[dag.TaskID]*taskSeqs
	jobs     map[dag.TaskID]*Job
	raylets  map[string]Raylet
	puts     map[dag.TaskID]*PutTask
	secret   []byte // the cluster secret (owners.go); nil until set
}

// taskSeqs holds a task's stage sequence and, per stage, its subtask index
// sequence: next[s-1] is the next index of stage s, and len(next) is the last
// stage handed out. A task has an entry from its allocation until DeleteJob.
type taskSeqs struct {
	next []uint64
}

func newState() state {
	return state{
		nextTask: 1,
		tasks:    make(map[dag.TaskID]*taskSeqs),
		jobs:     make(map[dag.TaskID]*Job),
		raylets:  make(map[string]Raylet),
		puts:     make(map[dag.TaskID]*PutTask),
	}
}

// Apply implements raft.FSM. It returns a Result for a command entry and nil
// for any other entry type.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applyLocked(l.Index, l.Data)
}

// ApplyBatch implements raft.BatchingFSM: one lock for the whole batch.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i] = f.applyLocked(l.Index, l.Data)
		}
	}
	return out
}

func (f *FSM) applyLocked(index uint64, data []byte) (res Result) {
	defer func() {
		// A bug here would crash every replica on the same entry, and again
		// on every restart; answer with an internal error instead.
		if p := recover(); p != nil {
			f.log.Error("raftmeta: apply panicked; this is a bug", "index", index, "panic", p)
			res = Result{ErrKind: dag.KindInternal, ErrMsg: fmt.Sprintf("raftmeta: apply of log entry %d failed: %v", index, p)}
		}
	}()
	typ, id, raw, err := decodeEnvelope(data)
	if err != nil {
		f.log.Warn("raftmeta: refused malformed log entry", "index", index, "err", err)
		return errResult(err)
	}
	if prev, ok := f.dd.lookup(id); ok {
		if prev.Type != typ {
			return errResult(invalid("%s request %s: the request ID was already used for a %s request; pick a fresh ID with NewRequestID", typ, id, prev.Type))
		}
		r := prev.Result
		r.Deduped = true
		return r
	}
	body, err := decodeBody(typ, raw)
	if err == nil {
		err = body.validate()
	}
	if err == nil {
		res, err = f.st.apply(body)
	}
	if err != nil {
		f.log.Debug("raftmeta: refused command", "index", index, "type", typ, "request", id, "err", err)
		res = errResult(err)
	}
	f.dd.remember(id, typ, res)
	return res
}

func notFound(format string, args ...any) error { return dag.Errorf(dag.KindNotFound, format, args...) }
func exhausted(format string, args ...any) error {
	return dag.Errorf(dag.KindResourceExhausted, format, args...)
}

// apply changes s by one valid-shaped command. Every check happens before the
// first change, so an error leaves s as it was.
func (s *state) apply(b Body) (Result, error) {
	if res, err, ok := s.applyOwners(b); ok {
		return res, err
	}
	switch c := b.(type) {
	case AllocTask:
		t, err := s.allocTask()
		return Result{Task: t}, err
	case AllocStage:
		seq, err := s.task(c.Task, "alloc stage")
		if err != nil {
			return Result{}, err
		}
		st, err := seq.allocStage(c.Task)
		return Result{Task: c.Task, Stage: st}, err
	case AllocSubtasks:
		seq, err := s.task(c.Task, "alloc subtasks")
		if err != nil {
			return Result{}, err
		}
		base, err := seq.allocIndexes(c.Task, c.Stage, c.N)
		if err != nil {
			return Result{}, err
		}
		return Result{Task: c.Task, Stage: c.Stage, Base: base, Count: c.N}, nil
	case SubmitJob:
		t, err := s.allocTask()
		if err != nil {
			return Result{}, err
		}
		j := &Job{Task: t, Graph: c.Graph, Options: c.Options, Status: JobSubmitted, Submitted: normTime(c.Time), Owner: c.Owner}
		if c.Leader != "" {
			j.Lowering = []string{c.Leader}
		}
		s.jobs[t] = j
		return Result{Task: t}, nil
	case BeginStage:
		return s.beginStage(c)
	case SetJobStatus:
		return s.setJobStatus(c)
	case DeleteJob:
		j, hasJob := s.jobs[c.Task]
		if _, hasSeq := s.tasks[c.Task]; !hasJob && !hasSeq {
			return Result{}, notFound("delete job: task %d is unknown or already deleted", c.Task)
		}
		if hasJob && !j.Status.Terminal() {
			return Result{}, invalid("delete job %d: the job is %v; cancel it and wait for it to end before deleting", c.Task, j.Status)
		}
		delete(s.jobs, c.Task)
		delete(s.tasks, c.Task)
		return Result{Task: c.Task}, nil
	case ReleaseJob:
		j, ok := s.jobs[c.Task]
		if !ok {
			return Result{}, notFound("release job: task %d has no job record", c.Task)
		}
		if !j.Status.Terminal() {
			return Result{}, invalid("release job %d: the job is %v; results are released after it ends", c.Task, j.Status)
		}
		// The results are gone: keep the record, not their IDs (ten
		// million subtasks' results are 120 MB on every head).
		j.Released, j.Results, j.ResultRuns = true, nil, nil
		return Result{Task: c.Task}, nil
	case ReleaseOnEnd:
		// Whatever the job's state: a request that follows the job's end
		// in the log still says its results go, and the leader that
		// proposed it releases them once it sees the end.
		j, ok := s.jobs[c.Task]
		if !ok {
			return Result{}, notFound("release job on its end: task %d has no job record", c.Task)
		}
		j.ReleaseOnEnd = true
		return Result{Task: c.Task}, nil
	case RegisterRaylet:
		r := c.Raylet
		r.Registered = normTime(r.Registered)
		s.raylets[r.ID] = r
		return Result{}, nil
	case DeregisterRaylet:
		if _, ok := s.raylets[c.ID]; !ok {
			return Result{}, notFound("deregister raylet: raylet %q is not registered", c.ID)
		}
		delete(s.raylets, c.ID)
		return Result{}, nil
	default:
		return Result{}, invalid("apply: unknown command body %T", b)
	}
}

func (s *state) allocTask() (dag.TaskID, error) {
	if s.nextTask > dag.MaxTaskID {
		return 0, exhausted("alloc task: all %d task IDs have been handed out; this cluster cannot take new jobs", uint64(dag.MaxTaskID))
	}
	t := dag.TaskID(s.nextTask)
	s.nextTask++
	s.tasks[t] = &taskSeqs{}
	return t, nil
}

func (s *state) task(t dag.TaskID, what string) (*taskSeqs, error) {
	seq, ok := s.tasks[t]
	if !ok {
		if uint64(t) >= s.nextTask {
			return nil, notFound("%s: task %d was never allocated; pass an ID AllocTask or SubmitJob returned", what, t)
		}
		return nil, notFound("%s: task %d was deleted", what, t)
	}
	return seq, nil
}

func (q *taskSeqs) allocStage(t dag.TaskID) (dag.StageID, error) {
	if len(q.next) >= dag.MaxStageID {
		return 0, exhausted("alloc stage: task %d already has all %d stages; split the job", t, dag.MaxStageID)
	}
	q.next = append(q.next, 1)
	return dag.StageID(len(q.next)), nil
}

// room checks that n indexes fit in stage st and returns the first.
func (q *taskSeqs) room(t dag.TaskID, st dag.StageID, n uint64) (uint64, error) {
	if st == 0 || int(st) > len(q.next) {
		return 0, notFound("alloc subtasks: stage %d of task %d was never allocated (last stage is %d)", st, t, len(q.next))
	}
	next := q.next[st-1]
	if left := dag.MaxSubtaskIndex + 1 - next; n > left {
		return 0, exhausted("alloc subtasks: task %d stage %d has %d subtask indexes left, %d requested; begin a new stage", t, st, left, n)
	}
	return next, nil
}

func (q *taskSeqs) allocIndexes(t dag.TaskID, st dag.StageID, n uint64) (uint64, error) {
	base, err := q.room(t, st, n)
	if err != nil {
		return 0, err
	}
	q.next[st-1] = base + n
	return base, nil
}

func (s *state) beginStage(c BeginStage) (Result, error) {
	j, ok := s.jobs[c.Task]
	if !ok {
		if _, err := s.task(c.Task, "begin stage"); err != nil {
			return Result{}, err
		}
		return Result{}, notFound("begin stage: task %d has no job record; use AllocStage for tasks without a job", c.Task)
	}
	if j.Status.Terminal() {
		k := dag.KindInvalidArgument
		if j.Status == JobCancelled {
			k = dag.KindCancelled
		}
		return Result{}, dag.Errorf(k, "begin stage: job %d is %v and takes no new stages", c.Task, j.Status)
	}
	q := s.tasks[c.Task] // a job always has its sequences (see DeleteJob)
	if len(q.next) >= dag.MaxStageID {
		return Result{}, exhausted("begin stage: job %d already has all %d stages", c.Task, dag.MaxStageID)
	}
	// n <= MaxSubtaskIndex was validated, so a fresh stage always has room.
	id, _ := q.allocStage(c.Task)
	q.next[id-1] = 1 + c.N
	st := Stage{ID: id, Base: 1, Count: c.N, Metas: c.Metas}
	j.Stages = append(j.Stages, st)
	j.Lowering = nil // this lowering finished
	return Result{Task: c.Task, Stage: id, Base: st.Base, Count: st.Count}, nil
}

func (s *state) setJobStatus(c SetJobStatus) (Result, error) {
	j, ok := s.jobs[c.Task]
	if !ok {
		return Result{}, notFound("set job status: job %d is unknown or deleted", c.Task)
	}
	switch {
	case j.Status.Terminal():
		return Result{}, invalid("set job %d to %v: the job already ended %v; a terminal status never changes", c.Task, c.Status, j.Status)
	case rank(c.Status) < rank(j.Status):
		return Result{}, invalid("set job %d to %v: the job is already %v; statuses only move forward", c.Task, c.Status, j.Status)
	}
	j.Status = c.Status
	j.Error = c.Error
	j.Cause = c.Cause
	j.Results, j.ResultRuns = c.Results, c.ResultRuns
	if c.Status.Terminal() {
		j.Finished = normTime(c.Time)
	}
	return Result{Task: c.Task}, nil
}

// Job returns a copy of task's job record (its slices are shared: read only).
func (f *FSM) Job(task dag.TaskID) (Job, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j, ok := f.st.jobs[task]
	if !ok {
		return Job{}, false
	}
	return *j, true
}

// Jobs returns every job record, by task ID (slices shared: read only).
func (f *FSM) Jobs() []Job {
	f.mu.RLock()
	out := make([]Job, 0, len(f.st.jobs))
	for _, j := range f.st.jobs {
		out = append(out, *j)
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.Task, b.Task) })
	return out
}

// Raylets returns every registered raylet, by ID.
func (f *FSM) Raylets() []Raylet {
	f.mu.RLock()
	out := make([]Raylet, 0, len(f.st.raylets))
	for _, r := range f.st.raylets {
		out = append(out, r)
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b Raylet) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// NextTask returns the task ID the next allocation will hand out
// (dag.MaxTaskID+1 once the sequence is spent).
func (f *FSM) NextTask() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.nextTask
}

// dedupe remembers the results of the last window request IDs, oldest first
// out.
type dedupe struct {
	window int
	ring   []RequestID // FIFO; grows to window, then wraps at head
	head   int         // oldest entry once the ring is full
	seen   map[RequestID]dedupeEntry
}

type dedupeEntry struct {
	Type   CommandType `cbor:"1,keyasint"`
	Result Result      `cbor:"2,keyasint"`
}

func newDedupe(window int) dedupe {
	return dedupe{window: window, seen: make(map[RequestID]dedupeEntry)}
}

func (d *dedupe) lookup(id RequestID) (dedupeEntry, bool) {
	e, ok := d.seen[id]
	return e, ok
}

func (d *dedupe) remember(id RequestID, typ CommandType, r Result) {
	if len(d.ring) < d.window {
		d.ring = append(d.ring, id)
	} else {
		delete(d.seen, d.ring[d.head])
		d.ring[d.head] = id
		d.head = (d.head + 1) % d.window
	}
	d.seen[id] = dedupeEntry{Type: typ, Result: r}
}

// each calls fn for every remembered ID, oldest first.
func (d *dedupe) each(fn func(RequestID, dedupeEntry)) {
	for i := range d.ring {
		id := d.ring[(d.head+i)%len(d.ring)]
		fn(id, d.seen[id])
	}
}

var _ raft.BatchingFSM = (*FSM)(nil)
