package wire

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// randomReply makes a pull reply with every field's edge cases: absent,
// nil against empty, zero, negative and large numbers, several
// locations.
func randomReply(rng *rand.Rand) PullReply {
	pick := func(n int) int { return rng.IntN(n) }
	num := func() int64 {
		switch pick(5) {
		case 0:
			return 0
		case 1:
			return int64(pick(30))
		case 2:
			return -int64(pick(1000)) - 1
		case 3:
			return rng.Int64()
		}
		return int64(pick(1 << 20))
	}
	i32s := func() []int32 {
		switch pick(3) {
		case 0:
			return nil
		case 1:
			return []int32{}
		}
		s := make([]int32, 1+pick(4))
		for i := range s {
			s[i] = int32(num())
		}
		return s
	}
	var r PullReply
	for range pick(4) {
		s := SubtaskSpec{ID: dag.PackSubtaskID(dag.TaskID(pick(1<<20)), dag.StageID(pick(9)), uint64(rng.Int64N(1<<40))),
			Attempt: int(num()), Outputs: i32s(), OutputBytes: num()}
		if pick(4) > 0 {
			s.Ops = []OpSpec{}
			for range pick(3) {
				o := OpSpec{Op: dag.OpID(rng.Uint32()), Inputs: i32s(), Index: i32s(), DType: dag.DType(pick(256))}
				if pick(2) == 0 {
					o.Args = make([]byte, pick(40))
					for k := range o.Args {
						o.Args[k] = byte(pick(256))
					}
				}
				for range pick(4) {
					o.Shape = append(o.Shape, num())
				}
				s.Ops = append(s.Ops, o)
			}
		}
		for range pick(4) {
			in := InputSpec{Object: dag.NewObjectID(s.ID, uint32(pick(3))), Size: num(), Part: int32(num()), Pending: pick(2) == 0}
			for range pick(3) {
				in.Locations = append(in.Locations, []string{"127.0.0.1:40001", "127.0.0.1:40002", "10.0.0.7:7100", "[::1]:9", ""}[pick(5)])
			}
			s.Inputs = append(s.Inputs, in)
		}
		r.Subtasks = append(r.Subtasks, s)
	}
	for range pick(3) {
		r.Free = append(r.Free, dag.NewObjectID(dag.PackSubtaskID(1, 1, uint64(pick(99))), uint32(pick(3))))
	}
	r.More = pick(2) == 0
	return r
}

// normal empties what the two decoders may leave either nil or empty, and
// the intern cache, so that equal replies compare equal.
func normal(r PullReply) PullReply {
	r.intern = nil
	if len(r.Subtasks) == 0 {
		r.Subtasks = nil
	}
	if len(r.Free) == 0 {
		r.Free = nil
	}
	for i := range r.Subtasks {
		s := &r.Subtasks[i]
		if len(s.Ops) == 0 {
			s.Ops = nil
		}
		if len(s.Outputs) == 0 {
			s.Outputs = nil
		}
		if len(s.Inputs) == 0 {
			s.Inputs = nil
		}
		for j := range s.Ops {
			o := &s.Ops[j]
			if len(o.Args) == 0 {
				o.Args = nil
			}
			if len(o.Inputs) == 0 {
				o.Inputs = nil
			}
			if len(o.Index) == 0 {
				o.Index = nil
			}
			if len(o.Shape) == 0 {
				o.Shape = nil
			}
		}
		for k := range s.Inputs {
			if len(s.Inputs[k].Locations) == 0 {
				s.Inputs[k].Locations = nil
			}
		}
	}
	return r
}

// TestPullReplyCodecMatchesGeneric holds the hand-written encoding to the
// generic encoder's bytes, and the hand-written decoder to the generic
// decoder's values, over random replies; and decoding into a reply that
// held a larger one (Reset) gives the same values.
func TestPullReplyCodecMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var reused PullReply
	for i := range 3000 {
		r := randomReply(rng)
		want, err := codec.EncMode().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.AppendCBOR(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reply %d: AppendCBOR\n%x, %v; the generic encoder gives\n%x", i, got, err, want)
		}
		var generic, fast PullReply
		if err := codec.DecMode().Unmarshal(want, &generic); err != nil {
			t.Fatal(err)
		}
		if err := fast.DecodeCBOR(want); err != nil {
			t.Fatalf("reply %d: DecodeCBOR: %v", i, err)
		}
		if !reflect.DeepEqual(normal(fast), normal(generic)) {
			t.Fatalf("reply %d: DecodeCBOR gives\n%+v\nthe generic decoder\n%+v", i, fast, generic)
		}
		reused.Reset()
		if err := codec.Unmarshal(want, &reused); err != nil || !reflect.DeepEqual(normal(reused), normal(generic)) {
			t.Fatalf("reply %d: decoded into reused memory: %v\n%+v\nwant %+v", i, err, reused, generic)
		}
		checkSkim(t, want, &fast)
	}
}

// TestPullReplySizeBound holds SizeBound, PullReplyBound and FreeBound
// to the bytes a reply takes, over random replies and one whose every
// number takes its longest encoding: the head stops adding specs to a
// reply by these bounds, so that it never outgrows the raylet's max frame.
func TestPullReplySizeBound(t *testing.T) {
	check := func(what string, r PullReply) {
		t.Helper()
		data, err := r.AppendCBOR(nil)
		if err != nil {
			t.Fatal(err)
		}
		bound := PullReplyBound + FreeBound*len(r.Free)
		for i := range r.Subtasks {
			bound += r.Subtasks[i].SizeBound()
		}
		if len(data) > bound {
			t.Fatalf("%s: encodes to %d bytes, over its bound of %d:\n%+v", what, len(data), bound, r)
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		check(fmt.Sprintf("reply %d", i), randomReply(rng))
	}
	// Each list long and of the longest numbers on its own, so that the
	// term of the bound for it is needed: the fixed parts' slack cannot
	// cover a missing one.
	const n = 10000
	ints := make([]int32, n)
	longs := make([]int64, n)
	locs := make([]string, n)
	for k := range n {
		ints[k], longs[k] = math.MinInt32, math.MinInt64
	}
	id := dag.PackSubtaskID(1, 1, 1)
	for _, c := range []struct {
		what string
		r    PullReply
	}{
		{"outputs", PullReply{Subtasks: []SubtaskSpec{{ID: id, Outputs: ints}}}},
		{"op inputs", PullReply{Subtasks: []SubtaskSpec{{ID: id, Ops: []OpSpec{{Inputs: ints}}}}}},
		{"op index", PullReply{Subtasks: []SubtaskSpec{{ID: id, Ops: []OpSpec{{Index: ints}}}}}},
		{"op shape", PullReply{Subtasks: []SubtaskSpec{{ID: id, Ops: []OpSpec{{Shape: longs}}}}}},
		{"op args", PullReply{Subtasks: []SubtaskSpec{{ID: id, Ops: []OpSpec{{Args: make([]byte, n)}}}}}},
		{"ops", PullReply{Subtasks: []SubtaskSpec{{ID: id, Ops: slices.Repeat([]OpSpec{{Op: math.MaxUint32, Args: []byte{1}, Inputs: ints[:1], Index: ints[:1], Shape: longs[:1], DType: math.MaxUint8}}, n)}}}},
		{"inputs", PullReply{Subtasks: []SubtaskSpec{{ID: id, Inputs: slices.Repeat([]InputSpec{{Size: math.MinInt64, Part: math.MinInt32, Pending: true, Locations: []string{"a"}}}, n)}}}},
		{"locations", PullReply{Subtasks: []SubtaskSpec{{ID: id, Inputs: []InputSpec{{Locations: locs}}}}}},
		{"long location", PullReply{Subtasks: []SubtaskSpec{{ID: id, Inputs: []InputSpec{{Locations: []string{strings.Repeat("h", 70000)}}}}}}},
		{"specs", PullReply{Subtasks: slices.Repeat([]SubtaskSpec{{ID: id, Attempt: math.MinInt64, OutputBytes: math.MinInt64, Outputs: ints[:1], Ops: []OpSpec{{}}, Inputs: []InputSpec{{}}}}, n)}},
		{"frees", PullReply{Subtasks: []SubtaskSpec{{ID: id}}, Free: make([]dag.ObjectID, n), More: true}},
	} {
		check(c.what, c.r)
	}
}

// checkSkim holds SkimPullReply to what the full decode of data gave.
func checkSkim(t *testing.T, data []byte, full *PullReply) {
	t.Helper()
	// What SkimPullReply gives, and what it should: the full decode
	// without ops and inputs (outputs nil and empty alike).
	type skimmed struct {
		ID          dag.SubtaskID
		Attempt     int
		Outputs     string
		OutputBytes int64
	}
	var got []skimmed
	frees, more, err := SkimPullReply(data, func(s *SubtaskSpec) {
		if len(s.Ops) > 0 || len(s.Inputs) > 0 {
			t.Fatalf("SkimPullReply of %x decoded ops or inputs: %+v", data, *s)
		}
		got = append(got, skimmed{s.ID, s.Attempt, fmt.Sprint(s.Outputs), s.OutputBytes})
	})
	if err != nil {
		t.Fatalf("SkimPullReply of %x: %v; DecodeCBOR took it", data, err)
	}
	var want []skimmed
	for _, sp := range full.Subtasks {
		want = append(want, skimmed{sp.ID, sp.Attempt, fmt.Sprint(sp.Outputs), sp.OutputBytes})
	}
	if !reflect.DeepEqual(got, want) || frees != len(full.Free) || more != full.More {
		t.Fatalf("SkimPullReply of %x gives\n%+v, %d frees, more %v\nDecodeCBOR\n%+v, %d frees, more %v", data, got, frees, more, want, len(full.Free), full.More)
	}
}

// TestPullReplyDecodeRefuses checks that malformed replies give errors
// (never a panic), including counts the data cannot hold, which must be
// refused before memory is taken for them.
func TestPullReplyDecodeRefuses(t *testing.T) {
	for _, c := range []struct {
		what string
		data []byte
	}{
		{"empty", nil},
		{"not a map", []byte{0x80}},
		{"truncated", []byte{0xa1, 0x01}},
		{"a billion subtasks in 3 bytes", []byte{0xa1, 0x01, 0x9a, 0x40, 0, 0, 0}},
		{"a short id", []byte{0xa1, 0x02, 0x81, 0x43, 1, 2, 3}},
		{"duplicate key", []byte{0xa2, 0x03, 0xf5, 0x03, 0xf5}},
		{"indefinite array", []byte{0xa1, 0x01, 0x9f, 0xff}},
		{"a tag", []byte{0xa1, 0x07, 0xc1, 0x00}},
		{"trailing bytes", []byte{0xa0, 0x00}},
		{"a float for a bool", []byte{0xa1, 0x03, 0xf9, 0x3c, 0x00}},
		{"deep nesting in an unknown field", append([]byte{0xa1, 0x09}, bytes.Repeat([]byte{0x81}, 100)...)},
	} {
		var r PullReply
		if err := r.DecodeCBOR(c.data); err == nil {
			t.Errorf("%s: decoded without error: %+v", c.what, r)
		}
		if _, _, err := SkimPullReply(c.data, func(*SubtaskSpec) {}); err == nil {
			t.Errorf("%s: skimmed without error", c.what)
		}
	}
}

// FuzzPullReplyDecode checks that the hand-written decoder never panics,
// and agrees with the generic decoder whenever both decode.
func FuzzPullReplyDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b, _ := randomReply(rng).AppendCBOR(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, generic PullReply
		ferr := fast.DecodeCBOR(data)
		gerr := codec.DecMode().Unmarshal(data, &generic)
		if ferr == nil && gerr == nil && !reflect.DeepEqual(normal(fast), normal(generic)) {
			t.Fatalf("decoders disagree on %x:\nfast    %+v\ngeneric %+v", data, fast, generic)
		}
		if ferr == nil {
			checkSkim(t, data, &fast)
		}
	})
}

func BenchmarkPullReplyCodec(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	var r PullReply
	for len(r.Subtasks) < 64 {
		r.Subtasks = append(r.Subtasks, randomReply(rng).Subtasks...)
	}
	r.Subtasks = r.Subtasks[:64]
	data, _ := r.AppendCBOR(nil)
	b.Run("encode/generic", func(b *testing.B) {
		for b.Loop() {
			codec.EncMode().Marshal(r)
		}
	})
	b.Run("encode/fast", func(b *testing.B) {
		buf := make([]byte, 0, 2*len(data))
		for b.Loop() {
			buf, _ = r.AppendCBOR(buf[:0])
		}
	})
	b.Run("decode/generic", func(b *testing.B) {
		var out PullReply
		for b.Loop() {
			out.Reset()
			codec.DecMode().Unmarshal(data, &out)
		}
	})
	b.Run("decode/fast", func(b *testing.B) {
		var out PullReply
		for b.Loop() {
			out.Reset()
			out.DecodeCBOR(data)
		}
	})
}

func randomCompletions(rng *rand.Rand) []Completion {
	pick := func(n int) int { return rng.IntN(n) }
	var out []Completion
	for range pick(5) {
		c := Completion{ID: dag.PackSubtaskID(dag.TaskID(pick(1<<20)), dag.StageID(pick(9)), uint64(rng.Int64N(1<<40)))}
		if pick(2) == 0 {
			c.Attempt = pick(300) - 10
		}
		for range pick(3) {
			c.Sizes = append(c.Sizes, rng.Int64()-rng.Int64())
		}
		if pick(3) == 0 {
			c.Kind = dag.Kind(pick(1 << 16))
			c.Error = []string{"", "fetch …: no location has it", "ß∂ unicode"}[pick(3)]
		}
		for range pick(3) {
			c.Fetched = append(c.Fetched, dag.NewObjectID(c.ID, uint32(pick(4))))
		}
		if pick(2) == 0 {
			c.Slot, c.Started, c.TookUS, c.FetchUS = int16(pick(1<<16)-1<<15), rng.Int64(), rng.Uint32(), uint32(pick(3))
		}
		out = append(out, c)
	}
	return out
}

func normalDone(done []Completion) []Completion {
	if len(done) == 0 {
		return nil
	}
	for i := range done {
		if len(done[i].Sizes) == 0 {
			done[i].Sizes = nil
		}
		if len(done[i].Fetched) == 0 {
			done[i].Fetched = nil
		}
	}
	return done
}

// list is b as the generic decoder gives a list of completions.
func (b *Completions) list() []Completion {
	var out []Completion
	for k := range b.Len() {
		var c Completion
		b.At(k, &c)
		out = append(out, c)
	}
	return out
}

// asPull is what the head decoded as the generic decoder gives a Pull.
func (p *PullIn) asPull() Pull {
	return Pull{Credits: p.Credits, Wait: p.Wait, Done: normalDone(p.Done.list()), FreesInReply: p.FreesInReply}
}

// TestCompletionCodecMatchesGeneric does for Pull and Complete what
// TestPullReplyCodecMatchesGeneric does for PullReply: encoded by
// themselves, decoded by the head into PullIn and CompleteIn.
func TestCompletionCodecMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var reusedPull PullIn
	var reusedComplete CompleteIn
	for i := range 3000 {
		p := Pull{Credits: rng.IntN(2000) - 5, Done: randomCompletions(rng), FreesInReply: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			p.Wait = time.Duration(rng.Int64N(int64(time.Minute)))
		}
		want, err := codec.EncMode().Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := p.AppendCBOR(nil); !bytes.Equal(got, want) {
			t.Fatalf("pull %d: AppendCBOR\n%x; the generic encoder gives\n%x", i, got, want)
		}
		if n := p.CBORSize(); n < len(want) {
			t.Fatalf("pull %d: CBORSize %d, under its encoding's %d bytes", i, n, len(want))
		}
		var generic pullFields
		if err := codec.DecMode().Unmarshal(want, &generic); err != nil {
			t.Fatal(err)
		}
		reusedPull.Reset()
		if err := codec.Unmarshal(want, &reusedPull); err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		generic.Done = normalDone(generic.Done)
		if got := reusedPull.asPull(); !reflect.DeepEqual(got, Pull(generic)) {
			t.Fatalf("pull %d: DecodeCBOR gives\n%+v\nthe generic decoder\n%+v", i, got, generic)
		}

		c := Complete{Done: randomCompletions(rng)}
		if want, err = codec.EncMode().Marshal(c); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.AppendCBOR(nil); !bytes.Equal(got, want) {
			t.Fatalf("complete %d: AppendCBOR\n%x; the generic encoder gives\n%x", i, got, want)
		}
		if n := c.CBORSize(); n < len(want) {
			t.Fatalf("complete %d: CBORSize %d, under its encoding's %d bytes", i, n, len(want))
		}
		var genericC completeFields
		if err := codec.DecMode().Unmarshal(want, &genericC); err != nil {
			t.Fatal(err)
		}
		reusedComplete.Reset()
		if err := codec.Unmarshal(want, &reusedComplete); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		genericC.Done = normalDone(genericC.Done)
		if got := normalDone(reusedComplete.Done.list()); !reflect.DeepEqual(got, genericC.Done) {
			t.Fatalf("complete %d: DecodeCBOR gives\n%+v\nthe generic decoder\n%+v", i, got, genericC.Done)
		}
	}
}

// FuzzPullDecode checks that the head's decoder of pulls (PullIn) never
// panics and agrees with the generic decoder whenever both decode.
func FuzzPullDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 20 {
		b, _ := Pull{Credits: 8, Done: randomCompletions(rng)}.AppendCBOR(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast PullIn
		var generic pullFields
		ferr := fast.DecodeCBOR(data)
		gerr := codec.DecMode().Unmarshal(data, &generic)
		if ferr == nil && gerr == nil {
			generic.Done = normalDone(generic.Done)
			if got := fast.asPull(); !reflect.DeepEqual(got, Pull(generic)) {
				t.Fatalf("decoders disagree on %x:\nfast    %+v\ngeneric %+v", data, got, generic)
			}
		}
	})
}

func BenchmarkPullCodec(b *testing.B) {
	p := Pull{Credits: 64, FreesInReply: true}
	for i := range 64 {
		p.Done = append(p.Done, Completion{ID: dag.PackSubtaskID(7, 1, uint64(1000+i)), Sizes: []int64{16}, Slot: 1,
			Started: 1_700_000_000_000_000_000 + int64(i), TookUS: 12, FetchUS: 0})
	}
	data, _ := p.AppendCBOR(nil)
	b.Run("encode/generic", func(b *testing.B) {
		for b.Loop() {
			codec.EncMode().Marshal(p)
		}
	})
	b.Run("encode/fast", func(b *testing.B) {
		buf := make([]byte, 0, 2*len(data))
		for b.Loop() {
			buf, _ = p.AppendCBOR(buf[:0])
		}
	})
	b.Run("decode/generic", func(b *testing.B) {
		var out pullFields
		for b.Loop() {
			out = pullFields{Done: out.Done[:0]}
			codec.DecMode().Unmarshal(data, &out)
		}
	})
	b.Run("decode/fast", func(b *testing.B) {
		var out PullIn
		for b.Loop() {
			out.Reset()
			out.DecodeCBOR(data)
		}
	})
}

// TestPullSizeIsNearItsEncoding checks that a pull of a window of
// ordinary completions (one output, timed, one fetched input or none) is
// guessed within a third over its encoding, so that the buffer it is
// encoded into is of the class it needs, not a class up.
func TestPullSizeIsNearItsEncoding(t *testing.T) {
	p := Pull{Credits: 1024, FreesInReply: true}
	for i := range 1024 {
		id := dag.PackSubtaskID(dag.TaskID(7+i/512), 1, uint64(i)*977)
		c := Completion{ID: id, Sizes: []int64{int64(8 << (i % 12))}, Slot: int16(i % 16), Started: 1_790_000_000_000_000_000 + int64(i), TookUS: uint32(i % 700)}
		if i%3 == 0 {
			c.Fetched = []dag.ObjectID{dag.NewObjectID(id, 0)}
		}
		p.Done = append(p.Done, c)
	}
	enc, err := p.AppendCBOR(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.CBORSize(); n < len(enc) || n > len(enc)*4/3 {
		t.Fatalf("CBORSize %d for a pull of %d bytes: want within a third over", n, len(enc))
	}
}

// freeFields is FreeObjects without its codec, for the generic one.
type freeFields FreeObjects

func randomFrees(rng *rand.Rand) FreeObjects {
	var f FreeObjects
	switch rng.IntN(4) {
	case 0: // nil
	case 1:
		f.IDs = []dag.ObjectID{}
	default:
		f.IDs = make([]dag.ObjectID, rng.IntN(300))
		for i := range f.IDs {
			for k := range f.IDs[i] {
				f.IDs[i][k] = byte(rng.IntN(256))
			}
		}
	}
	return f
}

// TestFreeObjectsCodecMatchesGeneric holds FreeObjects' encoder to the
// generic encoder's bytes and its decoder to the generic decoder's
// values, decoding into memory a larger message left.
func TestFreeObjectsCodecMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var reused FreeObjects
	for i := range 2000 {
		f := randomFrees(rng)
		want, err := codec.EncMode().Marshal(freeFields(f))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := f.AppendCBOR(nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("frees %d: AppendCBOR\n%x; the generic encoder gives\n%x", i, got, want)
		}
		if n := f.CBORSize(); n < len(want) {
			t.Fatalf("frees %d: CBORSize %d, under its encoding's %d bytes", i, n, len(want))
		}
		if via, err := codec.Marshal(f); err != nil || !bytes.Equal(via, want) {
			t.Fatalf("frees %d: codec.Marshal gives %x, %v; want %x", i, via, err, want)
		}
		var generic freeFields
		if err := codec.DecMode().Unmarshal(want, &generic); err != nil {
			t.Fatal(err)
		}
		if err := codec.Unmarshal(want, &reused); err != nil {
			t.Fatalf("frees %d: %v", i, err)
		}
		if len(reused.IDs) == 0 && len(generic.IDs) == 0 && (reused.IDs == nil) != (generic.IDs == nil) {
			generic.IDs = reused.IDs // nil and empty mean the same
		}
		if !reflect.DeepEqual(reused, FreeObjects(generic)) {
			t.Fatalf("frees %d: DecodeCBOR gives\n%+v\nthe generic decoder\n%+v", i, reused, generic)
		}
	}
}

// TestFreeObjectsDecodeRefuses: malformed frees are refused, naming what
// is wrong, and a count of IDs the data cannot hold is refused before it
// takes memory for them.
func TestFreeObjectsDecodeRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"not a map", []byte{0x80}, "want major type 5"},
		{"short ID", append([]byte{0xa1, 0x01, 0x81, 0x4f}, make([]byte, 16)...), "15 bytes, want 16"},
		{"an ID of another type", append([]byte{0xa1, 0x01, 0x81, 0x70}, make([]byte, 16)...), "want a byte string"},
		// A million IDs claimed in 12 bytes: refused by the count.
		{"huge count", append([]byte{0xa1, 0x01, 0x9a, 0x00, 0x0f, 0x42, 0x40}, make([]byte, 12)...), "items in"},
		// Six one-byte items claimed: each real ID takes 17.
		{"items too small", []byte{0xa1, 0x01, 0x86, 0, 0, 0, 0, 0, 0}, "a real one takes at least 17"},
		{"trailing bytes", []byte{0xa1, 0x01, 0x80, 0x00}, "1 bytes after the free objects"},
		{"duplicate key", []byte{0xa2, 0x01, 0x80, 0x01, 0x80}, "duplicate map key 1"},
	} {
		var f FreeObjects
		err := f.DecodeCBOR(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
		if dag.KindOf(err) != dag.KindInvalidArgument {
			t.Errorf("%s: kind %v, want invalid argument", c.name, dag.KindOf(err))
		}
		if cap(f.IDs) > 6 {
			t.Errorf("%s: took room for %d IDs", c.name, cap(f.IDs))
		}
	}
}

// FuzzFreeObjectsDecode checks that FreeObjects' decoder never panics and
// agrees with the generic decoder whenever both decode.
func FuzzFreeObjectsDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 10 {
		b, _ := randomFrees(rng).AppendCBOR(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast FreeObjects
		var generic freeFields
		ferr := fast.DecodeCBOR(data)
		gerr := codec.DecMode().Unmarshal(data, &generic)
		if len(fast.IDs) == 0 && len(generic.IDs) == 0 {
			generic.IDs = fast.IDs // nil and empty mean the same
		}
		if ferr == nil && gerr == nil && !reflect.DeepEqual(fast, FreeObjects(generic)) {
			t.Fatalf("decoders disagree on %x:\nfast    %+v\ngeneric %+v", data, fast, generic)
		}
	})
}

func BenchmarkFreeObjectsCodec(b *testing.B) {
	f := FreeObjects{IDs: make([]dag.ObjectID, 64)}
	for i := range f.IDs {
		f.IDs[i] = dag.NewObjectID(dag.PackSubtaskID(7, 1, uint64(1000+i)), 0)
	}
	data, _ := f.AppendCBOR(nil)
	b.Run("encode/generic", func(b *testing.B) {
		for b.Loop() {
			codec.EncMode().Marshal(freeFields(f))
		}
	})
	b.Run("encode/fast", func(b *testing.B) {
		buf := make([]byte, 0, 2*len(data))
		for b.Loop() {
			buf, _ = f.AppendCBOR(buf[:0])
		}
	})
	b.Run("decode/generic", func(b *testing.B) {
		var out freeFields
		for b.Loop() {
			codec.DecMode().Unmarshal(data, &out)
		}
	})
	b.Run("decode/fast", func(b *testing.B) {
		var out FreeObjects
		for b.Loop() {
			out.DecodeCBOR(data)
		}
	})
}
