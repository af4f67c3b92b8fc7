package dag

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestAddRowAndAlikeMatchAddNode builds graphs twice, once with AddRow and
// AddAlike and once with AddNode per chunk as their doc says they do, and
// checks every table is the same: the batch paths write the flat tables
// by arithmetic (offsets, dimensions, indexes), which AddNode derives from
// lengths one chunk at a time.
func TestAddRowAndAlikeMatchAddNode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		var batch, single *ChunkGraph
		if rng.IntN(2) == 0 {
			batch, single = NewChunkGraph(rng.IntN(40)), NewChunkGraph(rng.IntN(40))
		} else {
			batch, single = &ChunkGraph{}, &ChunkGraph{} // not made by NewChunkGraph
		}
		for _, g := range []*ChunkGraph{batch, single} {
			for a := range 3 {
				g.AddArgs([]byte{byte(a)})
			}
		}
		for step := 0; step < 6; step++ {
			n := rng.IntN(20)
			k := rng.IntN(3)
			if batch.Len() == 0 {
				k = 0
			}
			ins := make([][]int32, k)
			for j := range ins {
				ins[j] = make([]int32, n+rng.IntN(2)) // longer than n is allowed
				for i := range ins[j] {
					ins[j][i] = int32(rng.IntN(batch.Len()))
				}
			}
			op, tl, args, dt := OpID(rng.Uint32()), int32(step), int32(rng.IntN(3)), DType(1+rng.IntN(3))
			if rng.IntN(2) == 0 || batch.Len() == 0 {
				sizes := make([]int64, n)
				if rng.IntN(3) == 0 {
					sizes = []int64{int64(rng.IntN(9))} // one size for all
				} else {
					for i := range sizes {
						sizes[i] = int64(rng.IntN(9))
					}
				}
				first, err := batch.AddRow(op, tl, args, dt, n, sizes, ins)
				if err != nil {
					t.Fatalf("trial %d: AddRow: %v", trial, err)
				}
				if first != int32(single.Len()) {
					t.Fatalf("trial %d: AddRow returned %d, want %d", trial, first, single.Len())
				}
				for i := range n {
					size := sizes[0]
					if len(sizes) == n {
						size = sizes[i]
					}
					if _, err := single.AddNode(op, tl, args, dt, column(ins, i), []int32{int32(i)}, []int64{size}); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				like := make([]int32, n)
				for i := range like {
					like[i] = int32(rng.IntN(batch.Len()))
				}
				first, err := batch.AddAlike(op, tl, args, dt, like, ins)
				if err != nil {
					t.Fatalf("trial %d: AddAlike: %v", trial, err)
				}
				if first != int32(single.Len()) {
					t.Fatalf("trial %d: AddAlike returned %d, want %d", trial, first, single.Len())
				}
				for i, c := range like {
					if _, err := single.AddNode(op, tl, args, dt, column(ins, i), single.Index(c), single.Shape(c)); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Some chunks of more than one dimension, for AddAlike to copy.
			if rng.IntN(2) == 0 {
				idx, shape := []int32{int32(step), 1, 2}, []int64{3, 4, 5}
				for _, g := range []*ChunkGraph{batch, single} {
					if _, err := g.AddNode(9, 99, 0, 1, nil, idx, shape); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !reflect.DeepEqual(tables(batch), tables(single)) {
				t.Fatalf("trial %d step %d: batch graph\n%+v\nwant\n%+v", trial, step, tables(batch), tables(single))
			}
			if err := batch.Validate(); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
	}
}

// TestAddRowRefusesWhole checks that AddRow and AddAlike add nothing when
// they refuse: an input that is not an earlier chunk, too few sizes or
// inputs, or a row that does not fit under the graph's limit.
func TestAddRowRefusesWhole(t *testing.T) {
	g := NewChunkGraph(8)
	g.SetLimit(6, 100)
	if _, err := g.AddRow(1, 0, 0, 1, 3, []int64{1}, nil); err != nil {
		t.Fatal(err)
	}
	before := tables(g)
	for name, add := range map[string]func() error{
		"forward input":  func() error { _, err := g.AddRow(1, 1, 0, 1, 2, []int64{1}, [][]int32{{0, 3}}); return err },
		"negative input": func() error { _, err := g.AddRow(1, 1, 0, 1, 1, []int64{1}, [][]int32{{-1}}); return err },
		"sizes":          func() error { _, err := g.AddRow(1, 1, 0, 1, 2, []int64{1, 2, 3}, nil); return err },
		"inputs":         func() error { _, err := g.AddRow(1, 1, 0, 1, 2, []int64{1}, [][]int32{{0}}); return err },
		"alike forward":  func() error { _, err := g.AddAlike(1, 1, 0, 1, []int32{0, 3}, nil); return err },
		"alike inputs":   func() error { _, err := g.AddAlike(1, 1, 0, 1, []int32{0, 1}, [][]int32{{2}}); return err },
	} {
		if err := add(); err == nil {
			t.Errorf("%s: no error", name)
		}
		if !reflect.DeepEqual(tables(g), before) {
			t.Fatalf("%s: the graph changed on an error", name)
		}
	}
	for name, add := range map[string]func() error{
		"row":   func() error { _, err := g.AddRow(1, 1, 0, 1, 4, []int64{1}, nil); return err },
		"alike": func() error { _, err := g.AddAlike(1, 1, 0, 1, []int32{0, 1, 2, 0}, nil); return err },
	} {
		if err := add(); !errors.Is(err, ErrResourceExhausted) {
			t.Errorf("%s over the limit: %v, want ErrResourceExhausted", name, err)
		}
		if !reflect.DeepEqual(tables(g), before) {
			t.Fatalf("%s: the graph changed on an error", name)
		}
	}
	if _, err := g.AddRow(1, 1, 0, 1, 3, []int64{1}, [][]int32{{0, 1, 2}}); err != nil {
		t.Fatalf("a row that fits exactly: %v", err)
	}
}

// column returns ins[0][i], ins[1][i], …
func column(ins [][]int32, i int) []int32 {
	var c []int32
	for _, in := range ins {
		c = append(c, in[i])
	}
	return c
}

type graphTables struct {
	Nodes  []ChunkNode
	Args   [][]byte
	Inputs []int32
	InOff  []uint32
	Shapes []int64
	Index  []int32
}

// tables returns g's tables, empty ones as nil.
func tables(g *ChunkGraph) graphTables {
	nilIfEmpty := func(s []int32) []int32 {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	t := graphTables{Nodes: g.Nodes, Args: g.Args, Inputs: nilIfEmpty(g.inputs), InOff: g.inOff, Shapes: g.shapes, Index: nilIfEmpty(g.index)}
	if len(t.Nodes) == 0 {
		t.Nodes = nil
	}
	if len(t.InOff) <= 1 {
		t.InOff = nil // a graph not made by NewChunkGraph has none until its first node
	}
	if len(t.Shapes) == 0 {
		t.Shapes = nil
	}
	return t
}
