package tensor

import (
	"fmt"
	"math"
	"slices"

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
	redAll // min of bool lanes, identity true
	redAny // max of bool lanes, identity false
	redNanSum
	redNanMin // NaN where every element is NaN
	redNanMax
	redNanMean // planes: sum and count of the non-NaN elements
	redMoments // planes: count, mean and M2 (Chan et al.), for var and std
)

// planes is how many arrays of partial results a kind keeps: a partial
// result chunk of such a kind has shape [planes, kept...].
func (k redKind) planes() int {
	switch k {
	case redNanMean:
		return 2
	case redMoments:
		return 3
	}
	return 1
}

// reduceArgs are the args of the reductions. On a tileable node: Combine,
// Axes (nil or empty: all), KeepDims and Ddof. On a chunk: the normalized
// Axes; Partial on chunks whose result is a partial (in lanes, with
// planes); and, for the last step of a mean, Mean with the element Count to
// divide by.
type reduceArgs struct {
	Combine  int   `cbor:"1,keyasint,omitempty"`
	Axes     []int `cbor:"2,keyasint,omitempty"`
	KeepDims bool  `cbor:"3,keyasint,omitempty"`
	Mean     bool  `cbor:"4,keyasint,omitempty"`
	Count    int64 `cbor:"5,keyasint,omitempty"`
	Partial  bool  `cbor:"6,keyasint,omitempty"`
	Ddof     int64 `cbor:"7,keyasint,omitempty"` // var and std: the divisor is N - Ddof
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

// Ddof sets Var's and Std's delta degrees of freedom: the divisor is N -
// ddof (0 by default, as NumPy).
func Ddof(ddof int) ReduceOption { return func(a *reduceArgs) { a.Ddof = int64(ddof) } }

type reduceOp struct {
	name string
	kind redKind
	mean bool // the result is divided by the element count
	std  bool // the square root of the variance
}

// combineOp merges partial results of op; it is no Tiler and no engine
// op, so it does not embed op.
type combineOp struct {
	name string
	op   reduceOp
}

var (
	sumOp     = reduceOp{name: "tensor.sum", kind: redSum}
	prodOp    = reduceOp{name: "tensor.prod", kind: redProd}
	minOp     = reduceOp{name: "tensor.min", kind: redMin}
	maxOp     = reduceOp{name: "tensor.max", kind: redMax}
	meanOp    = reduceOp{name: "tensor.mean", kind: redSum, mean: true}
	allOp     = reduceOp{name: "tensor.all", kind: redAll}
	anyOp     = reduceOp{name: "tensor.any", kind: redAny}
	nansumOp  = reduceOp{name: "tensor.nansum", kind: redNanSum}
	nanminOp  = reduceOp{name: "tensor.nanmin", kind: redNanMin}
	nanmaxOp  = reduceOp{name: "tensor.nanmax", kind: redNanMax}
	nanmeanOp = reduceOp{name: "tensor.nanmean", kind: redNanMean}
	varOp     = reduceOp{name: "tensor.var", kind: redMoments}
	stdOp     = reduceOp{name: "tensor.std", kind: redMoments, std: true}

	reduceOps = []reduceOp{sumOp, prodOp, minOp, maxOp, meanOp, allOp, anyOp, nansumOp, nanminOp, nanmaxOp, nanmeanOp, varOp, stdOp}
)

func init() {
	for _, op := range reduceOps {
		dag.MustRegister(op)
		dag.MustRegister(op.combiner())
	}
}

func (op reduceOp) combiner() combineOp { return combineOp{op.name + ".combine", op} }

// resultDType is the dtype of the reduction of in.
func (op reduceOp) resultDType(in dag.DType) dag.DType {
	switch {
	case op.kind == redAll || op.kind == redAny:
		return dag.Bool
	case op.mean || op.kind == redNanMean || op.kind == redMoments:
		return floatResult(in)
	case op.kind == redSum || op.kind == redProd || op.kind == redNanSum:
		return sumDType(in)
	}
	return in
}

// accDType is the lane dtype partial results of in are kept in.
func (op reduceOp) accDType(in dag.DType) dag.DType {
	switch {
	case op.kind == redAll || op.kind == redAny:
		return dag.Int64
	case op.mean || op.kind == redNanMean || op.kind == redMoments:
		return dag.Float64
	}
	return lane(op.resultDType(in))
}

// loadDType is the dtype the input is read as.
func (op reduceOp) loadDType(in dag.DType) dag.DType {
	if op.kind == redAll || op.kind == redAny {
		return dag.Bool
	}
	return op.accDType(in)
}

// Sum returns the sum of the elements: of all of them (a 0-dimensional
// tensor) or along Axis. It runs as a tree reduction: one partial result per
// chunk, then levels that each combine up to DefaultCombine (or Combine)
// partials. Integer sums wrap around on overflow, as in Go and NumPy; bools
// sum as int64.
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

// Mean returns the arithmetic mean: float32 for float32, else float64 (see
// Sum). Shapes are known when the graph is built, so the partials are plain
// sums and the last step of the tree divides by the element count; the
// mean of no elements is NaN.
func (t *Tensor) Mean(opts ...ReduceOption) *Tensor { return reduce(meanOp, t, opts) }

// All reports whether every element is nonzero (true for no elements); a
// bool tensor.
func (t *Tensor) All(opts ...ReduceOption) *Tensor { return reduce(allOp, t, opts) }

// Any reports whether some element is nonzero (false for no elements).
func (t *Tensor) Any(opts ...ReduceOption) *Tensor { return reduce(anyOp, t, opts) }

// NanSum is Sum counting NaNs as zero.
func (t *Tensor) NanSum(opts ...ReduceOption) *Tensor { return reduce(nansumOp, t, opts) }

// NanMin is Min ignoring NaNs; where every element is NaN the result is
// NaN (NumPy warns there).
func (t *Tensor) NanMin(opts ...ReduceOption) *Tensor { return reduce(nanminOp, t, opts) }

// NanMax is Max ignoring NaNs (see NanMin).
func (t *Tensor) NanMax(opts ...ReduceOption) *Tensor { return reduce(nanmaxOp, t, opts) }

// NanMean is Mean of the elements that are not NaN: the partials are
// (sum, count) pairs, since how many elements count depends on the data.
// Where every element is NaN the result is NaN.
func (t *Tensor) NanMean(opts ...ReduceOption) *Tensor { return reduce(nanmeanOp, t, opts) }

// Var returns the variance, Σ(x-mean)²/(N-ddof) (see Ddof): float32 for
// float32, else float64. Each chunk computes its (count, mean, M2) exactly
// (two passes over data in cache), and the tree merges them by Chan, Golub
// and LeVeque's pairwise update, so no sum of squares loses the variance
// to cancellation. Where N-ddof <= 0 the result is Inf or NaN, as NumPy's.
func (t *Tensor) Var(opts ...ReduceOption) *Tensor { return reduce(varOp, t, opts) }

// Std returns the square root of Var.
func (t *Tensor) Std(opts ...ReduceOption) *Tensor { return reduce(stdOp, t, opts) }

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
	if a.Ddof != 0 && op.kind != redMoments {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: ddof applies to var and std only", op.name))
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
	return derive(op.name, a, shape, op.resultDType(t.dtype), t)
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

// noIdentity reports whether a reduction of no elements is undefined.
func (op reduceOp) noIdentity() bool {
	switch op.kind {
	case redMin, redMax, redNanMin, redNanMax:
		return true
	}
	return false
}

// checkIdentity refuses a min or max over no elements (they have no
// identity), unless the result itself is empty.
func checkIdentity(op reduceOp, shape []int64, red []bool, out []int64) error {
	if !op.noIdentity() || elements(out) == 0 || hasUnknown(shape) {
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
	if a.Ddof != 0 && op.kind != redMoments {
		return tc.Errorf("ddof applies to var and std only")
	}
	inDT, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	if op.kind == redMoments && a.Ddof < 0 {
		return tc.Errorf("ddof %d must not be negative", a.Ddof)
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
	dt, acc := op.resultDType(inDT), op.accDType(inDT)
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
	planes := int64(op.kind.planes())

	finalArgs := reduceArgs{Axes: axes, Ddof: a.Ddof}
	if op.mean {
		finalArgs.Mean, finalArgs.Count = true, count
	}
	partArgs := tc.Chunks.AddArgs(mustEncode(reduceArgs{Axes: axes, Partial: true}))
	finalPart := tc.Chunks.AddArgs(mustEncode(finalArgs))
	finalArgs.Axes = nil
	finalComb := tc.Chunks.AddArgs(mustEncode(finalArgs))
	combArgs := int32(-1)
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
		partIdx  = make([]int32, 1+nd) // a partial's index: [0,] then its position in input rank
		keepIdx  = make([]int32, 1+nd) // the same with reduced dims 0
		partShp  = make([]int64, 1+nd) // a partial's shape: [planes,] then input rank with reduced dims 1
		outIdx   = make([]int32, 0, nd)
		outShp   = make([]int64, 0, nd)
		inputBuf [1]int32
	)
	partShp[0] = planes
	keepShp, inIdx := partShp[1:], partIdx[1:]
	if planes == 1 {
		partShp, partIdx, keepIdx = keepShp, inIdx, keepIdx[1:]
	}
	keepPos := keepIdx[len(keepIdx)-nd:]
	err = forEachChunk(keptSplits, func(pos []int32, _ []int64) error {
		outIdx, outShp = outIdx[:0], outShp[:0]
		for d := range nd {
			keepPos[d] = pos[d]
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
		if cap(level) < total { // sized once: a sum of 3.3 million chunks grew it 30 times over
			level = dag.HugePages(make([]int32, 0, total))
		}
		level = level[:0]
		if nd == 1 && planes == 1 && total > 1 {
			// A vector reduced whole: the partials are one row, partial j
			// at index j with size 1 reading input chunk j, added in one
			// pass (a sum of 3.3 million chunks).
			first, err := tc.AddRow(n.Op, partArgs, acc, total, partShp, g.Chunks)
			if err != nil {
				return err
			}
			for j := range int32(total) {
				level = append(level, first+j)
			}
		} else if err := forEachChunk(redSplits, func(rpos []int32, _ []int64) error {
			lin := 0
			for d := range nd {
				inIdx[d] = pos[d] + rpos[d]
				lin = lin*len(g.NSplits[d]) + int(inIdx[d])
			}
			inputBuf[0] = g.Chunks[lin]
			idx, shp, args, cdt := partIdx, partShp, partArgs, acc
			if total == 1 {
				idx, shp, args, cdt = outIdx, outShp, finalPart, dt
			}
			c, err := tc.AddChunk(n.Op, args, cdt, inputBuf[:], idx, shp)
			level = append(level, c)
			return err
		}); err != nil {
			return err
		}
		for len(level) > 1 {
			root := len(level) <= a.Combine
			next = slices.Grow(next[:0], (len(level)+a.Combine-1)/a.Combine)
			for i := 0; i < len(level); i += a.Combine {
				j := min(i+a.Combine, len(level))
				if j-i == 1 { // a lone partial moves up a level as it is
					next = append(next, level[i])
					continue
				}
				idx, shp, cdt := keepIdx, partShp, acc
				args := int32(-1)
				if root {
					idx, shp, cdt = outIdx, outShp, dt
					args = finalComb
				}
				if args < 0 {
					if combArgs < 0 {
						combArgs = tc.Chunks.AddArgs(mustEncode(reduceArgs{Partial: true}))
					}
					args = combArgs
				}
				c, err := tc.AddChunk(combOp, args, cdt, level[i:j], idx, shp)
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
		return errorf("input has dtype %s; %s computes on float64, float32, int64 and bool", m.DType, op.name)
	}
	red := b.boolMask(len(m.Shape))
	if err := reduceMask(a.Axes, red); err != nil {
		return errorf("%s: %v", op.name, err)
	}
	nOut := int64(1)
	for d, n := range m.Shape {
		if !red[d] {
			nOut *= n
		}
	}
	if a.Mean && !op.mean {
		return errorf("%s: a mean's args on another reduction", op.name)
	}
	r, err := b.newReducer(k, op, m.DType, nOut, a)
	if err != nil {
		return err
	}
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
	in, err := b.operand(s, ref, op.loadDType(m.DType))
	if err != nil {
		return err
	}
	b.emit(s, inst{code: opReduce, dt: r.dt, a: in, red: r})
	b.segs[s].closed = true // its value is whole only after the segment ran
	b.defineFull(k, r.out, r.outDT)
	return nil
}

// newReducer checks step k's declared result and prepares the partial
// results of op over an input of dtype in with nOut results.
func (b *builder) newReducer(k int, op reduceOp, in dag.DType, nOut int64, a *reduceArgs) (*reducer, error) {
	acc := op.accDType(in)
	planes := int64(op.kind.planes())
	outDT, outN := op.resultDType(in), nOut
	if a.Partial {
		outDT, outN = acc, nOut*planes
	}
	if err := b.checkDeclared(k, outDT, outN); err != nil {
		return nil, err
	}
	out, err := b.output(k, outDT)
	if err != nil {
		return nil, err
	}
	if len(b.reducers) == cap(b.reducers) {
		b.reducers = make([]reducer, 0, max(2, 2*cap(b.reducers))) // earlier pointers keep the old array
	}
	b.reducers = b.reducers[:len(b.reducers)+1]
	r := &b.reducers[len(b.reducers)-1]
	*r = reducer{reduceState: reduceState{op: op, dt: acc, n: nOut, out: out, outDT: outDT,
		partial: a.Partial, count: a.Count, ddof: a.Ddof}}
	if r.direct() {
		r.planes = asF64(out)
	} else {
		r.planes = asF64F(b.int64s(int(planes * nOut)))
	}
	r.init()
	return r, nil
}

func asF64F(x []int64) []float64 {
	if len(x) == 0 {
		return nil
	}
	return asF64(dag.Int64sAsBytes(x))
}

// reduceState is a set of partial results and how they end: shared by the
// first level (reducer, in the engine) and the combine kernel.
type reduceState struct {
	op      reduceOp
	dt      dag.DType // the lanes of planes
	n       int64     // results per plane
	planes  []float64 // op.kind.planes() arrays of n results
	out     []byte    // the step's output
	outDT   dag.DType
	partial bool
	count   int64 // a mean's divisor
	ddof    int64
}

// direct reports whether the partial results are the output itself.
func (r *reduceState) direct() bool {
	return r.outDT == r.dt && (r.partial || r.op.kind.planes() == 1)
}

func (r *reduceState) acc() []float64 { return r.planes[:r.n] }

func (r *reduceState) plane(i int) []float64 { return r.planes[int64(i)*r.n : int64(i+1)*r.n] }

func (r *reduceState) init() {
	if r.dt == dag.Int64 {
		var v int64
		switch r.op.kind {
		case redProd, redAll:
			v = 1
		case redMin, redNanMin:
			v = math.MaxInt64
		case redMax, redNanMax:
			v = math.MinInt64
		}
		fill(asI64(r.acc()), v)
		return
	}
	var v float64
	switch r.op.kind {
	case redProd:
		v = 1
	case redMin:
		v = math.Inf(1)
	case redMax:
		v = math.Inf(-1)
	case redNanMin, redNanMax:
		v = math.NaN() // nothing yet
	}
	fill(r.acc(), v)
	for i := 1; i < r.op.kind.planes(); i++ {
		fill(r.plane(i), 0)
	}
}

// finish turns complete partial results into the step's output: the last
// division of a mean, the variance from the moments, and the conversion to
// the output's dtype.
func (r *reduceState) finish() {
	if r.direct() && !(r.op.mean && !r.partial) {
		return
	}
	res := r.acc()
	if !r.partial {
		switch {
		case r.op.mean:
			divVS(res, res, float64(r.count))
		case r.op.kind == redNanMean:
			divVV(res, res, r.plane(1))
		case r.op.kind == redMoments:
			cnt, m2 := r.plane(0), r.plane(2)
			for i := range res {
				v := m2[i] / max(cnt[i]-float64(r.ddof), 0)
				if r.op.std {
					v = math.Sqrt(v)
				}
				res[i] = v
			}
		}
	}
	if !r.direct() { // (partials are always direct)
		storeLanes(r.out, r.outDT, 0, res)
	}
}

// reducer folds blocks of its input into partial results.
type reducer struct {
	reduceState
	walk *walker // input position → result offset
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
	acc := r.acc()
	for i := 0; i < len(x); {
		take := min(inner-w.pos, int64(len(x)-i))
		a, b := x[i:i+int(take)], y[i:i+int(take)]
		if r.dt == dag.Int64 {
			asI64(acc)[w.base] += sum8Pair(op, asI64(a), asI64(b))
		} else {
			acc[w.base] += sum8Pair(op, a, b)
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
	acc := r.acc()
	if r.dt == dag.Int64 {
		x, acc := asI64(run), asI64(acc)
		switch r.op.kind {
		case redSum, redNanSum:
			acc[off] += sum8(x)
		case redProd:
			acc[off] *= prod4(x)
		case redMin, redAll, redNanMin:
			acc[off] = min(acc[off], min4(x))
		case redMax, redAny, redNanMax:
			acc[off] = max(acc[off], max4(x))
		}
		return
	}
	switch r.op.kind {
	case redSum:
		acc[off] += sum8(run)
	case redProd:
		acc[off] *= prod4(run)
	case redMin:
		acc[off] = min(acc[off], min4(run))
	case redMax:
		acc[off] = max(acc[off], max4(run))
	case redNanSum:
		acc[off] += nansum8(run)
	case redNanMin:
		acc[off] = nanMin(acc[off], nanmin4(run))
	case redNanMax:
		acc[off] = nanMax(acc[off], nanmax4(run))
	case redNanMean:
		s, c := nanSumCount(run)
		acc[off] += s
		r.plane(1)[off] += c
	case redMoments:
		// The run's own moments, two passes over data in cache, merged
		// into the result's.
		n := float64(len(run))
		mean := sum8(run) / n
		m2 := sumSqDev(run, mean)
		mergeMoments(r.plane(0), r.plane(1), r.plane(2), off, n, mean, m2)
	}
}

// accumulate folds a run into consecutive results from off.
func (r *reducer) accumulate(off int64, run []float64) {
	end := off + int64(len(run))
	d := r.acc()[off:end]
	if r.dt == dag.Int64 {
		accumulate(r.op.kind, asI64(d), asI64(run))
		return
	}
	switch r.op.kind {
	case redNanSum:
		accNanSum(d, run)
	case redNanMin:
		accNanMin(d, run)
	case redNanMax:
		accNanMax(d, run)
	case redNanMean:
		accNanSum(d, run)
		accNotNaN(r.plane(1)[off:end], run)
	case redMoments:
		welford(r.plane(0)[off:end], r.plane(1)[off:end], r.plane(2)[off:end], run)
	default:
		accumulate(r.op.kind, d, run)
	}
}

// accumulate folds x into d elementwise for the kinds whose combining
// step is one plain op.
func accumulate[T num](kind redKind, d, x []T) {
	switch kind {
	case redSum, redNanSum:
		accSum(d, x)
	case redProd:
		accProd(d, x)
	case redMin, redAll, redNanMin:
		accMin(d, x)
	case redMax, redAny, redNanMax:
		accMax(d, x)
	}
}

// mergeMoments merges a group of n elements with the given mean and M2
// into result off (Chan, Golub and LeVeque).
func mergeMoments(cnt, mean, m2 []float64, off int64, n, mb, m2b float64) {
	na := cnt[off]
	if na == 0 {
		cnt[off], mean[off], m2[off] = n, mb, m2b
		return
	}
	if n == 0 {
		return
	}
	t := na + n
	delta := mb - mean[off]
	mean[off] += delta * (n / t)
	m2[off] += m2b + delta*delta*(na*n/t)
	cnt[off] = t
}

// welford adds one element to each of consecutive results.
func welford(cnt, mean, m2, x []float64) {
	mean, m2, x = mean[:len(cnt)], m2[:len(cnt)], x[:len(cnt)]
	for i := range cnt {
		c := cnt[i] + 1
		delta := x[i] - mean[i]
		mean[i] += delta / c
		m2[i] += delta * (x[i] - mean[i])
		cnt[i] = c
	}
}

// combine merges src's partial results into r's, elementwise.
func (r *reduceState) combine(src []float64) {
	acc := r.acc()
	if r.dt == dag.Int64 {
		accumulate(r.op.kind, asI64(acc), asI64(src[:r.n]))
		return
	}
	switch r.op.kind {
	case redNanMin:
		accNanMin(acc, src[:r.n])
	case redNanMax:
		accNanMax(acc, src[:r.n])
	case redNanMean:
		accSum(acc, src[:r.n])
		accSum(r.plane(1), src[r.n:2*r.n])
	case redMoments:
		cnt, mean, m2 := src[:r.n], src[r.n:2*r.n], src[2*r.n:3*r.n]
		for i := range cnt {
			mergeMoments(r.plane(0), r.plane(1), r.plane(2), int64(i), cnt[i], mean[i], m2[i])
		}
	default:
		accumulate(r.op.kind, acc, src[:r.n])
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
	if dt != dag.Float64 && dt != dag.Int64 {
		return errorf("%s: partial of dtype %s; partials are float64 or int64 lanes", op.name, dt)
	}
	if a.Mean && !op.op.mean {
		return errorf("%s: a mean's args on another reduction", op.name)
	}
	planes := int64(op.op.kind.planes())
	n := elements(kc.Shape)
	if a.Partial {
		if planes > 1 {
			if len(kc.Shape) == 0 || kc.Shape[0] != planes {
				return errorf("%s: partial shape %v; want %d planes first", op.name, kc.Shape, planes)
			}
			n /= planes
		}
	}
	for i, in := range kc.Inputs {
		if in.Meta.DType != dt || int64(len(in.Data)) != n*planes*8 {
			return errorf("%s: partial %d is %s with %d bytes; want %s with %d", op.name, i, in.Meta.DType, len(in.Data), dt, n*planes*8)
		}
	}
	// The input dtype only matters through acc and result dtypes: find
	// the one whose acc lanes are dt.
	r := reduceState{op: op.op, dt: dt, n: n, partial: a.Partial, count: a.Count, ddof: a.Ddof}
	r.outDT = kc.DType
	if r.partial {
		r.outDT = dt
	}
	if !numeric(r.outDT) || lane(r.outDT) != dt && !(r.outDT == dag.Float32 && dt == dag.Float64) && !(r.outDT == dag.Bool && dt == dag.Int64) {
		return errorf("%s: combines %s partials into %s", op.name, dt, r.outDT)
	}
	m := dag.Meta{DType: r.outDT, Shape: kc.Shape}
	buf, err := kc.Output(0, m, int(m.Bytes()))
	if err != nil {
		return err
	}
	r.out = buf
	if r.direct() {
		r.planes = asF64(buf)
	} else {
		r.planes = make([]float64, planes*n)
	}
	copy(r.planes, kc.Inputs[0].Float64s())
	for i, in := range kc.Inputs[1:] {
		if i%64 == 63 {
			if err := kc.Interrupted(); err != nil {
				return err
			}
		}
		r.combine(in.Float64s())
	}
	r.finish()
	return nil
}
