package dag

import (
	"errors"
	"fmt"
)

// Grid is a tileable's chunks: the chunk sizes along each dimension
// (NSplits, as in Mars) and the chunk nodes in row-major order over the grid.
type Grid struct {
	NSplits [][]int64
	Chunks  []int32
}

// Dims returns the number of chunks along each dimension.
func (g *Grid) Dims() []int {
	d := make([]int, len(g.NSplits))
	for i, s := range g.NSplits {
		d[i] = len(s)
	}
	return d
}

// At returns the chunk at grid position idx.
func (g *Grid) At(idx ...int) int32 {
	lin := 0
	for d, i := range idx {
		lin = lin*len(g.NSplits[d]) + i
	}
	return g.Chunks[lin]
}

// TileContext is what lowering hands an op's Tile method: the node being
// tiled, its inputs' grids, and the chunk graph to add to.
type TileContext struct {
	Graph  *TileableGraph
	Node   int32
	Inputs []*Grid // one per input of Node, in order
	Chunks *ChunkGraph

	out  *Grid
	args int32 // interned node args, or -1
}

// NewTileContext prepares the tiling of node in g; lowering calls it.
func NewTileContext(g *TileableGraph, node int32, inputs []*Grid, chunks *ChunkGraph) *TileContext {
	return &TileContext{Graph: g, Node: node, Inputs: inputs, Chunks: chunks, args: -1}
}

// Tileable returns the node being tiled.
func (tc *TileContext) Tileable() *TileableNode { return &tc.Graph.Nodes[tc.Node] }

// Input returns the tileable node of input i.
func (tc *TileContext) Input(i int) *TileableNode {
	return &tc.Graph.Nodes[tc.Graph.Nodes[tc.Node].Inputs[i]]
}

// NodeArgs returns the interned args of the tileable node, for chunks that
// share them.
func (tc *TileContext) NodeArgs() int32 {
	if tc.args < 0 {
		tc.args = tc.Chunks.AddArgs(tc.Tileable().Args)
	}
	return tc.args
}

// AddChunk adds a chunk of this tileable.
func (tc *TileContext) AddChunk(op OpID, args int32, dt DType, inputs []int32, index []int32, shape []int64) (int32, error) {
	c, err := tc.Chunks.AddNode(op, tc.Node, args, dt, inputs, index, shape)
	if err != nil {
		return -1, tc.addError(err)
	}
	return c, nil
}

// AddRow adds n one-dimensional chunks of this tileable in one pass, as
// ChunkGraph.AddRow: chunk i at grid index i, of size sizes[i] (or
// sizes[0] for all), reading ins[0][i], ins[1][i], … It returns the first
// chunk; the others follow it. Tilers of big one-dimensional grids use it
// rather than AddChunk per chunk.
func (tc *TileContext) AddRow(op OpID, args int32, dt DType, n int, sizes []int64, ins ...[]int32) (int32, error) {
	c, err := tc.Chunks.AddRow(op, tc.Node, args, dt, n, sizes, ins)
	if err != nil {
		return -1, tc.addError(err)
	}
	return c, nil
}

// AddAlike adds a chunk of this tileable for each chunk of like, in one
// pass, as ChunkGraph.AddAlike: chunk i with the grid index and shape of
// like[i], reading ins[0][i], ins[1][i], … It returns the first chunk;
// the others follow it.
func (tc *TileContext) AddAlike(op OpID, args int32, dt DType, like []int32, ins ...[]int32) (int32, error) {
	c, err := tc.Chunks.AddAlike(op, tc.Node, args, dt, like, ins)
	if err != nil {
		return -1, tc.addError(err)
	}
	return c, nil
}

// addError names the node being tiled in an error of the chunk graph.
func (tc *TileContext) addError(err error) error {
	if errors.Is(err, ErrResourceExhausted) {
		return Errorf(KindResourceExhausted, "%s: %w", tc.Graph.Describe(tc.Node), err)
	}
	return tc.Errorf("%v", err)
}

// Reserve returns an ErrResourceExhausted error when n more chunks would
// not fit under the chunk graph's limit. A tiler about to allocate per
// chunk from sizes a user chose (a grid of n positions) calls it first, so
// that an absurd size costs an error, not the process.
func (tc *TileContext) Reserve(n int64) error {
	if room := tc.Chunks.Room(); n > room {
		return Errorf(KindResourceExhausted, "%s: tiling needs %d more chunks, but the job's chunk graph has room for %d", tc.Graph.Describe(tc.Node), n, room)
	}
	return nil
}

// SetGrid declares the tileable's chunks. Every Tile must call it once.
func (tc *TileContext) SetGrid(g *Grid) { tc.out = g }

// Grid returns what SetGrid declared, or nil.
func (tc *TileContext) Grid() *Grid { return tc.out }

// Errorf returns an invalid-argument error that names the node being tiled.
func (tc *TileContext) Errorf(format string, args ...any) error {
	return Errorf(KindInvalidArgument, "%s: %s", tc.Graph.Describe(tc.Node), fmt.Sprintf(format, args...))
}
