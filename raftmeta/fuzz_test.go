package raftmeta

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

func seedCommands(f *testing.F) {
	for _, b := range []Body{
		AllocTask{}, AllocStage{Task: 1}, AllocSubtasks{Task: 1, Stage: 1, N: 3},
		SubmitJob{Graph: []byte{0xa0}, Time: t0}, BeginStage{Task: 2, N: 4},
		SetJobStatus{Task: 2, Status: JobSucceeded, Time: t0}, DeleteJob{Task: 2},
		RegisterRaylet{Raylet: Raylet{ID: "r", Addr: "h:1"}}, DeregisterRaylet{ID: "r"},
		ReleaseOnEnd{Task: 2}, ReleaseJob{Task: 2},
	} {
		d, err := EncodeCommand(Command{RequestID: NewRequestID(), Body: b})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d)
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
}

// FuzzDecodeCommand: any bytes decode to an error or to a command that
// encodes and decodes again to the same bytes.
func FuzzDecodeCommand(f *testing.F) {
	seedCommands(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			return
		}
		b1, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		c2, err := DecodeCommand(b1)
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		b2, _ := EncodeCommand(c2)
		if !bytes.Equal(b1, b2) {
			t.Fatal("encode/decode is not stable")
		}
	})
}

// FuzzFSMApply: any log entry gets a Result; a refused one leaves the state
// (apart from the dedupe table) as it was.
func FuzzFSMApply(f *testing.F) {
	seedCommands(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, 8)
		populate(h)
		before := stateBytes(t, h.f)
		h.index++
		out := h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: data})
		r, ok := out.(Result)
		if !ok {
			t.Fatalf("Apply returned %T", out)
		}
		if r.Err() != nil && !bytes.Equal(before, stateBytes(t, h.f)) {
			t.Fatalf("refused entry (%v) changed the state", r.Err())
		}
	})
}

// FuzzRestore: any bytes restore or fail cleanly; a restored state persists
// to a snapshot that restores to the same bytes.
func FuzzRestore(f *testing.F) {
	h := newHarness(f, 0)
	populate(h)
	f.Add(snapshotBytes(f, h.f))
	f.Add(snapshotBytes(f, NewFSM(0, nil)))
	f.Add([]byte{0xa1, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := NewFSM(16, nil)
		if err := restore(t, g, data); err != nil {
			return
		}
		b1 := snapshotBytes(t, g)
		g2 := NewFSM(16, nil)
		if err := restore(t, g2, b1); err != nil {
			t.Fatalf("a snapshot of a restored state does not restore: %v", err)
		}
		if !bytes.Equal(b1, snapshotBytes(t, g2)) {
			t.Fatal("restore is not stable")
		}
		// and the state machine still works
		h := &harness{t: t, f: g2}
		h.apply(NewRequestID(), AllocTask{})
	})
}
