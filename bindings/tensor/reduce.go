package tensor

import (
	"fmt"
	"math"

	"github.com/phobos-project/phobos/dag"
)

// DefaultCombine is how many partial results a tree reduction combines per
// node.
const DefaultCombine = 4

type redKind uint8

const (
	redSum redKind = iota
	redProd
	redMin
	redMax
)

// reduceArgs are the args of the reductions. On a tileable node: Combine,
// Axes (nil or empty: all) and KeepDims. On a chunk: the normalized Axes,
// and for the last step of a mean, Mean with the element Count to divide by.
type reduceArgs struct {
	Combine  int   `cbor:"1,keyasint,omitempty"`
	Axes     []int `cbor:"2,keyasint,omitempty"`
	KeepDims bool  `cbor:"3,keyasint,omitempty"`
	Mean     bool  `cbor:"4,keyasint,omitempty"`
	Count    int64 `cbor:"5,keyasint,omitempty"`
}

// ReduceOption configures a reduction; like Option, it may be reused.
type ReduceOption func(*reduceArgs)

// Axis reduces along the given axes only (negative axes count from the
// end). Without Axis a reduction covers every axis and gives a scalar.
func Axis(axes ...int) ReduceOption {
	return func(a *reduceArgs) { a.Axes = append([]int{}, axes...) }
}

// KeepDims keeps reduced axes as dimensions of size 1, as NumPy's keepdims.
func KeepDims() ReduceOption { return func(a *reduceArgs) { a.KeepDims = true } }

// Combine sets how many partial results each node of the reduction tree
// combines (at least 2; DefaultCombine if unset).
func Combine(n int) ReduceOption { return func(a *reduceArgs) { a.Combine = n } }

type reduceOp struct {
	name string
	kind redKind
	mean bool
}

type combineOp struct {
	name string
	kind redKind
	mean bool
}

var (
	sumOp  = reduceOp{"tensor.sum", redSum, false}
	prodOp = reduceOp{"tensor.prod", redProd, false}
	minOp  = reduceOp{"tensor.min", redMin, false}
	maxOp  = reduceOp{"tensor.max", redMax, false}
	meanOp = reduceOp{"tensor.mean", redSum, true}
)

const sumCombineName = "tensor.sum.combine"

func init() {
	for _, op := range []reduceOp{sumOp, prodOp, minOp, maxOp, meanOp} {
		dag.MustRegister(op)
		dag.MustRegister(op.combiner())
	}
}

func (op reduceOp) combiner() combineOp {
	return combineOp{op.name + ".combine", op.kind, op.mean}
}

// Sum returns the sum of the elements: of all of them (a 0-dimensional
// tensor) or along Axis. It runs as a tree reduction: one partial result per
// chunk, then levels that each combine up to DefaultCombine (or Combine)
// partials. Integer sums wrap around on overflow, as in Go and NumPy.
func (t *Tensor) Sum(opts ...ReduceOption) *Tensor { return reduce(sumOp, t, opts) }

// SumCombine is Sum(Combine(combine)).
func (t *Tensor) SumCombine(combine int) *Tensor {
	return reduce(sumOp, t, []ReduceOption{Combine(combine)})
}

// Prod returns the product of the elements (see Sum).
func (t *Tensor) Prod(opts ...ReduceOption) *Tensor { return reduce(prodOp, t, opts) }

// Min returns the smallest element (see Sum). NaN wins, as in NumPy. The
// minimum of no elements is an error.
func (t *Tensor) Min(opts ...ReduceOption) *Tensor { return reduce(minOp, t, opts) }

// Max returns the largest element (see Min).
func (t *Tensor) Max(opts ...ReduceOption) *Tensor { return reduce(maxOp, t, opts) }

// Mean returns the arithmetic mean, always float64 (see Sum). Shapes are
// known when the graph is built, so the partials are plain sums and the
// last step of the tree divides by the element count; the mean of no
// elements is NaN.
func (t *Tensor) Mean(opts ...ReduceOption) *Tensor { return reduce(meanOp, t, opts) }

func reduce(op reduceOp, t *Tensor, opts []ReduceOption) *Tensor {
	if t == nil {
		return failed(errNilReceiver(op.name[len("tensor."):]))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	var a reduceArgs
	for _, o := range opts {
		if o != nil {
			o(&a)
		}
	}
	if a.Combine == 0 {
		a.Combine = DefaultCombine
	}
	if a.Combine < 2 {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: combine size %d must be at least 2", op.name, a.Combine))
	}
	red, axes, err := reducedAxes(a.Axes, len(t.shape))
	if err != nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: %v", op.name, err))
	}
	if a.Axes != nil {
		a.Axes = axes
	}
	shape := reducedShape(t.shape, red, a.KeepDims)
	if err := checkIdentity(op, t.shape, red, shape); err != nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: %v", op.name, err))
	}
	dt := t.dtype
	if op.mean {
		dt = dag.Float64
	}
	return derive(op.name, a, shape, dt, t)
}

// reducedAxes returns which of nd dimensions axes reduces, and the axes
// normalized and sorted. No axes means all.
func reducedAxes(axes []int, nd int) ([]bool, []int, error) {
	red := make([]bool, nd)
	if err := reduceMask(axes, red); err != nil {
		return nil, nil, err
	}
	var norm []int
	for d, r := range red {
		if r {
			norm = append(norm, d)
		}
	}
	return red, norm, nil
}

// reduceMask sets red[d] for every dimension axes reduces (all of them
// for no axes).
func reduceMask(axes []int, red []bool) error {
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
		return nil
	}
	for _, ax := range axes {
		d, err := normAxis(ax, len(red))
		if err != nil {
			return err
		}
		if red[d] {
			return fmt.Errorf("axis %d is given twice", ax)
		}
		red[d] = true
	}
	return nil
}

func reducedShape(shape []int64, red []bool, keep bool) []int64 {
	out := make([]int64, 0, len(shape))
	for d, n := range shape {
		switch {
		case !red[d]:
			out = append(out, n)
		case keep:
			out = append(out, 1)
		}
	}
	return out
}

// checkIdentity refuses a min or max over no elements (they have no
// identity), unless the result itself is empty.
func checkIdentity(op reduceOp, shape []int64, red []bool, out []int64) error {
	if op.kind != redMin && op.kind != redMax || elements(out) == 0 || hasUnknown(shape) {
		return nil
	}
	for d, r := range red {
		if r && shape[d] == 0 {
			return fmt.Errorf("reduces dimension %d of size 0, and %s of no elements is undefined", d, op.name[len("tensor."):])
		}
	}
	return nil
}

func (op reduceOp) Name() string  { return op.name }
func (op reduceOp) NewArgs() any  { return new(reduceArgs) }
func (op combineOp) Name() string { return op.name }
func (op combineOp) NewArgs() any { return new(reduceArgs) }

func (op reduceOp) FuseChain(steps []dag.ChainStep) dag.Kernel  { return fuseChain(steps) }
func (op combineOp) FuseChain(steps []dag.ChainStep) dag.Kernel { return fuseChain(steps) }

func (op reduceOp) Exec(kc *dag.KernelCall) error { return execOne(op, kc) }

func (op reduceOp) Tile(tc *dag.TileContext) error {
	n := tc.Tileable()
	if len(n.Inputs) != 1 {
		return tc.Errorf("takes 1 input, has %d", len(n.Inputs))
	}
	var a reduceArgs
	if err := decodeNodeArgs(tc, &a); err != nil {
		return err
	}
	if a.Combine == 0 {
		a.Combine = DefaultCombine
	}
	if a.Combine < 2 {
		return tc.Errorf("combine size %d must be at least 2", a.Combine)
	}
	inDT, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	shapes, err := inputShapes(tc)
	if err != nil {
		return err
	}
	shape := shapes[0]
	red, axes, err := reducedAxes(a.Axes, len(shape))
	if err != nil {
		return tc.Errorf("%v", err)
	}
	outShape := reducedShape(shape, red, a.KeepDims)
	dt := inDT
	if op.mean {
		dt = dag.Float64
	}
	if err := checkNode(tc, outShape, dt); err != nil {
		return err
	}
	if err := checkIdentity(op, shape, red, outShape); err != nil {
		return tc.Errorf("%v", err)
	}
	count := int64(1)
	for d, r := range red {
		if r {
			count *= shape[d]
		}
	}
	g := tc.Inputs[0]
	nd := len(shape)

	partArgs := tc.Chunks.AddArgs(mustEncode(reduceArgs{Axes: axes}))
	finalPart, finalComb := partArgs, int32(-1)
	if op.mean {
		finalPart = tc.Chunks.AddArgs(mustEncode(reduceArgs{Axes: axes, Mean: true, Count: count}))
		finalComb = tc.Chunks.AddArgs(mustEncode(reduceArgs{Mean: true, Count: count}))
	}
	var combArgs int32 = -1
	combOp := dag.OpIDOf(op.combiner().name)

	// The output grid: kept dimensions keep their splits; reduced ones are
	// dropped, or one chunk of size 1 with KeepDims.
	keptSplits := make([][]int64, nd) // the grid of output positions, in input rank
	redSplits := make([][]int64, nd)  // the input chunks that fold into one position
	var outSplits [][]int64
	for d := range nd {
		if red[d] {
			keptSplits[d], redSplits[d] = []int64{1}, g.NSplits[d]
			if a.KeepDims {
				outSplits = append(outSplits, []int64{1})
			}
			continue
		}
		keptSplits[d], redSplits[d] = g.NSplits[d], []int64{1}
		outSplits = append(outSplits, g.NSplits[d])
	}
	grid := &dag.Grid{NSplits: outSplits}
	var (
		level    []int32
		next     []int32
		inIdx    = make([]int32, nd)
		inShape  = make([]int64, nd)
		keepIdx  = make([]int32, nd) // position in input rank, reduced dims 0
		keepShp  = make([]int64, nd) // partial shape in input rank, reduced dims 1
		outIdx   = make([]int32, 0, nd)
		outShp   = make([]int64, 0, nd)
		inputBuf [1]int32
	)
	err = forEachChunk(keptSplits, func(pos []int32, _ []int64) error {
		outIdx, outShp = outIdx[:0], outShp[:0]
		for d := range nd {
			keepIdx[d] = pos[d]
			if red[d] {
				keepShp[d] = 1
				if a.KeepDims {
					outIdx, outShp = append(outIdx, 0), append(outShp, 1)
				}
				continue
			}
			keepShp[d] = g.NSplits[d][pos[d]]
			outIdx, outShp = append(outIdx, pos[d]), append(outShp, keepShp[d])
		}
		total := 1
		for d := range nd {
			total *= len(redSplits[d])
		}
		level = level[:0]
		err := forEachChunk(redSplits, func(rpos []int32, _ []int64) error {
			lin := 0
			for d := range nd {
				inIdx[d] = pos[d] + rpos[d]
				inShape[d] = g.NSplits[d][inIdx[d]]
				lin = lin*len(g.NSplits[d]) + int(inIdx[d])
			}
			inputBuf[0] = g.Chunks[lin]
			idx, shp, args := inIdx, keepShp, partArgs
			if total == 1 {
				idx, shp, args = outIdx, outShp, finalPart
			}
			c, err := tc.AddChunk(n.Op, args, dt, inputBuf[:], idx, shp)
			level = append(level, c)
			return err
		})
		if err != nil {
			return err
		}
		for len(level) > 1 {
			root := len(level) <= a.Combine
			next = next[:0]
			for i := 0; i < len(level); i += a.Combine {
				j := min(i+a.Combine, len(level))
				if j-i == 1 { // a lone partial moves up a level as it is
					next = append(next, level[i])
					continue
				}
				idx, shp := keepIdx, keepShp
				args := int32(-1)
				if root {
					idx, shp = outIdx, outShp
					args = finalComb
				}
				if args < 0 {
					if combArgs < 0 {
						combArgs = tc.Chunks.AddArgs(nil)
					}
					args = combArgs
				}
				c, err := tc.AddChunk(combOp, args, dt, level[i:j], idx, shp)
				if err != nil {
					return err
				}
				next = append(next, c)
			}
			level, next = next, level
		}
		grid.Chunks = append(grid.Chunks, level[0])
		return nil
	})
	if err != nil {
		return err
	}
	tc.SetGrid(grid)
	return nil
}

// compile adds a first-level (per-chunk) reduction: a sink that folds its
// input's blocks into partial results, in the input's segment when it is
// computed there.
func (op reduceOp) compile(b *builder, k int) error {
	st, err := b.step(k, 1)
	if err != nil {
		return err
	}
	a := &b.args.red
	*a = reduceArgs{Axes: a.Axes[:0]}
	if err := decodeArgs(op.name, st.Args, a); err != nil {
		return err
	}
	ref := st.Inputs[0]
	m := b.metaOf(ref)
	if !numeric(m.DType) {
		return errorf("input has dtype %s; %s computes on float64 and int64", m.DType, op.name)
	}
	red := b.boolMask(len(m.Shape))
	if err := reduceMask(a.Axes, red); err != nil {
		return errorf("%s: %v", op.name, err)
	}
	dt := m.DType
	if op.mean {
		dt = dag.Float64
	}
	nOut := int64(1)
	for d, n := range m.Shape {
		if !red[d] {
			nOut *= n
		}
	}
	if err := b.checkDeclared(k, dt, nOut); err != nil {
		return err
	}
	if a.Mean && !op.mean {
		return errorf("%s: a mean's args on another reduction", op.name)
	}
	acc, err := b.output(k, dt)
	if err != nil {
		return err
	}
	if len(b.reducers) == cap(b.reducers) {
		b.reducers = make([]reducer, 0, max(2, 2*cap(b.reducers))) // earlier pointers keep the old array
	}
	b.reducers = b.reducers[:len(b.reducers)+1]
	r := &b.reducers[len(b.reducers)-1]
	*r = reducer{kind: op.kind, dt: dt, acc: acc, mean: a.Mean, count: a.Count}
	r.init()
	// Offsets of the partial results: row-major over the kept shape,
	// nothing along reduced dimensions.
	ostride := b.int64s(len(m.Shape))
	acc1 := int64(1)
	for d := len(m.Shape) - 1; d >= 0; d-- {
		if !red[d] {
			ostride[d] = acc1
			acc1 *= m.Shape[d]
		}
	}
	r.walk = b.newWalker(m.Shape, ostride)
	s := b.segFor(m.Shape)
	in, err := b.operand(s, ref, dt)
	if err != nil {
		return err
	}
	b.emit(s, inst{code: opReduce, dt: dt, a: in, red: r})
	b.segs[s].closed = true // its value is whole only after the segment ran
	b.defineFull(k, acc, dt)
	return nil
}

// reducer folds blocks of its input into partial results.
type reducer struct {
	kind  redKind
	dt    dag.DType
	acc   []float64 // one partial result per output element, typed by dt
	walk  *walker   // input position → result offset
	mean  bool
	count int64
}

func (r *reducer) init() {
	if r.dt == dag.Int64 {
		var v int64
		switch r.kind {
		case redProd:
			v = 1
		case redMin:
			v = math.MaxInt64
		case redMax:
			v = math.MinInt64
		}
		fill(asI64(r.acc), v)
		return
	}
	var v float64
	switch r.kind {
	case redProd:
		v = 1
	case redMin:
		v = math.Inf(1)
	case redMax:
		v = math.Inf(-1)
	}
	fill(r.acc, v)
}

// block folds the next len(x) input elements.
func (r *reducer) block(x []float64) {
	w := r.walk
	last := len(w.dims) - 1
	inner, st := w.dims[last], w.stride[last]
	for i := 0; i < len(x); {
		take := min(inner-w.pos, int64(len(x)-i))
		run := x[i : i+int(take)]
		if st == 0 {
			r.fold(w.base, run)
		} else {
			r.accumulate(w.base+w.pos, run)
		}
		i += int(take)
		w.pos += take
		if w.pos == inner {
			w.nextRun()
		}
	}
}

// block2 folds the next len(x) elements of x∘y (a sum's folded operand,
// see fuseReduce; the walker's inner dimension is reduced).
func (r *reducer) block2(op opcode, x, y []float64) {
	w := r.walk
	last := len(w.dims) - 1
	inner := w.dims[last]
	y = y[:len(x)]
	for i := 0; i < len(x); {
		take := min(inner-w.pos, int64(len(x)-i))
		a, b := x[i:i+int(take)], y[i:i+int(take)]
		if r.dt == dag.Int64 {
			acc := asI64(r.acc)
			acc[w.base] += sum8Pair(op, asI64(a), asI64(b))
		} else {
			r.acc[w.base] += sum8Pair(op, a, b)
		}
		i += int(take)
		w.pos += take
		if w.pos == inner {
			w.nextRun()
		}
	}
}

// fold reduces a run into the single result at off.
func (r *reducer) fold(off int64, run []float64) {
	if r.dt == dag.Int64 {
		x, acc := asI64(run), asI64(r.acc)
		switch r.kind {
		case redSum:
			acc[off] += sum8(x)
		case redProd:
			acc[off] *= prod4(x)
		case redMin:
			acc[off] = min(acc[off], min4(x))
		case redMax:
			acc[off] = max(acc[off], max4(x))
		}
		return
	}
	switch r.kind {
	case redSum:
		r.acc[off] += sum8(run)
	case redProd:
		r.acc[off] *= prod4(run)
	case redMin:
		r.acc[off] = min(r.acc[off], min4(run))
	case redMax:
		r.acc[off] = max(r.acc[off], max4(run))
	}
}

// accumulate folds a run into consecutive results from off.
func (r *reducer) accumulate(off int64, run []float64) {
	d := r.acc[off : off+int64(len(run))]
	if r.dt == dag.Int64 {
		accumulate(r.kind, asI64(d), asI64(run))
		return
	}
	accumulate(r.kind, d, run)
}

func accumulate[T num](kind redKind, d, x []T) {
	switch kind {
	case redSum:
		accSum(d, x)
	case redProd:
		accProd(d, x)
	case redMin:
		accMin(d, x)
	case redMax:
		accMax(d, x)
	}
}

func (r *reducer) finish() {
	if r.mean {
		divVS(r.acc, r.acc, float64(r.count))
	}
}

// Exec combines partial results in input order.
func (op combineOp) Exec(kc *dag.KernelCall) error {
	var a reduceArgs
	if err := decodeArgs(op.name, kc.Args, &a); err != nil {
		return err
	}
	if len(kc.Inputs) == 0 {
		return errorf("%s: no partial results to combine", op.name)
	}
	dt := kc.Inputs[0].Meta.DType
	if !numeric(dt) {
		return errorf("%s: partial of dtype %s", op.name, dt)
	}
	if kc.DType != dag.DTypeInvalid && kc.DType != dt {
		return errorf("%s: partials are %s but the plan declares %s", op.name, dt, kc.DType)
	}
	n := elements(kc.Shape)
	for i, in := range kc.Inputs {
		if in.Meta.DType != dt || int64(len(in.Data)) != n*8 {
			return errorf("%s: partial %d is %s with %d bytes; want %s with %d", op.name, i, in.Meta.DType, len(in.Data), dt, n*8)
		}
	}
	m := dag.Meta{DType: dt, Shape: kc.Shape}
	buf, err := kc.Output(0, m, int(m.Bytes()))
	if err != nil {
		return err
	}
	out := dag.BytesAsFloat64s(buf)
	copy(out, kc.Inputs[0].Float64s())
	for i, in := range kc.Inputs[1:] {
		if i%64 == 63 {
			if err := kc.Interrupted(); err != nil {
				return err
			}
		}
		if dt == dag.Int64 {
			accumulate(op.kind, asI64(out), in.Int64s())
		} else {
			accumulate(op.kind, out, in.Float64s())
		}
	}
	if a.Mean {
		divVS(out, out, float64(a.Count))
	}
	return nil
}
