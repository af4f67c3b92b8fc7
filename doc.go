// Package phobos is the driver API of phobos, a distributed task runtime in
// the style of Ray that carries out the distributed-execution design of Mars.
//
// A program connects to a running cluster with Connect, or starts an
// embedded one with Local (a head and raylets inside the process, talking
// over real loopback TCP, so the embedded path is the distributed path). It
// builds a graph, for example with package bindings/tensor, and runs it:
//
//	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2})
//	if err != nil { ... }
//	defer c.Close()
//	a := tensor.Rand([]int64{1e7}, tensor.Chunks(1e5))
//	b := tensor.Rand([]int64{1e7}, tensor.Chunks(1e5))
//	v, err := c.Run(ctx, a.Add(b).Sum())
//	fmt.Println(v.Float64())
//
// Errors keep their kind across the wire: errors.Is(err, phobos.ErrCancelled)
// and the other sentinels below work on errors from a remote cluster.
package phobos
