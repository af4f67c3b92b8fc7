package sched

import (
	"strings"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// TestPullReplyFitsMaxFrame: a raylet that asks for more subtasks than
// its max frame holds gets replies under that frame, each saying More,
// and the job still runs to the end; the frees that do not fit in a reply
// go as messages. (The harness fails the test on any reply over
// maxReply.)
func TestPullReplyFitsMaxFrame(t *testing.T) {
	h := newHarness(t, Config{Head: "h1"})
	h.records()
	h.maxReply = 16 << 10
	h.addRaylet("A", 2)
	p := h.addJob(1, seed(4096, 1), 0)
	// The raylet takes all it can get, pull after pull, and only then
	// reports what it took, all on one pull: a wave's completions free a
	// whole level of the tree at once, more IDs than a reply may carry.
	var held, done []wire.Completion
	pulls, more := 0, 0
	for len(h.ended) == 0 {
		if pulls++; pulls > 10000 {
			t.Fatal("the job did not end")
		}
		c := h.call("pull A")
		h.noteDone(h.raylet("A"), done)
		h.step(&Pull{Call: c, Session: h.raylet("A").sess, PullIn: &wire.PullIn{Credits: 1 << 20, Done: wire.CompletionsOf(done...), FreesInReply: true}})
		specs, _ := h.got[c].Value.([]wire.SubtaskSpec)
		done = done[:0]
		if len(specs) == 0 {
			held, done = done, held
			continue
		}
		for _, sp := range specs {
			held = append(held, ok(sp))
		}
		if len(specs) < p.Stage.Len() {
			more++
		}
	}
	st, err := h.status(1, false)
	if err != nil || st.Status != dag.JobSucceeded {
		t.Fatalf("job %+v, %v", st, err)
	}
	// The replies were cut by bytes, not by credits (which would have
	// handed out every leaf at once), and not to nothing: each leaf's spec
	// takes a few hundred bytes, its bound about twice that, and specs
	// are added while their bounds take under half the frame.
	if more < 100 || h.biggestReply < h.maxReply/8 {
		t.Fatalf("%d pulls, %d of them cut short, the biggest reply %d bytes: the max frame did not bound them", pulls, more, h.biggestReply)
	}
	if h.freeMsgs == 0 {
		t.Fatal("every free fit in the replies: the test no longer shows frees moved to messages")
	}
	freed := 0
	for _, ids := range h.freed {
		freed += len(ids)
	}
	if want := p.Stage.Len() - 1; freed != want {
		t.Fatalf("freed %d objects, want %d", freed, want)
	}
}

// TestSpecOverMaxFrameFailsJob: a subtask whose spec alone is more than a
// reply may carry fails its job with an error that says so and what to
// do, instead of going out in a reply the raylet would refuse (which left
// the job waiting for it for ever).
func TestSpecOverMaxFrameFailsJob(t *testing.T) {
	h := newHarness(t, Config{Head: "h1"})
	h.records()
	h.maxReply = 4 << 10 // transport.MinFrameSize: a spec may take 1 KiB
	h.addRaylet("A", 2)
	// Sources of one element each, summed by one subtask reading all 64.
	h.addJob(1, tensor.Ones([]int64{64}, tensor.Chunks(1)).SumCombine(64), 0)
	h.run("A")
	st, err := h.status(1, false)
	if err != nil || st.Status != dag.JobFailed {
		t.Fatalf("job %+v, %v: want it failed", st, err)
	}
	if st.Kind != dag.KindResourceExhausted || !strings.Contains(st.Error, "raise the raylets' max frame") || !strings.Contains(st.Error, "reads 64 inputs") {
		t.Fatalf("job error %q (kind %v, cause %v): want it to name the inputs and the max frame, of kind resource exhausted", st.Error, st.Kind, st.Cause)
	}
	if got := h.l.s.raylets[h.raylet("A").r].running; got != 0 {
		t.Fatalf("raylet A runs %d subtasks after the job failed", got)
	}
}
