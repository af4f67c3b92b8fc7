package simraylets

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// TestJobsRunOnSimulatedRaylets: a real head schedules both benchmark
// jobs on simulated raylets to the end, every subtask is reported done by
// them, and the measures that need work to have happened are not zero.
func TestJobsRunOnSimulatedRaylets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Raylets: 20, Slots: 4, Credits: 16, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl, err := c.Client(ctx, phobosOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range Jobs {
		g, err := Job(job, 3000)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Run(ctx, cl, job, g, nil)
		if err != nil {
			t.Fatalf("%s: %v", job, err)
		}
		if r.N < 3000 || r.PerSec <= 0 || r.HeadBytesPerSubtask <= 0 || r.Pulls == 0 || r.PullP99 < r.PullP50 || r.PullP50 <= 0 {
			t.Fatalf("%s: implausible result %+v", job, r)
		}
		// Each subtask of these jobs makes one object, freed by the end
		// of Run (which waits for it to measure the heap after the frees).
		if got := c.Stats().Freed; got != r.N {
			t.Fatalf("%s: raylets were told to free %d objects, want %d", job, got, r.N)
		}
		// The last pulls carry the last completions after the job ended;
		// every subtask is eventually reported.
		deadline := time.Now().Add(10 * time.Second)
		for c.Stats().Completed < r.N && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling a counter, not synchronising
		}
		if got := c.Stats().Completed; got < r.N {
			t.Fatalf("%s: raylets reported %d of %d subtasks", job, got, r.N)
		}
	}
}

// TestReleaseFreesInBatches: releasing a job of 3 × 8Ki + 5 results on 2
// raylets tells them to free every result, in FreeObjects messages of at
// most 8Ki IDs (one message a raylet was 16 bytes an ID, over a raylet's
// max frame from a million IDs on).
func TestReleaseFreesInBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Raylets: 2, Slots: 4, Credits: 1024, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl, err := c.Client(ctx, phobosOptions())
	if err != nil {
		t.Fatal(err)
	}
	const n = 3*8192 + 5
	g, err := Job("independent", n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, cl, "independent", g, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFreed(ctx, n); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Freed != n || st.MaxFreeBatch > 8192 || st.MaxFreeBatch == 0 {
		t.Fatalf("raylets were told to free %d objects (want %d), at most %d in one message (want 1 to 8192)", st.Freed, n, st.MaxFreeBatch)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.quantile(q.q)
		if got < q.want || got > q.want+q.want/8 {
			t.Errorf("quantile %v = %v, want %v within 1/8 above", q.q, got, q.want)
		}
	}
}

// BenchmarkSimRaylets is the go test -bench form of phobos bench
// --sim-raylets: 100k subtasks of each job on 10..1000 raylets of 16
// slots, one head.
func BenchmarkSimRaylets(b *testing.B) {
	for _, job := range Jobs {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("job=%s/raylets=%d", job, n), func(b *testing.B) {
				ctx := context.Background()
				c, err := Start(ctx, Config{Raylets: n, Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cl, err := c.Client(ctx, phobosOptions())
				if err != nil {
					b.Fatal(err)
				}
				g, err := Job(job, 100_000)
				if err != nil {
					b.Fatal(err)
				}
				var last Result
				for b.Loop() {
					if last, err = c.Run(ctx, cl, job, g, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(last.PerSec, "subtasks/s")
				b.ReportMetric(last.HeadCPUPerSubtask*1e6, "head-cpu-us/subtask")
				b.ReportMetric(last.HeadBytesPerSubtask, "head-B/subtask")
				b.ReportMetric(last.PullP99, "pull-p99-us")
			})
		}
	}
}

func phobosOptions() phobos.Options { return phobos.Options{} }

// TestProcessCPUCountsPageFaults: touching fresh pages shows in the page
// faults processCPU reads (page_faults in the bench's results).
func TestProcessCPUCountsPageFaults(t *testing.T) {
	const pages = 4096
	size := pages * os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	syscall.Madvise(mem, syscall.MADV_NOHUGEPAGE) // one fault a page, not one per 2 MiB
	_, before := processCPU()
	for i := 0; i < size; i += os.Getpagesize() {
		mem[i] = 1
	}
	_, after := processCPU()
	if after-before < pages {
		t.Fatalf("touching %d fresh pages counted %d page faults", pages, after-before)
	}
}

// TestSimPullEncodesAsPull: a simulated raylet's pull, its completions
// kept without pointers, encodes byte for byte as the wire.Pull a raylet
// would send with the same completions, empty or not.
func TestSimPullEncodesAsPull(t *testing.T) {
	var done simReply
	want := wire.Pull{Credits: 64, Wait: 2 * time.Second, FreesInReply: true}
	check := func() {
		t.Helper()
		got, err := simPull{credits: 64, done: &done}.AppendCBOR(nil)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := want.AppendCBOR(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, exp) {
			t.Fatalf("simPull encodes as %x, want %x", got, exp)
		}
		if n := (simPull{credits: 64, done: &done}).CBORSize(); n < len(got) {
			t.Fatalf("CBORSize %d < encoding's %d bytes", n, len(got))
		}
	}
	check()
	done.buf = simBufs.get()
	for i, outs := range []int{1, 3, 0, 2} {
		id, err := dag.NewSubtaskID(7, 1, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		sizes := make([]int64, outs)
		for k := range sizes {
			sizes[k] = int64(100*i + k + 1)
		}
		done.buf.sizes = append(done.buf.sizes, sizes...)
		done.buf.done = append(done.buf.done, simDone{id: id, attempt: int32(i), outputs: int32(outs)})
		if outs == 0 {
			sizes = nil
		}
		want.Done = append(want.Done, wire.Completion{ID: id, Attempt: i, Sizes: sizes})
	}
	check()
	done.release()
}
