package wire

import (
	"errors"
	"runtime"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// arrayFrame is {key: [n × item]}.
func arrayFrame(key byte, n int, item []byte) []byte {
	b := []byte{0xa1, key, 0x9a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for range n {
		b = append(b, item...)
	}
	return b
}

// TestHeadBoundMessagesAreNotAmplified: frames of items too small to be
// real (empty maps, which decoded into whole structs: 96× for
// completions) are refused before anything is sized by their count, and
// real items decode within a small factor of their frame.
func TestHeadBoundMessagesAreNotAmplified(t *testing.T) {
	id := dag.PackSubtaskID(1, 2, 3)
	// A completion as a raylet sends one: with the slot and times of the
	// attempt (every attempt that ran has them).
	real := Completion{ID: id, Sizes: []int64{1}, Slot: 3, Started: 1_795_000_000_000_000_000, TookUS: 1500}
	realB, _ := codec.Marshal(&real)
	held := HeldObject{ID: dag.NewObjectID(id, 0)}
	heldB, _ := codec.Marshal(&held)
	const n = 1 << 18
	cases := []struct {
		name    string
		data    []byte
		v       any
		refused bool
	}{
		{"pull of empty completions", arrayFrame(3, n, []byte{0xa0}), &Pull{}, true},
		{"head's pull of empty completions", arrayFrame(3, n, []byte{0xa0}), &PullIn{}, true},
		{"complete of empty completions", arrayFrame(1, n, []byte{0xa0}), &Complete{}, true},
		{"head's complete of empty completions", arrayFrame(1, n, []byte{0xa0}), &CompleteIn{}, true},
		{"complete of attempt-only completions", arrayFrame(1, n, []byte{0xa1, 0x02, 0x01}), &Complete{}, true},
		{"head's complete of attempt-only completions", arrayFrame(1, n, []byte{0xa1, 0x02, 0x01}), &CompleteIn{}, true},
		{"register of empty held objects", arrayFrame(5, n, []byte{0xa0}), &RegisterRaylet{}, true},
		{"pull of real completions", arrayFrame(3, n, realB), &Pull{}, false},
		{"head's pull of real completions", arrayFrame(3, n, realB), &PullIn{}, false},
		{"register of real held objects", arrayFrame(5, n, heldB), &RegisterRaylet{}, false},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := codec.Unmarshal(c.data, c.v)
		runtime.ReadMemStats(&after)
		spent := after.TotalAlloc - before.TotalAlloc
		if c.refused {
			if !errors.Is(err, dag.ErrInvalidArgument) || spent > 64<<10 {
				t.Errorf("%s: err %v after allocating %d bytes; want it refused before", c.name, err, spent)
			}
			continue
		}
		if err != nil || spent > 8*uint64(len(c.data)) {
			t.Errorf("%s: err %v; %d bytes took %d to decode (%.1f×)", c.name, err, len(c.data), spent, float64(spent)/float64(len(c.data)))
		}
	}
}

// TestPullDecodingStaysAllocationFree: the size check costs the head's hot
// path no allocation: a pull decoded into a reset one allocates nothing.
func TestPullDecodingStaysAllocationFree(t *testing.T) {
	p := Pull{Credits: 8, Done: []Completion{
		{ID: dag.PackSubtaskID(1, 1, 1), Sizes: []int64{8}},
		{ID: dag.PackSubtaskID(1, 1, 2), Sizes: []int64{8, 16}, Fetched: []dag.ObjectID{dag.NewObjectID(dag.PackSubtaskID(1, 1, 9), 0)}},
	}}
	b, _ := codec.Marshal(&p)
	var got PullIn
	if err := codec.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		got.Reset()
		if err := codec.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("decoding a pull into a reset one allocates %v times, want 0", allocs)
	}
	var c CompleteIn
	cb, _ := codec.Marshal(&Complete{Done: p.Done})
	_ = codec.Unmarshal(cb, &c)
	if allocs := testing.AllocsPerRun(100, func() {
		c.Reset()
		if err := codec.Unmarshal(cb, &c); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("decoding a complete into a reset one allocates %v times, want 0", allocs)
	}
	var second Completion
	if got.Done.Len() == 2 {
		got.Done.At(1, &second)
	}
	if got.Done.Len() != 2 || len(second.Sizes) != 2 || second.Sizes[1] != 16 || len(second.Fetched) != 1 || got.Credits != 8 {
		t.Fatalf("decoded %+v", got)
	}
}
