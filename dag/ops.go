package dag

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/murmur3"
)

// OpID names an op on the wire: murmur3_32 of the op's full name (MEP 0002).
// Ops are always referred to by ID plus CBOR args, never by a serialized
// object.
type OpID uint32

// OpIDOf returns the ID of the op named name.
func OpIDOf(name string) OpID { return OpID(murmur3.Sum32([]byte(name))) }

func (id OpID) String() string { return fmt.Sprintf("op#%08x", uint32(id)) }

// Op is anything registered under a full name such as "tensor.add". What an
// op can do is found by type assertion: a Tiler can be lowered into chunks,
// a Kernel can run on a raylet.
type Op interface {
	Name() string
}

// Tiler is an op that lowering can tile: given its tileable node and its
// inputs' chunk grids, it adds chunk nodes to the chunk graph and declares
// the node's own chunk grid. Tile must be deterministic: the same context
// must always add the same chunks in the same order.
type Tiler interface {
	Op
	Tile(tc *TileContext) error
}

// Kernel is an op that a raylet can run on one chunk. Exec reads kc.Inputs,
// allocates each output with kc.Output and fills it. It must watch kc.Ctx in
// long loops and return ErrInterrupted (wrapped) when it is cancelled. Exec
// must not keep kc, its inputs or its outputs after it returns.
type Kernel interface {
	Op
	Exec(kc *KernelCall) error
}

// Registry maps op IDs to ops. It is safe for concurrent use; in practice
// ops are registered from init functions and only looked up afterwards.
//
// Lookups take no lock: the leader looks up the op of every chunk it sends
// and a raylet of every chunk it runs, while lowering looks up ops on other
// goroutines, and a read lock's shared counter then moved between the
// cores on every lookup (0.14 s of a 1.3 s job at 1,000 simulated raylets).
// Register copies the map instead, which costs nothing that matters for
// the few hundred ops a process registers once.
type Registry struct {
	mu   sync.Mutex // serialises Register
	byID atomic.Pointer[map[OpID]Op]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	m := map[OpID]Op{}
	r.byID.Store(&m)
	return r
}

// Register adds op. Registering a second op whose name hashes to an ID
// already taken is an error, whether or not the names differ.
func (r *Registry) Register(op Op) error {
	name := op.Name()
	if name == "" {
		return fmt.Errorf("register op %T: empty name", op)
	}
	id := OpIDOf(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.byID.Load()
	if prev, ok := old[id]; ok {
		if prev.Name() == name {
			return fmt.Errorf("register op %q: already registered (%s)", name, id)
		}
		return fmt.Errorf("register op %q: its id %s collides with registered op %q; rename one of them", name, id, prev.Name())
	}
	m := make(map[OpID]Op, len(old)+1)
	maps.Copy(m, old)
	m[id] = op
	r.byID.Store(&m)
	return nil
}

// Lookup returns the op with the given ID.
func (r *Registry) Lookup(id OpID) (Op, bool) {
	op, ok := (*r.byID.Load())[id]
	return op, ok
}

// Name returns the registered name of id, or its hex form if unknown; for
// messages.
func (r *Registry) Name(id OpID) string {
	if op, ok := r.Lookup(id); ok {
		return op.Name()
	}
	return id.String()
}

// Names returns every registered name, sorted.
func (r *Registry) Names() []string {
	m := *r.byID.Load()
	names := make([]string, 0, len(m))
	for _, op := range m {
		names = append(names, op.Name())
	}
	slices.Sort(names)
	return names
}

// Ops is the process-wide registry that bindings register into.
var Ops = NewRegistry()

// MustRegister registers op in Ops and panics on error; for init functions,
// where a collision is a build mistake.
func MustRegister(op Op) {
	if err := Ops.Register(op); err != nil {
		panic(err)
	}
}

// KernelCall is one run of a kernel on one chunk.
type KernelCall struct {
	Ctx    context.Context
	Args   []byte  // the op's CBOR args
	Index  []int32 // the chunk's position in its tileable's chunk grid
	Shape  []int64 // the output shape lowering expects (output 0)
	DType  DType   // the output dtype lowering expects (output 0)
	Inputs []Value // read-only; valid until Exec returns

	Outputs OutputAllocator
}

// OutputAllocator gives a kernel the memory for its outputs. The raylet
// decides where it lives: straight in the object store when the output
// leaves the subtask, in scratch memory when a fused successor consumes it.
type OutputAllocator interface {
	// Output returns a writable buffer of nbytes for output i, described by
	// m. Each output is allocated once. The buffer's contents are
	// unspecified (store memory is reused without zeroing): the kernel
	// writes every byte.
	Output(i int, m Meta, nbytes int) ([]byte, error)
}

// Output allocates output i. See OutputAllocator.
func (kc *KernelCall) Output(i int, m Meta, nbytes int) ([]byte, error) {
	return kc.Outputs.Output(i, m, nbytes)
}

// Interrupted returns an ErrInterrupted error if kc's context is done, nil
// otherwise; kernels call it between blocks of work.
func (kc *KernelCall) Interrupted() error {
	if err := kc.Ctx.Err(); err != nil {
		return &Error{Kind: KindInterrupted, Msg: "execution interrupted: " + err.Error(), Err: err}
	}
	return nil
}

// UnknownOp describes an op ID that is not registered, for error messages;
// bindings may set it (before any lookup happens, from init) to name what
// the ID stands for, using the op's args. It returns "" when it cannot.
var UnknownOp func(id OpID, args []byte) string
