package fn

import "context"

// Func1 is a registered function of one argument, called with typed Refs.
type Func1[A, R any] struct{ F *Func }

// Func2 is a registered function of two arguments.
type Func2[A, B, R any] struct{ F *Func }

// Func3 is a registered function of three arguments.
type Func3[A, B, C, R any] struct{ F *Func }

// Register1 registers f under name (see Register); it panics on error, as
// it is meant for package-level variables.
func Register1[A, R any](name string, f func(context.Context, A) (R, error)) Func1[A, R] {
	return Func1[A, R]{MustRegister(name, f)}
}

// Register2 registers a function of two arguments.
func Register2[A, B, R any](name string, f func(context.Context, A, B) (R, error)) Func2[A, B, R] {
	return Func2[A, B, R]{MustRegister(name, f)}
}

// Register3 registers a function of three arguments.
func Register3[A, B, C, R any](name string, f func(context.Context, A, B, C) (R, error)) Func3[A, B, C, R] {
	return Func3[A, B, C, R]{MustRegister(name, f)}
}

// Call calls the function.
func (f Func1[A, R]) Call(a Ref[A]) Ref[R] { return Ref[R]{n: f.F.build([]any{a})} }

// Call calls the function.
func (f Func2[A, B, R]) Call(a Ref[A], b Ref[B]) Ref[R] { return Ref[R]{n: f.F.build([]any{a, b})} }

// Call calls the function.
func (f Func3[A, B, C, R]) Call(a Ref[A], b Ref[B], c Ref[C]) Ref[R] {
	return Ref[R]{n: f.F.build([]any{a, b, c})}
}
