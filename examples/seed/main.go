// The seed example of the Mars design documents: a = rand(n), b = rand(n),
// (a + b).sum(), tiled into chunks, with ADD and SUM fused.
//
//	go run ./examples/seed [-size N] [-chunk C] [-connect ADDR -token-file F]
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/examples/internal/exrun"
)

var (
	size  int64  = 10_000_000
	chunk int64  = 100_000
	seed  uint64 = 1
)

func main() {
	exrun.Main("seed", func(fs *flag.FlagSet) {
		fs.Int64Var(&size, "size", size, "elements of a and b")
		fs.Int64Var(&chunk, "chunk", chunk, "elements per chunk")
		fs.Uint64Var(&seed, "seed", seed, "random seed")
	}, run)
}

func run(ctx context.Context, c *phobos.Client) (string, error) {
	a := tensor.Rand([]int64{size}, tensor.Chunks(chunk), tensor.Seed(seed))
	b := tensor.Rand([]int64{size}, tensor.Chunks(chunk), tensor.Seed(seed+1))
	start := time.Now()
	j, err := c.Submit(ctx, a.Add(b).Sum())
	if err != nil {
		return "", err
	}
	res, err := j.Wait(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("(a + b).sum() = %.6f  (%d subtasks, %.2fs)", res.Values[0].Float64(), res.Subtasks, time.Since(start).Seconds()), nil
}
