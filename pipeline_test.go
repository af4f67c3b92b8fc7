package phobos_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// linkChain is a chain of Length subtasks ("test.link"), each adding one
// to the one before; link FailAt fails its first run with a kind the head
// retries. Every run of a link is counted, by index.
type linkChainOp struct{}

type linkChainArgs struct {
	Length int64 `cbor:"1,keyasint"`
	FailAt int64 `cbor:"2,keyasint"`
}

// linkArgs are a link's: its index in the chain, and the chain's FailAt.
type linkArgs struct {
	I      int64 `cbor:"1,keyasint"`
	FailAt int64 `cbor:"2,keyasint"`
}

func (linkChainOp) Name() string { return "test.linkchain" }

func (linkChainOp) Tile(tc *dag.TileContext) error {
	var a linkChainArgs
	if err := codec.Unmarshal(tc.Tileable().Args, &a); err != nil {
		return tc.Errorf("malformed args: %v", err)
	}
	prev := int32(-1)
	for i := int64(0); i < a.Length; i++ {
		var ins []int32
		if prev >= 0 {
			ins = []int32{prev}
		}
		args, _ := codec.Marshal(linkArgs{I: i, FailAt: a.FailAt})
		c, err := tc.AddChunk(dag.OpIDOf("test.link"), tc.Chunks.AddArgs(args), dag.Int64, ins, nil, nil)
		if err != nil {
			return err
		}
		prev = c
	}
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: []int32{prev}})
	return nil
}

type linkOp struct{}

func (linkOp) Name() string { return "test.link" }

// linkRuns counts each link's runs.
var linkRuns struct {
	sync.Mutex
	n map[int32]int
}

func (linkOp) Exec(kc *dag.KernelCall) error {
	var a linkArgs
	if err := codec.Unmarshal(kc.Args, &a); err != nil {
		return err
	}
	i := int32(a.I)
	linkRuns.Lock()
	linkRuns.n[i]++
	first := linkRuns.n[i] == 1
	linkRuns.Unlock()
	if int64(i) == a.FailAt && first {
		return dag.Errorf(dag.KindUnavailable, "link %d fails its first run", i)
	}
	var v uint64
	if len(kc.Inputs) == 1 {
		v = binary.LittleEndian.Uint64(kc.Inputs[0].Data)
	}
	if v != uint64(i) {
		return fmt.Errorf("link %d read %d, want %d", i, v, i)
	}
	out, err := kc.Output(0, dag.Meta{DType: dag.Int64}, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(out, v+1)
	return nil
}

func init() {
	dag.MustRegister(linkChainOp{})
	dag.MustRegister(linkOp{})
}

func linkChain(length, failAt int64) phobos.Graph {
	args, _ := codec.Marshal(linkChainArgs{Length: length, FailAt: failAt})
	return raw{&dag.TileableGraph{
		Nodes:   []dag.TileableNode{{Op: dag.OpIDOf("test.linkchain"), Args: args, DType: dag.Int64}},
		Outputs: []int32{0},
	}}
}

// TestPipelinedChainSurvivesAFailure runs a chain with fusion off on real
// raylets, where the head sends each raylet links ahead of the links they
// read. A link that fails takes back what was sent ahead of it: the links
// after it never start on what it did not store, and run once each after
// its retry; the answer is the chain's length.
func TestPipelinedChainSurvivesAFailure(t *testing.T) {
	c, ctx := local(t, 2)
	for _, tc := range []struct{ length, failAt int64 }{{300, -1}, {300, 40}, {300, 299}} {
		linkRuns.Lock()
		linkRuns.n = map[int32]int{}
		linkRuns.Unlock()
		j, err := c.Submit(ctx, linkChain(tc.length, tc.failAt), phobos.JobOptions{Fusion: "none"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Wait(ctx)
		if err != nil {
			t.Fatalf("chain of %d failing at %d: %v", tc.length, tc.failAt, err)
		}
		got := res.Values[0].Int64s()
		if err := j.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != tc.length {
			t.Fatalf("chain of %d failing at %d = %v, want [%d]", tc.length, tc.failAt, got, tc.length)
		}
		linkRuns.Lock()
		for i := int32(0); i < int32(tc.length); i++ {
			want := 1
			if int64(i) == tc.failAt {
				want = 2
			}
			if n := linkRuns.n[i]; n != want {
				t.Errorf("chain of %d failing at %d: link %d ran %d times, want %d", tc.length, tc.failAt, i, n, want)
			}
		}
		linkRuns.Unlock()
	}
}
