package head

import (
	"log/slog"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/transport"
)

// Config configures a head. A zero field takes its value from
// DefaultConfig (Start fills them), so a literal with ID and DataDir is
// complete. Validate says what is wrong with one.
type Config struct {
	// ID is the head's stable Raft ID. Required; keep it across restarts.
	ID string
	// Listen is the address for raylets, drivers and other heads; default
	// 127.0.0.1:0 (a free port on loopback).
	Listen string
	// Advertise is the address others dial; default the listener's.
	Advertise string
	// DataDir holds the Raft log and snapshots. Required.
	DataDir string
	// Peers is the initial voter list, identical on every head of a new
	// cluster (this head included). Empty means a single-head cluster on
	// first start, or the existing configuration on restart.
	Peers []raftmeta.Server
	// Join, instead of Peers, names heads of a running cluster: the head
	// starts without bootstrapping and Server.Join asks them to add it.
	Join []string
	// Token is the cluster token of a plaintext cluster (Transport.Insecure);
	// under TLS (Transport.TLS, the default) the certificate is the
	// credential and Token is not used.
	Token []byte
	// Raft carries Raft timings and limits (default raftmeta.DefaultConfig);
	// ID, Addr, DataDir, Bootstrap and Logger are filled in from the fields
	// above.
	Raft raftmeta.Config
	// RayletTimeout is how long a raylet may miss heartbeats before it is
	// considered lost; default 5s. It must be at least HeartbeatInterval
	// (a few intervals, or a late beat loses a live raylet).
	RayletTimeout time.Duration
	// HeartbeatInterval is what raylets are told to use; default 1s.
	HeartbeatInterval time.Duration
	// ResultTTL is how long a job's results are kept after it ends unless
	// the driver releases them sooner; default 1h.
	ResultTTL time.Duration
	// CancelGrace is how long a cancelled subtask's kernel may run on before
	// it is abandoned; default 5s.
	CancelGrace time.Duration
	// Retries is the default number of re-runs of a failed subtask; default
	// 3, at most sched.MaxRetries (100).
	Retries int
	// PutGrace is how long a client's put objects outlive its last session
	// to the leader (time to reconnect after a failover); default 30s.
	PutGrace time.Duration
	// NoPipeline stops the leader from dispatching a subtask, ahead of its
	// inputs, to the raylet that is making them (a chain of dependent
	// subtasks then costs a round trip to the head per hop); off by
	// default.
	NoPipeline bool
	// MaxLowerings is how many leaders may begin lowering a job and stop
	// (die or step down) before it is failed instead of lowered again;
	// default 2.
	MaxLowerings int
	// JobBudget is the most head memory one job may take to lower and
	// schedule, as lowering.EstimateJob bounds it (PlanBytes); a job over it
	// is refused before anything is written. Default a quarter of the
	// memory the head may use (the machine's RAM or its cgroup's limit; 8
	// GiB when neither can be read).
	JobBudget int64
	// AdmitBudget bounds the same for all jobs lowered and running at once;
	// jobs that do not fit beside them wait. Default half the memory the
	// head may use; never less than JobBudget.
	AdmitBudget int64
	// AdmitQueue is how many jobs may wait for AdmitBudget; more are
	// refused. Default 256.
	AdmitQueue int
	// JobRetention is how long an ended job's record stays in Raft once
	// its results are gone (released, or past their TTL); default 24h.
	// JobRetentionCount is the most such records kept; default 10000. The
	// leader deletes the oldest first, in batches; a negative value turns
	// that limit off. See sched/retention.go.
	JobRetention      time.Duration
	JobRetentionCount int
	// RayletPurgeAfter is how long a lost or departed raylet stays
	// registered and listed in status; default 1h, negative forever.
	RayletPurgeAfter time.Duration
	// SettingNames says how errors name this Config's fields to whoever
	// set them: a program that fills the Config from flags maps a field's
	// name ("JobBudget") to its flag ("--job-budget"). A field it does not
	// map is named as the field. Errors that reach drivers (a job over its
	// budget) use it too.
	SettingNames map[string]string
	// HTTP is where the head serves its web service (docs/http-api.md):
	// the API, the dashboard, /metrics and /debug/pprof/, HTTPS with the
	// head's certificate under TLS. "" serves none; "127.0.0.1:0" picks a
	// free loopback port (Server.HTTPURL tells which).
	HTTP string
	// HTTPTokenFile names the web service's bearer token file (web.
	// WriteTokenFile makes one). Under TLS client certificates of the
	// cluster's CA are accepted too; on a plaintext cluster it is required.
	HTTPTokenFile string
	// Timeline bounds the per-job timeline the web service serves
	// (timeline.DefaultPerJob events per job, timeline.DefaultJobs jobs).
	Timeline timeline.Config
	// Transport, if set, is the base transport configuration.
	Transport transport.Config
	// Logger receives the head's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config. The memory
// budgets depend on the memory this process may use.
func DefaultConfig() Config {
	mem := memoryLimit()
	if mem <= 0 {
		mem = 8 << 30
	}
	return Config{
		Listen:            "127.0.0.1:0",
		Raft:              raftmeta.DefaultConfig(),
		RayletTimeout:     5 * time.Second,
		HeartbeatInterval: time.Second,
		ResultTTL:         time.Hour,
		CancelGrace:       5 * time.Second,
		Retries:           sched.DefaultRetries,
		PutGrace:          30 * time.Second,
		MaxLowerings:      2,
		JobBudget:         mem / 4,
		AdmitBudget:       mem / 2,
		AdmitQueue:        256,
		JobRetention:      sched.DefaultJobRetention,
		JobRetentionCount: sched.DefaultJobRetentionCount,
		RayletPurgeAfter:  sched.DefaultRayletPurgeAfter,
	}
}

// withDefaults fills the zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	dur(&c.RayletTimeout, d.RayletTimeout)
	dur(&c.HeartbeatInterval, d.HeartbeatInterval)
	dur(&c.ResultTTL, d.ResultTTL)
	dur(&c.CancelGrace, d.CancelGrace)
	dur(&c.PutGrace, d.PutGrace)
	if c.Retries == 0 {
		c.Retries = d.Retries
	}
	if c.MaxLowerings == 0 {
		c.MaxLowerings = d.MaxLowerings
	}
	if c.JobBudget == 0 {
		c.JobBudget = d.JobBudget
	}
	if c.AdmitBudget == 0 {
		c.AdmitBudget = max(d.AdmitBudget, c.JobBudget)
	}
	if c.AdmitQueue == 0 {
		c.AdmitQueue = d.AdmitQueue
	}
	dur(&c.JobRetention, d.JobRetention)
	dur(&c.RayletPurgeAfter, d.RayletPurgeAfter)
	if c.JobRetentionCount == 0 {
		c.JobRetentionCount = d.JobRetentionCount
	}
	return c
}

// Validate reports the first field of c a head cannot run with: a missing
// ID or DataDir, a negative duration or budget, more Retries than
// sched.MaxRetries, a RayletTimeout shorter than the HeartbeatInterval,
// or an AdmitBudget below the JobBudget. Zero fields are valid (they take
// their defaults). The error names fields through SettingNames.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return dag.Errorf(dag.KindInvalidArgument, "head: "+format, args...)
	}
	name := c.setting
	switch {
	case c.ID == "":
		return bad("%s is not set; give the head a stable ID", name("ID"))
	case c.DataDir == "":
		return bad("%s is not set; give the head a directory for its Raft log", name("DataDir"))
	case c.Retries < 0 || c.Retries > sched.MaxRetries:
		return bad("%s %d is more than %d; a subtask failing that often will not succeed, fix its cause", name("Retries"), c.Retries, sched.MaxRetries)
	case c.MaxLowerings < 0 || c.AdmitQueue < 0 || c.JobBudget < 0 || c.AdmitBudget < 0:
		return bad("%s, %s, %s and %s must not be negative", name("MaxLowerings"), name("AdmitQueue"), name("JobBudget"), name("AdmitBudget"))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"RayletTimeout", c.RayletTimeout}, {"HeartbeatInterval", c.HeartbeatInterval}, {"ResultTTL", c.ResultTTL},
		{"CancelGrace", c.CancelGrace}, {"PutGrace", c.PutGrace}} {
		if d.v < 0 {
			return bad("%s %v is negative", name(d.field), d.v)
		}
	}
	if c.RayletTimeout > 0 && c.HeartbeatInterval > 0 && c.RayletTimeout < c.HeartbeatInterval {
		return bad("%s %v is shorter than %s %v: raylets would be taken as lost between heartbeats", name("RayletTimeout"), c.RayletTimeout, name("HeartbeatInterval"), c.HeartbeatInterval)
	}
	if c.JobBudget > 0 && c.AdmitBudget > 0 && c.AdmitBudget < c.JobBudget {
		return bad("%s %s is less than %s %s: a job the head takes could never be admitted", name("AdmitBudget"), sched.BytesText(c.AdmitBudget), name("JobBudget"), sched.BytesText(c.JobBudget))
	}
	return nil
}

// setting names a Config field as its SettingNames say.
func (c Config) setting(field string) string {
	if n, ok := c.SettingNames[field]; ok {
		return n
	}
	return field
}
