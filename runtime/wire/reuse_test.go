package wire

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// A reply decoded into a Reset PullReply must be what a fresh decode
// gives: nothing of the earlier, larger reply may survive in fields the
// new one omits.
func TestPullReplyResetLeavesNothingBehind(t *testing.T) {
	big := PullReply{Subtasks: []SubtaskSpec{
		{ID: dag.PackSubtaskID(1, 1, 1), Attempt: 3, OutputBytes: 800,
			Ops: []OpSpec{
				{Op: 7, Args: []byte{0xa0}, Inputs: []int32{-1, -2}, Index: []int32{4, 5}, Shape: []int64{10, 10}, DType: dag.Float64},
				{Op: 8, Inputs: []int32{0}, Shape: []int64{10}, DType: dag.Int64},
			},
			Outputs: []int32{1, 0},
			Inputs: []InputSpec{
				{Object: dag.NewObjectID(dag.PackSubtaskID(1, 1, 9), 0), Size: 80, Locations: []string{"a:1", "b:2"}, Part: 2},
				{Object: dag.NewObjectID(dag.PackSubtaskID(1, 1, 8), 0), Size: 80, Locations: []string{"c:3"}},
			}},
		{ID: dag.PackSubtaskID(1, 1, 2), Attempt: 1, Ops: []OpSpec{{Op: 9, Args: []byte{1}}}, Outputs: []int32{0}},
	}, Free: []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(1, 1, 7), 0)}}
	small := PullReply{Subtasks: []SubtaskSpec{
		{ID: dag.PackSubtaskID(2, 1, 1),
			Ops:     []OpSpec{{Op: 1, Inputs: []int32{-1}}},
			Outputs: []int32{0},
			Inputs:  []InputSpec{{Object: dag.NewObjectID(dag.PackSubtaskID(2, 1, 5), 0), Size: 8}}},
	}}
	bigB, err := codec.Marshal(&big)
	if err != nil {
		t.Fatal(err)
	}
	smallB, err := codec.Marshal(&small)
	if err != nil {
		t.Fatal(err)
	}

	var r PullReply
	if err := codec.Unmarshal(bigB, &r); err != nil {
		t.Fatal(err)
	}
	r.Reset()
	if len(r.Subtasks) != 0 || len(r.Free) != 0 {
		t.Fatalf("Reset left %d subtasks and %d frees", len(r.Subtasks), len(r.Free))
	}
	if err := codec.Unmarshal(smallB, &r); err != nil {
		t.Fatal(err)
	}
	var fresh PullReply
	if err := codec.Unmarshal(smallB, &fresh); err != nil {
		t.Fatal(err)
	}
	got, err := codec.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := codec.Marshal(&fresh)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("decoded into a reset reply:\n %+v\nfresh:\n %+v", r, fresh)
	}
	s := &r.Subtasks[0]
	if s.Attempt != 0 || s.OutputBytes != 0 || len(s.Ops[0].Args) != 0 || len(s.Ops[0].Shape) != 0 ||
		len(s.Inputs[0].Locations) != 0 || s.Inputs[0].Part != 0 {
		t.Fatalf("stale fields survived: %+v", *s)
	}

	// Reusing the reply's memory: decoding a reply no larger than the last,
	// without strings or args, allocates nothing.
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset()
		if err := codec.Unmarshal(smallB, &r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("decoding into a reset reply allocates %v times, want 0", allocs)
	}
}

func TestCompletionsResetLeavesNothingBehind(t *testing.T) {
	big := Pull{Credits: 4, Wait: 5, Done: []Completion{
		{ID: dag.PackSubtaskID(1, 1, 1), Attempt: 2, Sizes: []int64{8, 16}, Error: "boom", Kind: dag.KindFatal,
			Fetched: []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(1, 1, 7), 0)}},
		{ID: dag.PackSubtaskID(1, 1, 2), Sizes: []int64{8}},
	}}
	small := Pull{Credits: 1, Done: []Completion{{ID: dag.PackSubtaskID(3, 1, 1), Sizes: []int64{24}}}}
	bigB, _ := codec.Marshal(&big)
	smallB, _ := codec.Marshal(&small)

	var p PullIn
	if err := codec.Unmarshal(bigB, &p); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := codec.Unmarshal(smallB, &p); err != nil {
		t.Fatal(err)
	}
	var c Completion
	p.Done.At(0, &c)
	if p.Wait != 0 || p.Done.Len() != 1 || c.Attempt != 0 || c.Error != "" || c.Kind != 0 || len(c.Fetched) != 0 ||
		len(c.Sizes) != 1 || c.Sizes[0] != 24 {
		t.Fatalf("decoded into a reset pull: %+v", p)
	}

	cm := Complete{Done: big.Done}
	cmB, _ := codec.Marshal(&cm)
	var got CompleteIn
	if err := codec.Unmarshal(cmB, &got); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	one, _ := codec.Marshal(&Complete{Done: small.Done})
	if err := codec.Unmarshal(one, &got); err != nil {
		t.Fatal(err)
	}
	got.Done.At(0, &c)
	if got.Done.Len() != 1 || c.Error != "" || c.Attempt != 0 || len(c.Fetched) != 0 {
		t.Fatalf("decoded into a reset complete: %+v", got)
	}
}

// TestPullDecodesIntoItsMemory: each completion's sizes go into the
// batch's list of sizes, not a slice of their own. The head decodes a
// batch larger than any it held in two allocations (the records and the
// sizes), not one a completion; a reset pull decodes one no larger than it
// held before without allocating.
func TestPullDecodesIntoItsMemory(t *testing.T) {
	batch := func(n, outs int) []byte {
		p := Pull{Credits: 64, FreesInReply: true}
		for i := range n {
			sizes := make([]int64, outs)
			for k := range sizes {
				sizes[k] = int64(8 * (i + k + 1))
			}
			p.Done = append(p.Done, Completion{ID: dag.PackSubtaskID(7, 1, uint64(i)), Sizes: sizes, TookUS: 12})
		}
		b, _ := p.AppendCBOR(nil)
		return b
	}
	big, few, many := batch(300, 2), batch(20, 1), batch(300, 1)
	if allocs := testing.AllocsPerRun(50, func() {
		var fresh PullIn
		if err := fresh.DecodeCBOR(many); err != nil {
			t.Fatal(err)
		}
	}); allocs > 2 {
		t.Errorf("decoding 300 completions into a new pull allocates %v times, want 2 (the records and the sizes)", allocs)
	}
	var p PullIn
	for _, b := range [][]byte{big, few} {
		p.Reset()
		if err := p.DecodeCBOR(b); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(50, func() {
		p.Reset()
		if err := p.DecodeCBOR(many); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("decoding 300 completions into a reset pull that held 300 allocates %v times, want 0", allocs)
	}
	for i := range p.Done.Len() {
		var c Completion
		p.Done.At(i, &c)
		if len(c.Sizes) != 1 || c.Sizes[0] != int64(8*(i+1)) {
			t.Fatalf("completion %d: sizes %v, want [%d]", i, c.Sizes, 8*(i+1))
		}
	}
}

// Reset empties only the specs up to the reply's length: those past it
// must have been emptied by an earlier Reset. A big reply, a small one,
// then one as long as the big one whose later specs omit what the big
// one's had: each decodes as a fresh reply would.
func TestPullReplyResetAcrossSizes(t *testing.T) {
	spec := func(task dag.TaskID, full bool) SubtaskSpec {
		s := SubtaskSpec{ID: dag.PackSubtaskID(task, 1, 1), Ops: []OpSpec{{Op: 1}}, Outputs: []int32{0}}
		if full {
			s.Attempt, s.OutputBytes = 2, 64
			s.Ops[0].Args, s.Ops[0].Shape = []byte{7}, []int64{8}
			s.Inputs = []InputSpec{{Object: dag.NewObjectID(dag.PackSubtaskID(task, 1, 9), 0), Size: 8, Locations: []string{"a:1"}, Pending: true}}
		}
		return s
	}
	replies := []PullReply{
		{Subtasks: []SubtaskSpec{spec(1, true), spec(2, true), spec(3, true)}, More: true},
		{Subtasks: []SubtaskSpec{spec(4, false)}},
		{},
		{Subtasks: []SubtaskSpec{spec(5, false), spec(6, false), spec(7, false)}},
	}
	var r PullReply
	for k, rep := range replies {
		b, err := codec.Marshal(&rep)
		if err != nil {
			t.Fatal(err)
		}
		r.Reset()
		if err := codec.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		var fresh PullReply
		if err := codec.Unmarshal(b, &fresh); err != nil {
			t.Fatal(err)
		}
		got, _ := codec.Marshal(&r)
		want, _ := codec.Marshal(&fresh)
		if !bytes.Equal(got, want) {
			t.Fatalf("reply %d decoded into reused memory:\n %+v\nfresh:\n %+v", k, r, fresh)
		}
	}
}

// The head's batches of completions hold no pointers: the collector marks
// their memory without reading it (see Completions). A field of a type
// with pointers (a string, a slice) added to a record fails this.
func TestCompletionsHoldNoPointers(t *testing.T) {
	var b Completions
	for _, f := range reflect.VisibleFields(reflect.TypeOf(b)) {
		if hasPointers(f.Type.Elem()) {
			t.Errorf("Completions.%s is a list of %s, which holds pointers", f.Name, f.Type.Elem())
		}
	}
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.String, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// At gives back what Append took, and a reset batch forgets it.
func TestCompletionsRoundTrip(t *testing.T) {
	cs := []Completion{
		{ID: dag.PackSubtaskID(1, 1, 1), Attempt: 2, Sizes: []int64{8, 16}, Slot: 3, Started: 7, TookUS: 9, FetchUS: 1,
			Fetched: []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(1, 1, 7), 0)}},
		{ID: dag.PackSubtaskID(1, 1, 2), Kind: dag.KindFatal, Error: "boom"},
		{ID: dag.PackSubtaskID(1, 1, 3), Sizes: []int64{24}},
	}
	b := CompletionsOf(cs...)
	if got := b.list(); !reflect.DeepEqual(got, cs) {
		t.Fatalf("At gives\n%+v\nwant\n%+v", got, cs)
	}
	b.Reset()
	b.Append(&cs[2])
	if got := b.list(); !reflect.DeepEqual(got, cs[2:]) {
		t.Fatalf("after Reset and one Append: %+v, want %+v", got, cs[2:])
	}
}
