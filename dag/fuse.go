package dag

// ChainStep is one op of a fused subtask, as the raylet offers it to a
// ChainFuser.
type ChainStep struct {
	Op   OpID
	Args []byte
	// Inputs refer to earlier steps (k >= 0) or to the subtask's external
	// inputs (-(k+1) is external input k).
	Inputs []int32
	Index  []int32
	Shape  []int64
	DType  DType
	// Output is the step's output index in the subtask when its value leaves
	// the subtask, or -1.
	Output int32
}

// ChainFuser is an op that can run a whole fused subtask in one pass over
// the data (for example an elementwise chain ending in a reduction), instead
// of one kernel per op with an intermediate buffer between each. The raylet
// offers every subtask to the ChainFuser of its first op (if it has one).
//
// FuseChain returns nil when it cannot run these steps; the raylet then runs
// them one by one. A returned kernel is called with KernelCall.Inputs set to
// the subtask's external inputs and must allocate, with KernelCall.Output,
// output k for every step whose Output is k. FuseChain must be cheap and
// deterministic: the fused result must equal the step-by-step result.
type ChainFuser interface {
	Op
	FuseChain(steps []ChainStep) Kernel
}

// ArgsTyper is an op whose args are a Go struct. NewArgs returns a pointer
// to a zero value of it; graph files use it to turn an op's JSON args into
// CBOR (JSON field names match the struct's field names, case-insensitively)
// and back.
type ArgsTyper interface {
	Op
	NewArgs() any
}
