package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
)

func sid(i uint64) dag.SubtaskID { return dag.PackSubtaskID(7, 1, i) }

func TestRecorderKeepsNewestPerJob(t *testing.T) {
	r := NewRecorder(Config{PerJob: 300})
	for i := range 1000 {
		r.Record(7, Event{Time: int64(i), Subtask: sid(uint64(i)), Kind: Queued})
	}
	s, ok := r.Snapshot(7, nil)
	if !ok {
		t.Fatal("job 7 unknown")
	}
	if len(s.Events) != 300 || s.Dropped != 700 {
		t.Fatalf("kept %d, dropped %d; want 300 and 700", len(s.Events), s.Dropped)
	}
	for i, e := range s.Events {
		if e.Time != int64(700+i) {
			t.Fatalf("event %d has time %d, want %d (oldest first)", i, e.Time, 700+i)
		}
	}
	if _, ok := r.Snapshot(8, nil); ok {
		t.Fatal("job 8 was never recorded but is known")
	}
}

func TestRecorderForgetsOldestJob(t *testing.T) {
	r := NewRecorder(Config{Jobs: 2})
	for task := dag.TaskID(1); task <= 3; task++ {
		r.RecordBatch(task, []Event{{Time: 1, Kind: Queued}, {Time: 2, Kind: Dispatched}})
	}
	if _, ok := r.Snapshot(1, nil); ok {
		t.Fatal("job 1, recorded first, is still kept beyond Jobs=2")
	}
	for _, task := range []dag.TaskID{2, 3} {
		if s, ok := r.Snapshot(task, nil); !ok || len(s.Events) != 2 {
			t.Fatalf("job %d: ok=%v, %d events; want 2", task, ok, len(s.Events))
		}
	}
	r.Forget(2)
	if _, ok := r.Snapshot(2, nil); ok {
		t.Fatal("job 2 is kept after Forget")
	}
	// The forgotten ring is reused, empty.
	r.Record(4, Event{Time: 9, Kind: Queued})
	if s, _ := r.Snapshot(4, nil); len(s.Events) != 1 || s.Events[0].Time != 9 || s.Dropped != 0 {
		t.Fatalf("job 4 after reuse: %+v", s)
	}
}

func TestRecordAllocatesNothingWhenFull(t *testing.T) {
	r := NewRecorder(Config{PerJob: 1024})
	e := Event{Subtask: sid(1), Kind: Finished, Raylet: "r1", Ops: "tensor.add"}
	for range 2048 {
		r.Record(7, e)
	}
	batch := make([]Event, 16)
	if n := testing.AllocsPerRun(1000, func() {
		r.Record(7, e)
		r.RecordBatch(7, batch)
	}); n != 0 {
		t.Fatalf("Record allocates %v times per call on a full ring; want 0", n)
	}
}

// cluster makes the events of a job on two raylets: r1 with 2 slots and
// r2 with 3, one subtask failing once and running again, one still
// running, one whose start was dropped, one cancelled while queued.
func cluster() []Event {
	var ev []Event
	ms := func(m int) int64 { return int64(m) * int64(time.Millisecond) }
	slots := []Lane{{"r1", 0}, {"r1", 1}, {"r2", 0}, {"r2", 1}, {"r2", 2}}
	for i := range 20 {
		l := slots[i%len(slots)]
		st := sid(uint64(i + 1))
		start := ms(10 * (i / len(slots)))
		ev = append(ev,
			Event{Time: start - ms(2), Subtask: st, Attempt: 1, Kind: Queued, Slot: NoSlot, Raylet: l.Raylet},
			Event{Time: start - ms(1), Subtask: st, Attempt: 1, Kind: Dispatched, Slot: NoSlot, Raylet: l.Raylet},
			Event{Time: start, Subtask: st, Attempt: 1, Kind: Started, Slot: l.Slot, Raylet: l.Raylet, Ops: "tensor.add"},
		)
		end := Event{Time: start + ms(8), Subtask: st, Attempt: 1, Kind: Finished, Slot: l.Slot, Raylet: l.Raylet,
			BytesRead: 800, BytesWritten: 400, Fetch: time.Millisecond}
		switch i {
		case 3:
			end.Kind = Failed
			ev = append(ev, end,
				Event{Time: ms(100), Subtask: st, Attempt: 2, Kind: Started, Slot: 0, Raylet: "r1", Ops: "tensor.add"},
				Event{Time: ms(105), Subtask: st, Attempt: 2, Kind: Finished, Slot: 0, Raylet: "r1"})
		case 19:
			// still running
		default:
			ev = append(ev, end)
		}
	}
	// A start that was dropped: only its end remains.
	ev = append(ev, Event{Time: ms(50), Subtask: sid(99), Attempt: 1, Kind: Finished, Slot: 1, Raylet: "r2"})
	// Cancelled while queued: no start.
	ev = append(ev, Event{Time: ms(1), Subtask: sid(98), Attempt: 1, Kind: Queued, Slot: NoSlot, Raylet: "r2"},
		Event{Time: ms(2), Subtask: sid(98), Attempt: 1, Kind: Cancelled, Slot: NoSlot, Raylet: "r2"})
	return ev
}

func TestAttempts(t *testing.T) {
	now := int64(200 * time.Millisecond)
	lanes, spans := Attempts(cluster(), now)
	want := []Lane{{"r1", 0}, {"r1", 1}, {"r2", 0}, {"r2", 1}, {"r2", 2}}
	if fmt.Sprint(lanes) != fmt.Sprint(want) {
		t.Fatalf("lanes %v, want %v", lanes, want)
	}
	if len(spans) != 21 {
		t.Fatalf("%d spans, want 21 (20 first attempts and one retry)", len(spans))
	}
	var failed, running, retried int
	for i, s := range spans {
		if i > 0 && s.Start < spans[i-1].Start {
			t.Fatalf("span %d starts before span %d", i, i-1)
		}
		switch {
		case s.State == Failed:
			failed++
		case s.State == Started:
			running++
			if s.End != now {
				t.Errorf("running span ends at %d, want now %d", s.End, now)
			}
		case s.Attempt == 2:
			retried++
			if lanes[s.Lane] != (Lane{"r1", 0}) || s.End-s.Start != int64(5*time.Millisecond) {
				t.Errorf("retry: lane %v, %v long", lanes[s.Lane], time.Duration(s.End-s.Start))
			}
		}
		if s.Attempt == 1 && (s.Start-s.Queued != int64(2*time.Millisecond) || s.Start-s.Dispatched != int64(time.Millisecond)) {
			t.Errorf("span %d: queued %v and dispatched %v before start; want 2ms and 1ms", i,
				time.Duration(s.Start-s.Queued), time.Duration(s.Start-s.Dispatched))
		}
	}
	if failed != 1 || running != 1 || retried != 1 {
		t.Fatalf("failed %d, running %d, retried %d; want 1 each", failed, running, retried)
	}
}

// TestTraceOneLanePerSlot checks the trace is valid JSON in the Trace
// Event Format with exactly one lane (pid, tid) per raylet slot, every
// slice on a named lane, and no two attempts overlapping on one lane.
func TestTraceOneLanePerSlot(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTrace(&buf, Snapshot{Task: 7, Events: cluster(), Dropped: 3}, int64(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Cat  string         `json:"cat"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Pid  int            `json:"pid"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
		OtherData       map[string]any `json:"otherData"`
		DisplayTimeUnit string         `json:"displayTimeUnit"`
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("trace is not valid JSON of the expected shape: %v", err)
	}
	if tr.OtherData["dropped_events"] != 3.0 || tr.OtherData["job"] != 7.0 {
		t.Errorf("otherData %v", tr.OtherData)
	}
	type lane struct{ pid, tid int }
	names := map[lane]string{}
	procs := map[int]string{}
	last := map[lane]float64{}
	attempts := 0
	for _, e := range tr.TraceEvents {
		l := lane{e.Pid, e.Tid}
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			if _, dup := names[l]; dup {
				t.Fatalf("lane %v named twice", l)
			}
			names[l] = procs[e.Pid] + "/" + e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "process_name":
			procs[e.Pid] = e.Args["name"].(string)
		case e.Ph == "X" && e.Cat != "fetch":
			attempts++
			if _, ok := names[l]; !ok {
				t.Fatalf("slice %q on lane %v, which has no thread_name", e.Name, l)
			}
			if e.Ts < last[l] {
				t.Fatalf("attempts overlap on lane %v (%s): one starts at %v before the previous ends at %v", l, names[l], e.Ts, last[l])
			}
			last[l] = e.Ts + e.Dur
		}
	}
	if len(names) != 5 {
		t.Fatalf("%d lanes %v, want 5: one per raylet slot (r1: 2, r2: 3)", len(names), names)
	}
	if names[lane{1, 1}] != "raylet r1/slot 0" || names[lane{2, 3}] != "raylet r2/slot 2" {
		t.Fatalf("lanes named %v", names)
	}
	if attempts != 21 {
		t.Fatalf("%d attempt slices, want 21", attempts)
	}
}

func TestTraceEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTrace(&buf, Snapshot{Task: 1}, 0); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("empty trace is not JSON: %v\n%s", err, buf.Bytes())
	}
	if evs, _ := v["traceEvents"].([]any); evs == nil || len(evs) != 0 {
		t.Fatalf("traceEvents = %v, want []", v["traceEvents"])
	}
}

func BenchmarkRecord(b *testing.B) {
	r := NewRecorder(Config{})
	e := Event{Subtask: sid(1), Kind: Finished, Raylet: "r1", Ops: "tensor.add"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Time = int64(i)
		r.Record(7, e)
	}
}

// TestForgetDropsStrings checks that a forgotten job's ring, kept for the
// next job, holds no event (and so no string) of it, whether it had
// filled and wrapped or not.
func TestForgetDropsStrings(t *testing.T) {
	for _, n := range []int{3, firstRing + 5, 1000} {
		r := NewRecorder(Config{PerJob: 512})
		for i := range n {
			r.Record(1, Event{Time: int64(i), Kind: Started, Raylet: "r1", Ops: "tensor.add"})
		}
		r.Forget(1)
		if r.spare == nil {
			t.Fatalf("%d events: the forgotten ring was not kept", n)
		}
		for i, e := range r.spare.ev {
			if e != (Event{}) {
				t.Fatalf("%d events: event %d of the kept ring is %+v, want zero", n, i, e)
			}
		}
		r.Record(2, Event{Time: 1, Kind: Queued})
		if s, _ := r.Snapshot(2, nil); len(s.Events) != 1 || s.Events[0].Time != 1 {
			t.Fatalf("%d events: the next job's snapshot is %+v", n, s.Events)
		}
	}
}
