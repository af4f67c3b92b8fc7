package head

import (
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
)

// BenchmarkSchedulerPullComplete measures the leader machine's cost per
// subtask (dispatch and completion) without I/O, as the event loop drives
// it: one raylet pulls 256 subtasks at a time, each pull carrying the
// completions of the batch before.
func BenchmarkSchedulerPullComplete(b *testing.B) {
	g, err := tensor.Graph(tensor.Ones([]int64{1 << 20}, tensor.Chunks(1<<20/16384)))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	var done wire.Completions
	sizes := []int64{8}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		b.StopTimer()
		m, sess, lowered := benchLeader(b, g, now)
		b.StartTimer()
		m.Step(now, lowered) // the job is scheduled
		pull := &wire.PullIn{Credits: 256}
		ev := &sched.Pull{Call: 1, Session: sess, PullIn: pull}
		for {
			pull.Done = done
			fx := m.Step(now, ev)
			if len(fx.Pulls) != 1 {
				b.Fatalf("pull answered %d times", len(fx.Pulls))
			}
			specs := fx.Pulls[0].Subtasks
			if len(specs) == 0 {
				break
			}
			done.Reset()
			for i := range specs {
				done.Append(&wire.Completion{ID: specs[i].ID, Sizes: sizes})
			}
			n += len(specs)
		}
		done.Reset()
		m.Step(now, &sched.ReleaseJob{Call: 3, Caller: sched.Caller{Name: "bench"}, Task: 1})
	}
	if n == 0 {
		b.Fatal("the job was never scheduled")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/subtask")
}

// benchLeader is a leader machine with one raylet of 4 slots and g
// submitted and lowered, its effects carried out inline; the Lowered event
// that schedules the job is returned, not stepped.
func benchLeader(b *testing.B, g *dag.TileableGraph, now time.Time) (*sched.Leader, sched.Session, *sched.Lowered) {
	var lowered *sched.Lowered
	m := sched.New(sched.Config{Head: "h1"})
	var (
		task  dag.TaskID
		stage dag.StageID
		call  sched.Call = 100
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
				lw := lw
				out := lw.Run(func(n uint64, metas []byte) (sched.StageIDs, error) {
					call++
					fx := m.Step(now, &sched.AllocStage{Call: call, Task: lw.Task, N: n, Metas: metas})
					for _, c := range fx.Commits {
						stage++
						fx = m.Step(now, &sched.Committed{Req: c.Req, Result: sched.CommitResult{Task: lw.Task, Stage: stage, Base: 1, Count: n}})
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
	sess := new(int)
	do(&sched.Records{})
	reg := &sched.Register{Call: 1, Session: sess}
	reg.ID, reg.Addr, reg.Slots = "A", "a", 4
	do(reg)
	graph, err := codec.Marshal(g)
	if err != nil {
		b.Fatal(err)
	}
	fusion, _ := lowering.ParseFusion("")
	est, err := lowering.EstimateJob(g, dag.Ops, fusion)
	if err != nil {
		b.Fatal(err)
	}
	do(&sched.Submit{Call: 2, Caller: sched.Caller{Name: "bench"}, RequestID: sched.RequestID{1}, Graph: g, GraphBytes: graph, Estimate: est})
	if lowered == nil || lowered.Err != nil {
		b.Fatalf("the job was not lowered: %+v", lowered)
	}
	return m, sess, lowered
}
