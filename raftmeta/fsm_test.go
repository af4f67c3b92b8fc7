package raftmeta

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// harness feeds commands to an FSM as raft would, with increasing indexes.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newHarness(t testing.TB, window int) *harness {
	return &harness{t: t, f: NewFSM(window, nil)}
}

func (h *harness) raw(data []byte) Result {
	h.t.Helper()
	h.index++
	out := h.f.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: data})
	r, ok := out.(Result)
	if !ok {
		h.t.Fatalf("Apply returned %T, want Result", out)
	}
	return r
}

func (h *harness) apply(req RequestID, b Body) Result {
	h.t.Helper()
	data, err := EncodeCommand(Command{RequestID: req, Body: b})
	if err != nil {
		h.t.Fatalf("encode %T: %v", b, err)
	}
	return h.raw(data)
}

// do applies b under a fresh request ID and fails the test on an error.
func (h *harness) do(b Body) Result {
	h.t.Helper()
	r := h.apply(NewRequestID(), b)
	if err := r.Err(); err != nil {
		h.t.Fatalf("%T %+v: %v", b, b, err)
	}
	return r
}

// fail applies b under a fresh request ID and wants an error of kind k.
func (h *harness) fail(b Body, k dag.Kind) Result {
	h.t.Helper()
	r := h.apply(NewRequestID(), b)
	if err := r.Err(); err == nil || !errors.Is(err, k) {
		h.t.Fatalf("%T %+v: got err %v (result %+v), want kind %v", b, b, err, r, k)
	}
	return r
}

type memSink struct {
	bytes.Buffer
	cancelled, closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func persist(t testing.TB, snap raft.FSMSnapshot) []byte {
	t.Helper()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("persist left sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	snap.Release()
	return sink.Bytes()
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return persist(t, snap)
}

// stateBytes is the snapshot without the dedupe table: what "the state is
// unchanged" means for a refused command (whose answer is still remembered).
func stateBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snap.(*fsmSnapshot).data.Dedupe = nil
	return persist(t, snap)
}

func restore(t testing.TB, f *FSM, b []byte) error {
	t.Helper()
	return f.Restore(io.NopCloser(bytes.NewReader(b)))
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestFSMSequences(t *testing.T) {
	h := newHarness(t, 0)
	for want := dag.TaskID(1); want <= 3; want++ {
		if got := h.do(AllocTask{}).Task; got != want {
			t.Fatalf("AllocTask = %d, want %d", got, want)
		}
	}
	stages := []struct {
		task dag.TaskID
		want dag.StageID
	}{{1, 1}, {1, 2}, {2, 1}, {1, 3}}
	for _, s := range stages {
		if got := h.do(AllocStage{Task: s.task}).Stage; got != s.want {
			t.Fatalf("AllocStage(task %d) = %d, want %d", s.task, got, s.want)
		}
	}
	ranges := []struct {
		task    dag.TaskID
		stage   dag.StageID
		n, base uint64
	}{
		{1, 1, 10, 1}, {1, 1, 5, 11}, {1, 2, 3, 1}, {2, 1, 1, 1}, {1, 1, 1, 16},
	}
	for _, r := range ranges {
		got := h.do(AllocSubtasks{Task: r.task, Stage: r.stage, N: r.n})
		if got.Base != r.base || got.Count != r.n || got.Task != r.task || got.Stage != r.stage {
			t.Fatalf("AllocSubtasks(%d,%d,%d) = %+v, want base %d", r.task, r.stage, r.n, got, r.base)
		}
	}

	job := h.do(SubmitJob{Graph: []byte{0xa0}, Options: []byte{0xf6}, Time: t0}).Task
	if job != 4 {
		t.Fatalf("SubmitJob task = %d, want 4 (after three AllocTask)", job)
	}
	s1 := h.do(BeginStage{Task: job, N: 100})
	if s1.Stage != 1 || s1.Base != 1 || s1.Count != 100 {
		t.Fatalf("BeginStage = %+v, want stage 1 [1,101)", s1)
	}
	if got := h.do(AllocSubtasks{Task: job, Stage: 1, N: 5}).Base; got != 101 {
		t.Fatalf("AllocSubtasks after BeginStage(100) base = %d, want 101", got)
	}
	s2 := h.do(BeginStage{Task: job, N: 1})
	if s2.Stage != 2 || s2.Base != 1 || s2.Count != 1 {
		t.Fatalf("second BeginStage = %+v, want stage 2 [1,2)", s2)
	}
	// A data-dependent stage may be empty; it still takes a stage ID and
	// records the metas lowering was fed, for replay after a failover.
	if e := h.do(BeginStage{Task: job, N: 0, Metas: []byte{0x80}}); e.Stage != 3 || e.Count != 0 {
		t.Fatalf("empty BeginStage = %+v", e)
	}
	if rec, _ := h.f.Job(job); len(rec.Stages) != 3 || len(rec.Stages[2].Metas) != 1 {
		t.Fatalf("stages recorded %+v", rec.Stages)
	}
	j, ok := h.f.Job(job)
	if !ok {
		t.Fatal("job 4 not found after SubmitJob")
	}
	want := Job{Task: 4, Graph: []byte{0xa0}, Options: []byte{0xf6}, Status: JobSubmitted,
		Stages: []Stage{{ID: 1, Base: 1, Count: 100}, {ID: 2, Base: 1, Count: 1}, {ID: 3, Base: 1, Metas: []byte{0x80}}}}
	if !j.Submitted.Equal(t0) {
		t.Fatalf("Submitted = %v, want %v", j.Submitted, t0)
	}
	j.Submitted = time.Time{}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("job = %+v\nwant  %+v", j, want)
	}
	if h.f.NextTask() != 5 {
		t.Fatalf("NextTask = %d, want 5", h.f.NextTask())
	}

	// times are kept to the microsecond, in UTC, on every replica
	at := time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600))
	job = h.do(SubmitJob{Graph: []byte{1}, Time: at}).Task
	j, _ = h.f.Job(job)
	if want := at.Round(time.Microsecond); !j.Submitted.Equal(want) || j.Submitted.Location() != time.UTC {
		t.Fatalf("Submitted = %v, want %v in UTC", j.Submitted, want)
	}
}

func TestFSMRefusesInvalid(t *testing.T) {
	h := newHarness(t, 0)
	h.do(AllocTask{})                                     // task 1: no job
	running := h.do(SubmitJob{Graph: []byte{1}}).Task     // task 2
	h.do(SetJobStatus{Task: running, Status: JobRunning}) //
	h.do(AllocStage{Task: 1})                             // task 1 stage 1
	cases := []struct {
		name string
		body Body
		kind dag.Kind
	}{
		{"stage of never-allocated task", AllocStage{Task: 99}, dag.KindNotFound},
		{"stage of task 0", AllocStage{Task: 0}, dag.KindInvalidArgument},
		{"subtasks of unallocated stage", AllocSubtasks{Task: 1, Stage: 2, N: 1}, dag.KindNotFound},
		{"subtasks of stage 0", AllocSubtasks{Task: 1, Stage: 0, N: 1}, dag.KindInvalidArgument},
		{"subtasks of unknown task", AllocSubtasks{Task: 42, Stage: 1, N: 1}, dag.KindNotFound},
		{"zero subtasks", AllocSubtasks{Task: 1, Stage: 1, N: 0}, dag.KindInvalidArgument},
		{"more subtasks than a stage holds", AllocSubtasks{Task: 1, Stage: 1, N: dag.MaxSubtaskIndex + 1}, dag.KindInvalidArgument},
		{"empty graph", SubmitJob{}, dag.KindInvalidArgument},
		{"begin stage without job", BeginStage{Task: 1, N: 1}, dag.KindNotFound},
		{"begin stage of unknown task", BeginStage{Task: 77, N: 1}, dag.KindNotFound},
		{"status of unknown job", SetJobStatus{Task: 77, Status: JobRunning}, dag.KindNotFound},
		{"release of unknown job", ReleaseJob{Task: 77}, dag.KindNotFound},
		{"release of running job", ReleaseJob{Task: running}, dag.KindInvalidArgument},
		{"release on end of unknown job", ReleaseOnEnd{Task: 77}, dag.KindNotFound},
		{"release on end of task without job", ReleaseOnEnd{Task: 1}, dag.KindNotFound},
		{"release on end of task 0", ReleaseOnEnd{Task: 0}, dag.KindInvalidArgument},
		{"status of task without job", SetJobStatus{Task: 1, Status: JobRunning}, dag.KindNotFound},
		{"status back to submitted", SetJobStatus{Task: running, Status: JobSubmitted}, dag.KindInvalidArgument},
		{"status out of range", SetJobStatus{Task: running, Status: 9}, dag.KindInvalidArgument},
		{"status zero", SetJobStatus{Task: running, Status: 0}, dag.KindInvalidArgument},
		{"delete running job", DeleteJob{Task: running}, dag.KindInvalidArgument},
		{"delete unknown", DeleteJob{Task: 55}, dag.KindNotFound},
		{"raylet without ID", RegisterRaylet{Raylet: Raylet{Addr: "a:1"}}, dag.KindInvalidArgument},
		{"raylet without address", RegisterRaylet{Raylet: Raylet{ID: "r"}}, dag.KindInvalidArgument},
		{"raylet negative slots", RegisterRaylet{Raylet: Raylet{ID: "r", Addr: "a:1", Slots: -1}}, dag.KindInvalidArgument},
		{"raylet negative capacity", RegisterRaylet{Raylet: Raylet{ID: "r", Addr: "a:1", StoreCapacity: -1}}, dag.KindInvalidArgument},
		{"deregister unknown raylet", DeregisterRaylet{ID: "nobody"}, dag.KindNotFound},
		{"deregister empty ID", DeregisterRaylet{}, dag.KindInvalidArgument},
		{"submit time before 1970", SubmitJob{Graph: []byte{1}, Time: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}, dag.KindInvalidArgument},
		{"finish time after 2100", SetJobStatus{Task: running, Status: JobFailed, Time: maxTime}, dag.KindInvalidArgument},
		{"raylet time after 2100", RegisterRaylet{Raylet: Raylet{ID: "r", Addr: "a:1", Registered: maxTime.Add(time.Hour)}}, dag.KindInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			before := stateBytes(t, h.f)
			r := h.fail(c.body, c.kind)
			if r.ErrMsg == "" {
				t.Fatal("error result without a message")
			}
			if after := stateBytes(t, h.f); !bytes.Equal(before, after) {
				t.Fatal("a refused command changed the state")
			}
		})
	}
}

func TestFSMOverflow(t *testing.T) {
	t.Run("task", func(t *testing.T) {
		h := newHarness(t, 0)
		h.f.st.nextTask = dag.MaxTaskID
		if got := h.do(AllocTask{}).Task; got != dag.MaxTaskID {
			t.Fatalf("last AllocTask = %d, want %d", got, uint64(dag.MaxTaskID))
		}
		before := stateBytes(t, h.f)
		h.fail(AllocTask{}, dag.KindResourceExhausted)
		h.fail(SubmitJob{Graph: []byte{1}}, dag.KindResourceExhausted)
		if !bytes.Equal(before, stateBytes(t, h.f)) {
			t.Fatal("refused allocation changed the state")
		}
		if h.f.NextTask() != dag.MaxTaskID+1 {
			t.Fatalf("NextTask = %d, want %d (spent, not wrapped)", h.f.NextTask(), uint64(dag.MaxTaskID+1))
		}
	})
	t.Run("stage", func(t *testing.T) {
		h := newHarness(t, 0)
		task := h.do(SubmitJob{Graph: []byte{1}}).Task
		seq := h.f.st.tasks[task]
		seq.next = make([]uint64, dag.MaxStageID-1)
		for i := range seq.next {
			seq.next[i] = 1
		}
		if got := h.do(AllocStage{Task: task}).Stage; got != dag.MaxStageID {
			t.Fatalf("stage 65535: got %d", got)
		}
		// the 65,536th stage, by either command
		before := stateBytes(t, h.f)
		h.fail(AllocStage{Task: task}, dag.KindResourceExhausted)
		h.fail(BeginStage{Task: task, N: 1}, dag.KindResourceExhausted)
		if !bytes.Equal(before, stateBytes(t, h.f)) {
			t.Fatal("refused stage changed the state")
		}
		// the last stage still hands out indexes
		if got := h.do(AllocSubtasks{Task: task, Stage: dag.MaxStageID, N: 2}).Base; got != 1 {
			t.Fatalf("indexes of stage 65535 start at %d", got)
		}
	})
	t.Run("index", func(t *testing.T) {
		h := newHarness(t, 0)
		task := h.do(AllocTask{}).Task
		st := h.do(AllocStage{Task: task}).Stage
		h.f.st.tasks[task].next[st-1] = dag.MaxSubtaskIndex - 9
		r := h.do(AllocSubtasks{Task: task, Stage: st, N: 10})
		if r.Base != dag.MaxSubtaskIndex-9 || r.Base+r.Count-1 != dag.MaxSubtaskIndex {
			t.Fatalf("last range = [%d,+%d), want to end at %d", r.Base, r.Count, uint64(dag.MaxSubtaskIndex))
		}
		if _, err := dag.NewSubtaskID(uint64(task), uint64(st), r.Base+r.Count-1); err != nil {
			t.Fatalf("last index does not pack: %v", err)
		}
		before := stateBytes(t, h.f)
		h.fail(AllocSubtasks{Task: task, Stage: st, N: 1}, dag.KindResourceExhausted)
		if !bytes.Equal(before, stateBytes(t, h.f)) {
			t.Fatal("refused range changed the state")
		}
		// a partly used stage refuses a range that would cross the limit
		h.f.st.tasks[task].next[st-1] = dag.MaxSubtaskIndex - 1
		h.fail(AllocSubtasks{Task: task, Stage: st, N: 3}, dag.KindResourceExhausted)
		if got := h.do(AllocSubtasks{Task: task, Stage: st, N: 2}).Base; got != dag.MaxSubtaskIndex-1 {
			t.Fatalf("base = %d", got)
		}
		// a whole stage's worth in one BeginStage is fine
		job := h.do(SubmitJob{Graph: []byte{1}}).Task
		r = h.do(BeginStage{Task: job, N: dag.MaxSubtaskIndex})
		if r.Base != 1 || r.Count != dag.MaxSubtaskIndex {
			t.Fatalf("BeginStage(max) = %+v", r)
		}
		h.fail(AllocSubtasks{Task: job, Stage: r.Stage, N: 1}, dag.KindResourceExhausted)
	})
}

func TestFSMMalformed(t *testing.T) {
	id := NewRequestID()
	good, _ := codec.Marshal(AllocStage{Task: 1})
	env := func(typ CommandType, req []byte, body []byte) []byte {
		b, err := codec.Marshal(envelope{Type: typ, RequestID: req, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wrongShape, _ := codec.Marshal(map[int]string{1: "not a task id"})
	valid, _ := EncodeCommand(Command{RequestID: id, Body: AllocStage{Task: 1}})
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not cbor", []byte{0xff, 0x00, 0x13}},
		{"truncated", valid[:len(valid)-1]},
		{"cbor but not a map", []byte{0x01}},
		{"unknown type", env(200, id[:], good)},
		{"type zero", env(0, id[:], good)},
		{"short request ID", env(TypeAllocStage, id[:8], good)},
		{"zero request ID", env(TypeAllocStage, make([]byte, 16), good)},
		{"no body", env(TypeAllocStage, id[:], nil)},
		{"body of wrong shape", env(TypeAllocStage, id[:], wrongShape)},
		{"body not cbor", append(append([]byte{0xa3, 0x01, byte(TypeAllocStage), 0x02, 0x50}, id[:]...), 0x03, 0xff)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 0)
			h.do(AllocTask{})
			before := stateBytes(t, h.f)
			r := h.raw(c.data)
			if err := r.Err(); !errors.Is(err, dag.ErrInvalidArgument) {
				t.Fatalf("got %v, want an invalid-argument error", err)
			}
			if !bytes.Equal(before, stateBytes(t, h.f)) {
				t.Fatal("malformed entry changed the state")
			}
			if _, err := DecodeCommand(c.data); !errors.Is(err, dag.ErrInvalidArgument) {
				t.Fatalf("DecodeCommand: got %v, want invalid argument", err)
			}
		})
	}
	t.Run("non-command entries", func(t *testing.T) {
		f := NewFSM(0, nil)
		for _, typ := range []raft.LogType{raft.LogConfiguration, raft.LogNoop, raft.LogBarrier} {
			if out := f.Apply(&raft.Log{Index: 1, Type: typ, Data: valid}); out != nil {
				t.Fatalf("log type %v: got %v, want nil", typ, out)
			}
		}
		if f.NextTask() != 1 {
			t.Fatal("non-command entry changed the state")
		}
	})
}

func TestFSMDedupe(t *testing.T) {
	h := newHarness(t, 3)
	a := NewRequestID()
	first := h.apply(a, AllocTask{})
	again := h.apply(a, AllocTask{})
	if first.Task != 1 || again.Task != 1 || first.Deduped || !again.Deduped {
		t.Fatalf("first %+v, again %+v: want task 1 twice, the second deduped", first, again)
	}
	if h.f.NextTask() != 2 {
		t.Fatalf("NextTask = %d after a repeated request, want 2 (applied once)", h.f.NextTask())
	}
	// the remembered answer also covers errors
	b := NewRequestID()
	e1 := h.apply(b, AllocStage{Task: 50})
	h.do(AllocTask{}) // task 2
	e2 := h.apply(b, AllocStage{Task: 50})
	if !errors.Is(e1.Err(), dag.ErrNotFound) || !e2.Deduped || e2.ErrMsg != e1.ErrMsg {
		t.Fatalf("error results %+v / %+v: want the same remembered NotFound", e1, e2)
	}
	// an ID reused for another command type is refused, not mis-answered
	if r := h.apply(a, AllocStage{Task: 1}); !errors.Is(r.Err(), dag.ErrInvalidArgument) {
		t.Fatalf("reused ID for another type: %+v, want invalid argument", r)
	}
	if got := h.apply(a, AllocTask{}); !got.Deduped || got.Task != 1 {
		t.Fatalf("mismatched reuse disturbed the table: %+v", got)
	}

	// window 3: a, b, (AllocTask task 2); one more pushes a out
	c := NewRequestID()
	if got := h.apply(c, AllocTask{}).Task; got != 3 {
		t.Fatalf("task = %d, want 3", got)
	}
	if got := h.apply(a, AllocTask{}); got.Deduped || got.Task != 4 {
		t.Fatalf("request older than the window: %+v, want a fresh task 4", got)
	}
	if got := h.apply(c, AllocTask{}); !got.Deduped || got.Task != 3 {
		t.Fatalf("recent request: %+v, want deduped task 3", got)
	}

	// the table travels in snapshots, oldest first
	g := NewFSM(3, nil)
	if err := restore(t, g, snapshotBytes(t, h.f)); err != nil {
		t.Fatal(err)
	}
	h2 := &harness{t: t, f: g, index: h.index}
	if got := h2.apply(c, AllocTask{}); !got.Deduped || got.Task != 3 {
		t.Fatalf("after restore: %+v, want deduped task 3", got)
	}
	if got := h2.apply(b, AllocTask{}); got.Deduped {
		t.Fatalf("after restore: b should have been evicted, got %+v", got)
	}
	// a smaller window on restore keeps the newest entries
	small := NewFSM(1, nil)
	if err := restore(t, small, snapshotBytes(t, h.f)); err != nil {
		t.Fatal(err)
	}
	if n := len(small.dd.ring); n != 1 {
		t.Fatalf("restored table holds %d, want 1", n)
	}
	if _, ok := small.dd.lookup(a); !ok { // a was the last one remembered
		t.Fatal("restore into a smaller window dropped the newest entry")
	}
}

func TestJobStatusTransitions(t *testing.T) {
	all := []JobStatus{JobSubmitted, JobRunning, JobSucceeded, JobFailed, JobCancelled}
	allowed := map[[2]JobStatus]bool{
		{JobSubmitted, JobRunning}: true, {JobSubmitted, JobSucceeded}: true,
		{JobSubmitted, JobFailed}: true, {JobSubmitted, JobCancelled}: true,
		{JobRunning, JobRunning}: true, {JobRunning, JobSucceeded}: true,
		{JobRunning, JobFailed}: true, {JobRunning, JobCancelled}: true,
	}
	results := []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(1, 1, 1), 0)}
	for _, from := range all {
		for _, to := range all[1:] {
			t.Run(from.String()+"→"+to.String(), func(t *testing.T) {
				h := newHarness(t, 0)
				task := h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
				if from != JobSubmitted {
					h.do(SetJobStatus{Task: task, Status: from, Time: t0})
				}
				end := t0.Add(time.Minute)
				r := h.apply(NewRequestID(), SetJobStatus{Task: task, Status: to, Error: "boom", Results: results, Time: end})
				j, _ := h.f.Job(task)
				if !allowed[[2]JobStatus{from, to}] {
					if !errors.Is(r.Err(), dag.ErrInvalidArgument) {
						t.Fatalf("got %v, want the transition refused", r.Err())
					}
					if j.Status != from {
						t.Fatalf("status = %v after a refused transition, want %v", j.Status, from)
					}
					return
				}
				if err := r.Err(); err != nil {
					t.Fatal(err)
				}
				if j.Status != to || j.Error != "boom" || !reflect.DeepEqual(j.Results, results) {
					t.Fatalf("job = %+v", j)
				}
				if to.Terminal() != j.Finished.Equal(end) {
					t.Fatalf("Finished = %v for %v", j.Finished, to)
				}
			})
		}
	}
}

func TestJobLifecycle(t *testing.T) {
	h := newHarness(t, 0)
	task := h.do(SubmitJob{Graph: []byte{1}}).Task
	h.do(BeginStage{Task: task, N: 4})
	h.do(SetJobStatus{Task: task, Status: JobCancelled, Error: "user cancelled"})
	if r := h.fail(BeginStage{Task: task, N: 1}, dag.KindCancelled); r.ErrMsg == "" {
		t.Fatal("no message")
	}
	h.do(DeleteJob{Task: task})
	if _, ok := h.f.Job(task); ok {
		t.Fatal("deleted job still readable")
	}
	h.fail(AllocStage{Task: task}, dag.KindNotFound)
	h.fail(DeleteJob{Task: task}, dag.KindNotFound)
	if got := h.do(AllocTask{}).Task; got == task {
		t.Fatal("a deleted task's ID was handed out again")
	}
	// a task allocated without a job can also be deleted
	bare := h.do(AllocTask{}).Task
	h.do(DeleteJob{Task: bare})
	h.fail(AllocStage{Task: bare}, dag.KindNotFound)

	// raylets
	r1 := Raylet{ID: "r1", Addr: "127.0.0.1:1", Slots: 2, StoreCapacity: 1 << 30, Registered: t0}
	h.do(RegisterRaylet{Raylet: r1})
	r1.Addr = "127.0.0.1:2"
	h.do(RegisterRaylet{Raylet: r1}) // a restarted raylet re-registers
	h.do(RegisterRaylet{Raylet: Raylet{ID: "r0", Addr: "x:1"}})
	rs := h.f.Raylets()
	if len(rs) != 2 || rs[0].ID != "r0" || rs[1].Addr != "127.0.0.1:2" || !rs[1].Registered.Equal(t0) {
		t.Fatalf("raylets = %+v", rs)
	}
	h.do(DeregisterRaylet{ID: "r0"})
	if rs := h.f.Raylets(); len(rs) != 1 || rs[0].ID != "r1" {
		t.Fatalf("raylets after deregister = %+v", rs)
	}
}

// populate gives f one of everything.
func populate(h *harness) {
	h.do(AllocTask{})
	h.do(AllocStage{Task: 1})
	h.do(AllocSubtasks{Task: 1, Stage: 1, N: 7})
	for i := range 4 {
		task := h.do(SubmitJob{Graph: []byte{0xa1, 1, byte(i)}, Options: []byte{0xa0}, Time: t0.Add(time.Duration(i) * time.Second)}).Task
		h.do(BeginStage{Task: task, N: uint64(10 + i)})
		switch i {
		case 1:
			h.do(SetJobStatus{Task: task, Status: JobRunning})
		case 2:
			h.do(SetJobStatus{Task: task, Status: JobSucceeded, Time: t0.Add(time.Hour),
				Results: []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(task, 1, 3), 1)}})
		case 3:
			h.do(SetJobStatus{Task: task, Status: JobFailed, Error: "kernel exploded", Time: t0.Add(time.Hour + 123456*time.Microsecond)})
		}
	}
	h.do(RegisterRaylet{Raylet: Raylet{ID: "b", Addr: "10.0.0.2:7000", Slots: 4, StoreCapacity: 2 << 30, Registered: t0}})
	h.do(RegisterRaylet{Raylet: Raylet{ID: "a", Addr: "10.0.0.1:7000", Slots: 2, StoreCapacity: 1 << 30, Registered: t0}})
	h.fail(AllocStage{Task: 999}, dag.KindNotFound) // a remembered error
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	h := newHarness(t, 0)
	populate(h)
	b1 := snapshotBytes(t, h.f)
	g := NewFSM(0, nil)
	if err := restore(t, g, b1); err != nil {
		t.Fatal(err)
	}
	if b2 := snapshotBytes(t, g); !bytes.Equal(b1, b2) {
		t.Fatal("snapshot → restore → snapshot changed the bytes")
	}
	if !reflect.DeepEqual(h.f.Jobs(), g.Jobs()) {
		t.Fatalf("jobs differ after restore:\n%+v\n%+v", h.f.Jobs(), g.Jobs())
	}
	if !reflect.DeepEqual(h.f.Raylets(), g.Raylets()) || h.f.NextTask() != g.NextTask() {
		t.Fatal("raylets or task sequence differ after restore")
	}
	// both go on identically
	h2 := &harness{t: t, f: g, index: h.index}
	for _, b := range []Body{AllocTask{}, AllocStage{Task: 1}, AllocSubtasks{Task: 1, Stage: 1, N: 3}, BeginStage{Task: 2, N: 5}} {
		req := NewRequestID()
		if r1, r2 := h.apply(req, b), h2.apply(req, b); r1 != r2 {
			t.Fatalf("%T: original %+v, restored %+v", b, r1, r2)
		}
	}
	// Restore replaces: nothing of the old state survives
	if err := restore(t, g, snapshotBytes(t, NewFSM(0, nil))); err != nil {
		t.Fatal(err)
	}
	if len(g.Jobs()) != 0 || len(g.Raylets()) != 0 || g.NextTask() != 1 || len(g.dd.ring) != 0 {
		t.Fatal("restoring an empty snapshot left old state behind")
	}
}

// A snapshot is the state at Snapshot(), whatever Apply does while Persist
// runs.
func TestSnapshotIsolation(t *testing.T) {
	h := newHarness(t, 0)
	populate(h)
	early, _ := h.f.Snapshot()
	want := snapshotBytes(t, h.f)
	done := make(chan []byte)
	go func() {
		var sink memSink
		if err := early.Persist(&sink); err != nil {
			done <- nil
			return
		}
		done <- sink.Bytes()
	}()
	for range 50 {
		h.do(AllocSubtasks{Task: 1, Stage: 1, N: 1}) // changes an index in place
		h.do(BeginStage{Task: 2, N: 1})              // appends to a job's stages
		h.do(AllocTask{})
	}
	h.do(SetJobStatus{Task: 3, Status: JobCancelled})
	h.do(RegisterRaylet{Raylet: Raylet{ID: "c", Addr: "x:1"}})
	got := <-done
	if !bytes.Equal(got, want) {
		t.Fatal("a snapshot taken earlier persisted later changes")
	}
}

func TestRestoreRejects(t *testing.T) {
	h := newHarness(t, 0)
	populate(h)
	var good snapshotData
	if err := codec.Unmarshal(snapshotBytes(t, h.f), &good); err != nil {
		t.Fatal(err)
	}
	mutate := func(fn func(d *snapshotData)) []byte {
		var d snapshotData
		b, _ := codec.Marshal(good)
		if err := codec.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		fn(&d)
		out, err := codec.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"garbage", []byte("not a snapshot")},
		{"empty", nil},
		{"future version", mutate(func(d *snapshotData) { d.Version = 2 })},
		{"next task zero", mutate(func(d *snapshotData) { d.NextTask = 0 })},
		{"next task past limit", mutate(func(d *snapshotData) { d.NextTask = dag.MaxTaskID + 2 })},
		{"task not yet allocated", mutate(func(d *snapshotData) { d.Tasks[0].Task = dag.TaskID(d.NextTask) })},
		{"task twice", mutate(func(d *snapshotData) { d.Tasks = append(d.Tasks, d.Tasks[0]) })},
		{"index past limit", mutate(func(d *snapshotData) { d.Tasks[0].Next[0] = dag.MaxSubtaskIndex + 2 })},
		{"index zero", mutate(func(d *snapshotData) { d.Tasks[0].Next[0] = 0 })},
		{"too many stages", mutate(func(d *snapshotData) { d.Tasks[0].Next = make([]uint64, dag.MaxStageID+1) })},
		{"job without task", mutate(func(d *snapshotData) { d.Tasks = d.Tasks[:1] })},
		{"job status zero", mutate(func(d *snapshotData) { d.Jobs[0].Status = 0 })},
		{"job stage never allocated", mutate(func(d *snapshotData) { d.Jobs[0].Stages[0].ID = 9 })},
		{"raylet twice", mutate(func(d *snapshotData) { d.Raylets[1] = d.Raylets[0] })},
		{"dedupe zero ID", mutate(func(d *snapshotData) { d.Dedupe[0].RequestID = RequestID{} })},
		{"dedupe ID twice", mutate(func(d *snapshotData) { d.Dedupe[1].RequestID = d.Dedupe[0].RequestID })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotBytes(t, h.f)
			if err := restore(t, h.f, c.data); !errors.Is(err, dag.ErrInvalidArgument) {
				t.Fatalf("got %v, want an invalid-argument error", err)
			}
			if !bytes.Equal(before, snapshotBytes(t, h.f)) {
				t.Fatal("a rejected restore changed the state")
			}
		})
	}
}

func TestApplyBatchMatchesApply(t *testing.T) {
	batched := NewFSM(0, nil)
	var logs []*raft.Log
	rec := &recorder{harness: newHarness(t, 0)}
	populateInto(rec)
	for i, d := range rec.data {
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: d})
	}
	logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogConfiguration, Data: []byte{1}})
	out := batched.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("ApplyBatch returned %d results for %d logs", len(out), len(logs))
	}
	for i, r := range rec.results {
		if out[i] != r {
			t.Fatalf("entry %d: batch %+v, one by one %+v", i+1, out[i], r)
		}
	}
	if out[len(out)-1] != nil {
		t.Fatalf("configuration entry answered %v", out[len(out)-1])
	}
	if !bytes.Equal(snapshotBytes(t, batched), snapshotBytes(t, rec.f)) {
		t.Fatal("ApplyBatch and Apply reached different states")
	}
}

// recorder applies commands one by one and keeps their bytes and results.
type recorder struct {
	*harness
	data    [][]byte
	results []any
}

func populateInto(r *recorder) {
	reqs := []Body{
		AllocTask{}, AllocStage{Task: 1}, AllocSubtasks{Task: 1, Stage: 1, N: 7},
		SubmitJob{Graph: []byte{1}, Time: t0}, BeginStage{Task: 2, N: 9},
		SetJobStatus{Task: 2, Status: JobRunning}, AllocStage{Task: 77},
		RegisterRaylet{Raylet: Raylet{ID: "a", Addr: "b:1"}},
	}
	dup := NewRequestID()
	for i, b := range reqs {
		req := NewRequestID()
		if i == 2 {
			req = dup
		}
		d, _ := EncodeCommand(Command{RequestID: req, Body: b})
		r.data = append(r.data, d)
		r.results = append(r.results, r.raw(d))
	}
	d, _ := EncodeCommand(Command{RequestID: dup, Body: AllocSubtasks{Task: 1, Stage: 1, N: 7}})
	r.data = append(r.data, d)
	r.results = append(r.results, r.raw(d))
}

func TestCommandRoundTrip(t *testing.T) {
	bodies := []Body{
		AllocTask{}, AllocStage{Task: 3}, AllocSubtasks{Task: 3, Stage: 2, N: 1 << 40},
		SubmitJob{Graph: []byte{0xa0}, Options: []byte{0xf6}, Time: t0},
		BeginStage{Task: 1, N: 5},
		SetJobStatus{Task: 1, Status: JobFailed, Error: "x", Results: []dag.ObjectID{{1}}, Time: t0},
		DeleteJob{Task: 9},
		RegisterRaylet{Raylet: Raylet{ID: "r", Addr: "h:1", Slots: 3, StoreCapacity: 5, Registered: t0}},
		DeregisterRaylet{ID: "r"},
	}
	for _, b := range bodies {
		t.Run(b.Type().String(), func(t *testing.T) {
			c := Command{RequestID: NewRequestID(), Body: b}
			data, err := EncodeCommand(c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeCommand(data)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := EncodeCommand(got)
			if got.RequestID != c.RequestID || got.Body.Type() != b.Type() || !bytes.Equal(again, data) {
				t.Fatalf("round trip: %+v → %+v", c, got)
			}
		})
	}
	if _, err := EncodeCommand(Command{RequestID: NewRequestID()}); err == nil {
		t.Fatal("encoding a command without a body succeeded")
	}
}

func TestStatusAndTypeNames(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{JobSubmitted.String(), "SUBMITTED"}, {JobRunning.String(), "RUNNING"},
		{JobSucceeded.String(), "SUCCEEDED"}, {JobFailed.String(), "FAILED"},
		{JobCancelled.String(), "CANCELLED"}, {JobStatus(0).String(), "UNKNOWN"},
		{JobStatus(6).String(), "JobState(6)"},
		{TypeBeginStage.String(), "BeginStage"}, {CommandType(0).String(), "CommandType(0)"},
		{TypeReleaseJob.String(), "ReleaseJob"}, {TypeSetSecret.String(), "SetSecret"},
		{TypeReleaseOnEnd.String(), "ReleaseOnEnd"}, {CommandType(18).String(), "CommandType(18)"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestReleaseOnEndRecorded(t *testing.T) {
	h := newHarness(t, 0)
	task := h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
	h.do(SetJobStatus{Task: task, Status: JobRunning, Time: t0})
	h.do(ReleaseOnEnd{Task: task})
	h.do(ReleaseOnEnd{Task: task}) // asking twice is fine
	if j, _ := h.f.Job(task); !j.ReleaseOnEnd || j.Released || j.Status != JobRunning {
		t.Fatalf("after ReleaseOnEnd: %+v; want running, to be released on its end", j)
	}
	// The request outlives a snapshot: a leader restored from one finds it.
	restored := NewFSM(0, nil)
	if err := restore(t, restored, snapshotBytes(t, h.f)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if j, _ := restored.Job(task); !j.ReleaseOnEnd {
		t.Fatalf("restored from a snapshot: %+v; want ReleaseOnEnd kept", j)
	}
	// A request that follows the job's end in the log is recorded too: the
	// leader that proposed it releases the job.
	h.do(SetJobStatus{Task: task, Status: JobSucceeded, Time: t0})
	h.do(ReleaseJob{Task: task})
	if j, _ := h.f.Job(task); !j.Released || !j.ReleaseOnEnd {
		t.Fatalf("after the end and ReleaseJob: %+v; want released", j)
	}
	ended := h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
	h.do(SetJobStatus{Task: ended, Status: JobFailed, Time: t0})
	h.do(ReleaseOnEnd{Task: ended})
	if j, _ := h.f.Job(ended); !j.ReleaseOnEnd {
		t.Fatalf("ReleaseOnEnd after the end: %+v; want it recorded", j)
	}
}

func TestReleaseJobRecorded(t *testing.T) {
	h := newHarness(t, 0)
	task := h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
	results := []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(task, 1, 1), 0)}
	h.do(SetJobStatus{Task: task, Status: JobSucceeded, Results: results, Time: t0})
	if j, _ := h.f.Job(task); j.Released || len(j.Results) != 1 {
		t.Fatalf("before ReleaseJob: %+v; want unreleased with its result", j)
	}
	h.do(ReleaseJob{Task: task})
	h.do(ReleaseJob{Task: task}) // releasing twice is fine
	// The record stays; the released results' IDs go (every head would
	// keep millions of them).
	if j, _ := h.f.Job(task); !j.Released || j.Status != JobSucceeded || j.Results != nil {
		t.Fatalf("after ReleaseJob: %+v; want released, succeeded, no result IDs", j)
	}
}
