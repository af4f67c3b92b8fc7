package raylet

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// doubleOp doubles a float64 chunk, writing every byte of its output (whose
// memory is not zeroed).
type doubleOp struct{}

func (doubleOp) Name() string { return "raylet.test.double" }

func (doubleOp) Exec(kc *dag.KernelCall) error {
	in := kc.Inputs[0]
	buf, err := kc.Output(0, in.Meta, len(in.Data))
	if err != nil {
		return err
	}
	src, dst := dag.BytesAsFloat64s(in.Data), dag.BytesAsFloat64s(buf)
	for i, v := range src {
		dst[i] = 2 * v
	}
	return nil
}

func init() { dag.MustRegister(doubleOp{}) }

// TestRunAllocatesNothingInSteadyState runs the same two-op subtask (an
// intermediate in scratch memory, then an exported output in the store)
// again and again on one slot, deleting its output each time, as a
// long-running raylet does, and checks that a run allocates nothing and
// computes the right values every time.
func TestRunAllocatesNothingInSteadyState(t *testing.T) {
	store, err := objectstore.Open(objectstore.Config{Dir: t.TempDir(), Name: "reuse", Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := &Raylet{store: store, ctx: context.Background(), id: "test"}
	s := newSlot(r)

	const n = 100
	input := dag.NewObjectID(dag.PackSubtaskID(1, 1, 0), 0)
	meta := dag.Meta{DType: dag.Float64, Shape: []int64{n}}
	buf, err := store.Create(input, 8*n, dag.EncodeMeta(meta))
	if err != nil {
		t.Fatal(err)
	}
	for i := range dag.BytesAsFloat64s(buf) {
		dag.BytesAsFloat64s(buf)[i] = float64(i)
	}
	if err := store.Seal(input); err != nil {
		t.Fatal(err)
	}

	op := dag.OpIDOf(doubleOp{}.Name())
	spec := &wire.SubtaskSpec{
		ID:      dag.PackSubtaskID(1, 1, 1),
		Inputs:  []wire.InputSpec{{Object: input, Size: 8 * n}},
		Ops:     []wire.OpSpec{{Op: op, Inputs: []int32{wire.ExternalInput(0)}}, {Op: op, Inputs: []int32{0}}},
		Outputs: []int32{1},
	}
	out := dag.NewObjectID(spec.ID, 0)
	once := func() {
		c := r.run(s, spec)
		if c.Failed() {
			t.Fatalf("run failed: %s", c.Error)
		}
		if len(c.Sizes) != 1 || c.Sizes[0] != 8*n {
			t.Fatalf("sizes %v, want [%d]", c.Sizes, 8*n)
		}
		obj, err := store.Get(out)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range dag.BytesAsFloat64s(obj.Data) {
			if v != 4*float64(i) {
				t.Fatalf("output[%d] = %v, want %v", i, v, 4*float64(i))
			}
		}
		store.Release(out)
		if err := store.Delete(out); err != nil {
			t.Fatal(err)
		}
	}
	once() // the first run sizes the slot's buffers
	if allocs := testing.AllocsPerRun(200, once); allocs != 0 {
		t.Errorf("a run allocates %v times in steady state, want 0", allocs)
	}
	if st := store.Stats(); st.Objects != 1 {
		t.Errorf("store holds %d objects after the runs, want only the input", st.Objects)
	}
}

// TestOutputsFoundMade runs a subtask whose output is already in the store
// in each state it can be found in. A sealed one (an earlier attempt's) is
// kept and reported; one still being written by another attempt, or
// deleted while readers pin it, may yet vanish, so the attempt fails as
// unavailable instead of reporting an output it cannot vouch for. An
// abandoned run's discard deletes only what it stored itself.
func TestOutputsFoundMade(t *testing.T) {
	store, err := objectstore.Open(objectstore.Config{Dir: t.TempDir(), Name: "found", Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := &Raylet{store: store, ctx: context.Background(), id: "test"}
	s := newSlot(r)
	meta := dag.EncodeMeta(dag.Meta{DType: dag.Float64, Shape: []int64{1}})
	input := dag.NewObjectID(dag.PackSubtaskID(1, 1, 0), 0)
	putObject(t, store, input, make([]byte, 8), meta)
	op := dag.OpIDOf(doubleOp{}.Name())
	spec := func(n uint64) *wire.SubtaskSpec {
		return &wire.SubtaskSpec{ID: dag.PackSubtaskID(1, 1, n), Inputs: []wire.InputSpec{{Object: input, Size: 8}},
			Ops: []wire.OpSpec{{Op: op, Inputs: []int32{wire.ExternalInput(0)}}}, Outputs: []int32{0}}
	}
	run := func(sp *wire.SubtaskSpec) wire.Completion {
		s.renew(r)
		return r.run(s, sp)
	}

	// Sealed by an earlier attempt: kept, reported, and not the
	// abandoned run's to delete.
	made := spec(1)
	putObject(t, store, dag.NewObjectID(made.ID, 0), make([]byte, 8), meta)
	if c := run(made); c.Failed() || len(c.Sizes) != 1 {
		t.Fatalf("output sealed already: completion %v %q sizes %v, want success", c.Kind, c.Error, c.Sizes)
	}
	s.a.discard()
	if !store.Contains(dag.NewObjectID(made.ID, 0)) {
		t.Fatal("discarding a run deleted the output an earlier attempt made")
	}

	// Being written by another attempt: refused, and left to that one.
	writing := spec(2)
	out := dag.NewObjectID(writing.ID, 0)
	if _, err := store.Create(out, 8, meta); err != nil {
		t.Fatal(err)
	}
	if c := run(writing); c.Kind != dag.KindUnavailable || !strings.Contains(c.Error, "being written by another attempt") {
		t.Fatalf("output being written: completion %v %q, want unavailable naming the other attempt", c.Kind, c.Error)
	}
	if err := store.Abort(out); err != nil {
		t.Fatalf("the other attempt's object was not left to it: %v", err)
	}

	// Deleted while a reader pins it: refused too.
	pinned := spec(3)
	out = dag.NewObjectID(pinned.ID, 0)
	putObject(t, store, out, make([]byte, 8), meta)
	if _, err := store.Get(out); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(out); err != nil {
		t.Fatal(err)
	}
	if c := run(pinned); c.Kind != dag.KindUnavailable {
		t.Fatalf("output deleted but pinned: completion %v %q, want unavailable", c.Kind, c.Error)
	}
	store.Release(out)

	// Made by this run: an abandoned run's discard deletes it.
	fresh := spec(4)
	if c := run(fresh); c.Failed() {
		t.Fatalf("fresh output: %q", c.Error)
	}
	s.a.discard()
	if store.Contains(dag.NewObjectID(fresh.ID, 0)) {
		t.Fatal("discarding a run kept the output it made")
	}
}

// TestFreesOnlyFromTheRegisteredSession checks that the raylet carries out
// frees from the leader it last registered with, and ignores a previous
// leader's: those could land after the raylet told the new leader it holds
// the objects.
func TestFreesOnlyFromTheRegisteredSession(t *testing.T) {
	store, err := objectstore.Open(objectstore.Config{Dir: t.TempDir(), Name: "frees", Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := &Raylet{store: store, ctx: context.Background(), id: "test", log: slog.New(slog.DiscardHandler)}
	id := dag.NewObjectID(dag.PackSubtaskID(1, 1, 7), 0)
	putObject(t, store, id, make([]byte, 8), dag.EncodeMeta(dag.Meta{DType: dag.Float64, Shape: []int64{1}}))
	previous, current := new(transport.Session), new(transport.Session)
	r.regSess = current
	r.freeFrom(previous, []dag.ObjectID{id})
	if !store.Contains(id) {
		t.Fatal("a previous leader's free deleted an object")
	}
	r.freeFrom(current, []dag.ObjectID{id})
	if store.Contains(id) {
		t.Fatal("the registered leader's free did not delete the object")
	}
}
