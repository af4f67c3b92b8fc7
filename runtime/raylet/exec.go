package raylet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/tasklog"
	"github.com/phobos-project/phobos/runtime/wire"
)

// slot is one worker's reusable state: everything running a subtask needs
// besides the kernel's own memory, kept across subtasks so that a worker
// in steady state allocates nothing per subtask.
type slot struct {
	// ctx is cancelled only to interrupt a subtask; then renewed. The
	// raylet's loop sets it (renew) and cancels it; the worker reads it.
	ctx    context.Context
	cancel context.CancelFunc

	inputs   []dag.Value
	releases []func() // releases of partitioned inputs
	pinned   []dag.ObjectID
	outOf    []int32
	vals     []dag.Value
	ins      []dag.Value
	steps    []dag.ChainStep
	metas    metaCache
	a        allocator
	kc       dag.KernelCall
	logs     slotLogger
	fetch    time.Duration // the last attempt's time fetching inputs from peers
}

// slotLogger is the dag.TaskLogger of a slot's context: it makes the
// attempt's logger only when a kernel asks for one (fn.Logger), so a
// subtask that logs nothing costs nothing.
type slotLogger struct {
	h    *tasklog.Handler
	mu   sync.Mutex
	task tasklog.Task
	lg   *slog.Logger
}

func (l *slotLogger) TaskLogger() *slog.Logger {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lg == nil {
		l.lg = slog.New(l.h.ForTask(l.task))
	}
	return l.lg
}

// begin makes the logger the one of attempt att of subtask id.
func (l *slotLogger) begin(id dag.SubtaskID, att int) {
	l.mu.Lock()
	l.task, l.lg = tasklog.Task{Job: id.Task(), Subtask: id, Attempt: uint16(att + 1)}, nil
	l.mu.Unlock()
}

func newSlot(r *Raylet) *slot {
	s := &slot{}
	s.logs.h = r.logHandler
	s.a.r = r
	s.renew(r)
	return s
}

// renew gives the slot a fresh context if its last one was cancelled.
func (s *slot) renew(r *Raylet) {
	if s.ctx == nil || s.ctx.Err() != nil {
		s.ctx, s.cancel = context.WithCancel(r.ctx)
		s.ctx = dag.WithTaskLogger(s.ctx, &s.logs)
	}
}

// release unpins what the last subtask read.
func (s *slot) release(r *Raylet) {
	for _, id := range s.pinned {
		r.store.Release(id)
	}
	for _, f := range s.releases {
		f()
	}
	clear(s.releases)
	s.pinned, s.releases = s.pinned[:0], s.releases[:0]
	clear(s.inputs)
	clear(s.vals)
	clear(s.ins)
	s.kc = dag.KernelCall{}
}

// run executes one subtask attempt on slot s and returns its completion.
// It never panics on bad specs or failing kernels; a kernel panic becomes
// the subtask's error.
func (r *Raylet) run(s *slot, spec *wire.SubtaskSpec) (c wire.Completion) {
	ctx := s.ctx
	defer s.release(r)
	r.started.Add(1)
	s.logs.begin(spec.ID, spec.Attempt)
	s.fetch = 0
	c = wire.Completion{ID: spec.ID, Attempt: spec.Attempt}
	// The completion names the subtask and the head names its ops and this
	// raylet, so the error text says only what failed inside the subtask.
	// Its kind decides whether the head runs the subtask again (see
	// inputError, kernelError and storeError).
	fail := func(err error) wire.Completion {
		c.Kind = dag.KindOf(err)
		if c.Kind == dag.KindUnknown {
			c.Kind = dag.KindInternal // every failure below has a kind
		}
		c.Error = err.Error()
		c.Sizes = nil
		return c
	}

	// Inputs: pinned views from the local store, fetched from peers if needed.
	inputs := grow(s.inputs, len(spec.Inputs))
	s.inputs = inputs
	for k := range spec.Inputs {
		in := &spec.Inputs[k]
		if in.Part > 0 {
			v, release, err := r.inputPart(ctx, in)
			if err != nil {
				return fail(inputError(err))
			}
			s.releases = append(s.releases, release)
			inputs[k] = v
			continue
		}
		obj, fetched, took, err := r.localOrFetch(ctx, in) // a fetch from a peer is timed for the timeline
		if err != nil {
			return fail(inputError(err))
		}
		s.pinned = append(s.pinned, in.Object)
		if fetched {
			c.Fetched = append(c.Fetched, in.Object)
			s.fetch += took
		}
		m, err := s.metas.decode(obj.Meta)
		if err != nil {
			// The bytes are in the store and will read the same next time.
			return fail(dag.Errorf(dag.KindInvalidArgument, "input %s is corrupt: %w", in.Object, err))
		}
		inputs[k] = dag.Value{Meta: m, Data: obj.Data}
	}

	outOf := grow(s.outOf, len(spec.Ops)) // op -> output index, or -1
	s.outOf = outOf
	for j := range outOf {
		outOf[j] = -1
	}
	for k, j := range spec.Outputs {
		if j < 0 || int(j) >= len(spec.Ops) {
			return fail(dag.Errorf(dag.KindInvalidArgument, "malformed subtask: output %d names op %d of %d", k, j, len(spec.Ops)))
		}
		outOf[j] = int32(k)
	}
	a := &s.a
	a.reset(ctx, spec.ID)
	defer a.abortUnsealed()
	if k := s.fusedKernel(spec, outOf); k != nil {
		a.beginDirect()
		last := &spec.Ops[len(spec.Ops)-1]
		s.kc = dag.KernelCall{Ctx: ctx, Args: last.Args, Index: last.Index, Shape: last.Shape, DType: last.DType, Inputs: inputs, Outputs: a}
		if err := runKernel(k, &s.kc); err != nil {
			return fail(s.kernelError(err, nil))
		}
		sizes, err := a.sealAll(len(spec.Outputs))
		if err != nil {
			return fail(storeError(err))
		}
		c.Sizes = sizes
		return c
	}
	vals := grow(s.vals, len(spec.Ops))
	s.vals = vals
	ins := s.ins[:0]
	defer func() { s.ins = ins }()
	for j := range spec.Ops {
		op := &spec.Ops[j]
		ins = ins[:0]
		for _, ref := range op.Inputs {
			if k, ext := wire.IsExternal(ref); ext {
				if k >= len(inputs) {
					return fail(dag.Errorf(dag.KindInvalidArgument, "malformed subtask: op %d reads input %d of %d", j, k, len(inputs)))
				}
				ins = append(ins, inputs[k])
			} else {
				if k >= j {
					return fail(dag.Errorf(dag.KindInvalidArgument, "malformed subtask: op %d reads op %d, which runs later", j, k))
				}
				ins = append(ins, vals[k])
			}
		}
		a.begin(outOf[j])
		if err := r.exec(s, op, ins); err != nil {
			if len(spec.Ops) == 1 {
				op = nil // the head names the subtask's only op
			}
			return fail(s.kernelError(err, op))
		}
		v, ok := a.result()
		if !ok {
			return fail(dag.Errorf(dag.KindInternal, "%s returned without allocating its output", dag.Ops.Name(op.Op)))
		}
		vals[j] = v
	}
	sizes, err := a.sealAll(len(spec.Outputs))
	if err != nil {
		return fail(storeError(err))
	}
	c.Sizes = sizes
	return c
}

// Failed attempts are classified here, where they happen, so that the head
// runs again only what another attempt can fix. Retried: unavailable (a lost
// peer, I/O), resource exhausted (a full store), deadline exceeded,
// interrupted, internal. Not retried: invalid argument (malformed args or
// spec, a corrupt input), not found (an op or function this raylet lacks),
// permission denied, and errors from user code, unless the code marked its
// error retryable by giving it one of the retried kinds (fn.Retryable).

// inputError classifies a failure to get an input. An input that is
// missing, or that failed in a way nobody described, is an infrastructure
// failure (its holder died, or the head's directory is behind): another
// attempt may find it, so it is unavailable. A corrupt or refused input
// keeps its kind.
func inputError(err error) error {
	switch dag.KindOf(err) {
	case dag.KindUnknown, dag.KindNotFound:
		return &dag.Error{Kind: dag.KindUnavailable, Msg: err.Error(), Err: err}
	}
	return err
}

// storeError classifies a failure to seal outputs: the store's, not the
// job's, so another attempt may succeed.
func storeError(err error) error {
	switch dag.KindOf(err) {
	case dag.KindUnknown, dag.KindNotFound, dag.KindInvalidArgument:
		return &dag.Error{Kind: dag.KindUnavailable, Msg: err.Error(), Err: err}
	}
	return err
}

// kernelError classifies a kernel's error, prefixed with op's name when op
// is one of several run one by one. A kernel that stopped because its
// subtask was interrupted was interrupted, whatever it returned; an error
// without a kind is the kernel's own, from user code.
func (s *slot) kernelError(err error, op *wire.OpSpec) error {
	k := dag.KindOf(err)
	switch {
	case s.ctx.Err() != nil && k != dag.KindCancelled:
		k = dag.KindInterrupted
	case k == dag.KindUnknown || k == dag.KindFatal:
		k = dag.KindUserCode
	}
	msg := err.Error()
	if op != nil {
		msg = dag.Ops.Name(op.Op) + ": " + msg
	}
	return &dag.Error{Kind: k, Msg: msg, Err: err}
}

// grow returns b resized to n elements, reusing its memory when it can.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// exec runs one kernel, turning a panic into an error.
func (r *Raylet) exec(s *slot, op *wire.OpSpec, ins []dag.Value) (err error) {
	o, ok := dag.Ops.Lookup(op.Op)
	if !ok {
		if dag.UnknownOp != nil {
			if what := dag.UnknownOp(op.Op, op.Args); what != "" {
				return dag.Errorf(dag.KindNotFound, "%s is not registered on this raylet; run every raylet from a program that registers it (see bindings/fn)", what)
			}
		}
		return dag.Errorf(dag.KindNotFound, "op %s is not registered on this raylet; build every raylet with the bindings that define it", op.Op)
	}
	k, ok := o.(dag.Kernel)
	if !ok {
		return dag.Errorf(dag.KindNotFound, "op %q has no kernel on this raylet", o.Name())
	}
	s.kc = dag.KernelCall{Ctx: s.ctx, Args: op.Args, Index: op.Index, Shape: op.Shape, DType: op.DType, Inputs: ins, Outputs: &s.a}
	return runKernel(k, &s.kc)
}

// runKernel runs k, turning a panic into an error.
func runKernel(k dag.Kernel, kc *dag.KernelCall) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = dag.Errorf(dag.KindUserCode, "kernel panicked: %v", p)
		}
	}()
	return k.Exec(kc)
}

// fusedKernel asks the first op of a multi-op subtask for a kernel that runs
// the whole chain in one pass.
func (s *slot) fusedKernel(spec *wire.SubtaskSpec, outOf []int32) (k dag.Kernel) {
	if len(spec.Ops) < 2 {
		return nil
	}
	o, ok := dag.Ops.Lookup(spec.Ops[0].Op)
	if !ok {
		return nil
	}
	f, ok := o.(dag.ChainFuser)
	if !ok {
		return nil
	}
	steps := grow(s.steps, len(spec.Ops))
	s.steps = steps
	for j := range spec.Ops {
		op := &spec.Ops[j]
		steps[j] = dag.ChainStep{Op: op.Op, Args: op.Args, Inputs: op.Inputs, Index: op.Index, Shape: op.Shape, DType: op.DType, Output: outOf[j]}
	}
	defer func() {
		if recover() != nil {
			k = nil // a fuser that panics just does not fuse
		}
	}()
	return f.FuseChain(steps)
}

// allocator places kernel outputs: exported ones straight into the store
// under their object IDs, the rest in scratch memory.
type allocator struct {
	r       *Raylet
	ctx     context.Context // the subtask's: bounds waiting for store space
	subtask dag.SubtaskID

	out    int32 // output index of the op being run, or -1
	direct bool  // a fused kernel: Output(i) is the subtask's output i
	cur    dag.Value
	have   bool
	store  []created
	meta   []byte // an output's encoded meta, reused
	sizes  int64Slab
	arena  []float64 // scratch memory for intermediates, reused
	used   int       // words of arena used by the running subtask
}

// reset readies a for a new subtask.
func (a *allocator) reset(ctx context.Context, id dag.SubtaskID) {
	a.ctx, a.subtask = ctx, id
	a.out, a.direct, a.have, a.cur = -1, false, false, dag.Value{}
	a.store = a.store[:0]
	a.used = 0
}

type created struct {
	id     dag.ObjectID
	size   int64
	sealed bool
	reused bool // the object already existed (an earlier attempt); keep it
}

func (a *allocator) begin(out int32) { a.out, a.have, a.direct = out, false, false }

func (a *allocator) beginDirect() { a.direct = true }

func (a *allocator) result() (dag.Value, bool) { return a.cur, a.have }

// Output implements dag.OutputAllocator.
func (a *allocator) Output(i int, m dag.Meta, n int) ([]byte, error) {
	if a.direct {
		return a.create(int32(i), m, n)
	}
	if i != 0 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "kernel asked for output %d; only single-output kernels are supported", i)
	}
	if a.have {
		return nil, dag.Errorf(dag.KindInvalidArgument, "kernel allocated output %d twice", i)
	}
	if n < 0 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "kernel asked for %d bytes", n)
	}
	if a.out < 0 {
		buf := a.scratch(n)
		a.cur, a.have = dag.Value{Meta: m, Data: buf}, true
		return buf, nil
	}
	buf, err := a.create(a.out, m, n)
	if err != nil {
		return nil, err
	}
	a.cur, a.have = dag.Value{Meta: m, Data: buf}, true
	return buf, nil
}

// create allocates exported output out in the store.
func (a *allocator) create(out int32, m dag.Meta, n int) ([]byte, error) {
	if n < 0 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "kernel asked for %d bytes", n)
	}
	id := dag.NewObjectID(a.subtask, uint32(out))
	for _, c := range a.store {
		if c.id == id {
			return nil, dag.Errorf(dag.KindInvalidArgument, "kernel allocated output %d twice", out)
		}
	}
	a.meta = dag.AppendMeta(a.meta[:0], m)
	buf, err := a.r.store.CreateCtx(a.ctx, id, int64(n), a.meta)
	if errors.Is(err, objectstore.ErrExists) {
		if !a.r.store.Contains(id) {
			// Another attempt of this subtask is writing it here, or it was
			// deleted and readers still pin it: it may yet vanish, so this
			// attempt cannot vouch for it. Another attempt will find it made
			// or gone.
			return nil, dag.Errorf(dag.KindUnavailable, "output %s is being written by another attempt of this subtask on this raylet, or being deleted: %w", id, err)
		}
		// An earlier attempt (or a run before a head failover) already made
		// this object; kernels are deterministic, so keep it and compute into
		// scratch only, to feed fused successors.
		a.store = append(a.store, created{id: id, size: int64(n), reused: true})
		return a.scratch(n), nil
	}
	if err != nil {
		return nil, err
	}
	a.store = append(a.store, created{id: id, size: int64(n)})
	return buf, nil
}

// sealAll seals every created output and returns output sizes by index.
func (a *allocator) sealAll(nout int) ([]int64, error) {
	sizes := a.sizes.take(nout)
	for i := range a.store {
		c := &a.store[i]
		sizes[c.id.Output()] = c.size
		if c.reused {
			continue
		}
		if err := a.r.store.Seal(c.id); err != nil {
			return nil, fmt.Errorf("seal %s: %w", c.id, err)
		}
		c.sealed = true
	}
	return sizes, nil
}

// abortUnsealed frees outputs of a failed attempt.
func (a *allocator) abortUnsealed() {
	for _, c := range a.store {
		if !c.sealed && !c.reused {
			_ = a.r.store.Abort(c.id)
		}
	}
}

// discard deletes the outputs an abandoned run sealed after all (the
// head was told it was cancelled), but not those it found made (never
// sealed by it): an earlier attempt's, which the head may count on.
func (a *allocator) discard() {
	for _, c := range a.store {
		if c.sealed {
			_ = a.r.store.Delete(c.id)
		}
	}
}

// scratchKeep bounds the scratch memory a slot keeps, in words (1 MiB).
const scratchKeep = 1 << 17

// scratch returns n zeroed bytes of 8-byte-aligned memory for an
// intermediate value. Small ones are carved from memory the slot keeps
// across subtasks (intermediates live only while their subtask runs);
// large ones, whose cost dwarfs an allocation, are allocated and left to
// the collector, so that one large subtask does not pin memory for good.
func (a *allocator) scratch(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := (n + 7) / 8
	if words > scratchKeep/4 {
		return dag.Float64sAsBytes(make([]float64, words))[:n]
	}
	if len(a.arena)-a.used < words {
		// A new block; values carved from the old one stay valid.
		a.arena, a.used = make([]float64, min(max(words, 2*len(a.arena), 512), scratchKeep)), 0
	}
	f := a.arena[a.used : a.used+words : a.used+words]
	a.used += words
	clear(f)
	return dag.Float64sAsBytes(f)[:n]
}
