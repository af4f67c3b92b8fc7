package wire

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/phobos-project/phobos/internal/codec"
)

// metaMessages returns a fresh value of every metadata message.
func metaMessages() []any {
	return []any{
		&AllocTask{}, &AllocStage{}, &AllocSubtasks{}, &Apply{}, &Allocated{},
		&HeadInfoRequest{}, &HeadSelf{}, &JoinHead{}, &RemoveHead{}, &ClusterStatusRequest{},
	}
}

func TestMetaMessagesRoundTrip(t *testing.T) {
	req := [16]byte{1, 2, 3}
	for _, v := range []any{
		&AllocTask{RequestID: req, Wait: time.Second},
		&AllocStage{RequestID: req, Task: 7, Wait: 5},
		&AllocSubtasks{RequestID: req, Task: 7, Stage: 2, Count: 1 << 40},
		&Apply{Command: []byte{0xa0}, Wait: time.Millisecond},
		&Allocated{Task: 1, Stage: 2, Base: 3, Count: 4, Deduped: true},
		&HeadInfoRequest{Raylets: true},
		&HeadSelf{Head: HeadInfo{ID: "h1", Addr: "a:1", Role: "leader", CommitIndex: 9, Term: 2, AppliedIndex: 9},
			LeaderID: "h1", LastIndex: 9, Voters: []HeadInfo{{ID: "h1", Addr: "a:1"}},
			Raylets: []RayletInfo{{ID: "r1", Addr: "b:2", State: "alive", Slots: 2}}},
		&JoinHead{ID: "h4", Addr: "c:3", Fresh: true, Incarnation: 99, Wait: time.Second},
		&RemoveHead{ID: "h2"},
		&ClusterStatusRequest{Timeout: time.Second},
	} {
		b, err := codec.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := codec.Unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%T round trip: got %+v, want %+v", v, got, v)
		}
	}
}

// FuzzMetaMessages decodes bytes from outside the process into every
// metadata message: no panic, and whatever decodes encodes, and decoding
// that gives the same encoding again.
func FuzzMetaMessages(f *testing.F) {
	for _, v := range []any{AllocSubtasks{Task: 1, Stage: 1, Count: 3}, JoinHead{ID: "h", Addr: "a"}, Apply{Command: []byte{1}}} {
		b, _ := codec.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xa1, 0x02, 0x1b, 0, 0, 0, 1, 0, 0, 0, 0}) // task 2^32
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range metaMessages() {
			if codec.Unmarshal(data, v) != nil {
				continue
			}
			b, err := codec.Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded but does not encode: %v", v, err)
			}
			again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := codec.Unmarshal(b, again); err != nil {
				t.Fatalf("%T: its own encoding does not decode: %v", v, err)
			}
			if b2, err := codec.Marshal(again); err != nil || !bytes.Equal(b, b2) {
				t.Fatalf("%T: encodes to %x, then to %x (%v)", v, b, b2, err)
			}
		}
	})
}
