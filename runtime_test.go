package phobos_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
)

// flakyOp fails while its counter is positive, then succeeds. Its error
// is of a kind the head retries (an error without a kind is user code's,
// which is not retried).
type flakyOp struct{ failures *atomic.Int64 }

func (flakyOp) Name() string { return "test.flaky" }

func (f flakyOp) Tile(tc *dag.TileContext) error {
	c, err := tc.AddChunk(tc.Tileable().Op, tc.NodeArgs(), dag.Int64, nil, nil, nil)
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: []int32{c}})
	return err
}

func (f flakyOp) Exec(kc *dag.KernelCall) error {
	if f.failures.Add(-1) >= 0 {
		return dag.Errorf(dag.KindUnavailable, "the flux capacitor is cold")
	}
	_, err := kc.Output(0, dag.Meta{DType: dag.Int64}, 8)
	return err
}

var flakyFailures atomic.Int64

func init() { dag.MustRegister(flakyOp{&flakyFailures}) }

func flakyGraph() phobos.Graph {
	return raw{&dag.TileableGraph{Nodes: []dag.TileableNode{{Op: dag.OpIDOf("test.flaky"), DType: dag.Int64}}, Outputs: []int32{0}}}
}

func TestRetriesThenFatal(t *testing.T) {
	c, ctx := local(t, 2)
	// Two failures, then success: within the default three re-runs.
	flakyFailures.Store(2)
	if _, err := c.Run(ctx, flakyGraph()); err != nil {
		t.Fatalf("a subtask failing twice should succeed on retry: %v", err)
	}
	// Always failing: the job fails with the op's own error and its name.
	flakyFailures.Store(1000)
	_, err := c.Run(ctx, flakyGraph())
	if !errors.Is(err, phobos.ErrFatal) {
		t.Fatalf("err = %v, want a fatal task error", err)
	}
	for _, want := range []string{"the flux capacitor is cold", "test.flaky", "4 attempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if left := flakyFailures.Load(); left != 1000-4 {
		t.Fatalf("the op ran %d times, want 4 (1 + 3 retries)", 1000-left)
	}
	// Retries are bounded: a job cannot ask for more than the head allows.
	_, err = c.Submit(ctx, flakyGraph(), phobos.JobOptions{Retries: 1000})
	if !errors.Is(err, phobos.ErrInvalidGraph) || !strings.Contains(err.Error(), "retries 1000") {
		t.Fatalf("submit with 1000 retries: err = %v, want an invalid-argument error naming the retries", err)
	}
}

func TestCancelIsQuick(t *testing.T) {
	c, ctx := local(t, 2)
	j, err := c.Submit(ctx, bench.SleepSum(2000, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := j.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Finished > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling for progress, not synchronising
	}
	start := time.Now()
	if err := j.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = j.Done(ctx)
	if !errors.Is(err, phobos.ErrCancelled) {
		t.Fatalf("after cancel: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("cancel took %v, want under 1s for kernels that watch their context", took)
	}
	// Cancelling again is a clear no-op.
	if err := j.Cancel(ctx); err != nil {
		t.Fatalf("cancelling an ended job: %v", err)
	}
	st, _ := j.Status(ctx)
	if st.Status != phobos.JobCancelled {
		t.Fatalf("status after a second cancel: %s", st.Status)
	}
}

// stuckOp signals when it starts and then ignores cancellation until the
// test releases it.
type stuckOp struct{}

var (
	stuckStarted = make(chan struct{}, 16)
	stuckRelease = make(chan struct{})
)

func (stuckOp) Name() string { return "test.stuck" }

func (stuckOp) Tile(tc *dag.TileContext) error { return tileScalar(tc) }

// submitStarted submits a job of one op's single subtask and waits for
// its kernel to signal started.
func submitStarted(t *testing.T, c *phobos.Client, ctx context.Context, op string, started <-chan struct{}) *phobos.Job {
	t.Helper()
	j, err := c.Submit(ctx, raw{&dag.TileableGraph{Nodes: []dag.TileableNode{{Op: dag.OpIDOf(op), DType: dag.Int64}}, Outputs: []int32{0}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("the %s kernel never started", op)
	}
	return j
}

// tileScalar tiles a test op into one int64 chunk.
func tileScalar(tc *dag.TileContext) error {
	c, err := tc.AddChunk(tc.Tileable().Op, tc.NodeArgs(), dag.Int64, nil, nil, nil)
	tc.SetGrid(&dag.Grid{NSplits: [][]int64{}, Chunks: []int32{c}})
	return err
}

func (stuckOp) Exec(kc *dag.KernelCall) error {
	stuckStarted <- struct{}{}
	<-stuckRelease // deaf to kc.Ctx
	_, err := kc.Output(0, dag.Meta{DType: dag.Int64}, 8)
	return err
}

func init() { dag.MustRegister(stuckOp{}) }

func TestCancelAbandonsStuckKernels(t *testing.T) {
	c, ctx := local(t, 1)
	t.Cleanup(func() { close(stuckRelease) })
	j := submitStarted(t, c, ctx, "test.stuck", stuckStarted)
	start := time.Now()
	if err := j.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := j.Done(wctx); !errors.Is(err, phobos.ErrCancelled) {
		t.Fatalf("stuck job after cancel: %v", err)
	}
	t.Logf("a kernel deaf to its interrupt was abandoned after %v", time.Since(start))
	// The raylet replaced the stuck slot: new work runs while it is stuck.
	v, err := c.Run(wctx, bench.SleepSum(4, time.Millisecond))
	if err != nil {
		t.Fatalf("after abandoning a stuck kernel: %v", err)
	}
	if len(v.Data) != 8 {
		t.Fatalf("result %v", v.Data)
	}
}

// gateOp signals when it starts and then waits for the test to open the
// gate (or for its interrupt).
type gateOp struct{}

var (
	gateStarted = make(chan struct{}, 16)
	gateOpen    = make(chan struct{}) // a send lets one kernel through
)

func (gateOp) Name() string { return "test.gate" }

func (gateOp) Tile(tc *dag.TileContext) error { return tileScalar(tc) }

func (gateOp) Exec(kc *dag.KernelCall) error {
	gateStarted <- struct{}{}
	select {
	case <-gateOpen:
	case <-kc.Ctx.Done():
		return kc.Ctx.Err()
	}
	_, err := kc.Output(0, dag.Meta{DType: dag.Int64}, gateBytes)
	return err
}

// gateBytes is the size of a gated job's result: big enough that the
// stores' usage shows it.
const gateBytes = 1 << 20

func init() { dag.MustRegister(gateOp{}) }

// TestReleaseBeforeTheEnd releases a job while it runs: the release is
// recorded (through Raft, as ReleaseOnEnd) and answered, the job goes on
// to succeed, and its result is freed when it ends rather than kept for
// the result TTL.
func TestReleaseBeforeTheEnd(t *testing.T) {
	c, ctx := local(t, 1)
	base := storeUse(t, c, ctx)
	run := func(release bool) *phobos.Job {
		j := submitStarted(t, c, ctx, "test.gate", gateStarted)
		if release {
			if err := j.Release(ctx); err != nil {
				t.Fatalf("release of a running job: %v", err)
			}
			// Its status says so while it runs (the wire's Released).
			if st, err := j.Status(ctx); err != nil || !st.Released || st.Terminal() {
				t.Fatalf("status of a job released while it runs: %+v, %v; want it running and released", st, err)
			}
		}
		select {
		case gateOpen <- struct{}{}: // the kernel waits for it
		case <-ctx.Done():
			t.Fatal("the gated kernel stopped waiting")
		}
		st, err := j.Done(ctx)
		if err != nil {
			t.Fatalf("job (released while it ran: %v): %v; want it to succeed", release, err)
		}
		if st.Released != release {
			t.Fatalf("job released while it ran: %v; its final status says released %v", release, st.Released)
		}
		return j
	}
	// Not released: the result stays in the store once the job ended.
	// (The stores are read directly: status reports lag by a heartbeat.)
	kept := run(false)
	if n := phobos.LocalStoreObjects(c); n != 1 {
		t.Fatalf("%d objects in the store after a job not released; want its result", n)
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if jobs, err := c.Jobs(ctx); err != nil || len(jobs) != 1 || !jobs[0].Released {
		t.Fatalf("jobs after the release: %+v, %v; want the one job, released", jobs, err)
	}
	testutil.WaitFor(t, 30*time.Second, "the released result to be freed", func() bool { return phobos.LocalStoreObjects(c) == 0 })
	// Released while it ran: its result goes when it ends.
	run(true)
	testutil.WaitFor(t, 30*time.Second, "the result of the job released while it ran to be freed once it ended",
		func() bool { return phobos.LocalStoreObjects(c) == 0 })
	waitStores(t, c, ctx, func(used int64) bool { return used == base }, "return to their starting usage")
}

// TestStoresEmptyAfterRelease runs a 200,000-subtask job and checks every
// store is back to its starting usage once the results are released.
func TestStoresEmptyAfterRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 subtasks; skipped with -short")
	}
	c, ctx := local(t, 2)
	base := storeUse(t, c, ctx)
	j, err := c.Submit(ctx, bench.Independent(200_000))
	if err != nil {
		t.Fatal(err)
	}
	st, err := j.Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Subtasks != 200_000 {
		t.Fatalf("%d subtasks", st.Subtasks)
	}
	// The results are held until released.
	waitStores(t, c, ctx, func(used int64) bool { return used >= base+200_000*8 }, "hold the results")
	if err := j.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitStores(t, c, ctx, func(used int64) bool { return used == base }, "return to their starting usage")

	// Intermediates are freed as their readers finish: on the reply to
	// the pull that reported the readers, or by message when no reply is
	// going out. Either way only the results are left, and nothing once
	// they are released.
	for _, g := range []phobos.Graph{
		bench.Chain(2_000),
		tensor.Ones([]int64{40_000}, tensor.Chunks(10)).Add(tensor.Ones([]int64{40_000}, tensor.Chunks(10))).Sum(),
	} {
		j, err = c.Submit(ctx, g, phobos.JobOptions{Fusion: "none"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		// Before the release only the result (and copies of the last
		// inputs fetched from the other raylet) may remain.
		testutil.WaitFor(t, 30*time.Second, "intermediates to be freed", func() bool { return phobos.LocalStoreObjects(c) <= 5 })
		if err := j.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitStores(t, c, ctx, func(used int64) bool { return used == base }, "return to their starting usage")
	}
}

func storeUse(t *testing.T, c *phobos.Client, ctx context.Context) int64 {
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, r := range st.Raylets {
		used += r.Store.Used
	}
	return used
}

// waitStores waits (heartbeats carry store usage) until ok holds.
func waitStores(t *testing.T, c *phobos.Client, ctx context.Context, ok func(int64) bool, what string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, "stores to "+what, func() bool { return ok(storeUse(t, c, ctx)) })
}

// TestZeroCopyResult reads a result straight from the co-located raylet's
// arena: no copy, and the view stays valid until released.
func TestZeroCopyResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 1, Slots: 2, StoreSize: 64 << 20, Options: phobos.Options{ZeroCopy: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j, err := c.Submit(ctx, tensor.Arange(0, 1_000_000, 1)) // one chunk
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Values[0]
	if !v.ZeroCopy() {
		t.Fatal("a result on this node came back as a copy")
	}
	f := v.Float64s()
	for i, x := range f {
		if x != float64(i) {
			t.Fatalf("element %d = %v", i, x)
		}
	}
	// The job's results were released on the cluster, but the view pins the
	// object until Release.
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if v.Release() != nil || v.Data != nil {
		t.Fatal("a second Release should do nothing")
	}
	// Multi-chunk results are still copied.
	res, err = mustJob(t, c, ctx, tensor.Arange(0, 1000, 1, tensor.Chunks(100))).Wait(ctx)
	if err != nil || res.Values[0].ZeroCopy() || len(res.Values[0].Float64s()) != 1000 {
		t.Fatalf("multi-chunk result: %v", err)
	}
}

func mustJob(t *testing.T, c *phobos.Client, ctx context.Context, g phobos.Graph) *phobos.Job {
	t.Helper()
	j, err := c.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestPutObject stores driver data in the cluster and uses it in graphs.
func TestPutObject(t *testing.T) {
	c, ctx := local(t, 2)
	data := make([]float64, 100_000)
	for i := range data {
		data[i] = float64(i % 1000)
	}
	o, err := c.PutFloat64s(ctx, data, []int64{100_000})
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.FromObject(o.ID, o.Meta, tensor.Chunks(10_000))
	v, err := c.Run(ctx, x.Mul(tensor.Scalar(2)).Sum())
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, d := range data {
		want += 2 * d
	}
	if v.Float64() != want {
		t.Fatalf("sum = %v, want %v", v.Float64(), want)
	}
	// Used again, by another job.
	v, err = c.Run(ctx, tensor.FromObject(o.ID, o.Meta).Max())
	if err != nil || v.Float64() != 999 {
		t.Fatalf("max = %v, %v", v, err)
	}
	if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A released object is gone: a job reading it is refused, naming it.
	_, err = c.Run(ctx, tensor.FromObject(o.ID, o.Meta).Sum())
	if !errors.Is(err, phobos.ErrNotFound) || !strings.Contains(err.Error(), o.ID.String()) {
		t.Fatalf("job reading a released object: %v", err)
	}
	// Bad puts.
	if _, err := c.PutFloat64s(ctx, data, []int64{7}); !errors.Is(err, phobos.ErrInvalidGraph) {
		t.Fatalf("put with a wrong shape: %v", err)
	}

	// Another client's data is theirs: a job here may not read it, whether
	// or not this client put data too, until its owner shares it.
	other, err := phobos.ConnectLocal(ctx, c, "bob")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	theirs, err := other.PutFloat64s(ctx, data[:10], []int64{10})
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"before", "after"} {
		_, err = c.Run(ctx, tensor.FromObject(theirs.ID, theirs.Meta).Sum())
		if !errors.Is(err, phobos.ErrPermissionDenied) || !strings.Contains(err.Error(), `belongs to "bob"`) ||
			!strings.Contains(err.Error(), theirs.ID.String()) {
			t.Fatalf("job reading another client's object (%s this client put its own): %v", who, err)
		}
		mine, err := c.PutFloat64s(ctx, data[:10], []int64{10})
		if err != nil {
			t.Fatal(err)
		}
		defer mine.Release(ctx)
	}
	if v, err := other.Run(ctx, tensor.FromObject(theirs.ID, theirs.Meta).Sum()); err != nil || v.Float64() != 45 {
		t.Fatalf("the owner's own job: %v, %v", v, err)
	}
	if err := theirs.Share(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Run(ctx, tensor.FromObject(theirs.ID, theirs.Meta).Sum()); err != nil || v.Float64() != 45 {
		t.Fatalf("a job reading an object shared with it: %v, %v", v, err)
	}
}

// TestWaitAfterRelease: fetching a job's results after releasing them is
// a clear not-found error, not a silent recomputation.
func TestWaitAfterRelease(t *testing.T) {
	c, ctx := local(t, 1)
	j, err := c.Submit(ctx, tensor.Ones([]int64{100}, tensor.Chunks(10)).Sum())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(ctx); err != nil { // Wait releases the results
		t.Fatal(err)
	}
	_, err = j.Wait(ctx)
	if !errors.Is(err, phobos.ErrNotFound) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("second Wait: %v", err)
	}
	// A failed job's Wait returns its error every time.
	flakyFailures.Store(1000)
	fj, err := c.Submit(ctx, flakyGraph())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := fj.Wait(ctx); !errors.Is(err, phobos.ErrFatal) || !strings.Contains(err.Error(), "flux capacitor") {
			t.Fatalf("wait %d on a failed job: %v", i, err)
		}
	}
}
