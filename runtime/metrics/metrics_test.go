package metrics

import (
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func fullSet(t *testing.T) (*prometheus.Registry, *Head, *Raylet) {
	t.Helper()
	reg := NewRegistry()
	h, err := NewHead(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRaylet(reg, func() StoreStats {
		return StoreStats{Capacity: 1 << 30, Used: 1 << 20, Objects: 3, Spills: 2, Restores: 1, SpilledBytes: 4096}
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg, h, r
}

// TestNamesFollowConventions lints every phobos metric with Prometheus's
// own linter (units, _total on counters, snake case, help text) and
// checks the prefix.
func TestNamesFollowConventions(t *testing.T) {
	reg, h, r := fullSet(t)
	h.QueueOf("r1").Set(3)
	r.Transferred(In, 100, time.Millisecond)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, mf := range mfs {
		name := mf.GetName()
		switch {
		case strings.HasPrefix(name, "phobos_"):
			ours++
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
		default:
			t.Errorf("metric %s has neither the phobos_ prefix nor the Go runtime's", name)
		}
	}
	if ours < 20 {
		t.Errorf("only %d phobos metrics gathered", ours)
	}
}

func TestValues(t *testing.T) {
	reg, h, r := fullSet(t)
	var states [NumSubtaskStates]int64
	states[2], states[3] = 5, 7
	h.SetSubtasks(&states)
	h.Dispatched(12)
	h.Completed(OutcomeFinished, 7)
	h.Completed(OutcomeFailed, 1)
	h.Submitted()
	h.SetJobs(JobRunning, 1)
	h.Ended(JobSucceeded, 3*time.Second)
	h.SetRaylets(2, 1)
	h.SetLeader(true)
	q := h.QueueOf("r1")
	q.Set(4)
	r.SetSlots(8, 3)
	r.Ran(OutcomeFinished, 20*time.Millisecond)
	r.Transferred(Out, 4096, time.Millisecond)
	r.TransferFailed()

	want := `
# HELP phobos_subtasks Subtasks of the jobs this head schedules (as leader), by state.
# TYPE phobos_subtasks gauge
phobos_subtasks{state="cancelled"} 0
phobos_subtasks{state="cancelling"} 0
phobos_subtasks{state="fatal"} 0
phobos_subtasks{state="finished"} 7
phobos_subtasks{state="freed"} 0
phobos_subtasks{state="ready"} 0
phobos_subtasks{state="running"} 5
phobos_subtasks{state="unscheduled"} 0
# HELP phobos_subtasks_completed_total Subtask attempts that ended, by outcome (finished, failed, cancelled).
# TYPE phobos_subtasks_completed_total counter
phobos_subtasks_completed_total{outcome="cancelled"} 0
phobos_subtasks_completed_total{outcome="failed"} 1
phobos_subtasks_completed_total{outcome="finished"} 7
# HELP phobos_queued_subtasks Subtasks in each raylet's ready queue at the leader.
# TYPE phobos_queued_subtasks gauge
phobos_queued_subtasks{raylet="r1"} 4
# HELP phobos_store_spills_total Objects written to spill files.
# TYPE phobos_store_spills_total counter
phobos_store_spills_total 2
# HELP phobos_transfer_bytes_total Object bytes fetched from peers (in) and sent to peers and drivers (out).
# TYPE phobos_transfer_bytes_total counter
phobos_transfer_bytes_total{direction="in"} 0
phobos_transfer_bytes_total{direction="out"} 4096
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phobos_subtasks", "phobos_subtasks_completed_total",
		"phobos_queued_subtasks", "phobos_store_spills_total", "phobos_transfer_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "phobos_job_duration_seconds"); err != nil || n != 3 {
		t.Fatalf("job duration series: %d (%v), want 3 (one per end state)", n, err)
	}
	h.ForgetRaylet("r1")
	if n, _ := testutil.GatherAndCount(reg, "phobos_queued_subtasks"); n != 0 {
		t.Fatalf("r1's queue gauge is still exported after ForgetRaylet")
	}
}

// TestUpdatesAllocateNothing: the scheduler and raylets update metrics per
// batch on their hot paths.
func TestUpdatesAllocateNothing(t *testing.T) {
	_, h, r := fullSet(t)
	q := h.QueueOf("r1")
	var states [NumSubtaskStates]int64
	n := testing.AllocsPerRun(1000, func() {
		h.SetSubtasks(&states)
		h.Dispatched(64)
		h.Completed(OutcomeFinished, 64)
		q.Set(10)
		h.Ended(JobFailed, time.Second)
		r.SetSlots(4, 2)
		r.Ran(OutcomeFinished, time.Millisecond)
		r.Transferred(In, 1<<20, time.Millisecond)
	})
	if n != 0 {
		t.Fatalf("a batch of metric updates allocates %v times; want 0", n)
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewHead(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHead(reg); err == nil {
		t.Fatal("a second head metric set registered on the same registry")
	}
}

// TestGoMetricsReachPrometheus: what raft emits through go-metrics shows
// on the registry, prefixed.
func TestGoMetricsReachPrometheus(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := InstallGoMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := InstallGoMetrics(reg); err != nil {
		t.Fatalf("installing again for the same registry: %v", err)
	}
	if err := InstallGoMetrics(prometheus.NewRegistry()); err == nil {
		t.Fatal("a second registry took the process's go-metrics sink without an error")
	}
	gometrics.IncrCounter([]string{"raft", "apply"}, 3)
	gometrics.SetGauge([]string{"raft", "peers"}, 2)
	gometrics.AddSampleWithLabels([]string{"raft", "replication", "heartbeat"}, 4, []gometrics.Label{{Name: "peer_id", Value: "h2"}})
	gometrics.AddSampleWithLabels([]string{"raft", "replication", "heartbeat"}, 6, []gometrics.Label{{Name: "peer_id", Value: "h2"}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				got[mf.GetName()] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[mf.GetName()] = m.Gauge.GetValue()
			case m.Summary != nil:
				for _, l := range m.GetLabel() {
					got[mf.GetName()+" "+l.GetName()+"="+l.GetValue()] = m.Summary.GetSampleSum()
				}
				got[mf.GetName()+" count"] = float64(m.Summary.GetSampleCount())
			}
		}
	}
	if got["phobos_raft_apply"] != 3 || got["phobos_raft_peers"] != 2 {
		t.Fatalf("go-metrics on the registry: %v; want phobos_raft_apply 3 and phobos_raft_peers 2", got)
	}
	if got["phobos_raft_replication_heartbeat peer_id=h2"] != 10 || got["phobos_raft_replication_heartbeat count"] != 2 {
		t.Fatalf("go-metrics samples on the registry: %v; want phobos_raft_replication_heartbeat{peer_id=h2} with sum 10 and count 2", got)
	}
}

// TestSamplesExpire: a timer not fed for the expiration leaves the
// registry, as go-metrics' own sink does; one fed since stays.
func TestSamplesExpire(t *testing.T) {
	s := newSamples(&gometrics.BlackholeSink{}, time.Minute)
	s.AddSample([]string{"raft", "old"}, 1)
	t0 := time.Now()
	s.AddSample([]string{"raft", "new"}, 1)
	collect := func(now time.Time) []string {
		ch := make(chan prometheus.Metric, 8)
		s.collectAt(ch, now)
		close(ch)
		var names []string
		for m := range ch {
			names = append(names, m.Desc().String())
		}
		return names
	}
	if got := collect(t0); len(got) != 2 {
		t.Fatalf("collected %v, want both timers", got)
	}
	s.m["raft_old"].updated = t0.Add(-2 * time.Minute)
	got := collect(t0)
	if len(got) != 1 || !strings.Contains(got[0], "raft_new") {
		t.Fatalf("collected %v after raft_old went unfed for 2m, want raft_new only", got)
	}
	if _, ok := s.m["raft_old"]; ok {
		t.Fatal("the expired timer is still held")
	}
}

func BenchmarkSchedulerBatch(b *testing.B) {
	reg := prometheus.NewRegistry()
	h, _ := NewHead(reg)
	q := h.QueueOf("r1")
	var states [NumSubtaskStates]int64
	b.ReportAllocs()
	for b.Loop() {
		h.Dispatched(64)
		h.Completed(OutcomeFinished, 64)
		q.Set(100)
		h.SetSubtasks(&states)
	}
}
