package raylet

import (
	"context"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
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
