package raftmeta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// Written by the code before result runs (commit acac790): SubmitJob for
// task 1, then SetJobStatus SUCCEEDED listing three result IDs, and the
// snapshot of an FSM that applied both.
const (
	oldSubmitJob = "" +
		"a3010402500100000000000000000000000000000003a20141010374323032362d31312d32365431323a30303a30305a"
	oldSetJobStatus = "" +
		"a3010602500200000000000000000000000000000003a401010203048350010000000100010000000000000000005001" +
		"00000001000200000000000000000050010000000200070000000000010000000574323032362d31312d32365431323a" +
		"30313a30305a"
	oldSnapshot = "" +
		"a6010102020381a2010102f60481a6010102410104030683500100000001000100000000000000000050010000000100" +
		"0200000000000000000050010000000200070000000000010000000874323032362d31312d32365431323a30303a3030" +
		"5a0974323032362d31312d32365431323a30313a30305a05800682a201500100000000000000000000000000000002a2" +
		"010402a10101a201500200000000000000000000000000000002a2010602a10101"
)

var oldResultIDs = []dag.ObjectID{
	dag.NewObjectID(dag.PackSubtaskID(1, 1, 1), 0),
	dag.NewObjectID(dag.PackSubtaskID(1, 1, 2), 0),
	dag.NewObjectID(dag.PackSubtaskID(1, 2, 7), 1),
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An entry of the old format, listing result IDs, still decodes and
// applies; so does a snapshot holding such a job.
func TestOldResultListApplies(t *testing.T) {
	h := newHarness(t, 0)
	if err := h.raw(unhex(t, oldSubmitJob)).Err(); err != nil {
		t.Fatal(err)
	}
	cmd, err := DecodeCommand(unhex(t, oldSetJobStatus))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cmd.Body.(SetJobStatus); !ok || !slices.Equal(c.Results, oldResultIDs) || len(c.ResultRuns) != 0 {
		t.Fatalf("decoded %+v", cmd.Body)
	}
	if err := h.raw(unhex(t, oldSetJobStatus)).Err(); err != nil {
		t.Fatal(err)
	}
	j, ok := h.f.Job(1)
	if !ok || j.Status != JobSucceeded || !slices.Equal(j.ResultIDs(), oldResultIDs) {
		t.Fatalf("job %+v, result IDs %v", j, j.ResultIDs())
	}
	// The state is what the old code snapshotted, byte for byte.
	if got := stateBytes(t, h.f); !bytes.Equal(got, withoutDedupe(t, unhex(t, oldSnapshot))) {
		t.Fatalf("state after the old entries differs from the old snapshot:\n got %x\nwant %x", got, unhex(t, oldSnapshot))
	}
	g := NewFSM(0, nil)
	if err := restore(t, g, unhex(t, oldSnapshot)); err != nil {
		t.Fatal(err)
	}
	if j, ok := g.Job(1); !ok || !slices.Equal(j.ResultIDs(), oldResultIDs) {
		t.Fatalf("restored job %+v", j)
	}
}

// withoutDedupe is snapshot b with its dedupe table dropped, as stateBytes.
func withoutDedupe(t *testing.T, b []byte) []byte {
	t.Helper()
	f := NewFSM(0, nil)
	if err := restore(t, f, b); err != nil {
		t.Fatal(err)
	}
	return stateBytes(t, f)
}

// Result runs apply to the same IDs a list would, survive a snapshot, are
// dropped on release, and are checked.
func TestResultRuns(t *testing.T) {
	var ids []dag.ObjectID
	for i := uint64(0); i < 1000; i++ {
		ids = append(ids, dag.NewObjectID(dag.PackSubtaskID(1, 1, 1+i), 0))
	}
	ids = append(ids, dag.NewObjectID(dag.PackSubtaskID(1, 2, 5), 2))
	runs := dag.AppendObjectRuns(nil, ids...)
	if len(runs) != 2 {
		t.Fatalf("runs %+v", runs)
	}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	h := newHarness(t, 0)
	task := h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
	data, err := EncodeCommand(Command{RequestID: NewRequestID(), Body: SetJobStatus{Task: task, Status: JobSucceeded, ResultRuns: runs, Time: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 200 {
		t.Fatalf("SetJobStatus with %d results in two runs takes %d bytes", len(ids), len(data))
	}
	if err := h.raw(data).Err(); err != nil {
		t.Fatal(err)
	}
	j, _ := h.f.Job(task)
	if !slices.Equal(j.ResultIDs(), ids) || j.Results != nil {
		t.Fatalf("job %+v: result IDs differ from the list", j)
	}
	g := NewFSM(0, nil)
	if err := restore(t, g, snapshotBytes(t, h.f)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.f.Jobs(), g.Jobs()) {
		t.Fatalf("jobs differ after restore:\n%+v\n%+v", h.f.Jobs(), g.Jobs())
	}
	h.do(ReleaseJob{Task: task})
	if j, _ := h.f.Job(task); !j.Released || j.ResultRuns != nil || j.ResultIDs() != nil {
		t.Fatalf("released job %+v keeps its results", j)
	}

	task = h.do(SubmitJob{Graph: []byte{1}, Time: t0}).Task
	for _, bad := range []SetJobStatus{
		{Task: task, Status: JobSucceeded, Results: ids[:1], ResultRuns: runs[:1]},
		{Task: task, Status: JobSucceeded, ResultRuns: []dag.ObjectRun{{Task: task, Stage: 1, First: 3}}},
		{Task: task, Status: JobSucceeded, ResultRuns: []dag.ObjectRun{{Task: task, Stage: 1, First: dag.MaxSubtaskIndex, Count: 2}}},
	} {
		if r := h.apply(NewRequestID(), bad); !errors.Is(r.Err(), dag.ErrInvalidArgument) {
			t.Errorf("%+v: got %v, want refused", bad, r.Err())
		}
	}
	if j, _ := h.f.Job(task); j.Status != JobSubmitted {
		t.Fatalf("a refused status applied: %+v", j)
	}
}
