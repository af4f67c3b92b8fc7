// Package bench holds the ops and graphs of phobos's throughput benchmarks
// (phobos bench and the Go benchmarks): trivial independent subtasks and
// chains of dependent ones, so that what is measured is the runtime, not
// the kernels.
package bench

import (
	"encoding/binary"
	"fmt"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

const (
	noopName  = "bench.noop"
	chainName = "bench.chain"
	incName   = "bench.inc"
)

func init() {
	dag.MustRegister(noopOp{})
	dag.MustRegister(chainOp{})
	dag.MustRegister(incOp{})
}

// Graph is a benchmark job.
type Graph struct{ g *dag.TileableGraph }

// TileableGraph implements phobos.Graph.
func (b Graph) TileableGraph() (*dag.TileableGraph, error) { return b.g, nil }

// Independent returns a job of n subtasks that depend on nothing and each
// store one 8-byte value: the job's output has n chunks.
func Independent(n int64) Graph {
	return Graph{&dag.TileableGraph{
		Nodes:   []dag.TileableNode{{Op: dag.OpIDOf(noopName), Shape: []int64{n}, DType: dag.Int64, ChunkSize: []int64{1}}},
		Outputs: []int32{0},
	}}
}

type chainArgs struct {
	Length int64 `cbor:"1,keyasint"`
}

// Chain returns a job of n subtasks where each reads the one before (run
// it with fusion off, or chain fusion makes it one subtask). Its output is
// the last value, n.
func Chain(n int64) Graph {
	args, _ := codec.Marshal(chainArgs{Length: n})
	return Graph{&dag.TileableGraph{
		Nodes:   []dag.TileableNode{{Op: dag.OpIDOf(chainName), Args: args, DType: dag.Int64}},
		Outputs: []int32{0},
	}}
}

// Units tiles a 1-d int64 tensor into chunks of one element, chunk i at
// index i: the source of the benchmark jobs. An op embeds it for its Tile
// and Estimate, and adds its Name and Exec.
type Units struct{}

// Tile (dag.Tiler) lays out the node's one dimension a chunk per element.
func (Units) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.Shape) != 1 {
		return tc.Errorf("wants a 1-d shape, has %v", n.Shape)
	}
	if err := tc.Reserve(n.Shape[0]); err != nil {
		return err
	}
	args := tc.NodeArgs()
	grid := &dag.Grid{NSplits: [][]int64{make([]int64, n.Shape[0])}, Chunks: make([]int32, n.Shape[0])}
	idx := []int32{0}
	shape := []int64{1}
	for i := int64(0); i < n.Shape[0]; i++ {
		grid.NSplits[0][i] = 1
		idx[0] = int32(i)
		c, err := tc.AddChunk(n.Op, args, dag.Int64, nil, idx, shape)
		if err != nil {
			return err
		}
		grid.Chunks[i] = c
	}
	tc.SetGrid(grid)
	return nil
}

// Estimate (dag.Estimator): one chunk per element.
func (Units) Estimate(ec *dag.EstimateContext) error {
	if s := ec.Out.Splits; len(s) == 1 {
		s[0] = max(ec.Out.Shape[0], 1)
	}
	ec.Chunks = ec.Out.Chunks()
	return nil
}

// noopOp is a source of 1-element int64 chunks holding their index.
type noopOp struct{ Units }

func (noopOp) Name() string { return noopName }

func (noopOp) Exec(kc *dag.KernelCall) error {
	out, err := kc.Output(0, dag.Meta{DType: dag.Int64, Shape: kc.Shape}, 8)
	if err != nil {
		return err
	}
	var i int32
	if len(kc.Index) > 0 {
		i = kc.Index[0]
	}
	binary.LittleEndian.PutUint64(out, uint64(i))
	return nil
}

// chainOp tiles into Length chunks, each reading the previous; its grid is
// the last chunk.
type chainOp struct{}

func (chainOp) Name() string { return chainName }

func (chainOp) Tile(tc *dag.TileContext) error {
	var a chainArgs
	if err := codec.Unmarshal(tc.Tileable().Args, &a); err != nil {
		return tc.Errorf("malformed args: %v", err)
	}
	if a.Length < 1 {
		return tc.Errorf("chain length %d must be at least 1", a.Length)
	}
	args := tc.NodeArgs()
	inc := dag.OpIDOf(incName)
	prev := int32(-1)
	for i := int64(0); i < a.Length; i++ {
		var ins []int32
		if prev >= 0 {
			ins = []int32{prev}
		}
		c, err := tc.AddChunk(inc, args, dag.Int64, ins, nil, nil)
		if err != nil {
			return err
		}
		prev = c
	}
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: []int32{prev}})
	return nil
}

// Estimate (dag.Estimator): Length chunks in a line.
func (chainOp) Estimate(ec *dag.EstimateContext) error {
	var a chainArgs
	if err := codec.Unmarshal(ec.Tileable().Args, &a); err != nil {
		return ec.Errorf("malformed args: %v", err)
	}
	ec.Chunks = max(a.Length, 1)
	ec.Edges = ec.Chunks - 1
	return nil
}

// incOp adds one to its input (or starts at 1).
type incOp struct{}

func (incOp) Name() string { return incName }

func (incOp) Exec(kc *dag.KernelCall) error {
	var v uint64
	if len(kc.Inputs) == 1 {
		if len(kc.Inputs[0].Data) != 8 {
			return fmt.Errorf("%s: input has %d bytes, want 8", incName, len(kc.Inputs[0].Data))
		}
		v = binary.LittleEndian.Uint64(kc.Inputs[0].Data)
	}
	out, err := kc.Output(0, dag.Meta{DType: dag.Int64}, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(out, v+1)
	return nil
}
