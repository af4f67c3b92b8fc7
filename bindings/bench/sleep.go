package bench

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

const (
	sleepName   = "bench.sleep"
	isumName    = "bench.isum"
	isumComName = "bench.isum.combine"
)

func init() {
	dag.MustRegister(sleepOp{})
	dag.MustRegister(isumOp{})
	dag.MustRegister(isumCombineOp{})
}

type sleepArgs struct {
	Sleep time.Duration `cbor:"1,keyasint"`
}

// SleepSum returns a job of n subtasks that each sleep d (watching their
// context) and output their index, summed by a tree of 4-way combines: its
// result is n(n-1)/2. It is long enough to kill things in the middle of.
func SleepSum(n int64, d time.Duration) Graph { return sleepSum(n, sleepArgs{Sleep: d}) }

func sleepSum(n int64, a sleepArgs) Graph {
	args, _ := codec.Marshal(a)
	return Graph{&dag.TileableGraph{
		Nodes: []dag.TileableNode{
			{Op: dag.OpIDOf(sleepName), Args: args, Shape: []int64{n}, DType: dag.Int64, ChunkSize: []int64{1}},
			SumNode(0),
		},
		Outputs: []int32{1},
	}}
}

// SumNode is a node of a graph built by hand that sums node input, a
// 1-d int64 tensor, into one int64: a partial per chunk (fused with the
// chunk it reads) and a tree of 4-way combines, as SleepSum's result is
// summed.
func SumNode(input int32) dag.TileableNode {
	return dag.TileableNode{Op: dag.OpIDOf(isumName), Inputs: []int32{input}, DType: dag.Int64}
}

type sleepOp struct{ noopOp }

func (sleepOp) Name() string { return sleepName }

func (sleepOp) Exec(kc *dag.KernelCall) error {
	var a sleepArgs
	if err := codec.Unmarshal(kc.Args, &a); err != nil {
		return fmt.Errorf("%s: malformed args: %w", sleepName, err)
	}
	t := time.NewTimer(a.Sleep)
	select {
	case <-t.C:
	case <-kc.Ctx.Done():
		t.Stop()
		return kc.Interrupted()
	}
	return noopOp{}.Exec(kc)
}

// isumOp sums an int64 tensor with a tree of 4-way combines.
type isumOp struct{}

func (isumOp) Name() string { return isumName }

func (isumOp) Tile(tc *dag.TileContext) error {
	if len(tc.Inputs) != 1 {
		return tc.Errorf("wants one input, has %d", len(tc.Inputs))
	}
	in := tc.Inputs[0]
	args := tc.NodeArgs()
	level := make([]int32, 0, len(in.Chunks))
	for _, c := range in.Chunks {
		p, err := tc.AddChunk(dag.OpIDOf(isumName), args, dag.Int64, []int32{c}, nil, nil)
		if err != nil {
			return err
		}
		level = append(level, p)
	}
	for len(level) > 1 {
		var next []int32
		for i := 0; i < len(level); i += 4 {
			j := min(i+4, len(level))
			if j-i == 1 {
				next = append(next, level[i])
				continue
			}
			p, err := tc.AddChunk(dag.OpIDOf(isumComName), args, dag.Int64, level[i:j], nil, nil)
			if err != nil {
				return err
			}
			next = append(next, p)
		}
		level = next
	}
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: level})
	return nil
}

// Estimate (dag.Estimator): a partial per input chunk and a tree of
// 4-way combines.
func (isumOp) Estimate(ec *dag.EstimateContext) error {
	if len(ec.Inputs) != 1 {
		return nil // Tile refuses it
	}
	partials := ec.Inputs[0].Chunks()
	ec.Chunks = dag.SatAdd(partials, dag.TreeNodes(partials, 4))
	ec.Edges = dag.SatAdd(partials, ec.Chunks)
	ec.Fused = partials
	return nil
}

func (isumOp) Exec(kc *dag.KernelCall) error { return sumInts(kc) }

type isumCombineOp struct{}

func (isumCombineOp) Name() string                  { return isumComName }
func (isumCombineOp) Exec(kc *dag.KernelCall) error { return sumInts(kc) }

func sumInts(kc *dag.KernelCall) error {
	var s int64
	for _, in := range kc.Inputs {
		if len(in.Data)%8 != 0 {
			return fmt.Errorf("bench: input of %d bytes is not int64s", len(in.Data))
		}
		for i := 0; i < len(in.Data); i += 8 {
			s += int64(binary.LittleEndian.Uint64(in.Data[i:]))
		}
	}
	out, err := kc.Output(0, dag.Meta{DType: dag.Int64}, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(out, uint64(s))
	return nil
}
