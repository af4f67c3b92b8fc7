package bench_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
)

// The dependencies of each pattern on small graphs, written out by hand
// from Task Bench's definitions (core/core.cc, TaskGraph::dependencies):
// each entry is the points of timestep t-1 that (t, point) reads.
func TestPatternDependencies(t *testing.T) {
	type dep struct {
		t, p int64
		want []int64
	}
	cases := []struct {
		g    bench.TaskGraph
		deps []dep
	}{
		{bench.TaskGraph{Pattern: bench.Trivial, Width: 3, Steps: 3}, []dep{
			{0, 0, nil}, {1, 0, nil}, {1, 2, nil}, {2, 1, nil},
		}},
		{bench.TaskGraph{Pattern: bench.NoComm, Width: 3, Steps: 3}, []dep{
			{0, 1, nil}, {1, 0, []int64{0}}, {1, 2, []int64{2}}, {2, 1, []int64{1}},
		}},
		{bench.TaskGraph{Pattern: bench.Stencil1D, Width: 4, Steps: 3}, []dep{
			{0, 2, nil}, {1, 0, []int64{0, 1}}, {1, 1, []int64{0, 1, 2}}, {1, 2, []int64{1, 2, 3}}, {2, 3, []int64{2, 3}},
		}},
		{bench.TaskGraph{Pattern: bench.Stencil1D, Width: 1, Steps: 3}, []dep{
			{1, 0, []int64{0}},
		}},
		// Width 8: three distances; timestep t reads at 2^((t+2) mod 3).
		{bench.TaskGraph{Pattern: bench.FFT, Width: 8, Steps: 6}, []dep{
			{0, 3, nil},
			{1, 0, []int64{0, 1}}, {1, 3, []int64{2, 3, 4}}, {1, 7, []int64{6, 7}},
			{2, 0, []int64{0, 2}}, {2, 5, []int64{3, 5, 7}}, {2, 6, []int64{4, 6}},
			{3, 1, []int64{1, 5}}, {3, 4, []int64{0, 4}}, {3, 3, []int64{3, 7}},
			{4, 4, []int64{3, 4, 5}}, {5, 1, []int64{1, 3}},
		}},
		// Width 5: ceil(log2 5) = 3 distances, 1, 2, 4.
		{bench.TaskGraph{Pattern: bench.FFT, Width: 5, Steps: 4}, []dep{
			{1, 4, []int64{3, 4}}, {2, 2, []int64{0, 2, 4}}, {3, 0, []int64{0, 4}}, {3, 2, []int64{2}},
		}},
		// Widths 1, 2, 4, 4: each point reads point/2.
		{bench.TaskGraph{Pattern: bench.Tree, Width: 4, Steps: 4}, []dep{
			{0, 0, nil}, {1, 0, []int64{0}}, {1, 1, []int64{0}},
			{2, 2, []int64{1}}, {2, 3, []int64{1}}, {3, 0, []int64{0}}, {3, 3, []int64{1}},
		}},
		{bench.TaskGraph{Pattern: bench.AllToAll, Width: 3, Steps: 3}, []dep{
			{0, 0, nil}, {1, 0, []int64{0, 1, 2}}, {2, 2, []int64{0, 1, 2}},
		}},
	}
	for _, c := range cases {
		for _, d := range c.deps {
			got := c.g.Dependencies(d.t, d.p, nil)
			if !slices.Equal(got, d.want) {
				t.Errorf("%s width %d: (%d, %d) reads %v, want %v", c.g.Pattern, c.g.Width, d.t, d.p, got, d.want)
			}
		}
	}

	tree := bench.TaskGraph{Pattern: bench.Tree, Width: 4, Steps: 5}
	var widths []int64
	for s := range tree.Steps {
		widths = append(widths, tree.WidthAt(s))
	}
	if want := []int64{1, 2, 4, 4, 4}; !slices.Equal(widths, want) {
		t.Errorf("tree widths %v, want %v", widths, want)
	}
	if got := tree.Tasks(); got != 15 {
		t.Errorf("tree tasks %d, want 15", got)
	}
}

// Tiling builds exactly the graph Dependencies describes: chunk (t, p)
// reads the chunks of (t-1, q) for q in Dependencies(t, p), in that order;
// Tasks and Edges count what is built, the estimate bounds it, and the
// grid is the last timestep.
func TestTilingMatchesDependencies(t *testing.T) {
	for _, p := range bench.Patterns {
		for _, wh := range [][2]int64{{1, 1}, {1, 4}, {4, 1}, {5, 7}, {8, 9}, {16, 12}} {
			g := bench.TaskGraph{Pattern: p, Width: wh[0], Steps: wh[1], Iterations: 3, OutputBytes: 24}
			t.Run(fmt.Sprintf("%s/%dx%d", p, wh[0], wh[1]), func(t *testing.T) {
				checkTiling(t, g)
			})
		}
	}
}

func checkTiling(t *testing.T, g bench.TaskGraph) {
	job, err := g.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := job.TileableGraph()
	est, err := lowering.EstimateJob(tg, dag.Ops, lowering.FuseNone)
	if err != nil {
		t.Fatal(err)
	}
	tiled, err := lowering.Tile(tg, dag.Ops)
	if err != nil {
		t.Fatal(err)
	}
	cg := tiled.Chunks
	if int64(cg.Len()) != g.Tasks() || int64(cg.Edges()) != g.Edges() {
		t.Fatalf("built %d chunks and %d edges; Tasks %d, Edges %d", cg.Len(), cg.Edges(), g.Tasks(), g.Edges())
	}
	if est.Chunks < int64(cg.Len()) || est.Edges < int64(cg.Edges()) {
		t.Fatalf("estimate %+v is below what was built (%d chunks, %d edges)", est, cg.Len(), cg.Edges())
	}
	at := map[[2]int64]int32{}
	for c := range int32(cg.Len()) {
		ix := cg.Index(c)
		at[[2]int64{int64(ix[0]), int64(ix[1])}] = c
		if sh := cg.Shape(c); !slices.Equal(sh, []int64{1, 24}) {
			t.Fatalf("chunk %v has shape %v", ix, sh)
		}
	}
	for s := range g.Steps {
		for p := range g.WidthAt(s) {
			c, ok := at[[2]int64{s, p}]
			if !ok {
				t.Fatalf("no chunk for task (%d, %d)", s, p)
			}
			var want []int32
			for _, q := range g.Dependencies(s, p, nil) {
				want = append(want, at[[2]int64{s - 1, q}])
			}
			if got := cg.Inputs(c); !slices.Equal(got, want) {
				t.Fatalf("task (%d, %d) reads chunks %v, want %v", s, p, got, want)
			}
		}
	}
	grid := tiled.Grids[0]
	last := g.WidthAt(g.Steps - 1)
	if int64(len(grid.Chunks)) != last {
		t.Fatalf("grid has %d chunks, want the %d of the last timestep", len(grid.Chunks), last)
	}
	for p, c := range grid.Chunks {
		if ix := cg.Index(c); int64(ix[0]) != g.Steps-1 || ix[1] != int32(p) {
			t.Fatalf("grid chunk %d is task %v", p, ix)
		}
	}
}

// Edges counts the dependencies in closed form (and FFT by timestep); it
// must agree with summing Dependencies, including over many FFT periods.
func TestEdgesCountsDependencies(t *testing.T) {
	for _, p := range bench.Patterns {
		for _, w := range []int64{1, 2, 3, 7, 8, 33} {
			for _, s := range []int64{1, 2, 5, 40} {
				g := bench.TaskGraph{Pattern: p, Width: w, Steps: s}
				n, tasks := int64(0), int64(0)
				for ts := range s {
					for q := range g.WidthAt(ts) {
						n += int64(len(g.Dependencies(ts, q, nil)))
						tasks++
					}
				}
				if g.Edges() != n || g.Tasks() != tasks {
					t.Errorf("%s %dx%d: Edges %d Tasks %d, counted %d and %d", p, w, s, g.Edges(), g.Tasks(), n, tasks)
				}
			}
		}
	}
}

func TestTaskGraphValidate(t *testing.T) {
	ok := bench.TaskGraph{Pattern: bench.Stencil1D, Width: 4, Steps: 4}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []bench.TaskGraph{
		{Pattern: 0, Width: 4, Steps: 4},
		{Pattern: bench.Stencil1D, Width: 0, Steps: 4},
		{Pattern: bench.Stencil1D, Width: 4, Steps: 0},
		{Pattern: bench.Stencil1D, Width: 4, Steps: 4, Iterations: -1},
		{Pattern: bench.Stencil1D, Width: 4, Steps: 4, OutputBytes: 8},
		{Pattern: bench.Stencil1D, Width: 4, Steps: 4, OutputBytes: 1 << 40},
		{Pattern: bench.NoComm, Width: 1 << 20, Steps: 1 << 20},
		{Pattern: bench.AllToAll, Width: 1 << 12, Steps: 1 << 8},
	} {
		err := bad.Validate()
		if !errors.Is(err, dag.ErrInvalidArgument) {
			t.Errorf("%+v: Validate = %v, want an invalid-argument error", bad, err)
		}
		if _, err := bad.Graph(); err == nil {
			t.Errorf("%+v: Graph built", bad)
		}
	}
	if _, err := bench.ParsePattern("stencil"); !errors.Is(err, dag.ErrInvalidArgument) {
		t.Errorf("ParsePattern(stencil) = %v", err)
	}
	for _, p := range bench.Patterns {
		if q, err := bench.ParsePattern(p.String()); err != nil || q != p {
			t.Errorf("ParsePattern(%s) = %v, %v", p, q, err)
		}
	}
}

// A task checks that its inputs are the outputs of the tasks it depends on,
// as Task Bench's do, so a graph wired wrong fails instead of measuring.
func TestKernelRefusesWrongInput(t *testing.T) {
	g := bench.TaskGraph{Pattern: bench.Stencil1D, Width: 4, Steps: 3, Iterations: 1}
	out := func(s, p int64) dag.Value {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, uint64(s))
		binary.LittleEndian.PutUint64(b[8:], uint64(p))
		return dag.Value{Meta: dag.Meta{DType: dag.Bytes, Shape: []int64{1, 16}}, Data: b}
	}
	for _, c := range []struct {
		name string
		ins  []dag.Value
		ok   bool
	}{
		{"right", []dag.Value{out(1, 1), out(1, 2), out(1, 3)}, true},
		{"wrong point", []dag.Value{out(1, 1), out(1, 3), out(1, 2)}, false},
		{"wrong timestep", []dag.Value{out(0, 1), out(1, 2), out(1, 3)}, false},
		{"missing input", []dag.Value{out(1, 1), out(1, 2)}, false},
	} {
		kc, buf := kernelCall(t, g, 2, 2, c.ins)
		err := execTaskBench(kc)
		if c.ok {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if s, p := binary.LittleEndian.Uint64(buf.b), binary.LittleEndian.Uint64(buf.b[8:]); s != 2 || p != 2 {
				t.Fatalf("%s: output says (%d, %d)", c.name, s, p)
			}
			continue
		}
		if !errors.Is(err, dag.ErrInvalidArgument) {
			t.Errorf("%s: Exec = %v, want an invalid-argument error", c.name, err)
		}
	}
}

type outBuf struct{ b []byte }

func (o *outBuf) Output(i int, m dag.Meta, n int) ([]byte, error) {
	o.b = make([]byte, n)
	return o.b, nil
}

func kernelCall(t *testing.T, g bench.TaskGraph, s, p int32, ins []dag.Value) (*dag.KernelCall, *outBuf) {
	t.Helper()
	job, err := g.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := job.TileableGraph()
	buf := &outBuf{}
	return &dag.KernelCall{
		Ctx: context.Background(), Args: tg.Nodes[0].Args, Index: []int32{s, p},
		Shape: []int64{1, 16}, DType: dag.Bytes, Inputs: ins, Outputs: buf,
	}, buf
}

func execTaskBench(kc *dag.KernelCall) error {
	op, ok := dag.Ops.Lookup(dag.OpIDOf("bench.taskbench"))
	if !ok {
		return errors.New("bench.taskbench is not registered")
	}
	return op.(dag.Kernel).Exec(kc)
}

// Every pattern runs on an embedded cluster with fusion off: each task
// checks its inputs, and the result holds the last timestep's (t, point)
// in order.
func TestTaskGraphRunsEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2, Slots: 2, StoreSize: 32 << 20, Options: phobos.Options{Fusion: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range bench.Patterns {
		g := bench.TaskGraph{Pattern: p, Width: 6, Steps: 5, Iterations: 10, OutputBytes: 40}
		job, err := g.Graph()
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Run(ctx, job)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		parts := v.Chunks()
		if int64(len(parts)) != g.WidthAt(g.Steps-1) {
			t.Fatalf("%s: %d result chunks, want %d", p, len(parts), g.WidthAt(g.Steps-1))
		}
		for q, b := range parts {
			if len(b) != 40 {
				t.Fatalf("%s: result chunk %d has %d bytes", p, q, len(b))
			}
			for off := 0; off+16 <= len(b); off += 16 {
				if s, pt := binary.LittleEndian.Uint64(b[off:]), binary.LittleEndian.Uint64(b[off+8:]); s != uint64(g.Steps-1) || pt != uint64(q) {
					t.Fatalf("%s: result chunk %d holds (%d, %d) at %d", p, q, s, pt, off)
				}
			}
		}
		v.Release()
	}
}

// The runtime's share of a task, without the runtime: decoding the args,
// checking three inputs, writing the output (go test -bench TaskExec
// -benchmem ./bindings/bench).
func BenchmarkTaskExec(b *testing.B) {
	g := bench.TaskGraph{Pattern: bench.Stencil1D, Width: 4, Steps: 3}
	ins := make([]dag.Value, 3)
	for i := range ins {
		d := make([]byte, 16)
		binary.LittleEndian.PutUint64(d, 1)
		binary.LittleEndian.PutUint64(d[8:], uint64(i+1))
		ins[i] = dag.Value{Data: d}
	}
	t := &testing.T{}
	kc, _ := kernelCall(t, g, 2, 2, ins)
	kc.Outputs = fixedOut(make([]byte, 16))
	b.ReportAllocs()
	for b.Loop() {
		if err := execTaskBench(kc); err != nil {
			b.Fatal(err)
		}
	}
}

type fixedOut []byte

func (o fixedOut) Output(int, dag.Meta, int) ([]byte, error) { return o, nil }

// The runtime's cost per task, with empty kernels, on an embedded cluster
// of one raylet with a slot per CPU: the overhead METG measures, which a
// CPU profile of this benchmark breaks down (go test -run '^$' -bench
// TaskGraphEmpty -cpuprofile cpu.out ./bindings/bench). Width 64 is kept
// beside 48 because a step of exactly half the raylet's pull window (64
// tasks with 2 slots) costs some 2ms a step: the pull comes back full, the
// raylet takes the head to be busy and holds the step's completions for
// maxHold (runtime/raylet/core), then the next step fills the pull again.
// Width 2 (a task a core, as phobos bench taskbench runs by default) runs
// 1,000 steps: there every step of stencil_1d waits for the one before.
func BenchmarkTaskGraphEmpty(b *testing.B) {
	ctx := context.Background()
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 1, StoreSize: 64 << 20, Options: phobos.Options{Fusion: "none"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, p := range []bench.Pattern{bench.Trivial, bench.NoComm, bench.Stencil1D} {
		for _, w := range []int64{2, 48, 64} {
			steps := int64(100)
			if w == 2 {
				steps = 1000
			}
			g := bench.TaskGraph{Pattern: p, Width: w, Steps: steps}
			job, err := g.Graph()
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/width=%d", p, w), func(b *testing.B) {
				for b.Loop() {
					j, err := c.Submit(ctx, job)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := j.Done(ctx); err != nil {
						b.Fatal(err)
					}
					if err := j.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.Tasks()), "ns/task")
			})
		}
	}
}
