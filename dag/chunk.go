package dag

import (
	"fmt"
	"math"
	"slices"
)

// ChunkNode is one chunk of one tileable: an op run on a block of the
// array. Its inputs, shape and grid index live in the graph's flat slices;
// read them with the ChunkGraph accessors.
type ChunkNode struct {
	Op       OpID
	Tileable int32 // the tileable node this chunk belongs to
	Args     int32 // index into ChunkGraph.Args
	dim0     uint32
	ndim     uint8
	DType    DType
}

// ChunkGraph is the tileable graph tiled into chunks. Nodes are added in a
// topological order (inputs first) and never removed, so node indexes are
// stable IDs. The graph keeps everything in a few flat slices: a graph of
// 200,000 chunks is a handful of allocations.
type ChunkGraph struct {
	Nodes []ChunkNode
	// Args are the op args of the nodes, interned: every chunk of a tileable
	// usually shares one entry.
	Args [][]byte

	// Chunk c's inputs are inputs[inOff[c]:inOff[c+1]]: the passes that
	// only follow edges read a dense table of offsets, not every node.
	inputs []int32
	inOff  []uint32
	shapes []int64
	index  []int32

	maxNodes, maxInputs int // 0: only what the flat tables' offsets allow
	// What checkRoom compares with (resolveRoom): 0 in a graph not made
	// by NewChunkGraph, which then checks the limits themselves.
	roomNodes, roomInputs int
}

// NewChunkGraph returns an empty chunk graph with room for about n nodes.
func NewChunkGraph(n int) *ChunkGraph { return NewChunkGraphSized(n, 2*n) }

// NewChunkGraphSized returns an empty chunk graph with room for about n
// one-dimensional nodes and edges inputs.
func NewChunkGraphSized(n, edges int) *ChunkGraph {
	g := &ChunkGraph{
		Nodes:  HugePages(make([]ChunkNode, 0, n)),
		inputs: HugePages(make([]int32, 0, edges)),
		inOff:  append(HugePages(make([]uint32, 0, n+1)), 0),
		shapes: HugePages(make([]int64, 0, n)),
		index:  HugePages(make([]int32, 0, n)),
	}
	g.resolveRoom()
	return g
}

// SetLimit bounds the graph at nodes chunks and inputs chunk inputs in
// all (0: no bound beyond what the tables' 32-bit offsets allow). Once a
// graph is at its limit AddNode fails with ErrResourceExhausted, so that a
// tiler that makes more chunks than its job was admitted with stops there
// instead of exhausting the process.
func (g *ChunkGraph) SetLimit(nodes, inputs int64) {
	g.maxNodes, g.maxInputs = clampInt(nodes), clampInt(inputs)
	g.resolveRoom()
}

func clampInt(n int64) int {
	if n <= 0 {
		return 0
	}
	return int(min(n, math.MaxInt32))
}

// Room returns how many more chunks fit under the graph's limit.
func (g *ChunkGraph) Room() int64 {
	limit := int64(math.MaxInt32)
	if g.maxNodes > 0 {
		limit = int64(g.maxNodes)
	}
	return max(limit-int64(len(g.Nodes)), 0)
}

// AddArgs interns args and returns their index for AddNode.
func (g *ChunkGraph) AddArgs(args []byte) int32 {
	g.Args = append(g.Args, args)
	return int32(len(g.Args) - 1)
}

// AddNode appends a chunk and returns its index. inputs must be existing
// nodes; index and shape must have the same length (the tileable's ndim).
func (g *ChunkGraph) AddNode(op OpID, tileable, args int32, dt DType, inputs []int32, index []int32, shape []int64) (int32, error) {
	if len(index) != len(shape) {
		return -1, fmt.Errorf("chunk of tileable %d: index has %d dimensions, shape has %d", tileable, len(index), len(shape))
	}
	if len(shape) > 255 {
		return -1, fmt.Errorf("chunk of tileable %d: %d dimensions is more than 255", tileable, len(shape))
	}
	// checkRoom's common case, written out: AddNode is called per chunk.
	if len(g.Nodes) >= g.roomNodes || len(g.inputs)+len(inputs) > g.roomInputs || len(g.shapes)+len(shape) > math.MaxUint32 {
		if err := g.checkRoomSlow(1, len(inputs), len(shape)); err != nil {
			return -1, fmt.Errorf("chunk of tileable %d: %w", tileable, err)
		}
	}
	id := int32(len(g.Nodes))
	for _, in := range inputs {
		if in < 0 || in >= id {
			return -1, fmt.Errorf("chunk of tileable %d: input %d is not an earlier chunk", tileable, in)
		}
	}
	g.Nodes = append(g.Nodes, ChunkNode{
		Op:       op,
		Tileable: tileable,
		Args:     args,
		dim0:     uint32(len(g.shapes)),
		ndim:     uint8(len(shape)),
		DType:    dt,
	})
	if len(g.inOff) == 0 {
		g.inOff = append(g.inOff, 0) // a graph not made by NewChunkGraph
	}
	if len(inputs) > 0 { // a source has none: no copy call
		g.inputs = append(g.inputs, inputs...)
	}
	g.inOff = append(g.inOff, uint32(len(g.inputs)))
	if len(shape) == 1 { // most chunks: an append without a copy call
		g.shapes = append(g.shapes, shape[0])
		g.index = append(g.index, index[0])
	} else {
		g.shapes = append(g.shapes, shape...)
		g.index = append(g.index, index...)
	}
	return id, nil
}

// checkRoom refuses n nodes with nin inputs and ndim dimensions in all
// that would take the graph over its limit or overflow the 32-bit offsets
// of its flat tables.
func (g *ChunkGraph) checkRoom(n, nin, ndim int) error {
	if len(g.Nodes)+n <= g.roomNodes && len(g.inputs)+nin <= g.roomInputs && len(g.shapes)+ndim <= math.MaxUint32 {
		return nil
	}
	return g.checkRoomSlow(n, nin, ndim)
}

// checkRoomSlow is checkRoom from the limits themselves, for a graph whose
// room is not resolved (not made by NewChunkGraph) or is at its end.
func (g *ChunkGraph) checkRoomSlow(n, nin, ndim int) error {
	if (g.maxNodes == 0 || len(g.Nodes)+n <= g.maxNodes) && (g.maxInputs == 0 || len(g.inputs)+nin <= g.maxInputs) &&
		uint64(len(g.Nodes))+uint64(n) <= math.MaxInt32 &&
		uint64(len(g.inputs))+uint64(nin) <= math.MaxUint32 &&
		uint64(len(g.shapes))+uint64(ndim) <= math.MaxUint32 {
		return nil
	}
	return g.roomError(n, nin)
}

// resolveRoom sets the room checkRoom compares with: the limits, or what
// the 32-bit offsets of the tables allow.
func (g *ChunkGraph) resolveRoom() {
	g.roomNodes, g.roomInputs = math.MaxInt32, math.MaxUint32
	if g.maxNodes > 0 {
		g.roomNodes = min(g.roomNodes, g.maxNodes)
	}
	if g.maxInputs > 0 {
		g.roomInputs = min(g.roomInputs, g.maxInputs)
	}
}

// roomError is the error of checkRoom, which has found there is no room.
func (g *ChunkGraph) roomError(n, nin int) error {
	switch {
	case g.maxNodes > 0 && len(g.Nodes)+n > g.maxNodes:
		return Errorf(KindResourceExhausted, "the chunk graph is at its limit of %d chunks", g.maxNodes)
	case g.maxInputs > 0 && len(g.inputs)+nin > g.maxInputs:
		return Errorf(KindResourceExhausted, "the chunk graph is at its limit of %d chunk inputs", g.maxInputs)
	}
	return Errorf(KindResourceExhausted, "the chunk graph is at the most its tables can index (%d chunks, %d inputs)", len(g.Nodes), len(g.inputs))
}

// AddRow appends n one-dimensional chunks of tileable that share op, args
// and dt: chunk i of the row is at grid index i, has size sizes[i] (or
// sizes[0], when sizes has one element, for every chunk) and reads
// ins[0][i], ins[1][i], … (nothing when ins is empty). It returns the
// first chunk's index; the row's chunks are first, first+1, … The graph
// is then as if AddNode had added each chunk in turn, in a pass over
// flat tables rather than a call per chunk. On an error it adds nothing.
func (g *ChunkGraph) AddRow(op OpID, tileable, args int32, dt DType, n int, sizes []int64, ins [][]int32) (int32, error) {
	first := int32(len(g.Nodes))
	if n < 0 || n > 0 && len(sizes) != n && len(sizes) != 1 {
		return -1, fmt.Errorf("row of tileable %d: %d sizes for %d chunks", tileable, len(sizes), n)
	}
	if err := g.readyRow(tileable, first, n, n, ins); err != nil {
		return -1, err
	}
	if n == 0 {
		return first, nil
	}
	nodes := grow(&g.Nodes, n)
	dim0 := uint32(len(g.shapes))
	for i := range nodes {
		nodes[i] = ChunkNode{Op: op, Tileable: tileable, Args: args, dim0: dim0 + uint32(i), ndim: 1, DType: dt}
	}
	g.appendRowInputs(n, ins)
	shapes := grow(&g.shapes, n)
	if len(sizes) == n {
		copy(shapes, sizes)
	} else {
		for i := range shapes {
			shapes[i] = sizes[0]
		}
	}
	index := grow(&g.index, n)
	for i := range index {
		index[i] = int32(i)
	}
	return first, nil
}

// AddAlike appends one chunk of tileable for each chunk of like, all with
// op, args and dt: chunk i has the grid index and shape of like[i] and
// reads ins[0][i], ins[1][i], … (nothing when ins is empty). It returns
// the first chunk's index, as AddRow, and is AddNode for each chunk in
// turn, in one pass. On an error it adds nothing.
func (g *ChunkGraph) AddAlike(op OpID, tileable, args int32, dt DType, like []int32, ins [][]int32) (int32, error) {
	first := int32(len(g.Nodes))
	n := len(like)
	ndim := 0
	for _, c := range like {
		if c < 0 || c >= first {
			return -1, fmt.Errorf("chunk of tileable %d: chunk %d to copy is not an earlier chunk", tileable, c)
		}
		ndim += int(g.Nodes[c].ndim)
	}
	if err := g.readyRow(tileable, first, n, ndim, ins); err != nil {
		return -1, err
	}
	if n == 0 {
		return first, nil
	}
	nodes := grow(&g.Nodes, n)
	dim0 := uint32(len(g.shapes))
	shapes, index := grow(&g.shapes, ndim), grow(&g.index, ndim)
	d := uint32(0) // where chunk i's dimensions start in shapes and index
	for i, c := range like {
		src := &g.Nodes[c]
		nd := uint32(src.ndim)
		nodes[i] = ChunkNode{Op: op, Tileable: tileable, Args: args, dim0: dim0 + d, ndim: src.ndim, DType: dt}
		if nd == 1 { // most chunks: no copy call
			shapes[d] = g.shapes[src.dim0]
			index[d] = g.index[src.dim0]
		} else {
			copy(shapes[d:d+nd], g.shapes[src.dim0:src.dim0+nd])
			copy(index[d:d+nd], g.index[src.dim0:src.dim0+nd])
		}
		d += nd
	}
	g.appendRowInputs(n, ins)
	return first, nil
}

// readyRow checks that n chunks of dims dimensions in all can be added at
// first, reading ins: each of ins has an input for every chunk, each an
// earlier chunk, and the graph has room. Then it readies the input table
// for them.
func (g *ChunkGraph) readyRow(tileable, first int32, n, dims int, ins [][]int32) error {
	for _, in := range ins {
		if len(in) < n {
			return fmt.Errorf("chunks of tileable %d: %d inputs for %d chunks", tileable, len(in), n)
		}
		for _, c := range in[:n] {
			if c < 0 || c >= first {
				return fmt.Errorf("chunk of tileable %d: input %d is not an earlier chunk", tileable, c)
			}
		}
	}
	if err := g.checkRoom(n, n*len(ins), dims); err != nil {
		return fmt.Errorf("chunk of tileable %d: %w", tileable, err)
	}
	if n > 0 && len(g.inOff) == 0 {
		g.inOff = append(g.inOff, 0) // a graph not made by NewChunkGraph
	}
	return nil
}

// appendRowInputs appends the inputs of n chunks just added, chunk i
// reading ins[0][i], ins[1][i], …, in the room checkRoom found.
func (g *ChunkGraph) appendRowInputs(n int, ins [][]int32) {
	k := len(ins)
	in0 := uint32(len(g.inputs))
	inputs := grow(&g.inputs, n*k)
	for j, in := range ins {
		for i, c := range in[:n] {
			inputs[i*k+j] = c
		}
	}
	off := grow(&g.inOff, n)
	for i := range off {
		off[i] = in0 + uint32((i+1)*k)
	}
}

// grow lengthens *s by n elements and returns them, to be written: within
// its capacity (a chunk graph sized for its job), without a copy.
func grow[E any](s *[]E, n int) []E {
	l := len(*s)
	*s = slices.Grow(*s, n)[:l+n]
	return (*s)[l:]
}

// Len returns the number of chunks.
func (g *ChunkGraph) Len() int { return len(g.Nodes) }

// Edges returns the number of chunk inputs, summed over all chunks.
func (g *ChunkGraph) Edges() int { return len(g.inputs) }

// Inputs returns chunk c's inputs. The slice aliases the graph: do not modify.
func (g *ChunkGraph) Inputs(c int32) []int32 {
	i0, i1 := g.inOff[c], g.inOff[c+1]
	return g.inputs[i0:i1:i1]
}

// Shape returns chunk c's shape. The slice aliases the graph: do not modify.
func (g *ChunkGraph) Shape(c int32) []int64 {
	n := &g.Nodes[c]
	return g.shapes[n.dim0 : n.dim0+uint32(n.ndim) : n.dim0+uint32(n.ndim)]
}

// Index returns chunk c's position in its tileable's grid. The slice aliases
// the graph: do not modify.
func (g *ChunkGraph) Index(c int32) []int32 {
	n := &g.Nodes[c]
	return g.index[n.dim0 : n.dim0+uint32(n.ndim) : n.dim0+uint32(n.ndim)]
}

// InputTable returns every chunk's inputs as a CSR table (its Dst aliases
// the graph: do not modify), for passes that follow edges in bulk.
func (g *ChunkGraph) InputTable() CSR {
	off := make([]int32, len(g.Nodes)+1)
	for i := range off {
		off[i] = int32(g.inOff[i])
	}
	return CSR{Off: off, Dst: g.inputs[:off[len(g.Nodes)]]}
}

// NodeArgs returns chunk c's op args.
func (g *ChunkGraph) NodeArgs(c int32) []byte { return g.Args[g.Nodes[c].Args] }

// Meta returns chunk c's output description.
func (g *ChunkGraph) Meta(c int32) Meta { return Meta{DType: g.Nodes[c].DType, Shape: g.Shape(c)} }

// Users returns, for every chunk, the chunks that read it, as a CSR table.
func (g *ChunkGraph) Users() CSR { return g.InputTable().Invert(len(g.Nodes)) }

// Validate checks that every input is an earlier node, which makes the graph
// acyclic. Graphs built with AddNode always pass; Validate is for graphs
// that arrived from elsewhere.
func (g *ChunkGraph) Validate() error {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if len(g.inOff) != len(g.Nodes)+1 || g.inOff[i] > g.inOff[i+1] || uint64(g.inOff[i+1]) > uint64(len(g.inputs)) ||
			uint64(n.dim0)+uint64(n.ndim) > uint64(len(g.shapes)) ||
			int(n.Args) >= len(g.Args) || n.Args < 0 {
			return fmt.Errorf("chunk %d: references outside the graph's tables", i)
		}
		for _, in := range g.Inputs(int32(i)) {
			if in < 0 || int(in) >= i {
				return fmt.Errorf("chunk %d: input %d is not an earlier chunk (a cycle or a forward edge)", i, in)
			}
		}
	}
	return nil
}

// CSR is a compressed sparse row table: row i is Dst[Off[i]:Off[i+1]].
type CSR struct {
	Off []int32
	Dst []int32
}

// Row returns row i. The slice aliases the table: do not modify.
func (c CSR) Row(i int32) []int32 { return c.Dst[c.Off[i]:c.Off[i+1]:c.Off[i+1]] }

// Rows returns the number of rows.
func (c CSR) Rows() int {
	if len(c.Off) == 0 {
		return 0
	}
	return len(c.Off) - 1
}

// Invert returns the reverse of c as a table of n rows: for each node, the
// rows that contain it, in ascending order.
// It fills the rows through off itself, shifted by one, rather than through
// a copy of it: a table of ten million rows is 40 MB less to allocate and
// touch.
func (c CSR) Invert(n int) CSR {
	off := HugePages(make([]int32, n+1))
	if n == 0 {
		return CSR{Off: off}
	}
	// Count node d's rows in off[d+1], then make off[d+1] the start of
	// row d: filling row d advances off[d+1] to the start of row d+1, so
	// off ends right.
	for _, d := range c.Dst {
		if d+1 < int32(n) {
			off[d+2]++
		}
	}
	for i := 2; i <= n; i++ {
		off[i] += off[i-1]
	}
	dst := HugePages(make([]int32, len(c.Dst)))
	for i := 0; i < c.Rows(); i++ {
		for _, d := range c.Dst[c.Off[i]:c.Off[i+1]] {
			dst[off[d+1]] = int32(i)
			off[d+1]++
		}
	}
	return CSR{Off: off, Dst: dst}
}
