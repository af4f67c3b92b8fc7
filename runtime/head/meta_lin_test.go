package head

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// The three ID sequences as porcupine sees them. Each sequence is its own
// partition (linearizability is compositional): the task sequence, one
// stage sequence per task, one subtask index sequence per stage.

type seqKind uint8

const (
	seqTasks seqKind = iota
	seqStages
	seqIndexes
)

type seqKey struct {
	kind  seqKind
	task  dag.TaskID
	stage dag.StageID
}

func (k seqKey) String() string {
	switch k.kind {
	case seqTasks:
		return "tasks"
	case seqStages:
		return fmt.Sprintf("stages of task %d", k.task)
	}
	return fmt.Sprintf("indexes of %d/%d", k.task, k.stage)
}

// allocIn is one allocation request: n values of a sequence (n is 1 for
// tasks and stages).
type allocIn struct {
	key seqKey
	n   uint64
}

// allocOut is its outcome: the first value handed out; or unknown (no
// answer came, so it may or may not have been applied); or a definite
// refusal, which is never legal here because the test only asks for stages
// and indexes of tasks and stages it was told exist.
type allocOut struct {
	value   uint64
	unknown bool
	err     string
}

// seqModel: a sequence hands out its next value and moves past it. An
// acknowledged value must be exactly the next one: no value twice, no
// value out of order, and every acknowledged allocation visible to every
// later one.
var seqModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[seqKey][]porcupine.Operation{}
		var order []seqKey
		for _, op := range h {
			k := op.Input.(allocIn).key
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return uint64(1) },
	Step: func(state, input, output any) (bool, any) {
		next, in, out := state.(uint64), input.(allocIn), output.(allocOut)
		switch {
		case out.unknown:
			return true, next + in.n
		case out.err != "":
			return false, next
		case out.value == next:
			return true, next + in.n
		}
		return false, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(allocIn), output.(allocOut)
		switch {
		case out.unknown:
			return fmt.Sprintf("%v +%d -> ?", in.key, in.n)
		case out.err != "":
			return fmt.Sprintf("%v +%d -> error %s", in.key, in.n, out.err)
		}
		return fmt.Sprintf("%v +%d -> %d", in.key, in.n, out.value)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("next %d", state.(uint64)) },
}

// linRecorder keeps the history and what the clients may ask about.
type linRecorder struct {
	start time.Time

	mu      sync.Mutex
	ops     []porcupine.Operation
	tasks   []dag.TaskID
	stages  []seqKey // kind seqIndexes: (task, stage) pairs that exist
	acked   atomic.Int64
	unknown atomic.Int64
	deduped atomic.Int64
}

func (r *linRecorder) now() int64 { return int64(time.Since(r.start)) }

// pick chooses the next request.
func (r *linRecorder) pick(rng *rand.Rand) allocIn {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := rng.IntN(10)
	switch {
	case len(r.tasks) == 0 || x < 3:
		return allocIn{key: seqKey{kind: seqTasks}, n: 1}
	case len(r.stages) == 0 || x < 6:
		return allocIn{key: seqKey{kind: seqStages, task: r.tasks[rng.IntN(len(r.tasks))]}, n: 1}
	}
	k := r.stages[rng.IntN(len(r.stages))]
	return allocIn{key: k, n: 1 + uint64(rng.IntN(4))}
}

func (r *linRecorder) record(client int, in allocIn, out allocOut, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	if out.unknown || out.err != "" {
		return
	}
	switch in.key.kind {
	case seqTasks:
		r.tasks = append(r.tasks, dag.TaskID(out.value))
	case seqStages:
		r.stages = append(r.stages, seqKey{kind: seqIndexes, task: in.key.task, stage: dag.StageID(out.value)})
	}
}

// linClient issues allocations at random heads until ctx ends. An
// unanswered request is retried, with the same request ID, at other heads
// for up to opBudget; if no answer comes it is recorded as unknown.
func linClient(ctx context.Context, c *metaCluster, r *linRecorder, id int) {
	// A head cut off from the leader holds a request for leaderWaitT; the
	// client then tries another head, as a driver given several would.
	const opBudget, leaderWaitT = 5 * time.Second, 300 * time.Millisecond
	rng := rand.New(rand.NewPCG(uint64(id), 42))
	cl := c.client(fmt.Sprintf("client-%d", id))
	for ctx.Err() == nil {
		in := r.pick(rng)
		req := newReq()
		call := r.now()
		deadline := time.Now().Add(opBudget)
		var out allocOut
		for {
			var a wire.Allocated
			actx, cancel := context.WithTimeout(context.Background(), time.Second)
			addr := c.addr(rng.IntN(len(c.cfgs)))
			var err error
			switch in.key.kind {
			case seqTasks:
				err = cl.call(actx, addr, wire.MethodAllocTask, wire.AllocTask{RequestID: req, Wait: leaderWaitT}, &a)
				out.value = uint64(a.Task)
			case seqStages:
				err = cl.call(actx, addr, wire.MethodAllocStage, wire.AllocStage{RequestID: req, Task: in.key.task, Wait: leaderWaitT}, &a)
				out.value = uint64(a.Stage)
			default:
				err = cl.call(actx, addr, wire.MethodAllocSubtasks, wire.AllocSubtasks{RequestID: req, Task: in.key.task, Stage: in.key.stage, Count: in.n, Wait: leaderWaitT}, &a)
				out.value = a.Base
			}
			cancel()
			if err == nil {
				if a.Deduped {
					r.deduped.Add(1)
				}
				break
			}
			if errors.Is(err, dag.ErrInvalidArgument) || errors.Is(err, dag.ErrNotFound) || errors.Is(err, dag.ErrResourceExhausted) {
				out = allocOut{err: err.Error()}
				break
			}
			// No answer, or no leader: the outcome is unknown. Retry the
			// same request elsewhere while the budget lasts (not after the
			// test ends: a stopped client's last request stays unknown).
			if time.Now().After(deadline) || ctx.Err() != nil {
				out = allocOut{unknown: true}
				break
			}
			pause(context.Background(), time.Duration(5+rng.IntN(20))*time.Millisecond)
		}
		ret := r.now()
		if out.unknown {
			r.unknown.Add(1)
			ret = -1 // fixed up to the end of the history
		} else {
			r.acked.Add(1)
		}
		r.record(id, in, out, call, ret)
	}
}

// TestLinearizableIDsUnderFaults runs concurrent clients allocating task,
// stage and subtask IDs at random heads of a 3-head cluster while the
// leader is killed and restarted (twice) and a follower is cut off from the
// other heads, then checks the whole history with porcupine.
func TestLinearizableIDsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-head cluster through faults; skipped with -short")
	}
	c := startMetaCluster(t, 3)
	c.leader(10 * time.Second)
	r := &linRecorder{start: time.Now()}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	const clients = 6
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClient(ctx, c, r, i)
		}()
	}
	// Each phase lasts until the clients have had a number of answers, not a
	// number of seconds, so a slow machine stretches the test instead of
	// weakening it.
	progress := func(what string, n int64) {
		t.Helper()
		want := r.acked.Load() + n
		t0 := time.Now()
		metaWaitFor(t, 60*time.Second, fmt.Sprintf("%d acknowledged allocations (%s)", n, what), func() bool { return r.acked.Load() >= want })
		t.Logf("%s: %d answers in %v", what, n, time.Since(t0).Round(time.Millisecond))
	}
	const phase = 120
	progress("warm-up", phase)
	for round := range 2 {
		l := c.leader(10 * time.Second)
		t.Logf("round %d: kill leader %s", round, c.cfgs[l].ID)
		c.stop(l)
		progress("after the leader died", phase)
		c.start(l)
		progress("after the old leader came back", phase)

		l = c.leader(10 * time.Second)
		f := c.follower(l)
		var rest []string
		for i := range c.cfgs {
			if i != f {
				rest = append(rest, c.addr(i))
			}
		}
		t.Logf("round %d: partition follower %s from the other heads", round, c.cfgs[f].ID)
		c.net.partition([]string{c.addr(f)}, rest)
		progress("during the partition", phase)
		c.net.heal()
		progress("after healing", phase)
	}
	stop()
	wg.Wait()

	r.mu.Lock()
	ops := r.ops
	r.mu.Unlock()
	end := r.now() + 1
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = end
		}
	}
	t.Logf("%d operations: %d acknowledged, %d unknown, %d answered from the dedupe table after a retry",
		len(ops), r.acked.Load(), r.unknown.Load(), r.deduped.Load())
	res, info := porcupine.CheckOperationsVerbose(seqModel, ops, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "phobos-linearizability-*.html")
		if err == nil {
			porcupine.Visualize(seqModel, info, f)
			f.Close()
			t.Fatalf("the history is not linearizable; see %s", f.Name())
		}
		t.Fatalf("the history is not linearizable (and writing the visualization failed: %v)", err)
	default:
		t.Fatalf("porcupine could not decide within a minute (%d operations)", len(ops))
	}
}
