package fn

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/fxamacker/cbor/v2"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

const (
	callName = "fn.call"
	outName  = "fn.out"
	prefix   = "fn:"
)

func init() {
	dag.MustRegister(callOp{})
	dag.MustRegister(outOp{})
	prev := dag.UnknownOp
	dag.UnknownOp = func(id dag.OpID, args []byte) string {
		var a callArgs
		if codec.Unmarshal(args, &a) == nil && a.Name != "" && dag.OpIDOf(prefix+a.Name) == id {
			return fmt.Sprintf("function %q", a.Name)
		}
		if prev != nil {
			return prev(id, args)
		}
		return ""
	}
}

var (
	ctxType = reflect.TypeFor[context.Context]()
	errType = reflect.TypeFor[error]()
)

// Func is a registered function. It is safe for concurrent use.
type Func struct {
	name    string
	op      dag.OpID
	fv      reflect.Value
	withCtx bool
	params  []reflect.Type
	results []reflect.Type // without the error
	withErr bool
}

// Name returns the name the function was registered under.
func (f *Func) Name() string { return f.name }

var (
	mu     sync.Mutex
	byName = map[string]*Func{}
)

// Register registers f under name. f must be a func whose parameters may
// start with a context.Context, whose results may end with an error, and
// which has at least one other result; every other parameter and result is
// encoded with CBOR, so it must be plain data (numbers, strings, slices,
// maps, structs of those). Registering the same name twice, or a name whose
// op ID collides with another op, is an error.
func Register(name string, f any) (*Func, error) {
	if name == "" || strings.ContainsAny(name, " \t\n") {
		return nil, fmt.Errorf("fn.Register(%q): give a non-empty name without spaces, like \"mypkg.add\"", name)
	}
	fv := reflect.ValueOf(f)
	if !fv.IsValid() || fv.Kind() != reflect.Func || fv.IsNil() {
		return nil, fmt.Errorf("fn.Register(%q): got %T, want a function", name, f)
	}
	ft := fv.Type()
	if ft.IsVariadic() {
		return nil, fmt.Errorf("fn.Register(%q): %v is variadic; take a slice instead", name, ft)
	}
	fn := &Func{name: name, op: dag.OpIDOf(prefix + name), fv: fv}
	for i := 0; i < ft.NumIn(); i++ {
		t := ft.In(i)
		if i == 0 && t == ctxType {
			fn.withCtx = true
			continue
		}
		if err := encodable(t); err != nil {
			return nil, fmt.Errorf("fn.Register(%q): parameter %d of %v: %w", name, i+1, ft, err)
		}
		fn.params = append(fn.params, t)
	}
	for i := 0; i < ft.NumOut(); i++ {
		t := ft.Out(i)
		if i == ft.NumOut()-1 && t == errType {
			fn.withErr = true
			continue
		}
		if err := encodable(t); err != nil {
			return nil, fmt.Errorf("fn.Register(%q): result %d of %v: %w", name, i+1, ft, err)
		}
		fn.results = append(fn.results, t)
	}
	if len(fn.results) == 0 {
		return nil, fmt.Errorf("fn.Register(%q): %v returns no value; a task must return at least one result (plus an optional error)", name, ft)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := byName[name]; ok {
		return nil, fmt.Errorf("fn.Register(%q): a function is already registered under this name", name)
	}
	if err := dag.Ops.Register(kernel{fn}); err != nil {
		return nil, fmt.Errorf("fn.Register(%q): %w", name, err)
	}
	byName[name] = fn
	return fn, nil
}

// MustRegister is Register for init functions: it panics on error.
func MustRegister(name string, f any) *Func {
	fn, err := Register(name, f)
	if err != nil {
		panic(err)
	}
	return fn
}

// Lookup returns the function registered under name.
func Lookup(name string) (*Func, bool) {
	mu.Lock()
	defer mu.Unlock()
	f, ok := byName[name]
	return f, ok
}

// encodable reports whether values of t can cross the wire as CBOR.
func encodable(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Interface:
		if t.Kind() == reflect.Interface && t.NumMethod() == 0 {
			return nil // any: fine if the value itself is plain data
		}
		return fmt.Errorf("type %v cannot be encoded with CBOR; use plain data (numbers, strings, slices, maps, structs)", t)
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Map {
			if err := encodable(t.Key()); err != nil {
				return err
			}
		}
		return encodable(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).IsExported() {
				if err := encodable(t.Field(i).Type); err != nil {
					return fmt.Errorf("field %s: %w", t.Field(i).Name, err)
				}
			}
		}
	}
	return nil
}

// callArgs are the args of an fn.call node and of its chunk.
type callArgs struct {
	Name   string  `cbor:"1,keyasint"`
	Params []param `cbor:"2,keyasint"`
	// Results is the number of results; above 1 the call's value is a CBOR
	// array of them, and fn.out nodes pick them apart.
	Results int `cbor:"3,keyasint"`
}

// param is one argument: a constant, or the k-th input of the node.
type param struct {
	Const cbor.RawMessage `cbor:"1,keyasint,omitempty"`
	Input int             `cbor:"2,keyasint"` // -1 for a constant
}

type outArgs struct {
	Index int `cbor:"1,keyasint"`
}
