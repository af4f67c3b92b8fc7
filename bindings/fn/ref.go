package fn

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// node is one call (or one result of a multi-result call) in a DAG.
type node struct {
	op     dag.OpID
	args   []byte
	inputs []*node
	typ    reflect.Type
	err    error
}

// Ref is a value of type T that a DAG of calls produces: a call's result,
// or a constant made with Value. The zero Ref is invalid. Refs are
// immutable and safe to share.
type Ref[T any] struct {
	n     *node
	konst []byte // CBOR of a constant
	isVal bool
	err   error
}

// Value makes a constant argument. It fails (in the Ref, reported when the
// DAG is built) if v cannot be encoded with CBOR.
func Value[T any](v T) Ref[T] {
	b, err := codec.Marshal(v)
	if err != nil {
		return Ref[T]{err: fmt.Errorf("fn.Value: cannot encode %T with CBOR (%v); pass plain data: numbers, strings, slices, maps, structs", v, err)}
	}
	return Ref[T]{konst: b, isVal: true}
}

// Err returns the first error made while building r.
func (r Ref[T]) Err() error {
	switch {
	case r.err != nil:
		return r.err
	case r.n == nil && !r.isVal:
		return errors.New("fn: empty Ref; make values with fn.Value and results with a call")
	case r.n != nil:
		return r.n.err
	}
	return nil
}

// TileableGraph makes r runnable with a phobos client (Run, Submit).
func (r Ref[T]) TileableGraph() (*dag.TileableGraph, error) { return Graph(r) }

// Arg is a Ref of any type, as calls take them.
type Arg interface {
	refNode() (*node, []byte, reflect.Type, error)
}

func (r Ref[T]) refNode() (*node, []byte, reflect.Type, error) {
	return r.n, r.konst, reflect.TypeFor[T](), r.Err()
}

// build makes the call node of f on args, checking the arguments against
// f's signature.
func (f *Func) build(args []any) *node {
	n := &node{op: dag.OpIDOf(callName)}
	if f == nil {
		n.err = errors.New("fn: call of a nil *Func; register the function with fn.Register")
		return n
	}
	if len(args) != len(f.params) {
		n.err = fmt.Errorf("fn: %s takes %d arguments, called with %d", f.name, len(f.params), len(args))
		return n
	}
	ca := callArgs{Name: f.name, Results: len(f.results)}
	for i, a := range args {
		ref, ok := a.(Arg)
		if !ok {
			// A plain value: a constant, checked by decoding it the way the
			// raylet will.
			konst, err := codec.Marshal(a)
			if err == nil {
				err = codec.Unmarshal(konst, reflect.New(f.params[i]).Interface())
			}
			if err != nil {
				n.err = fmt.Errorf("fn: argument %d of %s: a %T cannot be passed as a %v (%v); pass plain data that decodes as the parameter's type", i+1, f.name, a, f.params[i], err)
				return n
			}
			ref = Ref[any]{konst: konst, isVal: true}
		}
		in, konst, t, err := ref.refNode()
		if err != nil {
			n.err = fmt.Errorf("fn: argument %d of %s: %w", i+1, f.name, err)
			return n
		}
		if t != f.params[i] && t != reflect.TypeFor[any]() {
			n.err = fmt.Errorf("fn: argument %d of %s is a %v, the function takes a %v", i+1, f.name, t, f.params[i])
			return n
		}
		if in != nil {
			if in.typ != nil && in.typ != f.params[i] {
				n.err = fmt.Errorf("fn: argument %d of %s is the result of a call giving %v, the function takes a %v", i+1, f.name, in.typ, f.params[i])
				return n
			}
			ca.Params = append(ca.Params, param{Input: len(n.inputs)})
			n.inputs = append(n.inputs, in)
		} else {
			ca.Params = append(ca.Params, param{Const: konst, Input: -1})
		}
	}
	b, err := codec.Marshal(ca)
	if err != nil {
		n.err = fmt.Errorf("fn: encode call of %s: %w", f.name, err)
		return n
	}
	n.args = b
	if len(f.results) == 1 {
		n.typ = f.results[0]
	}
	return n
}

// out picks result i of a multi-result call.
func out(call *node, i int, t reflect.Type) *node {
	n := &node{op: dag.OpIDOf(outName), inputs: []*node{call}, typ: t, err: call.err}
	n.args, _ = codec.Marshal(outArgs{Index: i})
	return n
}

// Call calls f (registered with Register) on args: Refs (results of other
// calls, or fn.Value constants) or plain values. R must be f's result type.
// Mismatches are reported when the DAG is built.
func Call[R any](f *Func, args ...any) Ref[R] {
	n := f.build(args)
	if n.err == nil && len(f.results) == 1 && f.results[0] != reflect.TypeFor[R]() && reflect.TypeFor[R]() != reflect.TypeFor[any]() {
		n.err = fmt.Errorf("fn: %s returns %v, used as %v", f.name, f.results[0], reflect.TypeFor[R]())
	}
	if n.err == nil && len(f.results) != 1 {
		n.err = fmt.Errorf("fn: %s returns %d results; use Call2", f.name, len(f.results))
	}
	return Ref[R]{n: n}
}

// Call2 calls a function of two results.
func Call2[R1, R2 any](f *Func, args ...any) (Ref[R1], Ref[R2]) {
	n := f.build(args)
	if n.err == nil && len(f.results) != 2 {
		n.err = fmt.Errorf("fn: %s returns %d results, not 2", f.name, len(f.results))
	}
	if n.err == nil && (f.results[0] != reflect.TypeFor[R1]() || f.results[1] != reflect.TypeFor[R2]()) {
		n.err = fmt.Errorf("fn: %s returns (%v, %v), used as (%v, %v)", f.name, f.results[0], f.results[1], reflect.TypeFor[R1](), reflect.TypeFor[R2]())
	}
	if n.err != nil {
		return Ref[R1]{n: n}, Ref[R2]{n: n}
	}
	return Ref[R1]{n: out(n, 0, f.results[0])}, Ref[R2]{n: out(n, 1, f.results[1])}
}

// Graph returns the tileable graph that computes refs, in order.
func Graph[T any](refs ...Ref[T]) (*dag.TileableGraph, error) {
	g := &dag.TileableGraph{}
	index := map[*node]int32{}
	var visit func(n *node) (int32, error)
	visit = func(n *node) (int32, error) {
		if n.err != nil {
			return -1, n.err
		}
		if i, ok := index[n]; ok {
			return i, nil
		}
		ins := make([]int32, len(n.inputs))
		for k, in := range n.inputs {
			i, err := visit(in)
			if err != nil {
				return -1, err
			}
			ins[k] = i
		}
		g.Nodes = append(g.Nodes, dag.TileableNode{Op: n.op, Args: n.args, Inputs: ins, DType: dag.Bytes})
		index[n] = int32(len(g.Nodes) - 1)
		return index[n], nil
	}
	if len(refs) == 0 {
		return nil, errors.New("fn.Graph: no refs given")
	}
	for _, r := range refs {
		if err := r.Err(); err != nil {
			return nil, err
		}
		if r.n == nil {
			return nil, errors.New("fn.Graph: a constant made with fn.Value is not a call; pass it to a function")
		}
		i, err := visit(r.n)
		if err != nil {
			return nil, err
		}
		g.Outputs = append(g.Outputs, i)
	}
	return g, nil
}

// Decode decodes a result fetched by a driver into a T.
func Decode[T any](v *phobos.Value) (T, error) {
	var out T
	if v == nil {
		return out, errors.New("fn.Decode: nil value")
	}
	if v.Meta.DType != dag.Bytes {
		return out, fmt.Errorf("fn.Decode: the value is a %v array, not the result of a function call", v.Meta.DType)
	}
	if err := codec.Unmarshal(v.Data, &out); err != nil {
		return out, fmt.Errorf("fn.Decode: decode into %T: %w", out, err)
	}
	return out, nil
}

// Get runs the DAG that computes r on c and returns its value.
func Get[T any](ctx context.Context, c *phobos.Client, r Ref[T]) (T, error) {
	var zero T
	v, err := c.Run(ctx, r)
	if err != nil {
		return zero, err
	}
	return Decode[T](v)
}
