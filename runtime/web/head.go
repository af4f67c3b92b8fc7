package web

import (
	"context"
	"io"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/tasklog"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/transport/pki"
)

// Principal is who made a request: the common name and role of a
// verified client certificate, or the principal a bearer token stands for
// (Config.TokenPrincipal). The head checks ownership against Name.
type Principal struct {
	Name string   `json:"name"`
	Role pki.Role `json:"-"`
}

// Admin reports whether p may act on every job.
func (p Principal) Admin() bool { return p.Role == pki.RoleAdmin }

// Head is what a head publishes to the web service. Every method may be
// called from many goroutines at once; ctx ends when the HTTP client goes
// away or the server shuts down. Errors carry a dag.Kind (dag.Errorf), from
// which the server picks the HTTP status: not found → 404, permission
// denied → 403, invalid argument → 400, unavailable → 503, and so on
// (docs/http-api.md). Methods that read one job return kind not found for
// a job the head does not know and permission denied for one p may not
// see (another client's, unless p is an admin).
//
// The server calls Leader on every API call, and Cluster, Jobs and Job
// once a second for every open event stream (the dashboard keeps one per
// tab): they should answer from figures the head keeps current (counts
// per state and op group updated as subtasks change state), never by
// walking a job's subtasks.
type Head interface {
	// Leader reports where API calls must be served: "" when this head
	// serves them (it leads), else the base URL of the leader's HTTP
	// service ("https://10.0.0.1:8080"), to which the server proxies them.
	// An error (kind unavailable) means no leader is known yet.
	Leader(ctx context.Context) (string, error)

	// Cluster reports the heads, the raylets and the job counts.
	Cluster(ctx context.Context, p Principal) (ClusterStatus, error)
	// Jobs lists the jobs p may see (an admin: all), newest first,
	// filtered and paged by q.
	Jobs(ctx context.Context, p Principal, q JobQuery) (JobPage, error)
	// Job reports on one job, its stages and op groups aggregated: the
	// answer's size must not grow with the job's subtasks.
	Job(ctx context.Context, p Principal, id dag.TaskID) (Job, error)
	// Submit submits g as p's job. A graph the head refuses (a cycle,
	// shapes that do not match, a job over budget) is an error naming the
	// node and the problem.
	Submit(ctx context.Context, p Principal, g *dag.TileableGraph, o SubmitOptions) (JobSummary, error)
	// Cancel cancels a job and returns at once with its state; cancelling
	// a job that has ended does nothing.
	Cancel(ctx context.Context, p Principal, id dag.TaskID) (JobSummary, error)
	// Release deletes a finished job's results from the raylets.
	Release(ctx context.Context, p Principal, id dag.TaskID) error
	// Result opens output i (from 0, in the graph's output order) of a job
	// that succeeded. The caller closes Body.
	Result(ctx context.Context, p Principal, id dag.TaskID, i int) (*Result, error)
	// Timeline copies the job's recorded events (timeline.Recorder).
	Timeline(ctx context.Context, p Principal, id dag.TaskID) (timeline.Snapshot, error)
	// Logs returns a page of the job's log lines from every raylet that
	// ran it; when q.Wait > 0 and there is no line after the cursor, it
	// waits up to q.Wait for one.
	Logs(ctx context.Context, p Principal, id dag.TaskID, q LogQuery) (LogPage, error)
}

// ClusterStatus is the cluster as the answering head sees it.
type ClusterStatus struct {
	Leader  string         `json:"leader"`
	Term    uint64         `json:"term"`
	Heads   []HeadStatus   `json:"heads"`
	Raylets []RayletStatus `json:"raylets"`
	Jobs    JobCounts      `json:"jobs"`
	// Queued counts subtasks in the leader's ready queues.
	Queued int `json:"queued"`
	// Time is when the figures were read (the dashboard derives rates from
	// two snapshots' counters).
	Time time.Time `json:"time"`
}

// HeadStatus is one head.
type HeadStatus struct {
	ID           string `json:"id"`
	Addr         string `json:"addr"`
	HTTP         string `json:"http,omitempty"` // base URL of its web service
	Role         string `json:"role"`           // leader, follower, candidate, unreachable
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Error        string `json:"error,omitempty"` // why an unreachable head did not answer
}

// RayletStatus is one raylet.
type RayletStatus struct {
	ID    string      `json:"id"`
	Addr  string      `json:"addr"`
	HTTP  string      `json:"http,omitempty"`
	State string      `json:"state"` // alive, lost, registered
	Slots int         `json:"slots"`
	Busy  int         `json:"busy"`   // slots running a subtask
	Queue int         `json:"queued"` // subtasks queued for it at the leader
	Store StoreStatus `json:"store"`
	// Transfers are cumulative; rates come from two snapshots.
	Transfers TransferStatus `json:"transfers"`
	Time      time.Time      `json:"time"`
}

// StoreStatus is a raylet's object store.
type StoreStatus struct {
	Capacity     int64 `json:"capacity"`
	Used         int64 `json:"used"`
	Objects      int   `json:"objects"`
	Pinned       int   `json:"pinned"`
	SpilledBytes int64 `json:"spilled_bytes"` // objects only on disk
	SpillBytes   int64 `json:"spill_bytes"`   // bytes in spill files
	Spills       int64 `json:"spills"`
	Restores     int64 `json:"restores"`
}

// TransferStatus counts a raylet's object transfers since it started.
type TransferStatus struct {
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	In       int64 `json:"in"`
	Out      int64 `json:"out"`
	Errors   int64 `json:"errors"`
}

// JobCounts counts jobs by state.
type JobCounts struct {
	Submitted int `json:"submitted"` // waiting for admission
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// Job states, as the Go API and `phobos jobs` spell them.
const (
	StateSubmitted = "SUBMITTED"
	StateRunning   = "RUNNING"
	StateSucceeded = "SUCCEEDED"
	StateFailed    = "FAILED"
	StateCancelled = "CANCELLED"
)

// JobStates lists the job states.
var JobStates = []string{StateSubmitted, StateRunning, StateSucceeded, StateFailed, StateCancelled}

// JobQuery filters and pages a job list.
type JobQuery struct {
	// States keeps jobs in one of these states; empty keeps all.
	States []string
	// Before, when not 0, lists jobs with smaller IDs (the next page).
	Before dag.TaskID
	// Limit caps the jobs returned (1 to MaxJobsPage).
	Limit int
}

// Paging of job lists.
const (
	DefaultJobsPage = 50
	MaxJobsPage     = 1000
)

// JobPage is a page of jobs, newest first.
type JobPage struct {
	Jobs []JobSummary `json:"jobs"`
	// Next, when not 0, is the Before of the next page.
	Next dag.TaskID `json:"next,omitempty"`
}

// JobSummary is one job in a list.
type JobSummary struct {
	ID        dag.TaskID `json:"id"`
	Name      string     `json:"name,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	State     string     `json:"state"`
	Subtasks  int        `json:"subtasks"` // lowered so far
	Finished  int        `json:"finished"`
	Submitted time.Time  `json:"submitted,omitzero"`
	Ended     time.Time  `json:"ended,omitzero"`
	Error     *JobError  `json:"error,omitempty"`
	// Released says the job's results were released (or will be as it
	// ends, for a job released while running).
	Released bool `json:"released,omitempty"`
}

// JobError says why a job failed.
type JobError struct {
	Kind    string `json:"kind"` // dag.Kind's name: "task failed", "cancelled", …
	Code    uint16 `json:"code"`
	Cause   string `json:"cause,omitempty"` // the kind of the subtask's error: "error in user code", …
	Message string `json:"message"`
	// The failing subtask, its ops, the raylet of its last attempt and how
	// many attempts it had.
	Subtask  string `json:"subtask,omitempty"`
	Ops      string `json:"ops,omitempty"`
	Raylet   string `json:"raylet,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// Job is one job in detail, aggregated: its size does not grow with its
// subtasks.
type Job struct {
	JobSummary
	// Counts are the job's subtasks by state, over all stages.
	Counts StateCounts `json:"counts"`
	Stages []Stage     `json:"stages"`
	// Groups are the job's subtasks grouped by stage and fused ops, with
	// the groups each reads from: the graph the dashboard draws.
	Groups  []OpGroup    `json:"groups"`
	Raylets []JobRaylet  `json:"raylets"`
	Results []ResultInfo `json:"results,omitempty"`
}

// StateCounts counts subtasks by the seeds' states.
type StateCounts struct {
	Unscheduled int `json:"unscheduled"`
	Ready       int `json:"ready"`
	Running     int `json:"running"`
	Finished    int `json:"finished"`
	Freed       int `json:"freed"`
	Fatal       int `json:"fatal"`
	Cancelling  int `json:"cancelling"`
	Cancelled   int `json:"cancelled"`
}

// Stage is one lowering stage of a job.
type Stage struct {
	ID       dag.StageID `json:"id"`
	Subtasks int         `json:"subtasks"`
	Counts   StateCounts `json:"counts"`
}

// OpGroup is the subtasks of one stage running the same fused ops.
type OpGroup struct {
	Stage    dag.StageID `json:"stage"`
	Ops      string      `json:"ops"`
	Subtasks int         `json:"subtasks"`
	Counts   StateCounts `json:"counts"`
	// Inputs index the job's Groups this group reads from.
	Inputs []int `json:"inputs,omitempty"`
}

// JobRaylet counts a job's subtasks on one raylet.
type JobRaylet struct {
	Raylet   string `json:"raylet"`
	Queued   int    `json:"queued"`
	Running  int    `json:"running"`
	Finished int    `json:"finished"`
	Failed   int    `json:"failed"`
}

// ResultInfo describes one output of a job that succeeded.
type ResultInfo struct {
	Index int     `json:"index"`
	Name  string  `json:"name,omitempty"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
}

// SubmitOptions are what a submit request may set besides the graph.
type SubmitOptions struct {
	Name      string
	Retries   int           // 0: the head's default
	ResultTTL time.Duration // 0: the head's default
	Fusion    string        // "": the head's default; chain, none, coloring
	// RequestID makes a retried submit find the job the first made: from
	// the request's Idempotency-Key header, or random.
	RequestID [16]byte
}

// Result is one output's value.
type Result struct {
	Meta dag.Meta
	// Size is the number of bytes Body yields: the value's elements,
	// row-major and little-endian, as phobos keeps them (for DType bytes,
	// the CBOR of the value).
	Size int64
	Body io.ReadCloser
}

// LogQuery selects a page of a job's log lines.
type LogQuery struct {
	// Subtask and Attempt, when not zero, keep one subtask's (attempt's)
	// lines.
	Subtask dag.SubtaskID
	Attempt uint16
	// Cursor continues from a page's Cursor; "" starts at the oldest line.
	Cursor string
	// Limit caps the lines (tasklog.DefaultLimit when 0).
	Limit int
	// Wait, when positive, waits up to this long for a line after the
	// cursor when there is none yet (a long poll).
	Wait time.Duration
}

// LogPage is a page of log lines.
type LogPage struct {
	Lines []tasklog.Line `json:"lines"`
	// Cursor reads on after this page.
	Cursor string `json:"cursor"`
	// More reports lines after Cursor already there (the limit cut them).
	More bool `json:"more,omitempty"`
	// Dropped counts lines rotated out of the raylets' bounded stores, and
	// Missed reports that some came after the query's cursor.
	Dropped uint64 `json:"dropped,omitempty"`
	Missed  bool   `json:"missed,omitempty"`
	// Unreachable names the raylets whose lines could not be read
	// (MergeLogs).
	Unreachable []string `json:"unreachable,omitempty"`
}
