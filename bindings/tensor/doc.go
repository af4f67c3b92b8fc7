// Package tensor is phobos's Mars-like tensor library: what user programs
// build graphs with, the tiling rule that splits each op into chunks, and
// the kernels that compute one chunk.
//
// Building a tensor computes nothing; it records an op, its args and its
// inputs. A driver submits the graph of a tensor (Graph) and the cluster
// lowers, schedules and runs it. Errors in building (a chunk size of 0,
// shapes that do not broadcast, an axis out of range, a slice out of
// bounds) are kept in the tensor and reported by Graph, so expressions chain
// without an error check at every step. Graphs that bypass the builder (a
// graph file) are checked again when they are tiled, and every tiling error
// names the node and the problem.
//
// # Ops
//
//   - creation: Rand (seeded per chunk), Full, FullInt, Ones, Zeros, Scalar,
//     ScalarInt, Arange, ArangeInt, FromSlice, FromInts (each chunk's args
//     carry only that chunk's block of the data);
//   - elementwise: Neg, Abs, Exp, Log, Sqrt, AsType; Add, Sub, Mul, Div, Pow,
//     Maximum, Minimum with NumPy broadcasting; a 0-dimensional constant
//     operand (Scalar) is folded into the op's args;
//   - reductions: Sum, Prod, Min, Max, Mean over all elements or Axis(...),
//     with KeepDims, as tree reductions combining Combine(n) partials per
//     node (DefaultCombine = 4);
//   - Matmul (2-D, blocked), Transpose (any permutation), Slice
//     (start:stop:step per dimension, negative steps too), Rechunk.
//
// Elements are float64 or int64 (dag.Float64, dag.Int64); arithmetic on two
// int64 tensors stays int64 and exact (wrapping on overflow), Div, Pow, Exp,
// Log, Sqrt and Mean give float64, and mixed operands give float64.
//
// # Chunks
//
// Sources are cut by their chunk size: a dimension of size n in chunks of c
// splits into c,…,c,n mod c (Chunks), or by explicit per-dimension lists
// (ChunkSplits). Other ops derive their chunks from their inputs'. Inputs
// of an elementwise op cut differently along a dimension are rechunked to
// the splits of the input with the most chunks there; Matmul rechunks its
// right operand's rows to its left operand's columns. Ops after a
// data-dependent op (a mask selection, Unique) read their inputs' sizes from
// the chunk grids that lowering fills in, and ask for them (a MetaNeeder
// error) while they are unknown.
//
// # Kernels
//
// Elementwise ops, creation ops and first-level reductions share one
// engine (engine.go): it runs a step list block by block (2,048 elements at
// a time) through pooled buffers, in loops without calls, interface
// dispatch or allocation per element. Every one of those ops is a
// dag.ChainFuser: a fused subtask such as [ADD, SUM] or [RAND, ADD, MUL]
// runs in one pass without writing its intermediates, and gives the same
// bytes as running the ops one by one, because an unfused op is the same
// engine running a one-step list over the same blocks. Matmul packs its
// operands into panels for a register-blocked micro-kernel (gemm.go); built
// with GOEXPERIMENT=simd on amd64 it uses AVX-512 or AVX2 micro-kernels.
//
// Every op registers in dag.Ops under "tensor.<name>" from init, so any
// process that imports this package (head, raylet, driver) knows them, and
// implements dag.ArgsTyper, so graph files can give its args as JSON.
//
// Tensors are immutable and safe to share between goroutines. Kernels keep
// nothing between calls except pooled scratch memory, and may run
// concurrently.
package tensor
