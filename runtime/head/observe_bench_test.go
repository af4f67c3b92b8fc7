package head

import (
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkObservedPullComplete is BenchmarkSchedulerPullComplete with
// what a head serving HTTP adds on its loop around every step: timeline
// events for dispatches and completions, and metrics. Compare the two
// side by side (benchstat): the difference is the cost per subtask of
// timelines and metrics, and allocs/op should not grow with subtasks.
func BenchmarkObservedPullComplete(b *testing.B) {
	g, err := tensor.Graph(tensor.Ones([]int64{1 << 20}, tensor.Chunks(1<<20/16384)))
	if err != nil {
		b.Fatal(err)
	}
	met, err := metrics.NewHead(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{met: met, rec: timeline.NewRecorder(timeline.Config{})}
	now := time.Now()
	var done wire.Completions
	sizes := []int64{8}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		b.StopTimer()
		m, sess, lowered := benchLeader(b, g, now)
		s.lead = &leadership{m: m}
		b.StartTimer()
		m.Step(now, lowered)
		pull := &wire.PullIn{Credits: 256}
		ev := &sched.Pull{Call: 1, Session: sess, PullIn: pull}
		for {
			pull.Done = done
			s.observeEvent(ev)
			fx := m.Step(now, ev)
			s.observeEffects(fx)
			specs := fx.Pulls[0].Subtasks
			if len(specs) == 0 {
				break
			}
			done.Reset()
			for i := range specs {
				done.Append(&wire.Completion{ID: specs[i].ID, Sizes: sizes, Started: now.UnixNano(), TookUS: 1000})
			}
			n += len(specs)
		}
		done.Reset()
		m.Step(now, &sched.ReleaseJob{Call: 3, Caller: sched.Caller{Name: "bench"}, Task: 1})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/subtask")
}
