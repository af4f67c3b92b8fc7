package transport

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// goid is the running goroutine's number, from its stack's first line.
func goid() uint64 {
	var b [64]byte
	f := bytes.Fields(b[:runtime.Stack(b[:], false)])
	n, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return n
}

// Jobs one after another run on the goroutines that ran earlier ones: they
// wait for the next job with their grown stacks instead of exiting. (A job
// that comes while the worker is still returning from the last finds none
// waiting and starts a second, so there may be more than one, never more
// than the cap.)
func TestWorkersAreReused(t *testing.T) {
	ran := make(chan uint64)
	p := newWorkerPool(4, 4, time.Hour, time.Hour, func(callJob) { ran <- goid() })
	seen := map[uint64]bool{}
	for range 50 {
		p.run(callJob{})
		seen[<-ran] = true
	}
	if len(seen) > 4 {
		t.Fatalf("50 jobs one after another ran on %d goroutines; want the 4 workers at most", len(seen))
	}
}

// No more than the cap wait; jobs beyond it still run, each on a goroutine
// of its own, and the workers leave once idle.
func TestWorkersAreCappedAndLeave(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	p := newWorkerPool(3, 3, time.Millisecond, time.Millisecond, func(callJob) { <-release; wg.Done() })
	wg.Add(10)
	for range 10 {
		p.run(callJob{})
	}
	if n := p.alive.Load(); n != 3 {
		t.Fatalf("%d workers alive with 10 jobs running; want the cap, 3", n)
	}
	close(release)
	wg.Wait()
	for p.alive.Load() != 0 {
		runtime.Gosched() // each leaves 1ms after its job
	}
}

// Beyond the core, workers up to the cap are kept too (a head with a pull
// in flight from each of a thousand raylets runs that many calls at once),
// but leave after the short idle time while the core ones stay.
func TestWorkersBeyondCoreLeaveSooner(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	p := newWorkerPool(2, 5, time.Hour, time.Millisecond, func(callJob) { <-release; wg.Done() })
	wg.Add(7)
	for range 7 {
		p.run(callJob{})
	}
	if n := p.alive.Load(); n != 5 {
		t.Fatalf("%d workers alive with 7 jobs running; want the cap, 5", n)
	}
	close(release)
	wg.Wait()
	for p.alive.Load() > 2 {
		runtime.Gosched() // the three beyond the core leave 1ms after their jobs
	}
	if n := p.alive.Load(); n != 2 {
		t.Fatalf("%d workers left once idle; want the core, 2 (they wait an hour)", n)
	}
}
