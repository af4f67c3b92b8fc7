package wire

import (
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/transport"
)

// Methods about the replicated metadata (60-79). Every head serves them: a
// follower forwards writes to the leader over its own session and answers
// with the leader's reply, so a caller may use any head.
const (
	// MethodHeadInfo asks one head about itself (HeadInfoRequest →
	// HeadSelf). It never forwards.
	MethodHeadInfo transport.Method = 60

	// ID allocation (AllocTask, AllocStage, AllocSubtasks → Allocated).
	MethodAllocTask     transport.Method = 61
	MethodAllocStage    transport.Method = 62
	MethodAllocSubtasks transport.Method = 63

	// MethodApply carries one encoded Raft command (raftmeta.EncodeCommand)
	// to the leader: Apply → Allocated. Heads use it to forward writes; a
	// head that is not the leader answers dag.KindNotLeader naming the
	// leader, and never forwards it again.
	MethodApply transport.Method = 64

	// Membership: JoinHead → {} and RemoveHead → {}.
	MethodJoinHead   transport.Method = 65
	MethodRemoveHead transport.Method = 66
)

// DefaultLeaderWait is how long a head holds a request that needs the
// leader while there is none (an election, a partition) when the request
// names no Wait of its own. MaxLeaderWait caps any Wait.
const (
	DefaultLeaderWait = 10 * time.Second
	MaxLeaderWait     = time.Minute
)

// AllocTask asks for the next task ID. RequestID is chosen by the caller
// (16 random bytes, never zero) and reused when it retries after an unknown
// outcome (a timeout, a broken session), so the retry is answered with the
// first answer instead of a second ID. Wait bounds how long the head may
// hold the request while there is no leader; 0 means DefaultLeaderWait.
type AllocTask struct {
	RequestID [16]byte      `cbor:"1,keyasint"`
	Wait      time.Duration `cbor:"2,keyasint,omitempty"`
}

// AllocStage asks for the next stage ID of Task (see AllocTask for
// RequestID and Wait).
type AllocStage struct {
	RequestID [16]byte      `cbor:"1,keyasint"`
	Task      dag.TaskID    `cbor:"2,keyasint"`
	Wait      time.Duration `cbor:"3,keyasint,omitempty"`
}

// AllocSubtasks asks for Count subtask indexes of (Task, Stage); the
// answer is the range [Base, Base+Count).
type AllocSubtasks struct {
	RequestID [16]byte      `cbor:"1,keyasint"`
	Task      dag.TaskID    `cbor:"2,keyasint"`
	Stage     dag.StageID   `cbor:"3,keyasint"`
	Count     uint64        `cbor:"4,keyasint"`
	Wait      time.Duration `cbor:"5,keyasint,omitempty"`
}

// Apply forwards one encoded command to the leader.
type Apply struct {
	Command []byte        `cbor:"1,keyasint"`
	Wait    time.Duration `cbor:"2,keyasint,omitempty"`
}

// Allocated answers the allocation methods and Apply with what the state
// machine handed out. Deduped is set when the request ID had been seen:
// this is the first answer again, and nothing new was allocated.
type Allocated struct {
	Task    dag.TaskID  `cbor:"1,keyasint,omitempty"`
	Stage   dag.StageID `cbor:"2,keyasint,omitempty"`
	Base    uint64      `cbor:"3,keyasint,omitempty"`
	Count   uint64      `cbor:"4,keyasint,omitempty"`
	Deduped bool        `cbor:"5,keyasint,omitempty"`
}

// HeadInfoRequest asks a head about itself. With Raylets set, a leader also
// reports the raylets as its scheduler sees them.
type HeadInfoRequest struct {
	Raylets bool `cbor:"1,keyasint,omitempty"`
}

// HeadSelf is one head's own account of itself.
type HeadSelf struct {
	Head       HeadInfo `cbor:"1,keyasint"`
	LeaderID   string   `cbor:"2,keyasint,omitempty"`
	LeaderAddr string   `cbor:"3,keyasint,omitempty"`
	LastIndex  uint64   `cbor:"4,keyasint,omitempty"`
	// SinceContact is how long ago this head last heard from the leader
	// (0 on the leader, and before any contact).
	SinceContact time.Duration `cbor:"5,keyasint,omitempty"`
	// Raylets is set when asked of the leader.
	Raylets []RayletInfo `cbor:"6,keyasint,omitempty"`
	// Voters are the heads this head's configuration lists.
	Voters []HeadInfo `cbor:"7,keyasint,omitempty"`
}

// JoinHead asks the cluster to add a head as a voter. Fresh says the head
// started with an empty data dir: if the cluster already lists its ID (or
// another head at its address), that entry is stale and is removed first,
// so the head joins as a new member. Incarnation is random per process
// start, so a retried join is not mistaken for a second wipe.
type JoinHead struct {
	ID          string        `cbor:"1,keyasint"`
	Addr        string        `cbor:"2,keyasint"`
	Fresh       bool          `cbor:"3,keyasint,omitempty"`
	Incarnation uint64        `cbor:"4,keyasint,omitempty"`
	Wait        time.Duration `cbor:"5,keyasint,omitempty"`
}

// RemoveHead asks the cluster to remove a head from the voters.
type RemoveHead struct {
	ID   string        `cbor:"1,keyasint"`
	Wait time.Duration `cbor:"2,keyasint,omitempty"`
}

// ClusterStatusRequest may accompany MethodClusterStatus (an empty body is
// fine). Timeout bounds how long the answering head waits for each other
// head; 0 means one second.
type ClusterStatusRequest struct {
	Timeout time.Duration `cbor:"1,keyasint,omitempty"`
}
