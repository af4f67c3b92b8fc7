package tensor

import (
	"github.com/phobos-project/phobos/dag"
)

// elemArgs are the args of the elementwise ops. A binary op whose operand
// was a 0-dimensional constant (Scalar, ScalarInt) carries it here instead
// of reading a chunk, so that (t+1)*2 stays a chain that fusion can join.
// The scalar is weak (see dtype.go).
type elemArgs struct {
	// Side is 0 without a scalar, 1 when the scalar is the right operand
	// (t - 1), 2 when it is the left one (1 - t).
	Side  int8    `cbor:"1,keyasint,omitempty"`
	Value float64 `cbor:"2,keyasint,omitempty"` // the scalar, unless IsInt
	Int   int64   `cbor:"3,keyasint,omitempty"`
	IsInt bool    `cbor:"4,keyasint,omitempty"`
}

const (
	sideNone  = 0
	sideRight = 1
	sideLeft  = 2
)

// resultRule is how an elementwise op's dtype follows from its operands'.
type resultRule uint8

const (
	resSame    resultRule = iota // the (promoted) operands' dtype
	resFloat                     // a float (floatResult; unaryFloat for unary ops)
	resCompare                   // bool, operands compared in their promoted dtype
	resLogical                   // bool, of the operands' truth values
)

// unaryOp is an elementwise op of one tensor.
type unaryOp struct {
	name string
	code opcode
	res  resultRule
}

// binaryOp is an elementwise op of two tensors, broadcast as in NumPy.
type binaryOp struct {
	name string
	code opcode
	res  resultRule
}

// astypeOp converts between any two dtypes.
type astypeOp struct{}

type astypeArgs struct {
	DType string `cbor:"1,keyasint"` // "float64", "float32", "int64" or "bool"
}

var (
	negOp      = unaryOp{"tensor.neg", opNeg, resSame}
	absOp      = unaryOp{"tensor.abs", opAbs, resSame}
	expOp      = unaryOp{"tensor.exp", opExp, resFloat}
	logOp      = unaryOp{"tensor.log", opLog, resFloat}
	sqrtOp     = unaryOp{"tensor.sqrt", opSqrt, resFloat}
	isnanOp    = unaryOp{"tensor.isnan", opIsNaN, resCompare}
	isfiniteOp = unaryOp{"tensor.isfinite", opIsFinite, resCompare}
	notOp      = unaryOp{"tensor.logical_not", opNot, resLogical}

	addOp  = binaryOp{"tensor.add", opAdd, resSame}
	subOp  = binaryOp{"tensor.sub", opSub, resSame}
	mulOp  = binaryOp{"tensor.mul", opMul, resSame}
	divOp  = binaryOp{"tensor.div", opDiv, resFloat}
	powOp  = binaryOp{"tensor.pow", opPow, resFloat}
	maxOp2 = binaryOp{"tensor.maximum", opMax, resSame}
	minOp2 = binaryOp{"tensor.minimum", opMin, resSame}
	eqOp   = binaryOp{"tensor.equal", opEq, resCompare}
	neOp   = binaryOp{"tensor.not_equal", opNe, resCompare}
	ltOp   = binaryOp{"tensor.less", opLt, resCompare}
	leOp   = binaryOp{"tensor.less_equal", opLe, resCompare}
	gtOp   = binaryOp{"tensor.greater", opGt, resCompare}
	geOp   = binaryOp{"tensor.greater_equal", opGe, resCompare}
	andOp  = binaryOp{"tensor.logical_and", opAnd, resLogical}
	orOp   = binaryOp{"tensor.logical_or", opOr, resLogical}

	unaryOps  = []unaryOp{negOp, absOp, expOp, logOp, sqrtOp, isnanOp, isfiniteOp, notOp}
	binaryOps = []binaryOp{addOp, subOp, mulOp, divOp, powOp, maxOp2, minOp2, eqOp, neOp, ltOp, leOp, gtOp, geOp, andOp, orOp}
)

const astypeName = "tensor.astype"

func init() {
	for _, op := range unaryOps {
		dag.MustRegister(op)
	}
	for _, op := range binaryOps {
		dag.MustRegister(op)
	}
	dag.MustRegister(astypeOp{})
}

// Neg returns -t (an error for bool, as in NumPy: use LogicalNot).
func (t *Tensor) Neg() *Tensor { return unary(negOp, t) }

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor { return unary(absOp, t) }

// Exp returns e**t (a float; see dtype.go).
func (t *Tensor) Exp() *Tensor { return unary(expOp, t) }

// Log returns the natural logarithm of t (a float; NaN below 0, -Inf at 0).
func (t *Tensor) Log() *Tensor { return unary(logOp, t) }

// Sqrt returns the square root of t (a float; NaN below 0).
func (t *Tensor) Sqrt() *Tensor { return unary(sqrtOp, t) }

// IsNaN returns where t is NaN (bool; false everywhere for integers).
func (t *Tensor) IsNaN() *Tensor { return unary(isnanOp, t) }

// IsFinite returns where t is neither NaN nor ±Inf (bool).
func (t *Tensor) IsFinite() *Tensor { return unary(isfiniteOp, t) }

// LogicalNot returns where t is zero (bool).
func (t *Tensor) LogicalNot() *Tensor { return unary(notOp, t) }

// Add returns t + u elementwise, broadcasting as NumPy does, in the dtype
// of dtype.go's table. Integer arithmetic wraps around on overflow; two
// bools add as logical or.
func (t *Tensor) Add(u *Tensor) *Tensor { return binary(addOp, t, u) }

// Sub returns t - u (see Add; an error for two bools, as in NumPy).
func (t *Tensor) Sub(u *Tensor) *Tensor { return binary(subOp, t, u) }

// Mul returns t * u (see Add; two bools multiply as logical and).
func (t *Tensor) Mul(u *Tensor) *Tensor { return binary(mulOp, t, u) }

// Div returns t / u, true division as NumPy's /: float32 for float32
// operands, else float64.
func (t *Tensor) Div(u *Tensor) *Tensor { return binary(divOp, t, u) }

// Pow returns t ** u, as Div a float (math.Pow; integer operands are
// converted, which is exact while the result stays below 2**53; NumPy
// keeps integers there).
func (t *Tensor) Pow(u *Tensor) *Tensor { return binary(powOp, t, u) }

// Maximum returns the larger of t and u elementwise; NaN wins.
func (t *Tensor) Maximum(u *Tensor) *Tensor { return binary(maxOp2, t, u) }

// Minimum returns the smaller of t and u elementwise; NaN wins.
func (t *Tensor) Minimum(u *Tensor) *Tensor { return binary(minOp2, t, u) }

// Equal returns t == u elementwise (bool), comparing in the operands'
// promoted dtype; NaN equals nothing.
func (t *Tensor) Equal(u *Tensor) *Tensor { return binary(eqOp, t, u) }

// NotEqual returns t != u (see Equal).
func (t *Tensor) NotEqual(u *Tensor) *Tensor { return binary(neOp, t, u) }

// Less returns t < u (see Equal).
func (t *Tensor) Less(u *Tensor) *Tensor { return binary(ltOp, t, u) }

// LessEqual returns t <= u (see Equal).
func (t *Tensor) LessEqual(u *Tensor) *Tensor { return binary(leOp, t, u) }

// Greater returns t > u (see Equal).
func (t *Tensor) Greater(u *Tensor) *Tensor { return binary(gtOp, t, u) }

// GreaterEqual returns t >= u (see Equal).
func (t *Tensor) GreaterEqual(u *Tensor) *Tensor { return binary(geOp, t, u) }

// LogicalAnd returns where both t and u are nonzero (bool).
func (t *Tensor) LogicalAnd(u *Tensor) *Tensor { return binary(andOp, t, u) }

// LogicalOr returns where t or u is nonzero (bool).
func (t *Tensor) LogicalOr(u *Tensor) *Tensor { return binary(orOp, t, u) }

// Scalar returns a 0-dimensional float64 constant. Used as an operand of a
// binary op it is folded into the op's args (t.Add(Scalar(1)) reads only
// t) and is weak: it takes t's dtype, as a Python number in NumPy.
func Scalar(x float64) *Tensor { return Full(nil, x) }

// ScalarInt returns a 0-dimensional int64 constant (see Scalar); with an
// int64 tensor the result stays int64.
func ScalarInt(x int64) *Tensor { return FullInt(nil, x) }

// AsType converts t to dt, as NumPy's astype: float → int64 truncates
// toward zero (NaN and out-of-range values give an unspecified int64),
// float64 → float32 rounds, anything nonzero (NaN too) is true, and bools
// are 0 and 1.
func (t *Tensor) AsType(dt dag.DType) *Tensor {
	if t == nil {
		return failed(errNilReceiver("AsType"))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	if !numeric(dt) {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: cannot convert to %s; use float64, float32, int64 or bool", astypeName, dt))
	}
	return derive(astypeName, astypeArgs{DType: dt.String()}, t.shape, dt, t)
}

// unaryTypes returns the dtype op gives on in, and the dtype it reads in as.
func unaryTypes(op unaryOp, in dag.DType) (dt, load dag.DType, err error) {
	switch op.res {
	case resFloat:
		dt = unaryFloat(in)
		return dt, dt, nil
	case resCompare:
		return dag.Bool, in, nil
	case resLogical:
		return dag.Bool, dag.Bool, nil
	}
	if op.code == opNeg && in == dag.Bool {
		return 0, 0, dag.Errorf(dag.KindInvalidArgument, "the negative of a bool is not supported, as in NumPy; use logical_not")
	}
	return in, in, nil
}

// binaryTypes returns the dtype op gives on operands of dtypes a and b (b
// a weak scalar when weak, an int one when weakInt), the dtype both are
// read in, and the code to run (two bools add as logical or).
func binaryTypes(op binaryOp, a, b dag.DType, weak, weakInt bool) (dt, load dag.DType, code opcode, err error) {
	p := promote(a, b)
	if weak {
		p = promoteWeak(a, weakInt)
	}
	code = op.code
	switch op.res {
	case resFloat:
		return floatResult(p), floatResult(p), code, nil
	case resCompare:
		return dag.Bool, p, code, nil
	case resLogical:
		return dag.Bool, dag.Bool, code, nil
	}
	if p == dag.Bool {
		switch code {
		case opAdd:
			code = opMax // or, on 0 and 1
		case opSub:
			return 0, 0, 0, dag.Errorf(dag.KindInvalidArgument, "subtracting bools is not supported, as in NumPy; use logical_xor (not_equal)")
		}
	}
	return p, p, code, nil
}

func unary(op unaryOp, t *Tensor) *Tensor {
	if t == nil {
		return failed(errNilReceiver(op.name[len("tensor."):]))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	dt, _, err := unaryTypes(op, t.dtype)
	if err != nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: %w", op.name, err))
	}
	return derive(op.name, nil, t.shape, dt, t)
}

func binary(op binaryOp, t, u *Tensor) *Tensor {
	if t == nil || u == nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: an operand is nil; build tensors with a constructor such as tensor.Ones", op.name))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	if err := u.Err(); err != nil {
		return failed(err)
	}
	shape, err := broadcastShapes(t.shape, u.shape)
	if err != nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: %v", op.name, err))
	}
	var a elemArgs
	var ins []*Tensor
	switch {
	case u.constant != nil:
		a = scalarArgs(sideRight, u)
		ins = []*Tensor{t}
	case t.constant != nil:
		a = scalarArgs(sideLeft, t)
		ins = []*Tensor{u}
	default:
		ins = []*Tensor{t, u}
	}
	var dt dag.DType
	if a.Side == sideNone {
		dt, _, _, err = binaryTypes(op, t.dtype, u.dtype, false, false)
	} else {
		dt, _, _, err = binaryTypes(op, ins[0].dtype, 0, true, a.IsInt)
	}
	if err != nil {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: %w", op.name, err))
	}
	var args any
	if a.Side != sideNone {
		args = a
	}
	return derive(op.name, args, shape, dt, ins...)
}

// scalarArgs folds the 0-dimensional constant c into a binary op's args.
func scalarArgs(side int8, c *Tensor) elemArgs {
	a := elemArgs{Side: side}
	if lane(c.dtype) == dag.Int64 {
		a.IsInt, a.Int = true, c.constant.Int
	} else {
		a.Value = c.constant.Value
		if c.dtype == dag.Float32 {
			a.Value = float64(float32(a.Value))
		}
	}
	return a
}

func (op unaryOp) Name() string                               { return op.name }
func (op unaryOp) NewArgs() any                               { return new(struct{}) }
func (op unaryOp) Exec(kc *dag.KernelCall) error              { return execOne(op, kc) }
func (op unaryOp) FuseChain(steps []dag.ChainStep) dag.Kernel { return fuseChain(steps) }

func (op unaryOp) Tile(tc *dag.TileContext) error {
	if n := len(tc.Tileable().Inputs); n != 1 {
		return tc.Errorf("takes 1 input, has %d", n)
	}
	in, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	dt, _, err := unaryTypes(op, in)
	if err != nil {
		return tc.Errorf("%v", err)
	}
	return tileElementwise(tc, dt)
}

func (op unaryOp) compile(b *builder, k int) error {
	st, err := b.step(k, 1)
	if err != nil {
		return err
	}
	m := b.metaOf(st.Inputs[0])
	if !numeric(m.DType) {
		return errorf("%s: input has dtype %s", op.name, m.DType)
	}
	dt, load, err := unaryTypes(op, m.DType)
	if err != nil {
		return errorf("%s: %v", op.name, err)
	}
	if err := b.checkDeclared(k, dt, elements(st.Shape)); err != nil {
		return err
	}
	s := b.segFor(st.Shape)
	a, err := b.operand(s, st.Inputs[0], load)
	if err != nil {
		return err
	}
	code := op.code
	if code == opAbs && dt == dag.Bool {
		code = opCopy
	}
	return b.define(k, s, b.emit(s, inst{code: code, dt: dt, ct: load, a: a}))
}

func (op binaryOp) Name() string                               { return op.name }
func (op binaryOp) NewArgs() any                               { return new(elemArgs) }
func (op binaryOp) Exec(kc *dag.KernelCall) error              { return execOne(op, kc) }
func (op binaryOp) FuseChain(steps []dag.ChainStep) dag.Kernel { return fuseChain(steps) }

func (op binaryOp) Tile(tc *dag.TileContext) error {
	var a elemArgs
	if err := decodeNodeArgs(tc, &a); err != nil {
		return err
	}
	want := 2
	if a.Side != sideNone {
		want = 1
	}
	if a.Side < sideNone || a.Side > sideLeft {
		return tc.Errorf("scalar side %d: want 0 (none), 1 (right) or 2 (left)", a.Side)
	}
	if n := len(tc.Tileable().Inputs); n != want {
		return tc.Errorf("takes %d inputs, has %d", want, n)
	}
	d0, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	var dt dag.DType
	if want == 2 {
		d1, ierr := inputDType(tc, 1)
		if ierr != nil {
			return ierr
		}
		dt, _, _, err = binaryTypes(op, d0, d1, false, false)
	} else {
		dt, _, _, err = binaryTypes(op, d0, 0, true, a.IsInt)
	}
	if err != nil {
		return tc.Errorf("%v", err)
	}
	return tileElementwise(tc, dt)
}

func (op binaryOp) compile(b *builder, k int) error {
	a := &b.args.elem
	*a = elemArgs{}
	if err := decodeArgs(op.name, b.steps[k].Args, a); err != nil {
		return err
	}
	nin := 2
	if a.Side != sideNone {
		nin = 1
	}
	st, err := b.step(k, nin)
	if err != nil {
		return err
	}
	d0 := b.metaOf(st.Inputs[0]).DType
	d1 := d0
	if nin == 2 {
		d1 = b.metaOf(st.Inputs[1]).DType
	}
	if !numeric(d0) || !numeric(d1) {
		return errorf("%s: inputs have dtypes %s and %s", op.name, d0, d1)
	}
	dt, load, code, err := binaryTypes(op, d0, d1, nin == 1, a.IsInt)
	if err != nil {
		return errorf("%s: %v", op.name, err)
	}
	if err := b.checkDeclared(k, dt, elements(st.Shape)); err != nil {
		return err
	}
	s := b.segFor(st.Shape)
	x, err := b.operand(s, st.Inputs[0], load)
	if err != nil {
		return err
	}
	in := inst{code: code, dt: dt, ct: load, a: x, b: -1}
	switch a.Side {
	case sideNone:
		if in.b, err = b.operand(s, st.Inputs[1], load); err != nil {
			return err
		}
	case sideRight, sideLeft:
		in.form = formVS
		if a.Side == sideLeft {
			in.form = formSV
		}
		if load == dag.Bool { // a logical op: the scalar's truth value
			in.i = b2i(a.IsInt && a.Int != 0 || !a.IsInt && a.Value != 0)
		} else {
			in.f, in.i = scalarValue(load, a)
		}
	default:
		return errorf("%s: scalar side %d", op.name, a.Side)
	}
	return b.define(k, s, b.emit(s, in))
}

func (astypeOp) Name() string                               { return astypeName }
func (astypeOp) NewArgs() any                               { return new(astypeArgs) }
func (op astypeOp) Exec(kc *dag.KernelCall) error           { return execOne(op, kc) }
func (astypeOp) FuseChain(steps []dag.ChainStep) dag.Kernel { return fuseChain(steps) }

func (astypeOp) Tile(tc *dag.TileContext) error {
	if n := len(tc.Tileable().Inputs); n != 1 {
		return tc.Errorf("takes 1 input, has %d", n)
	}
	if _, err := inputDType(tc, 0); err != nil {
		return err
	}
	var a astypeArgs
	if err := decodeNodeArgs(tc, &a); err != nil {
		return err
	}
	dt, err := dag.ParseDType(a.DType)
	if err != nil || !numeric(dt) {
		return tc.Errorf("cannot convert to %q; use float64, float32, int64 or bool", a.DType)
	}
	return tileElementwise(tc, dt)
}

func (op astypeOp) compile(b *builder, k int) error {
	st, err := b.step(k, 1)
	if err != nil {
		return err
	}
	a := &b.args.astype
	*a = astypeArgs{}
	if err := decodeArgs(astypeName, st.Args, a); err != nil {
		return err
	}
	dt, err := dag.ParseDType(a.DType)
	if err != nil || !numeric(dt) {
		return errorf("%s: cannot convert to %q", astypeName, a.DType)
	}
	m := b.metaOf(st.Inputs[0])
	if !numeric(m.DType) {
		return errorf("%s: input has dtype %s", astypeName, m.DType)
	}
	if err := b.checkDeclared(k, dt, elements(st.Shape)); err != nil {
		return err
	}
	s := b.segFor(st.Shape)
	x, err := b.operand(s, st.Inputs[0], m.DType)
	if err != nil {
		return err
	}
	code := opCast
	if dt == m.DType {
		code = opCopy
	}
	return b.define(k, s, b.emit(s, inst{code: code, dt: dt, srcDT: m.DType, a: x}))
}

// tileElementwise tiles a node whose output chunk at each grid position is
// computed from the inputs' chunks at the same position (broadcast
// dimensions read their only chunk). Inputs cut differently along a
// dimension are rechunked to the splits of the input with the most chunks
// there (the first such input on a tie).
func tileElementwise(tc *dag.TileContext, dt dag.DType) error {
	n := tc.Tileable()
	k := len(n.Inputs)
	shapes, err := inputShapes(tc)
	if err != nil {
		return err
	}
	out, err := broadcastShapes(shapes...)
	if err != nil {
		return tc.Errorf("%v", err)
	}
	if err := checkNode(tc, out, dt); err != nil {
		return err
	}
	args := tc.NodeArgs()
	g0 := tc.Inputs[0]
	same := true
	for i := range k {
		if !sameShape(shapes[i], out) || !sameSplits(tc.Inputs[i].NSplits, g0.NSplits) {
			same = false
		}
	}
	if same { // the common case: no broadcasting, no rechunking
		// Chunk j reads chunk j of every input, at its index and of its
		// shape: added in one pass.
		ins := make([][]int32, k)
		for i := range k {
			ins[i] = tc.Inputs[i].Chunks
		}
		first, err := tc.AddAlike(n.Op, args, dt, g0.Chunks, ins...)
		if err != nil {
			return err
		}
		grid := &dag.Grid{NSplits: g0.NSplits, Chunks: dag.HugePages(make([]int32, len(g0.Chunks)))}
		for j := range grid.Chunks {
			grid.Chunks[j] = first + int32(j)
		}
		tc.SetGrid(grid)
		return nil
	}

	nd := len(out)
	// broadcast reports whether input i reads dimension d of the output
	// through a size-1 (or missing) dimension.
	dimOf := func(i, d int) int { return d - (nd - len(shapes[i])) }
	broadcast := func(i, d int) bool {
		e := dimOf(i, d)
		return e < 0 || shapes[i][e] == 1 && out[d] != 1
	}
	target := make([][]int64, nd)
	for d := range nd {
		for i := range k {
			if broadcast(i, d) {
				continue
			}
			if s := tc.Inputs[i].NSplits[dimOf(i, d)]; target[d] == nil || len(s) > len(target[d]) {
				target[d] = s
			}
		}
		if target[d] == nil {
			target[d] = []int64{out[d]}
		}
	}
	grids := make([]*dag.Grid, k)
	for i := range k {
		g := tc.Inputs[i]
		want := make([][]int64, len(shapes[i]))
		for e := range want {
			d := e + nd - len(shapes[i])
			if broadcast(i, d) {
				want[e] = g.NSplits[e]
			} else {
				want[e] = target[d]
			}
		}
		if !sameSplits(g.NSplits, want) {
			idt, err := inputDType(tc, i)
			if err != nil {
				return err
			}
			if g, err = rechunkGrid(tc, g, shapes[i], want, idt); err != nil {
				return err
			}
		}
		grids[i] = g
	}
	grid := &dag.Grid{NSplits: target}
	ins := make([]int32, k)
	err = forEachChunk(target, func(pos []int32, shape []int64) error {
		for i, g := range grids {
			lin := 0
			for e := range shapes[i] {
				d := e + nd - len(shapes[i])
				p := 0
				if !broadcast(i, d) {
					p = int(pos[d])
				}
				lin = lin*len(g.NSplits[e]) + p
			}
			ins[i] = g.Chunks[lin]
		}
		c, err := tc.AddChunk(n.Op, args, dt, ins, pos, shape)
		grid.Chunks = append(grid.Chunks, c)
		return err
	})
	if err != nil {
		return err
	}
	tc.SetGrid(grid)
	return nil
}
