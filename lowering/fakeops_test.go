package lowering

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// Fake ops for lowering's own tests, in a registry of their own so these
// tests do not depend on bindings/tensor. Values are float64, 1-D.
//
//	f.src     source; element i of chunk k is (131k+i) mod 10
//	f.inc     x+1, chunk by chunk
//	f.add     x+y, chunk by chunk (same chunking)
//	f.sum     tree reduction, combine 4
//	f.small   the elements < 5 of x: chunks of unknown size
//	f.settle  x cut into chunks of args.Chunk; needs x's chunk sizes
//	f.seq     x then y, cut like f.settle; asks for x's sizes, and only
//	          then for y's (so a stage can be empty)
var fakes = func() *dag.Registry {
	r := dag.NewRegistry()
	for _, op := range []dag.Op{fsrc{}, fmapOp{"f.inc"}, faddOp{}, fsumOp{}, fsumOp{combine: true}, fmapOp{"f.small"}, fsettleOp{}, fseqOp{}, fetchOp{}} {
		if err := r.Register(op); err != nil {
			panic(err)
		}
	}
	return r
}()

type fsettleArgs struct {
	Chunk int64 `cbor:"1,keyasint"`
	Start int64 `cbor:"2,keyasint,omitempty"` // offset into the first input
}

func args(v any) []byte {
	b, err := codec.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fg builds fake tileable graphs.
type fg struct{ g dag.TileableGraph }

func (b *fg) node(op string, a []byte, shape []int64, chunk []int64, inputs ...int32) int32 {
	b.g.Nodes = append(b.g.Nodes, dag.TileableNode{Op: dag.OpIDOf(op), Args: a, Inputs: inputs, Shape: shape, DType: dag.Float64, ChunkSize: chunk})
	return int32(len(b.g.Nodes) - 1)
}
func (b *fg) src(n, c int64) int32 { return b.node("f.src", nil, []int64{n}, []int64{c}) }
func (b *fg) inc(x int32) int32 {
	return b.node("f.inc", nil, b.g.Nodes[x].Shape, nil, x)
}
func (b *fg) add(x, y int32) int32 { return b.node("f.add", nil, b.g.Nodes[x].Shape, nil, x, y) }
func (b *fg) sum(x int32) int32    { return b.node("f.sum", nil, []int64{}, nil, x) }
func (b *fg) small(x int32) int32  { return b.node("f.small", nil, []int64{Unknown}, nil, x) }
func (b *fg) settle(x int32, c int64) int32 {
	return b.node("f.settle", args(fsettleArgs{Chunk: c}), []int64{Unknown}, nil, x)
}
func (b *fg) out(ns ...int32) *dag.TileableGraph {
	b.g.Outputs = ns
	return &b.g
}

type fsrc struct{}

func (fsrc) Name() string { return "f.src" }
func (fsrc) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	size, c := n.Shape[0], n.ChunkSize[0]
	if c <= 0 {
		return tc.Errorf("chunk size %d must be positive", c)
	}
	grid := &dag.Grid{NSplits: [][]int64{nil}}
	for i, off := int32(0), int64(0); off < size || (size == 0 && i == 0); i++ {
		s := min(c, size-off)
		ch, err := tc.AddChunk(n.Op, tc.NodeArgs(), n.DType, nil, []int32{i}, []int64{s})
		if err != nil {
			return err
		}
		grid.NSplits[0] = append(grid.NSplits[0], s)
		grid.Chunks = append(grid.Chunks, ch)
		off += s
	}
	tc.SetGrid(grid)
	return nil
}
func (fsrc) Exec(kc *dag.KernelCall) error {
	out := alloc(kc, kc.Shape)
	// Element i of chunk k is (131k+i) mod 10: fakeSource gives the same.
	for i := range out {
		out[i] = float64((int64(kc.Index[0])*131 + int64(i)) % 10)
	}
	return nil
}

type fmapOp struct{ name string }

func (o fmapOp) Name() string { return o.name }
func (o fmapOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	in := tc.Inputs[0]
	grid := &dag.Grid{NSplits: [][]int64{append([]int64(nil), in.NSplits[0]...)}}
	for i, c := range in.Chunks {
		shape := tc.Chunks.Shape(c)
		if o.name == "f.small" {
			shape = []int64{Unknown}
			grid.NSplits[0][i] = Unknown
		}
		ch, err := tc.AddChunk(n.Op, tc.NodeArgs(), n.DType, []int32{c}, []int32{int32(i)}, shape)
		if err != nil {
			return err
		}
		grid.Chunks = append(grid.Chunks, ch)
	}
	tc.SetGrid(grid)
	return nil
}
func (o fmapOp) Exec(kc *dag.KernelCall) error {
	x := kc.Inputs[0].Float64s()
	if o.name == "f.small" {
		var keep []float64
		for _, v := range x {
			if v < 5 {
				keep = append(keep, v)
			}
		}
		copy(alloc(kc, []int64{int64(len(keep))}), keep)
		return nil
	}
	out := alloc(kc, kc.Inputs[0].Meta.Shape)
	for i, v := range x {
		out[i] = v + 1
	}
	return nil
}

type faddOp struct{}

func (faddOp) Name() string { return "f.add" }
func (faddOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	a, b := tc.Inputs[0], tc.Inputs[1]
	if len(a.Chunks) != len(b.Chunks) || tc.Input(0).Shape[0] != tc.Input(1).Shape[0] {
		return tc.Errorf("input shapes %v and %v differ", tc.Input(0).Shape, tc.Input(1).Shape)
	}
	grid := &dag.Grid{NSplits: a.NSplits}
	for i := range a.Chunks {
		ch, err := tc.AddChunk(n.Op, tc.NodeArgs(), n.DType, []int32{a.Chunks[i], b.Chunks[i]}, []int32{int32(i)}, tc.Chunks.Shape(a.Chunks[i]))
		if err != nil {
			return err
		}
		grid.Chunks = append(grid.Chunks, ch)
	}
	tc.SetGrid(grid)
	return nil
}
func (faddOp) Exec(kc *dag.KernelCall) error {
	x, y := kc.Inputs[0].Float64s(), kc.Inputs[1].Float64s()
	out := alloc(kc, kc.Inputs[0].Meta.Shape)
	for i := range out {
		out[i] = x[i] + y[i]
	}
	return nil
}

type fsumOp struct{ combine bool }

func (o fsumOp) Name() string {
	if o.combine {
		return "f.sum.combine"
	}
	return "f.sum"
}
func (o fsumOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	var level []int32
	for _, c := range tc.Inputs[0].Chunks {
		p, err := tc.AddChunk(n.Op, tc.NodeArgs(), n.DType, []int32{c}, nil, nil)
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
			p, err := tc.AddChunk(dag.OpIDOf("f.sum.combine"), tc.NodeArgs(), n.DType, level[i:j], nil, nil)
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
func (o fsumOp) Exec(kc *dag.KernelCall) error {
	s := 0.0
	for _, in := range kc.Inputs {
		for _, v := range in.Float64s() {
			s += v
		}
	}
	alloc(kc, nil)[0] = s
	return nil
}

// needChunks is a tiler's request for metas (see MetaNeeder).
type needChunks []int32

func (n needChunks) Error() string         { return fmt.Sprintf("need the sizes of chunks %v", []int32(n)) }
func (n needChunks) NeededChunks() []int32 { return n }

type fsettleOp struct{}

func (fsettleOp) Name() string { return "f.settle" }
func (fsettleOp) NewArgs() any { return new(fsettleArgs) }
func (fsettleOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	var a fsettleArgs
	if err := codec.Unmarshal(n.Args, &a); err != nil || a.Chunk <= 0 {
		return tc.Errorf("bad args")
	}
	in := tc.Inputs[0]
	var need needChunks
	for i, s := range in.NSplits[0] {
		if s < 0 {
			need = append(need, in.Chunks[i])
		}
	}
	if len(need) > 0 {
		return fmt.Errorf("f.settle: %w", need)
	}
	total := int64(0)
	starts := make([]int64, len(in.Chunks))
	for i, s := range in.NSplits[0] {
		starts[i] = total
		total += s
	}
	grid := &dag.Grid{NSplits: [][]int64{nil}}
	for k, off := int32(0), int64(0); off < total || k == 0; k++ {
		e := min(off+a.Chunk, total)
		var ins []int32
		first := int64(-1)
		for i, s := range in.NSplits[0] {
			if s > 0 && starts[i] < e && starts[i]+s > off {
				if first < 0 {
					first = off - starts[i]
				}
				ins = append(ins, in.Chunks[i])
			}
		}
		ch, err := tc.AddChunk(n.Op, tc.Chunks.AddArgs(args(fsettleArgs{Chunk: a.Chunk, Start: max(first, 0)})), n.DType, ins, []int32{k}, []int64{e - off})
		if err != nil {
			return err
		}
		grid.NSplits[0] = append(grid.NSplits[0], e-off)
		grid.Chunks = append(grid.Chunks, ch)
		off = e
		if total == 0 {
			break
		}
	}
	tc.SetGrid(grid)
	return nil
}
func (fsettleOp) Exec(kc *dag.KernelCall) error {
	var a fsettleArgs
	if err := codec.Unmarshal(kc.Args, &a); err != nil {
		return err
	}
	out := alloc(kc, kc.Shape)
	k, skip := 0, a.Start
	for _, in := range kc.Inputs {
		for _, v := range in.Float64s()[skip:] {
			if k == len(out) {
				break
			}
			out[k] = v
			k++
		}
		skip = 0
	}
	if k != len(out) {
		return errors.New("f.settle: inputs too short")
	}
	return nil
}

// heap is an OutputAllocator on the Go heap.
type heap struct{ out []dag.Value }

func (h *heap) Output(i int, m dag.Meta, n int) ([]byte, error) {
	for len(h.out) <= i {
		h.out = append(h.out, dag.Value{})
	}
	b := dag.Float64sAsBytes(make([]float64, (n+7)/8+1))[:n]
	h.out[i] = dag.Value{Meta: m, Data: b}
	return b, nil
}

func alloc(kc *dag.KernelCall, shape []int64) []float64 {
	m := dag.Meta{DType: dag.Float64, Shape: shape}
	b, _ := kc.Output(0, m, int(m.Bytes()))
	return dag.BytesAsFloat64s(b)
}

// runStages lowers g stage by stage and runs every stage in this process,
// feeding the metas lowering asks for, like a head would. It returns the
// plans and the value of each output, its chunks concatenated in grid order
// (right for 1-D outputs and scalars).
func runStages(t *testing.T, g *dag.TileableGraph, reg *dag.Registry, opts Options) ([]*Plan, []dag.Value) {
	t.Helper()
	tl, err := Tile(g, reg)
	if err != nil {
		t.Fatal(err)
	}
	store := map[dag.ObjectID]dag.Value{}
	alloc := Counter()
	var plans []*Plan
	for {
		p, err := tl.NextStage(7, opts, alloc)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
		runPlan(t, p, reg, store)
		if p.Final {
			var vals []dag.Value
			for _, r := range p.Results {
				n := 0
				for _, id := range r.Objects {
					n += len(store[id].Data)
				}
				buf := dag.Float64sAsBytes(make([]float64, n/8+1))[:0]
				for _, id := range r.Objects {
					buf = append(buf, store[id].Data...)
				}
				m := r.Meta
				if len(r.Objects) > 0 {
					m.DType = store[r.Objects[0]].Meta.DType
				}
				vals = append(vals, dag.Value{Meta: m, Data: buf})
			}
			return plans, vals
		}
		// Feed what a head knows from completions: byte sizes, resolved
		// against the planned metas. They must agree with the objects' own.
		var metas []dag.Meta
		for _, n := range tl.Need() {
			v := store[n.Object]
			m, err := ResolveMeta(n.Planned, int64(len(v.Data)))
			if err != nil || !reflect.DeepEqual(m, v.Meta) {
				t.Fatalf("need %s: resolved %v (%v), object holds %v", n.Object, m, err, v.Meta)
			}
			metas = append(metas, m)
		}
		if err := tl.Feed(metas); err != nil {
			t.Fatal(err)
		}
	}
}

// runPlan runs p's subtasks in index order (topological) with the ops'
// kernels, keeping exported objects in store.
func runPlan(t *testing.T, p *Plan, reg *dag.Registry, store map[dag.ObjectID]dag.Value) {
	t.Helper()
	sg := p.Stage
	cg := sg.Chunks
	for s := int32(0); s < int32(sg.Len()); s++ {
		local := map[int32]dag.Value{}
		for _, c := range sg.ChunksOf(s) {
			var ins []dag.Value
			for _, in := range cg.Inputs(c) {
				if v, ok := local[in]; ok {
					ins = append(ins, v)
					continue
				}
				id, ok := p.ObjectOf(in)
				v, have := store[id]
				if !ok || !have {
					t.Fatalf("subtask %d chunk %d: input %d (%s) not available", s, c, in, id)
				}
				ins = append(ins, v)
			}
			op, _ := reg.Lookup(cg.Nodes[c].Op)
			k, ok := op.(dag.Kernel)
			if !ok {
				t.Fatalf("chunk %d: op %s has no kernel", c, reg.Name(cg.Nodes[c].Op))
			}
			h := &heap{}
			kc := &dag.KernelCall{Ctx: context.Background(), Args: cg.NodeArgs(c), Index: cg.Index(c), Shape: cg.Shape(c),
				DType: cg.Nodes[c].DType, Inputs: ins, Outputs: h}
			if err := k.Exec(kc); err != nil {
				t.Fatalf("chunk %d (%s): %v", c, op.Name(), err)
			}
			local[c] = h.out[0]
		}
		for k, c := range sg.OutputsOf(s) {
			store[dag.NewObjectID(sg.ID(s), uint32(k))] = local[c]
		}
	}
}

// fakeSource is what f.src computes for a tensor of n elements in chunks of c.
func fakeSource(n, c int64) []float64 {
	out := make([]float64, n)
	for j := range out {
		k, i := int64(j)/c, int64(j)%c
		out[j] = float64((k*131 + i) % 10)
	}
	return out
}

type fseqOp struct{}

func (fseqOp) Name() string { return "f.seq" }
func (fseqOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	for k := 0; k < 2; k++ {
		var need needChunks
		for i, sz := range tc.Inputs[k].NSplits[0] {
			if sz < 0 {
				need = append(need, tc.Inputs[k].Chunks[i])
			}
		}
		if len(need) > 0 {
			return need
		}
	}
	// One output chunk per input chunk, copied (f.settle with Start 0).
	grid := &dag.Grid{NSplits: [][]int64{nil}}
	for k := 0; k < 2; k++ {
		for i, c := range tc.Inputs[k].Chunks {
			sz := tc.Inputs[k].NSplits[0][i]
			ch, err := tc.AddChunk(dag.OpIDOf("f.settle"), tc.Chunks.AddArgs(args(fsettleArgs{Chunk: max(sz, 1)})), n.DType, []int32{c}, []int32{int32(len(grid.Chunks))}, []int64{sz})
			if err != nil {
				return err
			}
			grid.NSplits[0] = append(grid.NSplits[0], sz)
			grid.Chunks = append(grid.Chunks, ch)
		}
	}
	tc.SetGrid(grid)
	return nil
}
