package lowering

import (
	"github.com/phobos-project/phobos/dag"
)

// Tiled is a tileable graph tiled into chunks.
type Tiled struct {
	Graph  *dag.TileableGraph
	Chunks *dag.ChunkGraph
	Grids  []*dag.Grid // per tileable node
	Order  []int32     // tileable nodes in the order they were tiled
}

// Tile validates g and tiles every node, inputs first, with the ops in reg.
// Errors name the node and the problem.
func Tile(g *dag.TileableGraph, reg *dag.Registry) (*Tiled, error) {
	order, err := g.Validate()
	if err != nil {
		return nil, err
	}
	est := 0
	for i := range g.Nodes {
		est += estimateChunks(&g.Nodes[i])
	}
	t := &Tiled{
		Graph:  g,
		Chunks: dag.NewChunkGraph(est),
		Grids:  make([]*dag.Grid, len(g.Nodes)),
		Order:  order,
	}
	for _, n := range order {
		node := &g.Nodes[n]
		op, ok := reg.Lookup(node.Op)
		if !ok {
			return nil, dag.Errorf(dag.KindInvalidArgument, "%s: unknown op %s; the head knows %d ops (is the graph from a newer client?)",
				g.Describe(n), node.Op, len(reg.Names()))
		}
		tiler, ok := op.(dag.Tiler)
		if !ok {
			return nil, dag.Errorf(dag.KindInvalidArgument, "%s: op %q cannot be tiled (it is a chunk-level op, not a user op)", g.Describe(n), op.Name())
		}
		inputs := make([]*dag.Grid, len(node.Inputs))
		for i, in := range node.Inputs {
			inputs[i] = t.Grids[in]
		}
		tc := dag.NewTileContext(g, n, inputs, t.Chunks)
		if err := tiler.Tile(tc); err != nil {
			return nil, err
		}
		grid := tc.Grid()
		if grid == nil {
			return nil, dag.Errorf(dag.KindInternal, "%s: op %q tiled without declaring its chunk grid", g.Describe(n), op.Name())
		}
		t.Grids[n] = grid
	}
	return t, nil
}

// estimateChunks guesses a node's chunk count from its shape and chunk
// size, to size the chunk graph's slices once.
func estimateChunks(n *dag.TileableNode) int {
	c := 1
	for d, s := range n.Shape {
		if d < len(n.ChunkSize) && n.ChunkSize[d] > 0 {
			k := (s + n.ChunkSize[d] - 1) / n.ChunkSize[d]
			if k > 1<<20 {
				k = 1 << 20
			}
			c *= int(max(k, 1))
		}
		if c > 1<<22 {
			return 1 << 22
		}
	}
	return c
}
