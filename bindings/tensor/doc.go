// Package tensor is phobos's Mars-like tensor library: what user programs
// build graphs with (Rand, Ones, Add, Sum, …), the tiling rule that splits
// each op into chunks, and the kernel that computes one chunk.
//
// Building a tensor computes nothing; it records an op, its args and its
// inputs. A driver submits the graph of a tensor (Graph) and the cluster
// lowers, schedules and runs it. Errors in building (a chunk size of 0,
// mismatched shapes) are kept in the tensor and reported by Graph, so
// expressions chain without an error check at every step.
//
// Every op registers in dag.Ops under "tensor.<name>" from init, so any
// process that imports this package (head, raylet, driver) knows them.
package tensor
