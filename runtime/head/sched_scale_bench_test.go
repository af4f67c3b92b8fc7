package head

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
)

// BenchmarkLeaderRaylets measures the leader machine's cost per subtask,
// without I/O, as the number of raylets grows: each raylet has 16 slots
// and pulls with the window a raylet uses for trivial subtasks (1024
// credits), its completions riding on its next pull. Flat ns/subtask
// across raylets=10..5000 is what issue 17 asks of placement, stealing and
// wake-ups. Jobs: 100k independent subtasks, and the seed example (RAND,
// RAND -> ADD+SUM, a tree of SUMs) over 50k chunks.
func BenchmarkLeaderRaylets(b *testing.B) {
	indep, err := bench.Independent(100_000).TileableGraph()
	if err != nil {
		b.Fatal(err)
	}
	const chunks = 50_000
	x := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(1))
	y := tensor.Rand([]int64{chunks * 100}, tensor.Chunks(100), tensor.Seed(2))
	seedG, err := tensor.Graph(x.Add(y).Sum())
	if err != nil {
		b.Fatal(err)
	}
	for _, job := range []struct {
		name string
		g    *dag.TileableGraph
	}{{"independent", indep}, {"seed", seedG}} {
		for _, n := range []int{10, 100, 1000, 5000} {
			b.Run(fmt.Sprintf("job=%s/raylets=%d", job.name, n), func(b *testing.B) {
				benchRaylets(b, job.g, n, 16)
			})
		}
	}
}

func benchRaylets(b *testing.B, g *dag.TileableGraph, raylets, slots int) {
	now := time.Now()
	credits := min(64*slots, 1024)
	sizes := []int64{8}
	total := 0
	var cpu time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m, sess, lowered := scaleLeader(b, g, now, raylets, slots)
		done := make([]wire.Completions, raylets)
		pulls := make([]*wire.PullIn, raylets)
		for r := range pulls {
			pulls[r] = &wire.PullIn{Credits: credits}
		}
		// Every raylet's pull waits at the head when the job comes, as an
		// idle raylet's does: the job's first wave answers them, a slice
		// a step (Resume).
		for r := range raylets {
			parked := *pulls[r]
			parked.Wait = time.Second
			m.Step(now, &sched.Pull{Call: sched.Call(r + 1), Session: sess[r], PullIn: &parked})
		}
		b.StartTimer()
		cpu0 := processCPU()
		for fx := m.Step(now, lowered); ; fx = m.Step(now, &sched.Resume{}) {
			for _, p := range fx.Pulls {
				r := int(p.Call) - 1
				for i := range p.Subtasks {
					done[r].Append(&wire.Completion{ID: p.Subtasks[i].ID, Sizes: sizes})
				}
				total += len(p.Subtasks)
			}
			if !fx.Resume {
				break
			}
		}
		for idle := 0; idle < raylets; {
			idle = 0
			for r := range raylets {
				pulls[r].Done = done[r]
				fx := m.Step(now, &sched.Pull{Call: sched.Call(r + 1), Session: sess[r], PullIn: pulls[r]})
				if len(fx.Pulls) != 1 {
					b.Fatalf("pull answered %d times", len(fx.Pulls))
				}
				specs := fx.Pulls[0].Subtasks
				done[r].Reset()
				for i := range specs {
					done[r].Append(&wire.Completion{ID: specs[i].ID, Sizes: sizes})
				}
				total += len(specs)
				if len(specs) == 0 {
					idle++
				}
			}
		}
		cpu += processCPU() - cpu0
		b.StopTimer()
		m.Step(now, &sched.ReleaseJob{Call: 1 << 30, Caller: sched.Caller{Name: "bench"}, Task: 1})
		b.StartTimer()
	}
	if total == 0 {
		b.Fatal("the job was never scheduled")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/subtask")
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "subtasks/s")
	// CPU time is what the machine cost, whatever else ran on the host:
	// on a shared machine the wall clock says more about the neighbours.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(total), "cpu-ns/subtask")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleLeader is benchLeader with n raylets of the given slots.
func scaleLeader(b *testing.B, g *dag.TileableGraph, now time.Time, n, slots int) (*sched.Leader, []sched.Session, *sched.Lowered) {
	var lowered *sched.Lowered
	m := sched.New(sched.Config{Head: "h1"})
	var (
		task  dag.TaskID
		stage dag.StageID
		call  sched.Call = 1 << 40
		work  []sched.Event
	)
	do := func(ev sched.Event) {
		work = append(work, ev)
		for len(work) > 0 {
			ev := work[0]
			work = work[1:]
			fx := m.Step(now, ev)
			for _, c := range fx.Commits {
				var res sched.CommitResult
				switch cmd := c.Cmd.(type) {
				case sched.SubmitJob:
					task++
					res.Task = task
				case sched.BeginStage:
					stage++
					res = sched.CommitResult{Task: cmd.Task, Stage: stage, Base: 1, Count: cmd.N}
				}
				work = append(work, &sched.Committed{Req: c.Req, Result: res})
			}
			for _, lw := range fx.Lower {
				out := lw.Run(func(k uint64, metas []byte) (sched.StageIDs, error) {
					call++
					fx := m.Step(now, &sched.AllocStage{Call: call, Task: lw.Task, N: k, Metas: metas})
					for _, c := range fx.Commits {
						stage++
						fx = m.Step(now, &sched.Committed{Req: c.Req, Result: sched.CommitResult{Task: lw.Task, Stage: stage, Base: 1, Count: k}})
					}
					for _, r := range fx.Replies {
						if r.Call == call {
							return r.Value.(sched.StageIDs), r.Err
						}
					}
					b.Fatal("no stage IDs")
					return sched.StageIDs{}, nil
				})
				lowered = out
			}
		}
	}
	do(&sched.Records{})
	sess := make([]sched.Session, n)
	for r := range n {
		sess[r] = new(int)
		reg := &sched.Register{Call: sched.Call(1<<41 + r), Session: sess[r]}
		reg.ID, reg.Addr, reg.Slots = fmt.Sprintf("r%d", r), fmt.Sprintf("a%d", r), slots
		do(reg)
	}
	graph, err := codec.Marshal(g)
	if err != nil {
		b.Fatal(err)
	}
	fusion, _ := lowering.ParseFusion("")
	est, err := lowering.EstimateJob(g, dag.Ops, fusion)
	if err != nil {
		b.Fatal(err)
	}
	do(&sched.Submit{Call: 1 << 42, Caller: sched.Caller{Name: "bench"}, RequestID: sched.RequestID{1}, Graph: g, GraphBytes: graph, Estimate: est})
	if lowered == nil || lowered.Err != nil {
		b.Fatalf("the job was not lowered: %+v", lowered)
	}
	return m, sess, lowered
}

// BenchmarkLeaderBigJob lowers and schedules one job of 1M subtasks
// (-benchtime 1x; LEADER_BIG_N for another size) on 1,000 raylets
// (LEADER_BIG_RAYLETS for another number) and reports the seconds
// lowering took, the seconds the release's step took, the heap held per
// subtask while the job runs (every subtask dispatched, none finished;
// LEADER_BIG_HEAP=FILE writes a heap profile of it to FILE.JOB) and what
// is left per subtask once the job finished and was released.
func BenchmarkLeaderBigJob(b *testing.B) {
	n := int64(1_000_000)
	if v := os.Getenv("LEADER_BIG_N"); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil {
			b.Fatal(err)
		}
	}
	raylets := 1000
	if v := os.Getenv("LEADER_BIG_RAYLETS"); v != "" {
		var err error
		if raylets, err = strconv.Atoi(v); err != nil || raylets < 1 {
			b.Fatalf("LEADER_BIG_RAYLETS=%q: want a positive number", v)
		}
	}
	for _, job := range []string{"independent", "seed"} {
		b.Run("job="+job, func(b *testing.B) {
			var g *dag.TileableGraph
			var err error
			if job == "independent" {
				g, err = bench.Independent(n).TileableGraph()
			} else {
				x := tensor.Rand([]int64{n / 3 * 100}, tensor.Chunks(100), tensor.Seed(1))
				y := tensor.Rand([]int64{n / 3 * 100}, tensor.Chunks(100), tensor.Seed(2))
				g, err = tensor.Graph(x.Add(y).Sum())
			}
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for b.Loop() {
				var base, running, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&base)
				t0 := time.Now()
				m, sess, lowered := scaleLeader(b, g, now, raylets, 16)
				lowerSecs := time.Since(t0).Seconds()
				m.Step(now, lowered)
				subtasks := 0
				done := make([]wire.Completions, len(sess))
				for r := range sess {
					fx := m.Step(now, &sched.Pull{Call: sched.Call(r + 1), Session: sess[r], PullIn: &wire.PullIn{Credits: 1024}})
					for _, sp := range fx.Pulls[0].Subtasks {
						done[r].Append(&wire.Completion{ID: sp.ID, Sizes: []int64{8}})
					}
					subtasks += len(fx.Pulls[0].Subtasks)
				}
				runtime.GC()
				runtime.ReadMemStats(&running)
				if f := os.Getenv("LEADER_BIG_HEAP"); f != "" { // a heap profile of the running job
					if w, err := os.Create(f + "." + job); err == nil {
						pprof.WriteHeapProfile(w)
						w.Close()
					}
				}
				total := subtasks
				for round := 0; subtasks > 0 && round < 1000; round++ {
					subtasks = 0
					for r := range sess {
						fx := m.Step(now, &sched.Pull{Call: sched.Call(r + 1), Session: sess[r], PullIn: &wire.PullIn{Credits: 1024, Done: done[r]}})
						done[r].Reset()
						for _, sp := range fx.Pulls[0].Subtasks {
							done[r].Append(&wire.Completion{ID: sp.ID, Sizes: []int64{8}})
						}
						subtasks += len(fx.Pulls[0].Subtasks)
					}
					total += subtasks
				}
				t1 := time.Now()
				m.Step(now, &sched.ReleaseJob{Call: 1 << 30, Caller: sched.Caller{Name: "bench"}, Task: 1})
				releaseSecs := time.Since(t1).Seconds()
				done, lowered = nil, nil
				runtime.GC()
				runtime.ReadMemStats(&after)
				if f := os.Getenv("LEADER_BIG_HEAP"); f != "" {
					if w, err := os.Create(f + ".released." + job); err == nil {
						pprof.WriteHeapProfile(w)
						w.Close()
					}
				}
				b.ReportMetric(lowerSecs, "lower-s")
				b.ReportMetric(releaseSecs, "release-s")
				b.ReportMetric(float64(running.HeapAlloc-base.HeapAlloc)/float64(total), "running-heap-B/subtask")
				b.ReportMetric((float64(after.HeapAlloc)-float64(base.HeapAlloc))/float64(total), "released-heap-B/subtask")
				runtime.KeepAlive(m)
			}
		})
	}
}
