package sched

import (
	"testing"

	"github.com/phobos-project/phobos/runtime/wire"
)

// freedCount is how many objects the harness saw freed on any raylet.
func (h *harness) freedCount() int {
	n := 0
	for _, ids := range h.freed {
		n += len(ids)
	}
	return n
}

// TestFreesRideOnPullReplies: a raylet that pulls again gets the frees its
// completions made in the reply, not as messages.
func TestFreesRideOnPullReplies(t *testing.T) {
	h := newTestHarness(t, 2)
	p := h.addJob(1, seed(40, 5), 0)
	h.run("A", "B")
	if len(h.ended) != 1 {
		t.Fatalf("ended %v", h.ended)
	}
	// The last completions' frees wait: no raylet pulled after them.
	h.advance(freePeriod)
	if want := p.Stage.Len() - 1; h.freedCount() != want {
		t.Fatalf("freed %d objects, want %d (all but the result)", h.freedCount(), want)
	}
	if h.inReply == 0 {
		t.Fatal("no free rode on a pull reply")
	}
	// Only what the raylets' last completions freed went as messages
	// when the timer fired: one a raylet at most.
	if h.freeMsgs > 2 {
		t.Fatalf("%d free messages (%d frees in replies); want at most one a raylet, at the timer", h.freeMsgs, h.inReply)
	}
}

// TestFreesWaitAtMostFreePeriod: frees held for a raylet that does not
// pull go when the timer fires, and not before.
func TestFreesWaitAtMostFreePeriod(t *testing.T) {
	h := newTestHarness(t, 1)
	h.addJob(1, seed(20, 5), 0) // 4 sources, their fused adds, one sum
	// Take everything (readers go ahead of their inputs), then report it
	// done without pulling again.
	var sps []wire.SubtaskSpec
	for range 10 {
		got := h.take1("A", 8)
		if len(got) == 0 {
			break
		}
		sps = append(sps, got...)
	}
	h.done("A", sps...)
	if len(h.ended) != 1 {
		t.Fatalf("ended %v after running %d subtasks", h.ended, len(sps))
	}
	before := h.freedCount()
	if before != 0 || !h.l.s.HoldsFrees() {
		t.Fatalf("freed %d at once; want them held", before)
	}
	h.advance(freePeriod - 1)
	if h.freedCount() != before {
		t.Fatalf("frees went before freePeriod: %d, then %d", before, h.freedCount())
	}
	msgs := h.freeMsgs
	h.advance(1)
	if h.freedCount() <= before || h.freeMsgs != msgs+1 {
		t.Fatalf("after freePeriod: freed %d (was %d), messages %d (was %d); want the held frees in one message", h.freedCount(), before, h.freeMsgs, msgs)
	}
}

// TestFreesGoAtOnceWithoutFreesInReply: a raylet whose pulls do not take
// frees in their replies gets them at once, as before frees were batched:
// a rebuilt producer dispatched to it must not be followed by an older
// free of its output.
func TestFreesGoAtOnceWithoutFreesInReply(t *testing.T) {
	h := newTestHarness(t, 1)
	h.addJob(1, seed(20, 5), 0)
	r := h.raylet("A")
	c := h.call("pull A")
	h.step(&Pull{Call: c, Session: r.sess, PullIn: &wire.PullIn{Credits: 8}})
	specs, _ := h.got[c].Value.([]wire.SubtaskSpec)
	if len(specs) == 0 {
		t.Fatal("no work")
	}
	h.done("A", specs...)
	if h.freedCount() == 0 || h.freeMsgs == 0 {
		t.Fatalf("freed %d in %d messages; want the frees at once", h.freedCount(), h.freeMsgs)
	}
	if h.l.s.HoldsFrees() && len(h.l.s.raylets[0].later) > 0 {
		t.Fatalf("frees held for a raylet that does not take them in replies: %v", h.l.s.raylets[0].later)
	}
}

// TestFreesGoInBatches: once freeBatch frees wait for a raylet, they go as
// a message without waiting for the timer.
func TestFreesGoInBatches(t *testing.T) {
	h := newTestHarness(t, 1)
	h.addJob(1, seed(int64(freeBatch)*2*5, 5), 0) // 2 × freeBatch sources
	h.take1("A", 0)                               // a first pull: A takes frees in its replies
	var sps []wire.SubtaskSpec
	for range 100 {
		got := h.take1("A", 4*freeBatch)
		if len(got) == 0 {
			break
		}
		sps = append(sps, got...)
	}
	// Finish them one report at a time, never pulling: the frees pile up.
	for _, sp := range sps {
		h.done("A", sp)
	}
	if h.freeMsgs == 0 {
		t.Fatalf("%d frees held and none sent without the timer", len(h.l.s.raylets[0].later))
	}
	if got := len(h.l.s.raylets[0].later); got >= freeBatch {
		t.Fatalf("%d frees held, at least a batch (%d)", got, freeBatch)
	}
}
