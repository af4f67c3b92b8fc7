package sched

import (
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Effects are everything the shell must do after one Step, complete: no
// decision is left to the shell. Its slices (and the subtask specs in
// Pulls) are the Leader's memory, reused by the next Step: carry them out,
// or copy what outlives the Step, before calling Step again.
type Effects struct {
	// Replies answer open calls.
	Replies []Reply
	// Pulls answer raylets' pulls. Encode them before the next Step: the
	// specs share the Leader's buffers.
	Pulls []PullReply
	// Free lists, by Raylet, objects that raylet is to delete; Interrupt,
	// subtasks it is to interrupt. Send each raylet its lists (a long
	// list may go as several messages). Frees are batched: most ride on
	// pull replies (PullReply.Free), and the rest wait up to freePeriod
	// for a batch of their own, except a job's release's.
	// Told lists the raylets that have either (others have none): read
	// those, not all raylets.
	Free      [][]dag.ObjectID
	Interrupt [][]dag.SubtaskID
	Told      []Raylet
	// PeerLost tells raylets that another one was lost, so their transfers
	// from it stop at once.
	PeerLost []PeerLost
	// Disconnect lists sessions to close (raylets that went silent, holders
	// of an ID a new process took, every raylet when stepping down).
	Disconnect []Session
	// Watch lists sessions whose end the shell reports as SessionClosed.
	Watch []Session
	// Commits are Raft commands to propose; each ends in a Committed.
	Commits []Commit
	// Timers are timers to set (At) or clear (Clear); each that comes due
	// is reported as TimerFired. Setting an ID again moves its timer.
	Timers []Timer
	// Estimate asks the shell to read a job's graph back from Raft and
	// estimate it, off the loop (Estimated answers).
	Estimate []dag.TaskID
	// Lower asks the shell to lower a stage of a job, off the loop
	// (Lowered answers).
	Lower []Lower
	// Ended reports jobs whose outcome Raft now holds.
	Ended []JobEnd
	// Resume asks the shell to step Resume soon (after letting events
	// already waiting in): raylets woken by this step still wait for
	// their parked pulls to be answered (see maxWaveSpecs).
	Resume bool
}

// reset empties fx for the next Step, keeping its memory.
func (fx *Effects) reset() {
	clear(fx.Replies)
	fx.Replies = fx.Replies[:0]
	clear(fx.Pulls)
	fx.Pulls = fx.Pulls[:0]
	fx.Free, fx.Interrupt, fx.Told = nil, nil, nil
	fx.PeerLost = fx.PeerLost[:0]
	clear(fx.Disconnect)
	fx.Disconnect = fx.Disconnect[:0]
	clear(fx.Watch)
	fx.Watch = fx.Watch[:0]
	clear(fx.Commits)
	fx.Commits = fx.Commits[:0]
	fx.Timers = fx.Timers[:0]
	fx.Estimate = fx.Estimate[:0]
	clear(fx.Lower)
	fx.Lower = fx.Lower[:0]
	clear(fx.Ended)
	fx.Ended = fx.Ended[:0]
	fx.Resume = false
}

// Reply answers a call: Value, or Err.
type Reply struct {
	Call  Call
	Value any
	Err   error
}

// PullReply answers a raylet's pull.
type PullReply struct {
	Call     Call
	Raylet   Raylet
	Subtasks []wire.SubtaskSpec
	// Free are objects the pull's completions freed on the raylet (it asked
	// for them in the reply).
	Free []dag.ObjectID
	// More says the credits ran out with more queued for the raylet.
	More bool
}

// PeerLost tells raylet To that the raylet ID at Addr was lost.
type PeerLost struct {
	To       Raylet
	ID, Addr string
}

// RequestID identifies one Raft command; a command proposed again under
// its ID applies once.
type RequestID [16]byte

func (r RequestID) String() string { return hex.EncodeToString(r[:]) }

// Commit asks the shell to propose Cmd to Raft under Req, retrying an
// unknown outcome under the same Req, and to report a Committed.
type Commit struct {
	Req RequestID
	Cmd Command
}

// CommitResult is what an applied command returned.
type CommitResult struct {
	Task    dag.TaskID
	Stage   dag.StageID
	Base    uint64
	Count   uint64
	Deduped bool // the request ID had been applied before; this is that result
}

// Command is a Raft command the Leader proposes: one of the types below,
// which mirror raftmeta's (the shell translates them).
type Command interface{ command() }

// SubmitJob records a new job; Leader, when set, marks its lowering as in
// flight on that head.
type SubmitJob struct {
	Graph, Options []byte
	Time           time.Time
	Owner, Leader  string
}

// SetJobStatus moves a job forward.
type SetJobStatus struct {
	Task    dag.TaskID
	State   dag.JobState
	Error   string
	Cause   dag.Kind
	Results []dag.ObjectRun // the result object IDs, as runs
	Time    time.Time
}

// BeginStage allocates a stage of N subtasks and records what lowering
// was fed before it.
type BeginStage struct {
	Task  dag.TaskID
	N     uint64
	Metas []byte
}

// BeginLowering marks a job's lowering as in flight on Leader.
type BeginLowering struct {
	Task   dag.TaskID
	Leader string
}

// EndLowering clears a job's lowering marks.
type EndLowering struct{ Task dag.TaskID }

// ReleaseJobCmd records that a job's results were released.
type ReleaseJobCmd struct{ Task dag.TaskID }

// ReleaseOnEndCmd records that a job was released before it ended: its
// results go when it ends, whichever leader records the end.
type ReleaseOnEndCmd struct{ Task dag.TaskID }

// RegisterRayletCmd records a raylet's identity.
type RegisterRayletCmd struct {
	ID, Addr      string
	Slots         int
	StoreCapacity int64
	Time          time.Time
}

// OpenPutsCmd allocates a put task for Owner.
type OpenPutsCmd struct {
	Owner string
	Time  time.Time
}

// ClosePuts ends a put task.
type ClosePuts struct{ Task dag.TaskID }

// SharePut lets principal With read one put object.
type SharePut struct {
	Object dag.ObjectID
	With   string
}

func (SubmitJob) command()         {}
func (SetJobStatus) command()      {}
func (BeginStage) command()        {}
func (BeginLowering) command()     {}
func (EndLowering) command()       {}
func (ReleaseJobCmd) command()     {}
func (ReleaseOnEndCmd) command()   {}
func (RegisterRayletCmd) command() {}
func (OpenPutsCmd) command()       {}
func (ClosePuts) command()         {}
func (SharePut) command()          {}

// TimerKind says what a timer is for.
type TimerKind uint8

const (
	TimerPull        TimerKind = iota + 1 // a parked pull's wait ends (Raylet)
	TimerWait                             // a WaitJob's timeout (Call)
	TimerClaim                            // a claim on a held raylet ID: the holder's timeout (Call)
	TimerFailover                         // the new leader's wait for raylets ends
	TimerCancelGrace                      // a cancelled job's kernels are abandoned (Task)
	TimerResultTTL                        // a job's results expire (Task)
	TimerPutGrace                         // a put task without sessions is closed (Task, Gen)
	TimerFrees                            // frees held back go to the raylets (see freePeriod)
)

var timerNames = [...]string{"", "pull", "wait", "claim", "failover", "cancel-grace", "result-ttl", "put-grace", "frees"}

func (k TimerKind) String() string {
	if int(k) < len(timerNames) {
		return timerNames[k]
	}
	return "timer"
}

// TimerID names one timer. It is comparable: the shell keys timers by it.
type TimerID struct {
	Kind   TimerKind
	Task   dag.TaskID
	Raylet Raylet
	Call   Call
	Gen    uint64
}

// Timer sets the timer ID to fire at At, or clears it.
type Timer struct {
	ID    TimerID
	At    time.Time
	Clear bool
}

// Lower asks the shell to lower stage Stage (0 is the first) of a job off
// the loop and to answer with Lowered. For the first stage the shell tiles
// Graph within Limits; for later ones it feeds Tiled the metas of the
// objects it needs: the recorded ones for a stage in Recorded, else those
// resolved from Sizes. A stage in Recorded takes its recorded IDs; a new
// one asks for IDs with AllocStage. Tiled belongs to the shell until it
// answers.
type Lower struct {
	Task     dag.TaskID
	Stage    int
	Graph    *dag.TileableGraph
	Tiled    *lowering.Tiled
	Options  lowering.Options
	Recorded []StageRecord
	Sizes    []int64
	Limits   lowering.Limits
}

// JobEnd reports a job whose outcome Raft now holds.
type JobEnd struct {
	Task  dag.TaskID
	State dag.JobState
	Err   error
}

// newRequest returns a request ID for a command this Leader proposes: its
// random prefix, then a counter.
func (l *Leader) newRequest() RequestID {
	var r RequestID
	copy(r[:8], l.cfg.RequestPrefix[:])
	l.reqSeq++
	binary.LittleEndian.PutUint64(r[8:], l.reqSeq)
	return r
}
