package tensor

import (
	"math/rand/v2"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

var codecUnmarshal = codec.Unmarshal

func init() {
	dag.MustRegister(fullOp{})
	dag.MustRegister(randOp{})
}

type fullArgs struct {
	Value float64 `cbor:"1,keyasint"`
}

// Full returns a tensor of the given shape filled with v.
func Full(shape []int64, v float64, opts ...Option) *Tensor {
	return newSource(fullName, shape, fullArgs{Value: v}, opts)
}

// Ones returns a tensor of ones.
func Ones(shape []int64, opts ...Option) *Tensor { return Full(shape, 1, opts...) }

// Zeros returns a tensor of zeros.
func Zeros(shape []int64, opts ...Option) *Tensor { return Full(shape, 0, opts...) }

const fullName = "tensor.full"

type fullOp struct{}

func (fullOp) Name() string                   { return fullName }
func (fullOp) Tile(tc *dag.TileContext) error { return tileSource(tc) }

func (fullOp) Exec(kc *dag.KernelCall) error {
	var a fullArgs
	if err := decodeArgs(fullName, kc.Args, &a); err != nil {
		return err
	}
	out, err := allocFloat64(kc, 0, kc.Shape)
	if err != nil {
		return err
	}
	for i := range out {
		out[i] = a.Value
	}
	return nil
}

type randArgs struct {
	Seed uint64 `cbor:"1,keyasint"`
}

// Rand returns a tensor of uniform values in [0, 1). Without Seed, the seed
// is chosen when the tensor is built, so the same tensor always has the same
// values wherever and however often it runs.
func Rand(shape []int64, opts ...Option) *Tensor {
	var o options
	for _, f := range opts {
		f(&o)
	}
	seed := rand.Uint64()
	if o.seed != nil {
		seed = *o.seed
	}
	return newSource(randName, shape, randArgs{Seed: seed}, opts)
}

const randName = "tensor.rand"

type randOp struct{}

func (randOp) Name() string                   { return randName }
func (randOp) Tile(tc *dag.TileContext) error { return tileSource(tc) }

func (randOp) Exec(kc *dag.KernelCall) error {
	var a randArgs
	if err := decodeArgs(randName, kc.Args, &a); err != nil {
		return err
	}
	out, err := allocFloat64(kc, 0, kc.Shape)
	if err != nil {
		return err
	}
	s := chunkSeed(a.Seed, kc.Index)
	r := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	for i := range out {
		if i&(1<<16-1) == 0 {
			if err := kc.Interrupted(); err != nil {
				return err
			}
		}
		out[i] = r.Float64()
	}
	return nil
}

// chunkSeed mixes a tensor's seed with a chunk's grid index (splitmix64).
func chunkSeed(seed uint64, idx []int32) uint64 {
	h := seed
	for _, i := range idx {
		h = splitmix(h ^ uint64(uint32(i)))
	}
	return splitmix(h)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// allocFloat64 allocates output i as float64s of the given shape.
func allocFloat64(kc *dag.KernelCall, i int, shape []int64) ([]float64, error) {
	m := dag.Meta{DType: dag.Float64, Shape: shape}
	b, err := kc.Output(i, m, int(m.Bytes()))
	if err != nil {
		return nil, err
	}
	return dag.BytesAsFloat64s(b), nil
}
