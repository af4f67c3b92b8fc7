package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// The scenario job: Steps source subtasks, each writing one int64 that is
// a function of its index and the plan's salt, summed by a tree of 4-way
// combines (bench.SumNode). Its answer is known before it runs; its step
// kernels are where faults hit.
const stepName = "sim.step"

func init() {
	dag.MustRegister(stepOp{})
}

type stepArgs struct {
	Gate  string        `cbor:"1,keyasint"` // the gates entry that holds faults' points
	Salt  uint64        `cbor:"2,keyasint"`
	Sleep time.Duration `cbor:"3,keyasint"` // each kernel's run time
}

// stepValue is what step i writes.
func stepValue(i int64, salt uint64) int64 {
	x := uint64(i)*0x9e3779b97f4a7c15 ^ salt
	x ^= x >> 29
	return int64(x % 1_000_003)
}

// graph is a job built by hand (a phobos.Graph).
type graph struct{ g *dag.TileableGraph }

func (g graph) TileableGraph() (*dag.TileableGraph, error) { return g.g, nil }

// jobGraph is the job of steps step subtasks.
func jobGraph(steps int64, a stepArgs) graph {
	args, _ := codec.Marshal(a)
	return graph{&dag.TileableGraph{
		Nodes: []dag.TileableNode{
			{Op: dag.OpIDOf(stepName), Args: args, Shape: []int64{steps}, DType: dag.Int64, ChunkSize: []int64{1}},
			bench.SumNode(0),
		},
		Outputs: []int32{1},
	}}
}

// stepOp is a source of 1-element chunks: chunk i holds stepValue(i).
type stepOp struct{ bench.Units }

func (stepOp) Name() string { return stepName }

func (stepOp) Exec(kc *dag.KernelCall) error {
	var a stepArgs
	if err := codec.Unmarshal(kc.Args, &a); err != nil {
		return fmt.Errorf("%s: malformed args: %w", stepName, err)
	}
	if g, ok := gates.Load(a.Gate); ok {
		if err := g.(*gate).enter(kc.Ctx); err != nil {
			return kc.Interrupted()
		}
	}
	if a.Sleep > 0 {
		t := time.NewTimer(a.Sleep)
		select {
		case <-t.C:
		case <-kc.Ctx.Done():
			t.Stop()
			return kc.Interrupted()
		}
	}
	out, err := kc.Output(0, dag.Meta{DType: dag.Int64, Shape: kc.Shape}, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(out, uint64(stepValue(int64(kc.Index[0]), a.Salt)))
	return nil
}

// gates holds the gate of every scenario running in this process, by the
// name its job's step args carry, so that kernels (which run inside the
// simulated raylets of this same process) find theirs.
var gates sync.Map // string → *gate

// gate numbers the step kernels of one scenario's job as they start
// (re-runs count too) and holds the kernel whose number a fault is planned
// at until the fault is in force.
type gate struct {
	name    string
	started atomic.Int64
	reached chan int64 // planned numbers, as their kernels start

	mu   sync.Mutex
	hold map[int64]chan struct{} // planned number → closed when released
}

var gateSeq atomic.Int64

func newGate(steps []int64) *gate {
	g := &gate{
		name:    fmt.Sprintf("gate-%d", gateSeq.Add(1)),
		reached: make(chan int64, len(steps)),
		hold:    map[int64]chan struct{}{},
	}
	for _, k := range steps {
		g.hold[k] = make(chan struct{})
	}
	gates.Store(g.name, g)
	return g
}

// enter numbers a starting kernel and, if a fault is planned at its
// number, reports it and waits until the fault is released or ctx ends
// (the kernel's raylet stops, or its subtask is cancelled).
func (g *gate) enter(ctx context.Context) error {
	k := g.started.Add(1)
	g.mu.Lock()
	ch, ok := g.hold[k]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	g.reached <- k // buffered: one slot per planned number
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release lets kernel k go on.
func (g *gate) release(k int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.hold[k]; ok {
		close(ch)
		delete(g.hold, k)
	}
}

// close releases every held kernel and forgets the gate.
func (g *gate) close() {
	gates.Delete(g.name)
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ch := range g.hold {
		close(ch)
		delete(g.hold, k)
	}
}
