package dag

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/phobos-project/phobos/internal/codec"
)

func TestObjectRunsRoundTrip(t *testing.T) {
	id := func(task TaskID, stage StageID, ix uint64, out uint32) ObjectID {
		return NewObjectID(PackSubtaskID(task, stage, ix), out)
	}
	// A stage's results in order: one run.
	var seq []ObjectID
	for i := uint64(0); i < 1000; i++ {
		seq = append(seq, id(3, 2, 17+i, 0))
	}
	runs := AppendObjectRuns(nil, seq...)
	if want := []ObjectRun{{Task: 3, Stage: 2, First: 17, Count: 1000}}; !slices.Equal(runs, want) {
		t.Fatalf("runs %+v, want %+v", runs, want)
	}
	if got := AppendRunIDs(nil, runs); !slices.Equal(got, seq) {
		t.Fatal("the IDs of one run differ from the list")
	}
	// Breaks: another output, another stage, a gap, a repeat, going back,
	// the largest index.
	odd := []ObjectID{id(3, 2, 5, 0), id(3, 2, 6, 1), id(3, 2, 7, 1), id(3, 3, 8, 1), id(3, 3, 10, 1), id(3, 3, 10, 1),
		id(3, 3, 9, 1), id(4, 3, 10, 1), id(4, 3, MaxSubtaskIndex-1, 0), id(4, 3, MaxSubtaskIndex, 0)}
	runs = AppendObjectRuns(nil, odd...)
	if len(runs) != 8 {
		t.Fatalf("%d runs for %d IDs with 7 breaks: %+v", len(runs), len(odd), runs)
	}
	if got := AppendRunIDs(nil, runs); !slices.Equal(got, odd) {
		t.Fatalf("IDs %v, want %v", got, odd)
	}
	// Random lists, through CBOR.
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 200; trial++ {
		var ids []ObjectID
		ix := rng.Uint64N(1 << 40)
		for k := rng.IntN(50); k > 0; k-- {
			if rng.IntN(4) == 0 {
				ix = rng.Uint64N(1 << 40)
			}
			ids = append(ids, id(TaskID(1+rng.IntN(2)), StageID(1+rng.IntN(2)), ix, uint32(rng.IntN(2))))
			ix++
		}
		runs := AppendObjectRuns(nil, ids...)
		for _, r := range runs {
			if err := r.Check(); err != nil {
				t.Fatal(err)
			}
		}
		b, err := codec.Marshal(runs)
		if err != nil {
			t.Fatal(err)
		}
		var back []ObjectRun
		if err := codec.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := AppendRunIDs(nil, back); !slices.Equal(got, ids) || RunsLen(back) != uint64(len(ids)) {
			t.Fatalf("trial %d: %v through runs %+v came back as %v", trial, ids, back, got)
		}
	}
	for _, bad := range []ObjectRun{{Task: 1, Stage: 1, First: 1}, {Task: 1, Stage: 1, First: MaxSubtaskIndex, Count: 2}, {Task: 1, Stage: 1, First: MaxSubtaskIndex + 1, Count: 1}} {
		if bad.Check() == nil {
			t.Errorf("run %+v passes Check", bad)
		}
	}
}
