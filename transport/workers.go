package transport

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"time"
)

// Incoming calls run on goroutines kept between calls. A goroutine started
// per call begins on the smallest stack and grows it by copying, several
// times over while a handler decodes its request: on a chain of dependent
// subtasks that was 15% of the process's CPU, on the critical path of every
// hop (BenchmarkCall: 20 µs → 13 µs a call). A goroutine that ran a call
// instead waits for the next one, its stack grown, for up to an idle time;
// a call that finds none waiting gets a goroutine of its own, which then
// stays if there is room.
//
// A head with many raylets has a call in flight from each: a pull waits
// at the head until there is work, up to half a minute, on its goroutine.
// With 1,000 raylets and a pool of 16, nearly every call started a
// goroutine of its own and grew its stack afresh (stack copying was 4% of
// the head's CPU in the seed example at 1,000 simulated raylets). So up to
// callWorkersCore workers wait callWorkersIdle between calls, and beyond
// them up to callWorkersMax wait a short callWorkersExtraIdle: enough to
// stay while calls keep coming, not to hold a burst's goroutines (a flood
// of connections) for long.
const (
	callWorkersMax       = 8192
	callWorkersIdle      = 30 * time.Second
	callWorkersExtraIdle = time.Second
)

var calls = newWorkerPool(max(16, 8*runtime.GOMAXPROCS(0)), callWorkersMax, callWorkersIdle, callWorkersExtraIdle, func(j callJob) {
	j.s.runCall(j.m, j.id, j.raw, j.pooled, j.share)
})

// callJob is one incoming call for a worker.
type callJob struct {
	s      *Session
	m      Method
	id     uint64
	raw    []byte
	pooled *bytes.Buffer // raw's pooled buffer, nil if raw is its own
	share  int64
}

// workerPool runs jobs on goroutines that wait between jobs: the first
// core of them for idle, the rest, up to max, for extraIdle.
type workerPool struct {
	do              func(callJob)
	core, max       int32
	idle, extraIdle time.Duration
	jobs            chan callJob // unbuffered: a send succeeds only to a waiting worker
	alive           atomic.Int32 // workers running a job or waiting for one
}

func newWorkerPool(core, max int, idle, extraIdle time.Duration, do func(callJob)) *workerPool {
	return &workerPool{do: do, core: int32(core), max: int32(max), idle: idle, extraIdle: extraIdle, jobs: make(chan callJob)}
}

// run runs j on a waiting worker, or on a new goroutine.
func (p *workerPool) run(j callJob) {
	select {
	case p.jobs <- j:
		return
	default:
	}
	n := p.alive.Add(1)
	if n > p.max {
		p.alive.Add(-1)
		go p.do(j)
		return
	}
	wait := p.idle
	if n > p.core {
		wait = p.extraIdle
	}
	go p.work(j, wait)
}

// work runs j, then the jobs handed to it, until none comes for wait.
func (p *workerPool) work(j callJob, wait time.Duration) {
	defer p.alive.Add(-1)
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		p.do(j)
		j = callJob{} // hold nothing of the last job while waiting
		idle.Reset(wait)
		select {
		case j = <-p.jobs:
		case <-idle.C:
			return
		}
	}
}
