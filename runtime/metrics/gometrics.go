package metrics

import (
	"fmt"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

var goMetrics struct {
	once sync.Once
	reg  prometheus.Registerer
	err  error
}

// InstallGoMetrics routes what hashicorp/raft (and anything else using
// go-metrics) emits into reg, under the phobos_ prefix: raft's keys with
// dots made underscores, e.g. phobos_raft_commitTime (milliseconds, as
// raft measures; timers are summaries of the last minute). A metric not
// updated for a minute is dropped, as the go-metrics sink does.
//
// go-metrics has one global sink per process, so only the first call
// installs one; a later call with the same registry does nothing and one
// with another registry returns an error (an embedded cluster's heads
// share one process: their raft metrics go to the first head's /metrics).
// The go-metrics runtime sampler is left off: NewRegistry's Go collector
// reads the same figures without stopping the world every second. Timers
// (samples) are summaries over the last minute; see samples.
func InstallGoMetrics(reg prometheus.Registerer) error {
	goMetrics.once.Do(func() {
		goMetrics.reg = reg
		prom, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			Expiration: time.Minute,
			Registerer: reg,
			Name:       "phobos_go_metrics_sink",
		})
		if err != nil {
			goMetrics.err = fmt.Errorf("metrics: a Prometheus sink for go-metrics: %w", err)
			return
		}
		sink := newSamples(prom, time.Minute)
		if err := reg.Register(sink); err != nil {
			goMetrics.err = fmt.Errorf("metrics: register go-metrics' timers: %w", err)
			return
		}
		cfg := gometrics.DefaultConfig(Namespace)
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false
		cfg.EnableServiceLabel = false
		if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
			goMetrics.err = fmt.Errorf("metrics: install the go-metrics sink: %w", err)
		}
	})
	if goMetrics.err != nil {
		return goMetrics.err
	}
	if goMetrics.reg != reg {
		return fmt.Errorf("metrics: go-metrics already report to another registry in this process (one sink per process); Raft's metrics appear there")
	}
	return nil
}

// samples keeps go-metrics' samples (raft's timers) as Prometheus summaries
// of the last minute, in two age buckets, and passes everything else to
// go-metrics' own Prometheus sink. That sink's summaries keep 10 s in five
// buckets, and a summary that is fed hands its buffer to a new goroutine
// every bucket: with raft timing every heartbeat, an idle leader started 3
// goroutines a second for it and a follower 5 (go tool trace; most of the
// follower's goroutine starts), whether or not anyone scraped. Now each
// fed summary starts one every 30 s. Like that sink, a summary not fed for
// expiration is dropped. Safe for concurrent use.
type samples struct {
	gometrics.MetricSink
	expiration time.Duration

	mu sync.Mutex
	m  map[string]*sampled // by name and labels
}

type sampled struct {
	s       prometheus.Summary
	updated time.Time
}

func newSamples(rest gometrics.MetricSink, expiration time.Duration) *samples {
	return &samples{MetricSink: rest, expiration: expiration, m: map[string]*sampled{}}
}

// nameReplacer makes a go-metrics key a Prometheus name, as go-metrics'
// Prometheus sink does.
var nameReplacer = strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_")

func (s *samples) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *samples) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	name := nameReplacer.Replace(strings.Join(key, "_"))
	id := name
	for _, l := range labels {
		id += ";" + l.Name + "=" + l.Value
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[id]
	if e == nil {
		cl := make(prometheus.Labels, len(labels))
		for _, l := range labels {
			cl[l.Name] = l.Value
		}
		e = &sampled{s: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: name, Help: name, ConstLabels: cl,
			MaxAge: time.Minute, AgeBuckets: 2,
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		})}
		s.m[id] = e
	}
	e.s.Observe(float64(val))
	e.updated = now
}

// Describe sends nothing: the summaries come and go with what raft
// measures, so samples is an unchecked collector.
func (s *samples) Describe(chan<- *prometheus.Desc) {}

func (s *samples) Collect(ch chan<- prometheus.Metric) { s.collectAt(ch, time.Now()) }

func (s *samples) collectAt(ch chan<- prometheus.Metric, now time.Time) {
	s.mu.Lock()
	live := make([]prometheus.Summary, 0, len(s.m))
	for id, e := range s.m {
		if s.expiration > 0 && now.Sub(e.updated) > s.expiration {
			delete(s.m, id)
			continue
		}
		live = append(live, e.s)
	}
	s.mu.Unlock()
	for _, sm := range live { // not under mu: raft must not wait for a scrape
		sm.Collect(ch)
	}
}
