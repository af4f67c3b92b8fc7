package sched

import (
	"math/rand/v2"
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
	if st.Kind != dag.KindResourceExhausted || !strings.Contains(st.Error, "raise the max frame of the raylets and the heads") || !strings.Contains(st.Error, "reads 64 inputs") {
		t.Fatalf("job error %q (kind %v, cause %v): want it to name the inputs and the max frame, of kind resource exhausted", st.Error, st.Kind, st.Cause)
	}
	if got := h.l.s.raylets[h.raylet("A").r].running; got != 0 {
		t.Fatalf("raylet A runs %d subtasks after the job failed", got)
	}
}

// TestFindInputMatchesScan holds findInput's index to the scan it
// replaces: over specs of up to 300 inputs with repeats, appended between
// looks, it finds the first input of each key, and none of a key absent.
func TestFindInputMatchesScan(t *testing.T) {
	s := newScheduler()
	rng := rand.New(rand.NewPCG(1, 2))
	obj := func(k int) dag.ObjectID { return dag.NewObjectID(dag.PackSubtaskID(1, 1, uint64(k)), 0) }
	scan := func(in0 int, id dag.ObjectID, part int32) int {
		for y := in0; y < len(s.inBuf); y++ {
			if s.inBuf[y].Object == id && s.inBuf[y].Part == part {
				return y - in0
			}
		}
		return -1
	}
	for round := range 200 {
		s.inBuf = s.inBuf[:0]
		// Inputs of earlier specs of the same reply come first.
		for range rng.IntN(5) {
			s.inBuf = append(s.inBuf, wire.InputSpec{Object: obj(rng.IntN(50))})
		}
		in0 := len(s.inBuf)
		s.resetInputIndex()
		for range 1 + rng.IntN(300) {
			id, part := obj(rng.IntN(400)), int32(rng.IntN(2))
			if got, want := s.findInput(in0, id, part), scan(in0, id, part); got != want {
				t.Fatalf("round %d, %d inputs: findInput(%v, part %d) = %d, the scan finds %d", round, len(s.inBuf)-in0, id, part, got, want)
			}
			s.inBuf = append(s.inBuf, wire.InputSpec{Object: id, Part: part}) // listed again or not, as spec may
		}
	}
}

// BenchmarkSpecWideGather builds the spec of a subtask reading 1,000
// inputs, as a gather of a whole step of Task Bench's all_to_all does.
func BenchmarkSpecWideGather(b *testing.B) {
	h := newHarness(b, Config{Head: "h1"})
	h.records()
	h.addRaylet("A", 2)
	h.addJob(1, tensor.Ones([]int64{1000}, tensor.Chunks(1)).SumCombine(1000), 0)
	h.done("A", h.take1("A", 1000)...)
	j := h.stage(1, 0)
	i := int32(-1)
	for k, st := range j.state {
		if st == Ready {
			i = int32(k)
		}
	}
	if i < 0 {
		b.Fatal("no gather ready")
	}
	s := h.l.s
	for b.Loop() {
		s.resetBuffers()
		if sp := s.spec(j, i); len(sp.Inputs) != 1000 {
			b.Fatalf("the gather reads %d inputs", len(sp.Inputs))
		}
	}
}
