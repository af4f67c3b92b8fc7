package tensor

import (
	"github.com/phobos-project/phobos/dag"
)

// elemArgs are the args of the elementwise ops. A binary op whose operand
// was a 0-dimensional constant (Scalar, ScalarInt) carries it here instead
// of reading a chunk, so that (t+1)*2 stays a chain that fusion can join.
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

// unaryOp is an elementwise op of one tensor.
type unaryOp struct {
	name  string
	code  opcode
	float bool // the result is float64 whatever the input
}

// binaryOp is an elementwise op of two tensors, broadcast as in NumPy.
type binaryOp struct {
	name  string
	code  opcode
	float bool
}

// astypeOp converts between float64 and int64.
type astypeOp struct{}

type astypeArgs struct {
	DType string `cbor:"1,keyasint"` // "float64" or "int64"
}

var (
	negOp  = unaryOp{"tensor.neg", opNeg, false}
	absOp  = unaryOp{"tensor.abs", opAbs, false}
	expOp  = unaryOp{"tensor.exp", opExp, true}
	logOp  = unaryOp{"tensor.log", opLog, true}
	sqrtOp = unaryOp{"tensor.sqrt", opSqrt, true}

	addOp  = binaryOp{"tensor.add", opAdd, false}
	subOp  = binaryOp{"tensor.sub", opSub, false}
	mulOp  = binaryOp{"tensor.mul", opMul, false}
	divOp  = binaryOp{"tensor.div", opDiv, true}
	powOp  = binaryOp{"tensor.pow", opPow, true}
	maxOp2 = binaryOp{"tensor.maximum", opMax, false}
	minOp2 = binaryOp{"tensor.minimum", opMin, false}
)

const astypeName = "tensor.astype"

func init() {
	for _, op := range []unaryOp{negOp, absOp, expOp, logOp, sqrtOp} {
		dag.MustRegister(op)
	}
	for _, op := range []binaryOp{addOp, subOp, mulOp, divOp, powOp, maxOp2, minOp2} {
		dag.MustRegister(op)
	}
	dag.MustRegister(astypeOp{})
}

// Neg returns -t.
func (t *Tensor) Neg() *Tensor { return unary(negOp, t) }

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor { return unary(absOp, t) }

// Exp returns e**t (float64).
func (t *Tensor) Exp() *Tensor { return unary(expOp, t) }

// Log returns the natural logarithm of t (float64; NaN below 0, -Inf at 0).
func (t *Tensor) Log() *Tensor { return unary(logOp, t) }

// Sqrt returns the square root of t (float64; NaN below 0).
func (t *Tensor) Sqrt() *Tensor { return unary(sqrtOp, t) }

// Add returns t + u elementwise, broadcasting as NumPy does. Integer
// arithmetic wraps around on overflow. The result is int64 when both
// operands are, else float64.
func (t *Tensor) Add(u *Tensor) *Tensor { return binary(addOp, t, u) }

// Sub returns t - u (see Add).
func (t *Tensor) Sub(u *Tensor) *Tensor { return binary(subOp, t, u) }

// Mul returns t * u (see Add).
func (t *Tensor) Mul(u *Tensor) *Tensor { return binary(mulOp, t, u) }

// Div returns t / u, always float64 (true division, as NumPy's /).
func (t *Tensor) Div(u *Tensor) *Tensor { return binary(divOp, t, u) }

// Pow returns t ** u, always float64 (math.Pow; integer operands are
// converted, which is exact while the result stays below 2**53).
func (t *Tensor) Pow(u *Tensor) *Tensor { return binary(powOp, t, u) }

// Maximum returns the larger of t and u elementwise; NaN wins.
func (t *Tensor) Maximum(u *Tensor) *Tensor { return binary(maxOp2, t, u) }

// Minimum returns the smaller of t and u elementwise; NaN wins.
func (t *Tensor) Minimum(u *Tensor) *Tensor { return binary(minOp2, t, u) }

// Scalar returns a 0-dimensional float64 constant. Used as an operand of a
// binary op it is folded into the op's args: t.Add(Scalar(1)) reads only t.
func Scalar(x float64) *Tensor { return Full(nil, x) }

// ScalarInt returns a 0-dimensional int64 constant (see Scalar); with an
// int64 tensor the result stays int64.
func ScalarInt(x int64) *Tensor { return FullInt(nil, x) }

// AsType converts t to dt (dag.Float64 or dag.Int64). float64 → int64
// truncates toward zero; NaN and out-of-range values give an unspecified
// int64.
func (t *Tensor) AsType(dt dag.DType) *Tensor {
	if t == nil {
		return failed(errNilReceiver("AsType"))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	if !numeric(dt) {
		return failed(dag.Errorf(dag.KindInvalidArgument, "%s: cannot convert to %s; use float64 or int64", astypeName, dt))
	}
	return derive(astypeName, astypeArgs{DType: dt.String()}, t.shape, dt, t)
}

func unary(op unaryOp, t *Tensor) *Tensor {
	if t == nil {
		return failed(errNilReceiver(op.name[len("tensor."):]))
	}
	if err := t.Err(); err != nil {
		return failed(err)
	}
	dt := t.dtype
	if op.float {
		dt = dag.Float64
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
	dt := promote(t.dtype, u.dtype)
	if op.float {
		dt = dag.Float64
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
	var args any
	if a.Side != sideNone {
		args = a
	}
	return derive(op.name, args, shape, dt, ins...)
}

func scalarArgs(side int8, c *Tensor) elemArgs {
	a := elemArgs{Side: side}
	if c.dtype == dag.Int64 {
		a.IsInt, a.Int = true, c.constant.Int
	} else {
		a.Value = c.constant.Value
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
	dt, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	if op.float {
		dt = dag.Float64
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
	dt := m.DType
	if op.float {
		dt = dag.Float64
	}
	if err := b.checkDeclared(k, dt, elements(st.Shape)); err != nil {
		return err
	}
	s := b.segFor(st.Shape)
	a, err := b.operand(s, st.Inputs[0], dt)
	if err != nil {
		return err
	}
	return b.define(k, s, b.emit(s, inst{code: op.code, dt: dt, a: a}))
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
	dt, err := inputDType(tc, 0)
	if err != nil {
		return err
	}
	if want == 2 {
		d1, err := inputDType(tc, 1)
		if err != nil {
			return err
		}
		dt = promote(dt, d1)
	} else if !a.IsInt {
		dt = dag.Float64
	}
	if op.float {
		dt = dag.Float64
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
	m0 := b.metaOf(st.Inputs[0])
	d1 := dag.Float64
	if nin == 2 {
		d1 = b.metaOf(st.Inputs[1]).DType
	} else if a.IsInt {
		d1 = dag.Int64
	}
	if !numeric(m0.DType) || !numeric(d1) {
		return errorf("%s: inputs have dtypes %s and %s", op.name, m0.DType, d1)
	}
	dt := promote(m0.DType, d1)
	if op.float {
		dt = dag.Float64
	}
	if err := b.checkDeclared(k, dt, elements(st.Shape)); err != nil {
		return err
	}
	s := b.segFor(st.Shape)
	x, err := b.operand(s, st.Inputs[0], dt)
	if err != nil {
		return err
	}
	in := inst{code: op.code, dt: dt, a: x, b: -1}
	switch a.Side {
	case sideNone:
		if in.b, err = b.operand(s, st.Inputs[1], dt); err != nil {
			return err
		}
	case sideRight, sideLeft:
		in.form = formVS
		if a.Side == sideLeft {
			in.form = formSV
		}
		if dt == dag.Int64 {
			in.i = a.Int
		} else if a.IsInt {
			in.f = float64(a.Int)
		} else {
			in.f = a.Value
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
		return tc.Errorf("cannot convert to %q; use float64 or int64", a.DType)
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
	return b.define(k, s, b.emit(s, inst{code: code, dt: dt, a: x}))
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
		grid := &dag.Grid{NSplits: g0.NSplits, Chunks: make([]int32, len(g0.Chunks))}
		var in [8]int32
		for j, src := range g0.Chunks {
			for i := range k {
				in[i] = tc.Inputs[i].Chunks[j]
			}
			c, err := tc.AddChunk(n.Op, args, dt, in[:k], tc.Chunks.Index(src), tc.Chunks.Shape(src))
			if err != nil {
				return err
			}
			grid.Chunks[j] = c
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
