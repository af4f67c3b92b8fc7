package lowering

import (
	"errors"
	"fmt"

	"github.com/phobos-project/phobos/dag"
)

// Unknown marks a dimension whose size is not known until the chunk (or the
// tileable) has been computed: the output of a data-dependent op such as
// tensor.unique or a boolean-mask selection. It may appear in a tileable
// node's Shape, in a chunk's shape and in a grid's NSplits.
const Unknown = -1

// MetaNeeder is the error a Tiler returns (possibly wrapped) when it cannot
// tile its node before some chunks of its inputs have been computed: their
// shapes hold Unknown dimensions. It must return before adding any chunk.
// Lowering then ends the stage with those chunks exported, waits for their
// actual metas (Tiled.Need, Tiled.Feed), writes the sizes into the chunk
// graph and the input grids, and calls Tile again.
//
// Lowering recognises any error with this method, so bindings need not
// import lowering.
type MetaNeeder interface {
	error
	NeededChunks() []int32
}

type nodeState uint8

const (
	untiled nodeState = iota
	tiled
)

// Tiled is a tileable graph tiled into chunks, as far as the data known so
// far allows, and the state of lowering it stage by stage.
//
// A Tiled is not safe for concurrent use. Feed and NextStage grow and
// change Chunks and Grids; plans of a multi-stage job get their own copies
// (see Plan), so a scheduler may read earlier plans while lowering goes on.
type Tiled struct {
	Graph  *dag.TileableGraph
	Chunks *dag.ChunkGraph
	Grids  []*dag.Grid // per tileable node; nil until the node is tiled
	Order  []int32     // tileable nodes in the order they are tiled

	state    []nodeState
	tilers   []dag.Tiler
	lowered  int32          // chunks [0, lowered) belong to earlier stages
	stages   int            // stages planned so far
	subtasks int64          // subtasks planned so far
	objects  []dag.ObjectID // per chunk of earlier stages: its object, if exported (multi-stage only)
	need     []int32        // chunks whose metas the waiting tilers asked for
	waiting  []int32        // tileable nodes whose tilers asked for metas
	needObjs []Need         // need, as objects, once the chunks are in a stage
}

// Need is a chunk whose actual meta lowering needs before it can tile
// further: the object holding it and the meta it was planned with (with
// Unknown dimensions).
type Need struct {
	Object  dag.ObjectID
	Planned dag.Meta
}

// Tile validates g, checks that every op is known and can be tiled, and
// tiles every node it can, inputs first. Nodes whose tilers need computed
// data, and the nodes after them, wait for later stages. Errors name the
// node and the problem. It is TileWithin with the default Limits.
func Tile(g *dag.TileableGraph, reg *dag.Registry) (*Tiled, error) {
	return TileWithin(g, reg, Limits{})
}

// Limits bound what tiling one job may build, over all its stages: once
// its chunk graph is full, tiling (Tile, Feed) stops with an
// ErrResourceExhausted error that names the node. A head compares
// EstimateJob's bounds with its budgets before it tiles; the limits are
// the backstop for an op whose estimate was wrong. Zero fields mean the
// defaults.
type Limits struct {
	Chunks int64 // chunk nodes (default DefaultMaxJobChunks)
	Edges  int64 // chunk inputs, summed (default DefaultMaxJobEdges)
}

// The default Limits: about the most the chunk graph's 32-bit tables and
// a large head hold (2^26 chunks take some 25 GiB to lower).
const (
	DefaultMaxJobChunks = 1 << 26
	DefaultMaxJobEdges  = 1 << 28
)

func (l Limits) resolve() Limits {
	if l.Chunks <= 0 {
		l.Chunks = DefaultMaxJobChunks
	}
	if l.Edges <= 0 {
		l.Edges = DefaultMaxJobEdges
	}
	return l
}

// TileWithin is Tile with the chunk graph bounded by lim.
func TileWithin(g *dag.TileableGraph, reg *dag.Registry, lim Limits) (*Tiled, error) {
	order, err := validate(g)
	if err != nil {
		return nil, err
	}
	tilers, err := lookupTilers(g, reg)
	if err != nil {
		return nil, err
	}
	t := &Tiled{
		Graph:  g,
		Grids:  make([]*dag.Grid, len(g.Nodes)),
		Order:  order,
		state:  make([]nodeState, len(g.Nodes)),
		tilers: tilers,
	}
	est := 0
	for i := range g.Nodes {
		node := &g.Nodes[i]
		if k := sourceChunks(node); k > MaxChunks {
			return nil, dag.Errorf(dag.KindInvalidArgument, "%s: shape %v in chunks of %v makes more than %d chunks; use bigger chunks",
				g.Describe(int32(i)), node.Shape, node.ChunkSize, MaxChunks)
		}
		est += estimateChunks(node)
	}
	lim = lim.resolve()
	// Size the chunk graph once: growing its tables by appending copies
	// them over and over (most of lowering a 10-million-chunk job, and the
	// garbage collector spins waiting to preempt each long copy). The
	// job's estimate bounds its first stage; within the limits, which the
	// head derives from the job's admitted budget.
	chunks, edges := int64(est), 2*int64(est)
	if e, err := estimate(g, order, tilers, FuseNone); err == nil && e.Stages <= 1 {
		chunks, edges = e.Chunks, e.Edges
	}
	chunks = min(chunks, lim.Chunks, maxReserve)
	edges = min(edges, lim.Edges, 4*chunks)
	t.Chunks = dag.NewChunkGraphSized(int(chunks), int(edges))
	t.Chunks.SetLimit(lim.Chunks, lim.Edges)
	if err := t.tile(); err != nil {
		return nil, err
	}
	return t, nil
}

// validate runs dag's structural checks, letting Unknown dimensions through
// except in sources, whose size must be known to cut it into chunks.
func validate(g *dag.TileableGraph) ([]int32, error) {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if len(n.ChunkSize) == 0 {
			continue
		}
		for d, s := range n.Shape {
			if s == Unknown {
				return nil, dag.Errorf(dag.KindInvalidArgument, "%s: a source cannot have an unknown size in dimension %d", g.Describe(int32(i)), d)
			}
		}
	}
	return g.ValidateUnknown()
}

// tile tiles every untiled node whose inputs are tiled, in order. A node
// whose tiler asks for metas waits, and so do the nodes after it.
func (t *Tiled) tile() error {
	g := t.Graph
	t.need, t.waiting = t.need[:0], t.waiting[:0]
	inputs := make([]*dag.Grid, 0, 4)
nodes:
	for _, n := range t.Order {
		if t.state[n] == tiled {
			continue
		}
		node := &g.Nodes[n]
		inputs = inputs[:0]
		for _, in := range node.Inputs {
			if t.state[in] != tiled {
				continue nodes
			}
			inputs = append(inputs, t.Grids[in])
		}
		before := t.Chunks.Len()
		tc := dag.NewTileContext(g, n, inputs, t.Chunks)
		err := t.tileNode(n, tc)
		var nm MetaNeeder
		if errors.As(err, &nm) {
			if t.Chunks.Len() != before {
				return dag.Errorf(dag.KindInternal, "%s: op %q added chunks and then asked for metas; a tiler must ask before adding any",
					g.Describe(n), t.tilers[n].Name())
			}
			if err := t.checkNeeds(n, inputs, nm.NeededChunks()); err != nil {
				return err
			}
			t.waiting = append(t.waiting, n)
			continue
		}
		if err != nil {
			return err
		}
		grid := tc.Grid()
		if grid == nil {
			return dag.Errorf(dag.KindInternal, "%s: op %q tiled without declaring its chunk grid", g.Describe(n), t.tilers[n].Name())
		}
		t.Grids[n] = grid
		t.state[n] = tiled
	}
	return nil
}

// tileNode runs node n's tiler. A tiler that panics on a graph it did not
// expect fails the job, not the head: every head leader would otherwise
// crash on the same job in turn.
func (t *Tiled) tileNode(n int32, tc *dag.TileContext) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = dag.Errorf(dag.KindInternal, "%s: op %q panicked while tiling: %v", t.Graph.Describe(n), t.tilers[n].Name(), r)
		}
	}()
	return t.tilers[n].Tile(tc)
}

// checkNeeds checks that a tiler asked for chunks of its own inputs whose
// metas are not known yet (anything else would never be satisfied), and
// adds them to t.need.
func (t *Tiled) checkNeeds(n int32, inputs []*dag.Grid, chunks []int32) error {
	if len(chunks) == 0 {
		return dag.Errorf(dag.KindInternal, "%s: op %q asked for metas without naming a chunk", t.Graph.Describe(n), t.tilers[n].Name())
	}
	for _, c := range chunks {
		found := false
		for _, gr := range inputs {
			for _, x := range gr.Chunks {
				if x == c {
					found = true
					break
				}
			}
		}
		if !found {
			return dag.Errorf(dag.KindInternal, "%s: op %q asked for the meta of chunk %d, which is not a chunk of its inputs", t.Graph.Describe(n), t.tilers[n].Name(), c)
		}
		if known(t.Chunks.Shape(c)) {
			return dag.Errorf(dag.KindInternal, "%s: op %q asked for the meta of chunk %d, whose shape %v is already known", t.Graph.Describe(n), t.tilers[n].Name(), c, t.Chunks.Shape(c))
		}
		dup := false
		for _, x := range t.need {
			if x == c {
				dup = true
				break
			}
		}
		if !dup {
			t.need = append(t.need, c)
		}
	}
	return nil
}

func known(shape []int64) bool {
	for _, d := range shape {
		if d < 0 {
			return false
		}
	}
	return true
}

// Built returns what lowering has built so far: chunks, edges, subtasks
// and stages (PlanBytes is zero). Once the final stage is planned these
// are the numbers EstimateJob bounds.
func (t *Tiled) Built() Estimate {
	return Estimate{Chunks: int64(t.Chunks.Len()), Edges: int64(t.Chunks.Edges()), Subtasks: t.subtasks, Stages: int64(t.stages)}
}

// Done reports whether every node is tiled and every chunk is in a stage.
func (t *Tiled) Done() bool { return t.complete() && t.lowered == int32(t.Chunks.Len()) }

// complete reports whether every node is tiled.
func (t *Tiled) complete() bool {
	for _, s := range t.state {
		if s != tiled {
			return false
		}
	}
	return true
}

// Waiting lists the tileable nodes whose tilers wait for computed metas.
func (t *Tiled) Waiting() []int32 { return append([]int32(nil), t.waiting...) }

// Need lists, after NextStage, the objects whose actual metas lowering
// needs before it can go on: pass them to Feed in this order. It is empty
// when the last plan was final.
func (t *Tiled) Need() []Need { return append([]Need(nil), t.needObjs...) }

// Feed gives lowering the actual metas of the objects Need listed, in that
// order, then tiles what they unblock. The metas must agree with the planned
// ones on dtype and on every known dimension. A head replaying a job after a
// failover feeds the metas it committed with the next stage, so that the
// next stage lowers to the same subtasks.
func (t *Tiled) Feed(metas []dag.Meta) error {
	if len(t.needObjs) == 0 {
		return dag.Errorf(dag.KindInternal, "feed: lowering needs no metas now (call NextStage first)")
	}
	if len(metas) != len(t.need) {
		return dag.Errorf(dag.KindInvalidArgument, "feed: %d metas for %d needed objects", len(metas), len(t.need))
	}
	for k, c := range t.need {
		m := metas[k]
		planned := t.Chunks.Meta(c)
		if m.DType != planned.DType || len(m.Shape) != len(planned.Shape) {
			return dag.Errorf(dag.KindInvalidArgument, "feed: object %s (chunk %d of %s) is %v%v, planned as %v%v",
				t.needObjs[k].Object, c, t.Graph.Describe(t.Chunks.Nodes[c].Tileable), m.DType, m.Shape, planned.DType, planned.Shape)
		}
		for d, s := range planned.Shape {
			if m.Shape[d] < 0 || (s >= 0 && s != m.Shape[d]) {
				return dag.Errorf(dag.KindInvalidArgument, "feed: object %s (chunk %d of %s) has shape %v, planned as %v",
					t.needObjs[k].Object, c, t.Graph.Describe(t.Chunks.Nodes[c].Tileable), m.Shape, planned.Shape)
			}
		}
	}
	for k, c := range t.need {
		if err := t.setShape(c, metas[k].Shape); err != nil {
			return err
		}
	}
	t.needObjs = nil
	return t.tile()
}

// setShape writes a computed chunk shape into the chunk graph and into the
// grid of its tileable.
func (t *Tiled) setShape(c int32, shape []int64) error {
	copy(t.Chunks.Shape(c), shape)
	tl := t.Chunks.Nodes[c].Tileable
	grid := t.Grids[tl]
	if grid == nil {
		return nil
	}
	idx := t.Chunks.Index(c)
	if len(idx) != len(grid.NSplits) {
		return nil // a chunk outside the grid's layout (e.g. a reduction's partial)
	}
	for d, i := range idx {
		if int(i) >= len(grid.NSplits[d]) {
			return dag.Errorf(dag.KindInternal, "chunk %d of %s: grid index %v outside its grid", c, t.Graph.Describe(tl), idx)
		}
		switch cur := grid.NSplits[d][i]; {
		case cur < 0:
			grid.NSplits[d][i] = shape[d]
		case cur != shape[d]:
			return dag.Errorf(dag.KindInvalidArgument, "%s: chunks in row %d of dimension %d have sizes %d and %d; they must agree",
				t.Graph.Describe(tl), i, d, cur, shape[d])
		}
	}
	return nil
}

// MaxChunks bounds the chunks of one source tileable, so that a graph
// asking for absurdly many chunks is refused instead of exhausting memory.
const MaxChunks = 1 << 25

// sourceChunks returns how many chunks a node's declared chunk size makes
// (saturating above MaxChunks), or 0 for nodes without a chunk size.
func sourceChunks(n *dag.TileableNode) int64 {
	if len(n.ChunkSize) == 0 || len(n.ChunkSize) != len(n.Shape) {
		return 0
	}
	k := int64(1)
	for d, s := range n.Shape {
		c := n.ChunkSize[d]
		if c <= 0 || s <= 0 {
			continue
		}
		x := s / c
		if s%c != 0 {
			x++
		}
		if x > MaxChunks {
			return MaxChunks + 1
		}
		if k *= x; k > MaxChunks {
			return MaxChunks + 1
		}
	}
	return k
}

// maxReserve caps the chunks a chunk graph reserves room for up front
// (more may come by appending).
const maxReserve = 1 << 26

// estimateChunks guesses a node's chunk count from its shape and chunk
// size, to size the chunk graph's slices once (at most MaxChunks, what
// TileWithin lets a node make, and the job's chunk limit in all): growing
// them by appending copied a 10-million-chunk graph several times over
// and was most of its lowering time.
func estimateChunks(n *dag.TileableNode) int {
	c := int64(1)
	for d, s := range n.Shape {
		if d < len(n.ChunkSize) && n.ChunkSize[d] > 0 && s > 0 {
			k := max(dag.ChunksAlong(s, n.ChunkSize[d]), 1)
			if k > MaxChunks/c {
				return MaxChunks
			}
			c *= k
		}
	}
	return int(c)
}

// ResolveMeta returns the actual meta of an object planned as planned (with
// at most one Unknown dimension) that turned out to hold nbytes: the
// unknown size is nbytes ÷ (element size × the known sizes). With it a head
// can feed Need from the byte sizes raylets already report, without the
// objects' metas.
func ResolveMeta(planned dag.Meta, nbytes int64) (dag.Meta, error) {
	m := dag.Meta{DType: planned.DType, Shape: append([]int64(nil), planned.Shape...)}
	per := int64(planned.DType.Size())
	unknown := -1
	for d, s := range m.Shape {
		switch {
		case s == Unknown && unknown >= 0:
			return m, fmt.Errorf("resolve meta %v%v: more than one unknown dimension; the object's own meta is needed", planned.DType, planned.Shape)
		case s == Unknown:
			unknown = d
		case s < 0:
			return m, fmt.Errorf("resolve meta %v%v: negative size", planned.DType, planned.Shape)
		default:
			per *= s
		}
	}
	switch {
	case nbytes < 0:
		return m, fmt.Errorf("resolve meta %v%v: negative byte size %d", planned.DType, planned.Shape, nbytes)
	case unknown < 0:
		if per != nbytes {
			return m, fmt.Errorf("resolve meta %v%v: %d bytes, want %d", planned.DType, planned.Shape, nbytes, per)
		}
		return m, nil
	case per == 0:
		if nbytes != 0 {
			return m, fmt.Errorf("resolve meta %v%v: %d bytes for an empty shape", planned.DType, planned.Shape, nbytes)
		}
		m.Shape[unknown] = 0 // any size fits; zero is the only one the bytes can show
		return m, nil
	case nbytes%per != 0:
		return m, fmt.Errorf("resolve meta %v%v: %d bytes is not a whole number of %d-byte rows", planned.DType, planned.Shape, nbytes, per)
	}
	m.Shape[unknown] = nbytes / per
	return m, nil
}
