package lowering

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

// small is what f.small keeps.
func small(x []float64) []float64 {
	var out []float64
	for _, v := range x {
		if v < 5 {
			out = append(out, v)
		}
	}
	return out
}

func inc(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v + 1
	}
	return out
}

func TestMultiStage(t *testing.T) {
	// x (100 in chunks of 10) -> small (sizes unknown) -> settle into chunks
	// of 7 -> +1. The settle waits for stage 1; sum(x) is a result of
	// stage 1 and y a result of stage 2.
	b := &fg{}
	x := b.src(100, 10)
	sx := b.sum(x)
	y := b.inc(b.settle(b.small(x), 7))
	g := b.out(y, sx)

	for _, fusion := range []Fusion{FuseChain, FuseNone, FuseColoring} {
		plans, vals := runStages(t, g, fakes, Options{Fusion: fusion, Slots: []int{2, 1}})
		if len(plans) != 2 || plans[0].Final || !plans[1].Final {
			t.Fatalf("%v: %d plans", fusion, len(plans))
		}
		want := inc(small(fakeSource(100, 10)))
		if !slices.Equal(vals[0].Float64s(), want) {
			t.Fatalf("%v: y = %v, want %v", fusion, vals[0], want)
		}
		total := 0.0
		for _, v := range fakeSource(100, 10) {
			total += v
		}
		if len(vals[1].Float64s()) != 1 || vals[1].Float64s()[0] != total {
			t.Fatalf("%v: sum(x) = %v, want %v", fusion, vals[1], total)
		}
		// Stage IDs come from alloc, one per stage.
		if plans[0].Stage.Stage != 1 || plans[1].Stage.Stage != 2 {
			t.Fatalf("%v: stages %d, %d", fusion, plans[0].Stage.Stage, plans[1].Stage.Stage)
		}
		// Stage 2 reads the 10 small chunks of stage 1 through fetch nodes.
		p2 := plans[1]
		if len(p2.Fetches) != 10 {
			t.Fatalf("%v: stage 2 fetches %d objects, want 10", fusion, len(p2.Fetches))
		}
		for i, id := range p2.Fetches {
			if id.Subtask().Stage() != 1 || fakes.Name(p2.Stage.Chunks.Nodes[i].Op) != FetchName {
				t.Fatalf("%v: fetch %d is %s (%s)", fusion, i, id, fakes.Name(p2.Stage.Chunks.Nodes[i].Op))
			}
			if p2.Stage.Owner[i] != -1 {
				t.Fatalf("%v: fetch node %d belongs to subtask %d", fusion, i, p2.Stage.Owner[i])
			}
		}
		// Stage 1 keeps what stage 2 reads and its result, sum(x).
		if len(plans[0].Keep) != 11 {
			t.Fatalf("%v: stage 1 keeps %d objects, want 11", fusion, len(plans[0].Keep))
		}
		// The results: y settled in chunks of 7, with its actual shape.
		r := p2.Results[0]
		n := int64(len(want))
		if r.Meta.Shape[0] != n || len(r.NSplits[0]) != int((n+6)/7) || r.NSplits[0][0] != 7 {
			t.Fatalf("%v: result meta %v nsplits %v", fusion, r.Meta, r.NSplits)
		}
		if p2.Results[1].Objects[0].Subtask().Stage() != 1 {
			t.Fatalf("%v: sum(x) should come from stage 1", fusion)
		}
	}
}

func TestMultiStageTwice(t *testing.T) {
	// Two data-dependent steps in a row: three stages.
	b := &fg{}
	x := b.src(60, 8)
	y := b.settle(b.small(b.inc(b.settle(b.small(x), 5))), 4)
	plans, vals := runStages(t, b.out(y), fakes, Options{Slots: []int{1}})
	if len(plans) != 3 {
		t.Fatalf("%d plans, want 3", len(plans))
	}
	want := small(inc(small(fakeSource(60, 8))))
	if !slices.Equal(vals[0].Float64s(), want) {
		t.Fatalf("y = %v, want %v", vals[0], want)
	}
}

func TestMultiStageEmpty(t *testing.T) {
	// Everything filtered out: the settle makes one empty chunk.
	b := &fg{}
	x := b.src(20, 5)
	z := b.settle(b.small(b.settle(b.small(b.settle(b.small(x), 3)), 3)), 3)
	// small(small(.)) keeps all (< 5 stays < 5); make it empty by adding 5.
	y := b.settle(b.small(b.inc(b.inc(b.inc(b.inc(b.inc(z)))))), 2)
	_, vals := runStages(t, b.out(y), fakes, Options{})
	if len(vals[0].Data) != 0 {
		t.Fatalf("y = %v, want empty", vals[0])
	}
}

func TestSingleStagePlanRefusesMultiStage(t *testing.T) {
	b := &fg{}
	g := b.out(b.settle(b.small(b.src(10, 3)), 2))
	tl, err := Tile(g, fakes)
	if err != nil {
		t.Fatal(err)
	}
	if w := tl.Waiting(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("waiting %v, want [2]", w)
	}
	_, err = tl.Plan(1, Options{}, Counter())
	if !errors.Is(err, ErrNeedsStages) || !strings.Contains(err.Error(), "node 2 ") {
		t.Fatalf("Plan: %v", err)
	}
}

func TestFeedChecks(t *testing.T) {
	b := &fg{}
	g := b.out(b.settle(b.small(b.src(10, 5)), 2))
	tl, err := Tile(g, fakes)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.Feed(nil); err == nil {
		t.Fatal("Feed before NextStage accepted")
	}
	if _, err := tl.NextStage(1, Options{}, Counter()); err != nil {
		t.Fatal(err)
	}
	if _, err := tl.NextStage(1, Options{}, Counter()); err == nil {
		t.Fatal("NextStage before Feed accepted")
	}
	need := tl.Need()
	if len(need) != 2 || need[0].Planned.Shape[0] != Unknown {
		t.Fatalf("need %+v", need)
	}
	good := []dag.Meta{{DType: dag.Float64, Shape: []int64{3}}, {DType: dag.Float64, Shape: []int64{0}}}
	bad := []struct {
		name  string
		metas []dag.Meta
		want  string
	}{
		{"count", good[:1], "1 metas for 2"},
		{"dtype", []dag.Meta{{DType: dag.Int64, Shape: []int64{3}}, good[1]}, "planned as float64"},
		{"ndim", []dag.Meta{{DType: dag.Float64, Shape: []int64{3, 1}}, good[1]}, "planned as"},
		{"negative", []dag.Meta{{DType: dag.Float64, Shape: []int64{-1}}, good[1]}, "has shape [-1]"},
	}
	for _, c := range bad {
		if err := tl.Feed(c.metas); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
	if err := tl.Feed(good); err != nil {
		t.Fatal(err)
	}
	p, err := tl.NextStage(1, Options{}, Counter())
	if err != nil || !p.Final {
		t.Fatalf("final stage: %v, %+v", err, p)
	}
	if got := p.Results[0].NSplits[0]; !slices.Equal(got, []int64{2, 1}) {
		t.Fatalf("nsplits %v, want [2 1]", got)
	}
}

// TestMultiStageReplay lowers a job twice: once running it, once as a new
// head leader would after a failover, replaying the committed stage IDs and
// the fed metas without running anything. Every stage's plan must be
// byte-identical.
func TestMultiStageReplay(t *testing.T) {
	b := &fg{}
	x := b.src(100, 10)
	y := b.inc(b.settle(b.small(b.inc(b.settle(b.small(x), 9))), 6))
	g := b.out(y, b.sum(x))
	for _, fusion := range []Fusion{FuseChain, FuseColoring} {
		opts := Options{Fusion: fusion, Slots: []int{2, 3}}
		// The first leader: run, and record what it commits.
		type stage struct {
			id    dag.StageID
			base  uint64
			n     int
			metas []dag.Meta
		}
		var log []stage
		tl, err := Tile(g, fakes)
		if err != nil {
			t.Fatal(err)
		}
		next := dag.StageID(3) // IDs need not start at 1
		alloc := func(n int) (dag.StageID, uint64, error) {
			next++
			log = append(log, stage{id: next, base: 1000 * uint64(next), n: n})
			return next, 1000 * uint64(next), nil
		}
		store := map[dag.ObjectID]dag.Value{}
		var first [][]byte
		for {
			p, err := tl.NextStage(42, opts, alloc)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := p.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			first = append(first, enc)
			runPlan(t, p, fakes, store)
			if p.Final {
				break
			}
			var metas []dag.Meta
			for _, n := range tl.Need() {
				metas = append(metas, store[n.Object].Meta)
			}
			log[len(log)-1].metas = metas
			if err := tl.Feed(metas); err != nil {
				t.Fatal(err)
			}
		}
		// The new leader: the committed stages and metas, nothing run.
		tl2, err := Tile(g, fakes)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		replay := func(n int) (dag.StageID, uint64, error) {
			st := log[k]
			if st.n != n {
				t.Fatalf("stage %d: %d subtasks, committed %d", k, n, st.n)
			}
			return st.id, st.base, nil
		}
		for i := 0; ; i++ {
			p, err := tl2.NextStage(42, opts, replay)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := p.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, first[i]) {
				t.Fatalf("%v: stage %d lowers differently on replay", fusion, i)
			}
			if p.Final {
				if i != len(first)-1 {
					t.Fatalf("%v: replay ended after %d stages, first run had %d", fusion, i+1, len(first))
				}
				break
			}
			if err := tl2.Feed(log[k].metas); err != nil {
				t.Fatal(err)
			}
			k++
		}
		if len(first) != 3 {
			t.Fatalf("%v: %d stages, want 3", fusion, len(first))
		}
	}
}

func TestResolveMeta(t *testing.T) {
	f := dag.Float64
	cases := []struct {
		planned dag.Meta
		bytes   int64
		want    []int64
		err     string
	}{
		{dag.Meta{DType: f, Shape: []int64{Unknown}}, 80, []int64{10}, ""},
		{dag.Meta{DType: f, Shape: []int64{3, Unknown}}, 240, []int64{3, 10}, ""},
		{dag.Meta{DType: dag.Bool, Shape: []int64{Unknown}}, 7, []int64{7}, ""},
		{dag.Meta{DType: f, Shape: []int64{0, Unknown}}, 0, []int64{0, 0}, ""},
		{dag.Meta{DType: f, Shape: []int64{4}}, 32, []int64{4}, ""},
		{dag.Meta{DType: f, Shape: []int64{4}}, 24, nil, "want 32"},
		{dag.Meta{DType: f, Shape: []int64{Unknown}}, 81, nil, "whole number"},
		{dag.Meta{DType: f, Shape: []int64{Unknown, Unknown}}, 80, nil, "more than one unknown"},
		{dag.Meta{DType: f, Shape: []int64{Unknown}}, -8, nil, "negative byte size"},
	}
	for _, c := range cases {
		m, err := ResolveMeta(c.planned, c.bytes)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ResolveMeta(%v, %d) = %v, %v; want error %q", c.planned, c.bytes, m, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(m.Shape, c.want) || m.DType != c.planned.DType {
			t.Errorf("ResolveMeta(%v, %d) = %v, %v; want %v", c.planned, c.bytes, m, err, c.want)
		}
	}
	// The planned shape is not modified.
	p := dag.Meta{DType: f, Shape: []int64{Unknown}}
	if _, _ = ResolveMeta(p, 8); p.Shape[0] != Unknown {
		t.Fatal("ResolveMeta wrote into the planned meta")
	}
}

func TestMultiStageEmptyStage(t *testing.T) {
	// f.seq asks for its first input's sizes, and once it has them, for its
	// second's, computed in stage 1 as well: stage 2 has no subtasks but
	// still takes a stage ID, so stage k always follows the k-th Feed.
	b := &fg{}
	x := b.src(30, 7)
	y := b.node("f.seq", nil, []int64{Unknown}, nil, b.small(x), b.small(b.inc(x)))
	var allocs []int
	counter := Counter()
	alloc := func(n int) (dag.StageID, uint64, error) {
		allocs = append(allocs, n)
		return counter(n)
	}
	tl, err := Tile(b.out(y), fakes)
	if err != nil {
		t.Fatal(err)
	}
	store := map[dag.ObjectID]dag.Value{}
	var plans []*Plan
	for {
		p, err := tl.NextStage(1, Options{}, alloc)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
		runPlan(t, p, fakes, store)
		if p.Final {
			break
		}
		var metas []dag.Meta
		for _, n := range tl.Need() {
			metas = append(metas, store[n.Object].Meta)
		}
		if err := tl.Feed(metas); err != nil {
			t.Fatal(err)
		}
	}
	if len(plans) != 3 || plans[1].Stage.Len() != 0 || len(allocs) != 3 || allocs[1] != 0 || plans[1].Stage.Stage != 2 {
		t.Fatalf("%d plans, allocs %v", len(plans), allocs)
	}
	var got []float64
	for _, id := range plans[2].Results[0].Objects {
		got = append(got, store[id].Float64s()...)
	}
	want := append(small(fakeSource(30, 7)), small(inc(fakeSource(30, 7)))...)
	if !slices.Equal(got, want) {
		t.Fatalf("y = %v, want %v", got, want)
	}
}
