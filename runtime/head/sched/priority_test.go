package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// simulate runs a lowered job on the pure scheduler with the given raylet
// slots: every round, each raylet pulls up to its free slots, then one
// running subtask completes (raylets take turns; each finishes its oldest
// first). It returns the peak number of live intermediate objects
// (finished, not yet freed, not results) and the order subtasks ran in.
func simulate(t *testing.T, p *lowering.Plan, slots []int) (peak int, ran []int32) {
	t.Helper()
	s := newScheduler()
	for i, n := range slots {
		s.AddRaylet(string(rune('A'+i)), "addr", n)
	}
	index, _ := s.AliveSlots()
	const task = 1
	s.AddJob(task, p, jobPolicy{}, index)
	sg := p.Stage
	result := map[dag.ObjectID]bool{}
	for _, r := range p.Results {
		for _, id := range r.Objects {
			result[id] = true
		}
	}
	live := map[dag.ObjectID]bool{}
	running := make([][]wire.SubtaskSpec, len(slots))
	take := func(fx *schedEffects) {
		for _, ids := range fx.Free {
			for _, id := range ids {
				delete(live, id)
			}
		}
	}
	turn := 0
	for done := 0; done < sg.Len(); {
		for r := range slots {
			running[r] = s.Pull(Raylet(r), slots[r]-len(running[r]), running[r])
		}
		r := -1
		for k := range slots {
			if c := (turn + k) % len(slots); len(running[c]) > 0 {
				r = c
				break
			}
		}
		if r < 0 {
			t.Fatalf("stuck after %d of %d subtasks", done, sg.Len())
		}
		turn++
		sp := running[r][0]
		running[r] = running[r][1:]
		sizes := make([]int64, len(sp.Outputs))
		s.fx.reset(len(s.raylets))
		fx := s.Complete(Raylet(r), &wire.Completion{ID: sp.ID, Attempt: sp.Attempt, Sizes: sizes})
		s.FlushFrees() // count a free when it is decided, not when it goes
		take(fx)
		for k := range sp.Outputs {
			if id := dag.NewObjectID(sp.ID, uint32(k)); !result[id] {
				live[id] = true
			}
		}
		// Completing a subtask frees its inputs at once; count after that.
		peak = max(peak, len(live))
		ran = append(ran, int32(sp.ID.Index()-sg.Base))
		done++
	}
	if info, _ := s.Job(task); info.Status != dag.JobSucceeded {
		t.Fatalf("job ended %v", info.Status)
	}
	if len(live) != 0 {
		t.Fatalf("%d intermediates never freed", len(live))
	}
	return peak, ran
}

// TestDepthFirstKeepsFewIntermediates: a wide tree reduction (4,096 leaf
// subtasks, combine 4: depth 6) on 2 raylets of 2 slots. With the seeds'
// priorities the live intermediates stay near depth × raylets × slots; run
// breadth-first (shallow first) they grow to the width of the tree.
func TestDepthFirstKeepsFewIntermediates(t *testing.T) {
	const leaves = 4096
	g, err := tensor.Graph(tensor.Rand([]int64{leaves * 10}, tensor.Chunks(10), tensor.Seed(1)).Sum())
	if err != nil {
		t.Fatal(err)
	}
	slots := []int{2, 2}
	lower := func() *lowering.Plan {
		p, err := lowering.Lower(g, 1, lowering.Options{Slots: slots}, dag.Ops, lowering.Counter())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := lower()
	depth := int32(0)
	for _, st := range p.Stage.Subtasks {
		depth = max(depth, st.Priority.Depth)
	}
	if depth != 6 || p.Stage.Len() != leaves+1024+256+64+16+4+1 {
		t.Fatalf("tree of depth %d with %d subtasks", depth, p.Stage.Len())
	}

	policy, order := simulate(t, p, slots)

	// Equal priorities: only the scheduler's newest-first tie-break is left.
	eq := lower()
	for i := range eq.Stage.Subtasks {
		eq.Stage.Subtasks[i].Priority = dag.Priority{}
	}
	lifo, _ := simulate(t, eq, slots)

	// Breadth-first: shallower first.
	bf := lower()
	for i := range bf.Stage.Subtasks {
		pr := &bf.Stage.Subtasks[i].Priority
		pr.Depth, pr.DemandDepth = -pr.Depth, -pr.DemandDepth
	}
	breadth, _ := simulate(t, bf, slots)

	t.Logf("peak live intermediates: policy %d, equal priorities %d, breadth-first %d (depth %d, raylets×slots %d, width %d)",
		policy, lifo, breadth, depth, 4, leaves)
	// Each level of the tree can hold a few partials waiting for their
	// siblings on each raylet, so "near" is within a factor of two.
	if bound := 2 * int(depth) * 4; policy > bound {
		t.Errorf("policy peak %d > 2 × depth × raylets × slots = %d", policy, bound)
	}
	if breadth < leaves/2 {
		t.Errorf("breadth-first peak %d, expected near the width %d", breadth, leaves)
	}
	// Depth first: the root runs last, and the first combine runs before
	// the 5% of the leaves have run.
	if order[len(order)-1] != int32(p.Stage.Len()-1) {
		t.Errorf("root ran at %d, not last", order[len(order)-1])
	}
	for k, s := range order {
		if len(p.Stage.Preds.Row(s)) > 0 {
			if k > leaves/20 {
				t.Errorf("first combine ran only after %d subtasks", k)
			}
			break
		}
	}
}

// TestReadyQueueAdopt: entries taken in at once (room, then adopt: each
// goes onto the stack or into the heap, and the heap is fixed by rising
// into place or by heapifying it whole) pop in the queue's total order,
// best priority first, then newest, as entries pushed one by one do.
func TestReadyQueueAdopt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sizes := range [][2]int{{0, 100}, {1000, 10}, {1000, 500}, {7, 7}, {0, 0}} {
		var pushed, bulk readyQueue
		seq := uint64(0)
		next := func() entry {
			seq++
			return entry{seq: seq, prio: dag.Priority{Depth: int32(rng.IntN(4)), DemandDepth: int32(rng.IntN(3)), Succs: int32(rng.IntN(3))}}
		}
		for range sizes[0] {
			e := next()
			pushed.push(e)
			bulk.push(e)
		}
		room := bulk.room(sizes[1])
		for k := range room {
			e := next()
			pushed.push(e)
			room[k] = e
		}
		if bulk.Len() != sizes[0] {
			t.Fatalf("%v: room changed the queue's length to %d", sizes, bulk.Len())
		}
		bulk.adopt(sizes[1])
		if part, k, ok := bulk.check(); !ok {
			t.Fatalf("%v: adopted queue out of order at %s entry %d", sizes, part, k)
		}
		for pushed.Len() > 0 {
			want, got := pushed.pop(), bulk.pop()
			if want.seq != got.seq {
				t.Fatalf("%v: popped entry %d, want %d", sizes, got.seq, want.seq)
			}
		}
		if bulk.Len() != 0 {
			t.Fatalf("%v: %d entries left", sizes, bulk.Len())
		}
	}
}

// popBest removes the entry that should leave a queue of ref's entries
// first, found by a plain scan: the reference the queue is checked
// against.
func popBest(ref []entry) (entry, []entry) {
	best := 0
	for k := range ref {
		if better(&ref[k], &ref[best]) {
			best = k
		}
	}
	e := ref[best]
	return e, append(ref[:best], ref[best+1:]...)
}

// TestReadyQueueRandom pushes and pops at random, with priorities drawn
// from a few levels or from one (where every entry goes onto the stack),
// and checks every pop against the best entry of a plain list.
func TestReadyQueueRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, levels := range []int{1, 2, 5} {
		var q readyQueue
		var ref []entry
		seq := uint64(0)
		for step := range 20000 {
			if len(ref) == 0 || rng.IntN(5) < 3 {
				seq++
				e := entry{seq: seq, prio: dag.Priority{Depth: int32(rng.IntN(levels)), Succs: int32(rng.IntN(levels))}}
				q.push(e)
				ref = append(ref, e)
				continue
			}
			var want entry
			want, ref = popBest(ref)
			if got := q.pop(); got.seq != want.seq {
				t.Fatalf("levels %d, step %d: popped %d, want %d", levels, step, got.seq, want.seq)
			}
			if q.Len() != len(ref) {
				t.Fatalf("levels %d, step %d: length %d, want %d", levels, step, q.Len(), len(ref))
			}
		}
		if part, k, ok := q.check(); !ok {
			t.Fatalf("levels %d: out of order at %s entry %d", levels, part, k)
		}
	}
}

// FuzzReadyQueue runs a program of pushes, pops and bulk queuing (room,
// then adopt) read from the input, with priorities drawn from its bytes,
// and checks every pop, the length and the queue's order against a plain
// list.
func FuzzReadyQueue(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 3, 5, 0, 0, 1, 1, 1})
	f.Add([]byte{2, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		var q readyQueue
		var ref []entry
		seq := uint64(0)
		next := func(b byte) entry {
			seq++
			return entry{seq: seq, prio: dag.Priority{Depth: int32(b & 3), DemandDepth: int32(b >> 2 & 1), Succs: int32(b >> 3 & 1)}}
		}
		for len(prog) >= 2 {
			op, arg := prog[0]%3, prog[1]
			prog = prog[2:]
			switch op {
			case 0: // push
				e := next(arg)
				q.push(e)
				ref = append(ref, e)
			case 1: // pop
				if len(ref) == 0 {
					continue
				}
				var want entry
				want, ref = popBest(ref)
				if got := q.pop(); got.seq != want.seq {
					t.Fatalf("popped %d, want %d", got.seq, want.seq)
				}
			case 2: // queue arg%16 entries at once, priorities from the bytes that follow
				k := min(int(arg%16), len(prog))
				room := q.room(k)
				for i := range room {
					room[i] = next(prog[i])
					ref = append(ref, room[i])
				}
				prog = prog[k:]
				q.adopt(k)
			}
			if q.Len() != len(ref) {
				t.Fatalf("length %d, want %d", q.Len(), len(ref))
			}
			if part, k, ok := q.check(); !ok {
				t.Fatalf("out of order at %s entry %d", part, k)
			}
		}
	})
}
