package chaos

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/kv"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// Job kinds.
const (
	JobDAG      = "dag"       // a random DAG of int64 tensor ops, checked exactly
	JobSeedOnes = "seed-ones" // (ones + ones).sum(): exactly 2n
	JobSeedRand = "seed-rand" // a, b random; (a + b).sum() against a sum computed here
	JobShuffle  = "shuffle"   // word count through GroupBy(m).Sum()
	JobSleep    = "sleep"     // n sleeping subtasks summed: n(n-1)/2
	JobChain    = "chain"     // n subtasks each adding one to the one before, fusion off: n
	JobProbe    = "probe"     // a small job that shows the cluster serves
	JobHog      = "hog"       // results larger than the stores, held unreleased
)

// jobSpec is one job of the workload: what to submit and how to check its
// result.
type jobSpec struct {
	kind  string
	desc  string
	graph phobos.Graph
	// fusion, when set, is the job's fusion ("none" keeps every op a
	// subtask of its own).
	fusion string
	// check verifies a successful result; nil for jobs whose results are
	// not fetched (hog).
	check func(res *phobos.Result, w *witness) error
}

// tensors runs several tensors as one job with several outputs.
type tensors []*tensor.Tensor

func (ts tensors) TileableGraph() (*dag.TileableGraph, error) { return tensor.Graph(ts...) }

// witness remembers the bytes of seeded random inputs: the same seed must
// give the same bytes in every job, however often a lost chunk was
// computed again. Safe for concurrent use.
type witness struct {
	mu   sync.Mutex
	seen map[string][32]byte
}

func (w *witness) same(key string, b []byte) error {
	h := sha256.Sum256(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string][32]byte{}
	}
	old, ok := w.seen[key]
	if !ok {
		w.seen[key] = h
		return nil
	}
	if old != h {
		return fmt.Errorf("%s gave different bytes than in an earlier job: a recomputed random chunk is not deterministic", key)
	}
	return nil
}

// randomJob draws one job for a workload step.
func randomJob(rng *rand.Rand) jobSpec {
	x := rng.IntN(100)
	switch {
	case x < 32:
		return dagJob(rng)
	case x < 40:
		return chainJob(int64(200 + rng.IntN(800)))
	case x < 50:
		return seedOnesJob(int64(100_000 * (1 + rng.IntN(4))))
	case x < 65:
		n := int64(50_000 * (1 + rng.IntN(4)))
		return seedRandJob(n, n/int64(5+rng.IntN(10)), uint64(1+rng.IntN(3)))
	case x < 85:
		return shuffleJob(3+rng.IntN(6), 100+rng.IntN(400), 1+rng.IntN(4), uint64(rng.IntN(5)))
	}
	return sleepJob(int64(40+rng.IntN(80)), time.Duration(5+rng.IntN(15))*time.Millisecond)
}

func seedOnesJob(n int64) jobSpec {
	chunk := max(n/20, 1)
	t := tensor.Ones([]int64{n}, tensor.Chunks(chunk)).Add(tensor.Ones([]int64{n}, tensor.Chunks(chunk))).Sum()
	return jobSpec{kind: JobSeedOnes, desc: fmt.Sprintf("(ones(%d) + ones(%d)).sum(), chunks of %d", n, n, chunk), graph: t,
		check: func(res *phobos.Result, _ *witness) error {
			if got := res.Values[0].Float64(); got != float64(2*n) {
				return fmt.Errorf("(ones + ones).sum() = %v, want %d", got, 2*n)
			}
			return nil
		}}
}

func seedRandJob(n, chunk int64, seed uint64) jobSpec {
	a := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(seed))
	b := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(seed+1000))
	return jobSpec{kind: JobSeedRand, desc: fmt.Sprintf("a, b = rand(%d) seeds %d, %d, chunks of %d; (a + b).sum()", n, seed, seed+1000, chunk),
		graph: tensors{a, b, a.Add(b).Sum()},
		check: func(res *phobos.Result, w *witness) error {
			if len(res.Values) != 3 {
				return fmt.Errorf("%d outputs, want 3", len(res.Values))
			}
			av, bv := res.Values[0].Float64s(), res.Values[1].Float64s()
			if int64(len(av)) != n || int64(len(bv)) != n {
				return fmt.Errorf("a and b have %d and %d elements, want %d", len(av), len(bv), n)
			}
			var want float64
			for i := range av {
				want += av[i] + bv[i]
			}
			got := res.Values[2].Float64()
			if math.Abs(got-want) > 1e-9*math.Abs(want) {
				return fmt.Errorf("(a + b).sum() = %v, but a and b fetched here sum to %v", got, want)
			}
			if err := w.same(fmt.Sprintf("rand(%d) seed %d chunks of %d", n, seed, chunk), res.Values[0].Data); err != nil {
				return err
			}
			return w.same(fmt.Sprintf("rand(%d) seed %d chunks of %d", n, seed+1000, chunk), res.Values[1].Data)
		}}
}

func shuffleJob(parts, lines, reducers int, seed uint64) jobSpec {
	c := kv.Words(kv.Text(parts, lines, seed)).GroupBy(reducers).Sum()
	return jobSpec{kind: JobShuffle, desc: fmt.Sprintf("word count of %d parts × %d lines (seed %d) through %d reducers", parts, lines, seed, reducers), graph: c,
		check: func(res *phobos.Result, _ *witness) error {
			got := map[string]float64{}
			for i, ch := range res.Values[0].Chunks() {
				var m map[string]float64
				if err := codec.Unmarshal(ch, &m); err != nil {
					return fmt.Errorf("reducer %d's chunk is not a key/value map: %w", i, err)
				}
				for k, v := range m {
					if _, dup := got[k]; dup {
						return fmt.Errorf("word %q came out of two reducers", k)
					}
					got[k] = v
				}
			}
			want := kv.CountWords(kv.GenerateText(parts, lines, seed))
			if len(got) != len(want) {
				return fmt.Errorf("%d distinct words, want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					return fmt.Errorf("count of %q = %v, want %v", k, got[k], v)
				}
			}
			return nil
		}}
}

func sleepJob(n int64, d time.Duration) jobSpec {
	return jobSpec{kind: JobSleep, desc: fmt.Sprintf("%d subtasks sleeping %v, summed", n, d), graph: bench.SleepSum(n, d),
		check: func(res *phobos.Result, _ *witness) error {
			v := res.Values[0].Int64s()
			if len(v) != 1 || v[0] != n*(n-1)/2 {
				return fmt.Errorf("sum of %d indexes = %v, want %d", n, v, n*(n-1)/2)
			}
			return nil
		}}
}

// chainJob is a chain of n dependent subtasks: the head sends a raylet
// links ahead of the links they read (pipelining), and a fault must not
// lose or repeat one.
func chainJob(n int64) jobSpec {
	return jobSpec{kind: JobChain, desc: fmt.Sprintf("a chain of %d subtasks, fusion off", n), graph: bench.Chain(n), fusion: "none",
		check: func(res *phobos.Result, _ *witness) error {
			if v := res.Values[0].Int64s(); len(v) != 1 || v[0] != n {
				return fmt.Errorf("chain of %d = %v, want %d", n, v, n)
			}
			return nil
		}}
}

// probeJob has one subtask per raylet or more, so a raylet that is gone
// but still counted holds it up until its work is placed elsewhere.
func probeJob() jobSpec {
	const n = 12
	t := tensor.FullInt([]int64{n}, 3, tensor.Chunks(1)).Sum()
	return jobSpec{kind: JobProbe, desc: "fullint(12, 3).sum() in 12 chunks", graph: t,
		check: func(res *phobos.Result, _ *witness) error {
			if v := res.Values[0].Int64s(); len(v) != 1 || v[0] != 3*n {
				return fmt.Errorf("probe sum = %v, want %d", v, 3*n)
			}
			return nil
		}}
}

// hogJob's result is bytes of int64s in chunks of at most chunkBytes; the
// harness never fetches it and releases it when its fault ends.
func hogJob(bytes, chunkBytes int64) jobSpec {
	n := max(bytes/8, 1)
	c := max(chunkBytes/8, 1)
	return jobSpec{kind: JobHog, desc: fmt.Sprintf("arange(%d) held as a result (%d MiB)", n, bytes>>20),
		graph: tensor.ArangeInt(0, n, 1, tensor.Chunks(c))}
}

// dagNode is a tensor with the harness's own answer for it.
type dagNode struct {
	t    *tensor.Tensor
	r    *iarr
	expr string
}

type dagGen struct {
	rng  *rand.Rand
	pool []dagNode
	nsrc int
}

// dagJob draws a random DAG of int64 tensor ops: sources of two
// dimensions (data, constants, ranges) in random chunks, then elementwise
// ops with broadcasting and scalar operands, negation and absolute value,
// transposes, strided and reversed slices, rechunks, matrix products and
// reductions over some or all axes, reusing earlier nodes so
// subexpressions are shared. Every output is compared exactly with the
// answer computed here.
func dagJob(rng *rand.Rand) jobSpec {
	g := &dagGen{rng: rng}
	g.pool = append(g.pool, g.source([]int64{int64(4 + rng.IntN(36)), int64(4 + rng.IntN(36))}))
	if rng.IntN(2) == 0 {
		g.pool = append(g.pool, g.source(g.pool[0].r.shape))
	}
	ops := 3 + rng.IntN(6)
	for range ops {
		g.pool = append(g.pool, g.op())
	}
	outs := []dagNode{g.pool[len(g.pool)-1]}
	if rng.IntN(2) == 0 {
		outs = append(outs, g.pool[rng.IntN(len(g.pool)-1)])
	}
	var ts tensors
	var refs []*iarr
	var names []string
	for _, o := range outs {
		ts = append(ts, o.t)
		refs = append(refs, o.r)
		names = append(names, o.expr)
	}
	desc := fmt.Sprintf("int64 DAG of %d nodes; outputs %s", len(g.pool), strings.Join(names, ", "))
	return jobSpec{kind: JobDAG, desc: desc, graph: ts,
		check: func(res *phobos.Result, _ *witness) error {
			if len(res.Values) != len(refs) {
				return fmt.Errorf("%d outputs, want %d", len(res.Values), len(refs))
			}
			for i, v := range res.Values {
				if err := sameInts(v, refs[i]); err != nil {
					return fmt.Errorf("output %d (%s): %w", i, names[i], err)
				}
			}
			return nil
		}}
}

func sameInts(v *phobos.Value, want *iarr) error {
	if v.Meta.DType != dag.Int64 {
		return fmt.Errorf("dtype %v, want int64", v.Meta.DType)
	}
	if fmt.Sprint(v.Shape()) != fmt.Sprint(want.shape) {
		return fmt.Errorf("shape %v, want %v", v.Shape(), want.shape)
	}
	got := v.Int64s()
	if len(got) != len(want.d) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want.d))
	}
	for k := range got {
		if got[k] != want.d[k] {
			return fmt.Errorf("element %d = %d, want %d", k, got[k], want.d[k])
		}
	}
	return nil
}

// chunks draws a chunk size per dimension: from one chunk to about six.
func (g *dagGen) chunks(shape []int64) tensor.Option {
	cs := make([]int64, len(shape))
	for d, s := range shape {
		lo := max(s/6, 1)
		cs[d] = lo + g.rng.Int64N(s-lo+1)
	}
	return tensor.Chunks(cs...)
}

func (g *dagGen) source(shape []int64) dagNode {
	g.nsrc++
	r := newIarr(shape)
	name := fmt.Sprintf("s%d%v", g.nsrc, shape)
	var t *tensor.Tensor
	switch {
	case len(shape) == 1 && g.rng.IntN(2) == 0:
		lo := int64(g.rng.IntN(20)) - 10
		for k := range r.d {
			r.d[k] = lo + int64(k)
		}
		t = tensor.ArangeInt(lo, lo+shape[0], 1, g.chunks(shape))
	case g.rng.IntN(4) == 0:
		v := int64(g.rng.IntN(7)) - 3
		for k := range r.d {
			r.d[k] = v
		}
		t = tensor.FullInt(shape, v, g.chunks(shape))
	default:
		for k := range r.d {
			r.d[k] = int64(g.rng.IntN(19)) - 9
		}
		t = tensor.FromInts(r.d, shape, g.chunks(shape))
	}
	return dagNode{t: t, r: r, expr: name}
}

func (g *dagGen) pick() dagNode { return g.pool[g.rng.IntN(len(g.pool))] }

// pick2D returns a random node of two dimensions (there is always one: the
// first source).
func (g *dagGen) pick2D() dagNode {
	for {
		if n := g.pick(); len(n.r.shape) == 2 {
			return n
		}
	}
}

func (g *dagGen) op() dagNode {
	rng := g.rng
	switch x := rng.IntN(100); {
	case x < 30:
		a := g.pick()
		op := binOp(rng.IntN(int(nBinOps)))
		b := g.partner(a)
		if rng.IntN(2) == 0 {
			a, b = b, a
		}
		return dagNode{t: op.tensor(a.t, b.t), r: refBinary(op, a.r, b.r), expr: fmt.Sprintf("%s(%s, %s)", op, a.expr, b.expr)}
	case x < 40:
		a := g.pick()
		if rng.IntN(2) == 0 {
			return dagNode{t: a.t.Neg(), r: refNeg(a.r), expr: "-" + a.expr}
		}
		return dagNode{t: a.t.Abs(), r: refAbs(a.r), expr: "abs(" + a.expr + ")"}
	case x < 50:
		a := g.pick2D()
		return dagNode{t: a.t.Transpose(1, 0), r: refTranspose(a.r, []int{1, 0}), expr: a.expr + ".T"}
	case x < 62:
		a := g.pick()
		if len(a.r.shape) == 0 {
			return a
		}
		var rs []tensor.Range
		for _, n := range a.r.shape {
			rs = append(rs, g.slice(n))
		}
		return dagNode{t: a.t.Slice(rs...), r: refSlice(a.r, rs), expr: fmt.Sprintf("%s[%s]", a.expr, rangesString(rs))}
	case x < 70:
		a := g.pick()
		if len(a.r.shape) == 0 {
			return a
		}
		var cs []int64
		for _, s := range a.r.shape {
			cs = append(cs, 1+rng.Int64N(s))
		}
		return dagNode{t: a.t.Rechunk(cs...), r: a.r, expr: fmt.Sprintf("rechunk(%s, %v)", a.expr, cs)}
	case x < 82:
		a := g.pick2D()
		k := a.r.shape[1]
		var b dagNode
		found := false
		for _, n := range g.pool {
			if len(n.r.shape) == 2 && n.r.shape[0] == k && rng.IntN(2) == 0 {
				b, found = n, true
				break
			}
		}
		if !found {
			b = g.source([]int64{k, int64(2 + rng.IntN(20))})
		}
		return dagNode{t: a.t.Matmul(b.t), r: refMatmul(a.r, b.r), expr: fmt.Sprintf("%s @ %s", a.expr, b.expr)}
	}
	a := g.pick()
	op := redOp(rng.IntN(int(nRedOps)))
	var axes []int
	var opts []tensor.ReduceOption
	if nd := len(a.r.shape); nd > 0 && rng.IntN(3) > 0 {
		axes = []int{rng.IntN(nd)}
		opts = append(opts, tensor.Axis(axes...))
	}
	keep := rng.IntN(2) == 0
	if keep {
		opts = append(opts, tensor.KeepDims())
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, tensor.Combine(2+rng.IntN(3)))
	}
	return dagNode{t: op.tensor(a.t, opts...), r: refReduce(op, a.r, axes, keep), expr: fmt.Sprintf("%s(%s, axes %v, keep %v)", op, a.expr, axes, keep)}
}

// partner returns an operand for a binary op with a: a node of a's shape
// or one that broadcasts against it, a fresh source, or a scalar.
func (g *dagGen) partner(a dagNode) dagNode {
	rng := g.rng
	var cands []dagNode
	for _, n := range g.pool {
		if s, ok := broadcast(a.r.shape, n.r.shape); ok && elems(s) <= 64*64 {
			cands = append(cands, n)
		}
	}
	switch x := rng.IntN(10); {
	case x < 4 && len(cands) > 0:
		return cands[rng.IntN(len(cands))]
	case x < 6:
		v := int64(rng.IntN(9)) - 4
		r := &iarr{shape: []int64{}, d: []int64{v}}
		return dagNode{t: tensor.ScalarInt(v), r: r, expr: fmt.Sprint(v)}
	case x < 8 && len(a.r.shape) == 2:
		// A row or a column that broadcasts.
		if rng.IntN(2) == 0 {
			return g.source([]int64{a.r.shape[1]})
		}
		return g.source([]int64{a.r.shape[0], 1})
	}
	return g.source(a.r.shape)
}

// slice draws an in-bounds range of a dimension of n: forward with a
// step of 1 to 3, or backward.
func (g *dagGen) slice(n int64) tensor.Range {
	rng := g.rng
	step := int64(1 + rng.IntN(3))
	if rng.IntN(3) == 0 {
		start := rng.Int64N(n)
		stop := int64(tensor.Open)
		if start > 0 && rng.IntN(2) == 0 {
			stop = rng.Int64N(start)
		}
		return tensor.Range{Start: start, Stop: stop, Step: -step}
	}
	start := rng.Int64N(n)
	return tensor.Range{Start: start, Stop: start + 1 + rng.Int64N(n-start), Step: step}
}

func rangesString(rs []tensor.Range) string {
	var parts []string
	for _, r := range rs {
		b := func(v int64) string {
			if v == tensor.Open {
				return ""
			}
			return fmt.Sprint(v)
		}
		parts = append(parts, fmt.Sprintf("%s:%s:%d", b(r.Start), b(r.Stop), r.Step))
	}
	return strings.Join(parts, ",")
}

// sortedKinds lists the keys of a count map in order, for reports.
func sortedKinds(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
