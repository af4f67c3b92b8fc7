package raylet

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// oneOp makes a one-element float64 chunk from nothing.
type oneOp struct{}

func (oneOp) Name() string { return "raylet.test.one" }
func (oneOp) Exec(kc *dag.KernelCall) error {
	buf, err := kc.Output(0, dag.Meta{DType: dag.Float64, Shape: []int64{1}}, 8)
	if err != nil {
		return err
	}
	dag.BytesAsFloat64s(buf)[0] = 1
	return nil
}

func init() { dag.MustRegister(oneOp{}) }

// freeingHead hands out subtasks, as many as the first pull asks for;
// when a pull brings completions, it frees their outputs (a leader that
// applied them and saw every reader finish) and then fails the pull as a
// leader that lost its leadership does. It keeps the pull that comes next:
// the raylet's retry.
type freeingHead struct {
	addr string

	mu    sync.Mutex
	pulls int
	freed []dag.ObjectID // what the failed pull's completions made
	retry *wire.Pull     // the pull after the failed one
	got   chan struct{}  // closed when retry is set
}

func (h *freeingHead) HandleCall(ctx context.Context, s *transport.Session, m transport.Method, b transport.Body) (any, error) {
	switch m {
	case wire.MethodLeader, wire.MethodHeartbeat:
		return wire.Leader{ID: "h1", Addr: h.addr}, nil
	case wire.MethodRegisterRaylet:
		return wire.RegisterReply{HeadID: "h1", HeartbeatInterval: time.Second}, nil
	case wire.MethodPull:
	default:
		return nil, dag.Errorf(dag.KindInvalidArgument, "fake head serves no method %d", m)
	}
	var p wire.Pull
	if err := b.Decode(&p); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pulls++
	switch {
	case h.retry != nil:
	case h.freed != nil:
		h.retry = &p
		close(h.got)
	case h.pulls == 1:
		// Each subtask makes one object from nothing; More says the
		// next pull is answered at once, so completions wait for it.
		specs := make([]wire.SubtaskSpec, p.Credits)
		for i := range specs {
			specs[i] = wire.SubtaskSpec{ID: dag.PackSubtaskID(1, 1, uint64(i)), Ops: []wire.OpSpec{{Op: dag.OpIDOf(oneOp{}.Name())}}, Outputs: []int32{0}, OutputBytes: 8}
		}
		return wire.PullReply{Subtasks: specs, More: true}, nil
	case len(p.Done) == 0:
		return wire.PullReply{More: true}, nil
	default:
		for _, c := range p.Done {
			if !c.Failed() {
				h.freed = append(h.freed, dag.NewObjectID(c.ID, 0))
			}
		}
		if err := s.Send(wire.MethodFreeObjects, wire.FreeObjects{IDs: h.freed}); err != nil {
			return nil, err
		}
		return nil, dag.Errorf(dag.KindNotLeader, "head h1 is no longer the leader")
	}
	h.mu.Unlock()
	<-ctx.Done() // parked until the session ends
	h.mu.Lock()
	return nil, ctx.Err()
}

func (h *freeingHead) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (h *freeingHead) HandleStream(_ *transport.Session, st net.Conn)                     { st.Close() }

// TestResentCompletionOfFreedOutputsIsDropped: completions that went out
// on a pull that failed go again on the next one, but not those whose
// outputs were freed meanwhile. A leader that applied them may have freed
// the outputs before it went away; the next leader, which never
// dispatched the work, would take the outputs as made here and send
// readers to nothing.
func TestResentCompletionOfFreedOutputsIsDropped(t *testing.T) {
	h := &freeingHead{got: make(chan struct{})}
	r := startWithHandler(t, h, &h.addr)

	select {
	case <-h.got:
	case <-testCtx(t).Done():
		t.Fatal("no pull came after the failed one")
	}
	h.mu.Lock()
	freed, retry := h.freed, h.retry
	h.mu.Unlock()
	if len(freed) == 0 {
		t.Fatal("the failed pull brought no successful completion")
	}
	for _, id := range freed {
		if r.store.Contains(id) {
			t.Fatalf("the raylet still holds %s, which the head freed", id)
		}
		for _, c := range retry.Done {
			if dag.NewObjectID(c.ID, 0) == id {
				t.Fatalf("the pull after the failed one carried %s's completion again, though its output was freed", c.ID)
			}
		}
	}
}
