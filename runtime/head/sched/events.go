package sched

import (
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Event is something that happened, which the Leader takes in Step: a
// raylet or driver call, a Raft command's outcome, lowering's result, a
// timer. Events are pointers to the structs of this file; the Leader reads
// them during Step only, so the shell may reuse one afterwards.
type Event interface{ event() }

// Call names one call the shell holds open for the Leader: the Leader
// answers it with a Reply (or a PullReply) in the same Step or a later one.
// The shell picks the numbers; they must be unique among open calls.
type Call uint64

// Session is the shell's token for one connection, a raylet's or a
// driver's. The Leader keeps and compares it (it must be comparable) and
// hands it back in effects, and never looks inside. Nil is no session (a
// call a follower proxied for a driver).
type Session any

// Caller is who made a driver call.
type Caller struct {
	Name  string
	Admin bool // an admin may act on anything
}

// owns reports whether c may act on something owner made.
func (c Caller) owns(owner string) bool { return c.Admin || c.Name == owner }

// Records are the Raft records a new leader starts from, read once this
// head has applied every entry committed before it led. Until they arrive
// the Leader answers calls about jobs and put tasks with "unavailable".
type Records struct {
	Jobs []JobRecord
	Puts []PutRecord
	// Raylets are the raylets registered in Raft: the failover wait ends
	// when every one of them is back (or after two heartbeat intervals).
	Raylets []string
}

// JobRecord is what Raft holds about a job, as the Leader needs it.
type JobRecord struct {
	Task      dag.TaskID
	Owner     string
	State     dag.JobState
	Error     string
	Cause     dag.Kind
	Options   wire.JobOptions
	Stages    []StageRecord
	Submitted time.Time
	Finished  time.Time
	Released  bool
	// ReleaseOnEnd: the job was released before it ended (ReleaseOnEndCmd);
	// its results are released when it ends.
	ReleaseOnEnd bool
	// Lowering lists the leaders that began lowering the job and did not
	// finish: a job that took leaders down is not lowered blindly again.
	Lowering []string
}

// StageRecord is one committed lowering stage: its ID, subtask range and
// the metas lowering was fed before it (opaque CBOR).
type StageRecord struct {
	ID    dag.StageID
	Base  uint64
	Count uint64
	Metas []byte
}

// PutRecord is an open put task: the client owning it and what it shared.
type PutRecord struct {
	Task   dag.TaskID
	Owner  string
	Shares []Share
}

// Share lets principal With read one put object.
type Share struct {
	Object dag.ObjectID
	With   string
}

// sharedWith reports whether the owner shared id with principal.
func (p *PutRecord) sharedWith(id dag.ObjectID, principal string) bool {
	for _, s := range p.Shares {
		if s.Object == id && s.With == principal {
			return true
		}
	}
	return false
}

// Register is a raylet's MethodRegisterRaylet on Session.
type Register struct {
	Call    Call
	Session Session
	wire.RegisterRaylet
	// CertNotAfter is when the certificate the raylet connected with
	// expires (zero without TLS), until its heartbeats say otherwise.
	CertNotAfter time.Time
	// MaxReply is the largest frame the raylet's session takes: no pull
	// reply to it may be larger (0: DefaultMaxReply).
	MaxReply int
}

// Heartbeat is a raylet's MethodHeartbeat.
type Heartbeat struct {
	Session Session
	wire.Heartbeat
}

// Resume answers Effects.Resume: serve more of the parked pulls that wait
// for their share of a wave of work.
type Resume struct{}

// Goodbye is a raylet saying it is shutting down: its loss is a departure.
type Goodbye struct {
	Call    Call
	Session Session
}

// SessionClosed says a session the Leader asked to watch (Effects.Watch)
// ended: a raylet's (it is lost) or a driver's (its put tasks lose it).
type SessionClosed struct {
	Session Session
	Err     error
}

// Pull is a raylet's MethodPull with the completions riding on it: the
// Leader applies them, then hands out up to Credits subtasks, or holds
// the call up to Wait (at most 30s) for work to appear.
type Pull struct {
	Call    Call
	Session Session
	*wire.PullIn
}

// Complete is a raylet's one-way batch of completions.
type Complete struct {
	Session Session
	Done    wire.Completions
}

// Submit is a driver's MethodSubmitJob, checked and estimated by the
// shell: the graph decoded, the options parsed, and both encoded for Raft.
type Submit struct {
	Call         Call
	Caller       Caller
	RequestID    RequestID
	Graph        *dag.TileableGraph
	GraphBytes   []byte
	Options      wire.JobOptions
	OptionsBytes []byte
	Estimate     lowering.Estimate
}

// WaitJob is a driver's MethodWaitJob.
type WaitJob struct {
	Call   Call
	Caller Caller
	wire.WaitJob
}

// CancelJob is a driver's MethodCancelJob.
type CancelJob struct {
	Call   Call
	Caller Caller
	Task   dag.TaskID
}

// ReleaseJob is a driver's MethodReleaseJob.
type ReleaseJob struct {
	Call   Call
	Caller Caller
	Task   dag.TaskID
}

// ListJobs is a driver's MethodListJobs.
type ListJobs struct {
	Call   Call
	Caller Caller
}

// OpenPuts is a driver's MethodOpenPuts; Session is nil when a follower
// proxied it (the driver attaches when it reaches the leader).
type OpenPuts struct {
	Call      Call
	Caller    Caller
	Session   Session
	RequestID RequestID
}

// AttachPuts is a driver's MethodAttachPuts.
type AttachPuts struct {
	Call    Call
	Caller  Caller
	Session Session
	Task    dag.TaskID
}

// PutObject is a driver's MethodPutObject.
type PutObject struct {
	Call   Call
	Caller Caller
	wire.PutObject
}

// ReleaseObject is a driver's MethodReleaseObject.
type ReleaseObject struct {
	Call   Call
	Caller Caller
	ID     dag.ObjectID
}

// ShareObject is a driver's MethodShareObject.
type ShareObject struct {
	Call   Call
	Caller Caller
	wire.ShareObject
}

// RayletInfos asks how the Leader sees each raylet; the reply is a
// map[string]wire.RayletInfo by raylet ID.
type RayletInfos struct{ Call Call }

// Committed is the outcome of a Commit: applied (Err nil), refused, or
// unknown (Err of kind unavailable: the shell gave up retrying it).
type Committed struct {
	Req    RequestID
	Result CommitResult
	Err    error
}

// Estimated answers an Estimate: the job's graph read back from Raft and
// what lowering it will cost, or why it cannot be.
type Estimated struct {
	Task     dag.TaskID
	Graph    *dag.TileableGraph
	Estimate lowering.Estimate
	Err      error
}

// AllocStage is lowering, on the shell's side, asking for the IDs of a new
// stage of N subtasks: the Leader commits a BeginStage and answers the
// call with a StageIDs.
type AllocStage struct {
	Call  Call
	Task  dag.TaskID
	N     uint64
	Metas []byte
}

// StageIDs answers AllocStage.
type StageIDs struct {
	Stage dag.StageID
	Base  uint64
}

// Lowered answers a Lower: the stage's plan and the job's tiled graph
// (handed back to the Leader), or the error lowering failed with.
type Lowered struct {
	Task  dag.TaskID
	Stage int
	Plan  *lowering.Plan
	Tiled *lowering.Tiled
	Err   error
}

// Tick is the shell's periodic clock (every RayletTimeout/4 or so): raylet
// liveness and the sweep of stashed objects run on it.
type Tick struct{}

// TimerFired says a timer the Leader set has come due.
type TimerFired struct{ ID TimerID }

// StepDown says this head stopped leading: the Leader asks the shell to
// close the raylets' sessions (they find the new leader) and is then
// dropped; the shell answers the calls it still holds.
type StepDown struct{}

func (*Records) event()       {}
func (*Register) event()      {}
func (*Heartbeat) event()     {}
func (*Resume) event()        {}
func (*Goodbye) event()       {}
func (*SessionClosed) event() {}
func (*Pull) event()          {}
func (*Complete) event()      {}
func (*Submit) event()        {}
func (*WaitJob) event()       {}
func (*CancelJob) event()     {}
func (*ReleaseJob) event()    {}
func (*ListJobs) event()      {}
func (*OpenPuts) event()      {}
func (*AttachPuts) event()    {}
func (*PutObject) event()     {}
func (*ReleaseObject) event() {}
func (*ShareObject) event()   {}
func (*RayletInfos) event()   {}
func (*Committed) event()     {}
func (*Estimated) event()     {}
func (*AllocStage) event()    {}
func (*Lowered) event()       {}
func (*Tick) event()          {}
func (*TimerFired) event()    {}
func (*StepDown) event()      {}
