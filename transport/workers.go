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
// at most a cap of them live, and a call that finds none waiting gets a
// goroutine of its own, which then stays if there is room.
var calls = newWorkerPool(max(16, 8*runtime.GOMAXPROCS(0)), 30*time.Second, func(j callJob) {
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

// workerPool runs jobs on goroutines that wait between jobs.
type workerPool struct {
	do    func(callJob)
	max   int32
	idle  time.Duration
	jobs  chan callJob // unbuffered: a send succeeds only to a waiting worker
	alive atomic.Int32 // workers running a job or waiting for one
}

func newWorkerPool(max int, idle time.Duration, do func(callJob)) *workerPool {
	return &workerPool{do: do, max: int32(max), idle: idle, jobs: make(chan callJob)}
}

// run runs j on a waiting worker, or on a new goroutine.
func (p *workerPool) run(j callJob) {
	select {
	case p.jobs <- j:
		return
	default:
	}
	if p.alive.Add(1) > p.max {
		p.alive.Add(-1)
		go p.do(j)
		return
	}
	go p.work(j)
}

// work runs j, then the jobs handed to it, until none comes for p.idle.
func (p *workerPool) work(j callJob) {
	defer p.alive.Add(-1)
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		p.do(j)
		j = callJob{} // hold nothing of the last job while waiting
		idle.Reset(p.idle)
		select {
		case j = <-p.jobs:
		case <-idle.C:
			return
		}
	}
}
