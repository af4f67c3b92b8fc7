package sched

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/phobos-project/phobos/dag"
)

// TestEntrySize: a queue entry stays 32 bytes on 64-bit machines (one
// per queued subtask; the order of its fields decides its padding).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("not a 64-bit machine")
	}
	if got := unsafe.Sizeof(entry{}); got != 32 {
		t.Errorf("entry is %d bytes, want 32", got)
	}
}

// TestEntryHoldsNoPointer: nothing in a queue entry is a pointer, so the
// collector does not read the queues (a big job queues an entry a
// subtask).
func TestEntryHoldsNoPointer(t *testing.T) {
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				f := ty.Field(i)
				walk(f.Type, path+"."+f.Name)
			}
		case reflect.Array:
			walk(ty.Elem(), path+"[]")
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func,
			reflect.Interface, reflect.String, reflect.UnsafePointer:
			t.Errorf("entry%s is a %s: the collector would read every queued entry", path, ty.Kind())
		}
	}
	walk(reflect.TypeFor[entry](), "")
}

// TestReusedSlotKeepsStaleEntriesStale: a cancelled job's queue entries
// stay on its raylet's queue after the job is released, and the next job
// takes the released job's slot in the stage table; none of those entries
// may pass for the new job's subtasks (the harness checks the invariants,
// live entries against READY subtasks among them, after every event), and
// the new job runs to its end.
func TestReusedSlotKeepsStaleEntriesStale(t *testing.T) {
	h := newTestHarness(t, 1)
	h.addJob(1, seed(40, 5), 0)
	old := h.stage(1, 0)
	running := h.take1("A", 2)
	if h.raylet("A").r < 0 || h.l.s.raylets[h.raylet("A").r].queue.Len() == 0 {
		t.Fatal("the job queued nothing on A")
	}
	h.cancel(1)
	h.done("A", running...)
	if info := h.info(1); info.Status != dag.JobCancelled {
		t.Fatalf("job 1: %+v, want cancelled", info)
	}
	if rp := h.release(1); rp.Err != nil {
		t.Fatalf("release job 1: %v", rp.Err)
	}
	stale := h.l.s.raylets[h.raylet("A").r].queue.Len()
	if stale == 0 {
		t.Fatal("no stale entry left on A's queue: the test tests nothing")
	}
	h.addJob(2, seed(40, 5), 0)
	if got := h.stage(2, 0).slot; got != old.slot {
		t.Fatalf("job 2 took slot %d, not the released job's %d: the test tests nothing", got, old.slot)
	}
	h.run("A")
	if info := h.info(2); info.Status != dag.JobSucceeded {
		t.Fatalf("job 2: %+v, want succeeded", info)
	}
}

// TestDropSlotClearsFrontiers: a released stage's frontier entries, which
// carry no sequence number to go stale by, leave every raylet's frontier
// before its slot can go to another stage.
func TestDropSlotClearsFrontiers(t *testing.T) {
	s := newScheduler()
	a, b := &stage{}, &stage{}
	a.slot, b.slot = s.takeSlot(a), s.takeSlot(b)
	r := s.AddRaylet("r1", "r1:7001", 4)
	rv := s.raylets[r]
	rv.frontier = []entry{{slot: a.slot, i: 1}, {slot: b.slot, i: 2}, {slot: a.slot, i: 3}}
	s.dropSlot(a)
	if len(rv.frontier) != 1 || rv.frontier[0].slot != b.slot {
		t.Fatalf("frontier after dropping slot %d: %+v", a.slot, rv.frontier)
	}
	if s.stageAt(a.slot) != nil {
		t.Fatal("a dropped slot still names its stage")
	}
	if c := (&stage{}); s.takeSlot(c) != a.slot {
		t.Fatal("a dropped slot is not reused")
	}
}
