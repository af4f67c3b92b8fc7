package sched

import (
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// TestPlacementFollowsInputBytes: an ADD whose inputs are on two raylets
// goes where more of its input bytes are.
func TestPlacementFollowsInputBytes(t *testing.T) {
	h := newTestHarness(t, 2)
	p := h.addJob(1, seed(8, 8), 0) // rand a, rand b -> add+sum
	a, b := h.take1("A", 10), h.take1("B", 10)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("initial assignment put both sources on one raylet: %+v", p.Stage.Subtasks)
	}
	h.doneSized("A", a[0], 100)
	h.doneSized("B", b[0], 5000)
	if got := h.take1("A", 10); len(got) != 0 {
		t.Fatalf("the add went to the raylet with fewer input bytes")
	}
	if got := h.take1("B", 10); len(got) != 1 {
		t.Fatalf("raylet B (5000 input bytes) got %d subtasks", len(got))
	}
}

// TestPlacementFavoursTheReporter: a subtask made ready by a raylet's
// report goes to that raylet when the best holder of its inputs holds at
// most nearBytes more, and to the best holder beyond that. (That the
// report's room bounds it: pipeline-gather.script.)
func TestPlacementFavoursTheReporter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizeA int64 // A's input, reported first; B's is 100 bytes
		want  string
	}{
		{"near", 100 + nearBytes, "B"},
		{"far", 101 + nearBytes, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHarness(t, 2)
			h.addJob(1, seed(8, 8), 0) // rand a, rand b -> add+sum
			a, b := h.take1("A", 10), h.take1("B", 10)
			if len(a) != 1 || len(b) != 1 {
				t.Fatalf("initial assignment put both sources on one raylet")
			}
			h.doneSized("A", a[0], tc.sizeA)
			h.doneSized("B", b[0], 100) // B's report makes the add ready
			other := map[string]string{"A": "B", "B": "A"}[tc.want]
			if got := h.take1(other, 10); len(got) != 0 {
				t.Fatalf("the add went to %s, want %s", other, tc.want)
			}
			if got := h.take1(tc.want, 10); len(got) != 1 {
				t.Fatalf("raylet %s got %d subtasks, want the add", tc.want, len(got))
			}
		})
	}
}

// TestReporterRoom: a report that readies many subtasks at once, each
// reading as much from either raylet (an all-to-all's next step), draws
// to the reporter only what it will take: no more queued than the credits
// of the pull carrying the report, or than its slots for a report sent
// alone. The rest are placed as before, by free slots, so the six end
// three on each raylet (with no bound, all six went to B).
func TestReporterRoom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		credits int // of B's pull carrying its report; 0: a report sent alone
		want    int // readers queued on or sent to B
	}{
		{"report", 0, 3}, // two for B's two slots, then one of the four spread
		{"pull", 3, 3},   // three for the pull; A the freer for the rest
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHarness(t, 2) // two slots each
			a := tensor.Ones([]int64{8}, tensor.Chunks(8))
			b := tensor.Ones([]int64{8}, tensor.Chunks(8))
			r := []*tensor.Tensor{a.Add(b), a.Sub(b), a.Mul(b), a.Div(b), a.Maximum(b), a.Minimum(b)}
			p := h.addJob(1, r[0].Add(r[1]).Add(r[2].Add(r[3])).Add(r[4].Add(r[5])), 0)
			sa, sb := h.take1("A", 10), h.take1("B", 10)
			if len(sa) != 1 || len(sb) != 1 {
				t.Fatalf("initial assignment put both sources on one raylet: %+v", p.Stage.Subtasks)
			}
			h.done("A", sa...)
			if tc.credits == 0 {
				h.done("B", sb...)
			} else if got := h.pull("B", tc.credits, 0, ok(sb[0])); len(got) != tc.credits {
				t.Fatalf("B's pull of %d credits got %d subtasks", tc.credits, len(got))
			}
			j := h.stage(1, 0)
			onB, readers := 0, 0
			for i := range int32(len(j.state)) {
				if preds(p, i) != "<0,1" {
					continue
				}
				readers++
				if j.where[i] == h.raylet("B").r {
					onB++
				}
			}
			if readers != 6 || onB != tc.want {
				t.Fatalf("%d of %d readers went to B, want %d of 6", onB, readers, tc.want)
			}
		})
	}
}

// TestPlacementTiesAndBroadcast: with equal input bytes the raylet with
// more free slots wins; a broadcast input (read by more than 8 subtasks)
// counts zero.
func TestPlacementTiesAndBroadcast(t *testing.T) {
	s := newScheduler()
	s.AddRaylet("A", "a", 4)
	s.AddRaylet("B", "b", 4)
	// A hand-built graph: source 0 read by 10 subtasks (a broadcast),
	// source 1 read by subtask 2 only.
	g := dag.NewChunkGraph(13)
	args := g.AddArgs(nil)
	add := func(ins ...int32) int32 {
		c, err := g.AddNode(dag.OpIDOf("tensor.add"), 0, args, dag.Float64, ins, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	src0, src1 := add(), add()
	for k := 0; k < 10; k++ {
		if k == 0 {
			add(src0, src1)
		} else {
			add(src0)
		}
	}
	sg := dag.NewSubtaskGraph(g, g.Len())
	for c := int32(0); c < int32(g.Len()); c++ {
		sg.AddSubtask([]int32{c}, []int32{c})
	}
	if err := sg.Link(); err != nil {
		t.Fatal(err)
	}
	sg.Task, sg.Stage, sg.Base = 1, 1, 1
	sg.Subtasks[0].Raylet, sg.Subtasks[1].Raylet = 0, 1
	var results []dag.ObjectID
	for c := int32(2); c < int32(g.Len()); c++ {
		id, _ := sg.ObjectOf(c)
		results = append(results, id)
	}
	plan := &lowering.Plan{Stage: sg, Results: []lowering.Result{{Objects: results}}}
	s.AddJob(1, plan, jobPolicy{}, []Raylet{0, 1})
	pull := func(r Raylet) []wire.SubtaskSpec { return s.Pull(r, 1, nil) }
	s0, s1 := pull(0), pull(1)
	// The broadcast source is huge, the other small: bytes of the broadcast
	// must not drag subtask 2 to raylet A.
	s.Complete(0, &wire.Completion{ID: s0[0].ID, Sizes: []int64{1 << 30}})
	s.Complete(1, &wire.Completion{ID: s1[0].ID, Sizes: []int64{10}})
	j := s.tasks[1][0]
	if w := j.where[2]; w != 1 {
		t.Fatalf("subtask 2 (reads a broadcast on A and 10 bytes on B) queued on %d, want B", w)
	}
	// Subtasks reading only the broadcast: no bytes anywhere, so free
	// slots decide, then queue length: they spread over both raylets.
	on := map[Raylet]int{}
	for i := int32(3); i < int32(g.Len()); i++ {
		on[j.where[i]]++
	}
	if on[0] == 0 || on[1] == 0 {
		t.Fatalf("broadcast readers all on one raylet: %v", on)
	}
}

func TestReadyQueueOrder(t *testing.T) {
	var q readyQueue
	prios := []dag.Priority{{Depth: 1}, {Depth: 3}, {Depth: 3, DemandDepth: 1}, {Depth: 0, Succs: 1}, {Depth: 0}, {Depth: 3}}
	for i, p := range prios {
		q.push(entry{i: int32(i), seq: uint64(i + 1), prio: p})
	}
	var got []int32
	for q.Len() > 0 {
		got = append(got, q.pop().i)
	}
	// deeper first; then demanded by deeper; then fewer successors; then newest
	want := []int32{2, 5, 1, 0, 4, 3}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("pop order %v, want %v", got, want)
		}
	}
}

// TestRetriesAvoidAFailingRaylet: a raylet that fails a subtask at once
// (a full disk, say) must not draw its retries back, by placement or by
// stealing them while idle.
func TestRetriesAvoidAFailingRaylet(t *testing.T) {
	h := newTestHarness(t, 3)
	h.addJob(1, tensor.Ones([]int64{4}, tensor.Chunks(4)).Sum(), 3)
	names := []string{"A", "B", "C"}
	bad := ""
	var sp []wire.SubtaskSpec
	for _, n := range names {
		if sp = h.take1(n, 1); len(sp) == 1 {
			bad = n
			break
		}
	}
	h.fail(bad, sp[0], dag.KindResourceExhausted, "spill dir full")
	// The bad raylet is idle and asks for work: it must not steal the retry.
	if got := h.take1(bad, 10); len(got) != 0 {
		t.Fatalf("the failing raylet took its retry back: %v", got)
	}
	good := ""
	for _, n := range names {
		if n == bad {
			continue
		}
		if sp = h.take1(n, 1); len(sp) == 1 {
			good = n
			break
		}
	}
	if good == "" {
		t.Fatal("the retry went nowhere")
	}
	// It fails on a second raylet too: the third gets it, not the first.
	h.fail(good, sp[0], dag.KindUnavailable, "transient")
	if got := h.take1(bad, 10); len(got) != 0 {
		t.Fatal("the first failing raylet took the second retry")
	}
	third := ""
	for _, n := range names {
		if n != bad && n != good {
			third = n
		}
	}
	if sp = h.take1(third, 1); len(sp) != 1 {
		t.Fatalf("the third raylet did not get the retry")
	}
	h.done(third, sp[0])
}
