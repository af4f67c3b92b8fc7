// A blocked matrix product: C = A·B for random n×n matrices cut into b×b
// blocks; chunk (i,j) of C reads row i of A's blocks and column j of B's.
//
//	go run ./examples/matmul [-n N] [-block B] [-connect ADDR -token-file F]
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
	n     int64 = 2000
	block int64 = 500
)

func main() {
	exrun.Main("matmul", func(fs *flag.FlagSet) {
		fs.Int64Var(&n, "n", n, "matrix size")
		fs.Int64Var(&block, "block", block, "block size")
	}, run)
}

func run(ctx context.Context, c *phobos.Client) (string, error) {
	a := tensor.Rand([]int64{n, n}, tensor.Chunks(block), tensor.Seed(1))
	b := tensor.Rand([]int64{n, n}, tensor.Chunks(block), tensor.Seed(2))
	start := time.Now()
	j, err := c.Submit(ctx, a.Matmul(b))
	if err != nil {
		return "", err
	}
	res, err := j.Wait(ctx)
	if err != nil {
		return "", err
	}
	secs := time.Since(start).Seconds()
	cv := res.Values[0].Float64s()
	sum := 0.0
	for _, x := range cv {
		sum += x
	}
	return fmt.Sprintf("C = A·B, %dx%d in %dx%d blocks: sum(C) = %.4f, %.2f GFLOP/s end to end (%d subtasks, %.2fs)",
		n, n, block, block, sum, 2*float64(n*n*n)/secs/1e9, res.Subtasks, secs), nil
}
