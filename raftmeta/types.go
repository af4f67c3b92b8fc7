package raftmeta

import (
	"time"

	"github.com/phobos-project/phobos/dag"
)

// JobStatus is where a job stands: dag.JobState, the one job-state
// vocabulary of phobos (its numbers are what the log and snapshots hold).
type JobStatus = dag.JobState

// The job states, as raftmeta has always named them.
const (
	JobSubmitted = dag.JobSubmitted
	JobRunning   = dag.JobRunning
	JobSucceeded = dag.JobSucceeded
	JobFailed    = dag.JobFailed
	JobCancelled = dag.JobCancelled
)

// rank orders statuses for the forward-only rule: all terminal states share
// the last rank.
func rank(s JobStatus) int {
	switch {
	case s == JobSubmitted:
		return 0
	case s == JobRunning:
		return 1
	default:
		return 2
	}
}

// Stage is one committed lowering stage of a job: its stage ID and the range
// [Base, Base+Count) of subtask indexes it was given.
type Stage struct {
	ID    dag.StageID `cbor:"1,keyasint"`
	Base  uint64      `cbor:"2,keyasint"`
	Count uint64      `cbor:"3,keyasint"`
	// Metas is what lowering was fed before this stage (see BeginStage).
	Metas []byte `cbor:"4,keyasint,omitempty"`
}

// Job is the replicated record of one submitted job. Graph and Options are
// opaque CBOR owned by the head; raftmeta never decodes them. Submitted and
// Finished come from the commands that set them (the leader's clock when it
// proposed them), never from the state machine's clock, so every replica
// holds the same record.
//
// A Job returned by Node.Job, Node.Jobs or FSM.Job shares its slices with the
// state machine: read them, never modify them.
type Job struct {
	Task      dag.TaskID     `cbor:"1,keyasint"`
	Graph     []byte         `cbor:"2,keyasint"`
	Options   []byte         `cbor:"3,keyasint,omitempty"`
	Status    JobStatus      `cbor:"4,keyasint"`
	Error     string         `cbor:"5,keyasint,omitempty"`
	Results   []dag.ObjectID `cbor:"6,keyasint,omitempty"` // see ResultRuns
	Stages    []Stage        `cbor:"7,keyasint,omitempty"`
	Submitted time.Time      `cbor:"8,keyasint"`
	Finished  time.Time      `cbor:"9,keyasint"`
	// Released says the driver released the results (ReleaseJob).
	Released bool `cbor:"10,keyasint,omitempty"`
	// Owner is the identity of the client that submitted the job.
	Owner string `cbor:"11,keyasint,omitempty"`
	// Lowering lists the leaders that began lowering the job since its
	// last committed stage (see owners.go).
	Lowering []string `cbor:"12,keyasint,omitempty"`
	// Cause is the kind of the error that failed the job (SetJobStatus).
	Cause dag.Kind `cbor:"13,keyasint,omitempty"`
	// ResultRuns are the result object IDs as runs (SetJobStatus); Results
	// holds them instead for a job whose status was set by an earlier head.
	// Read both with ResultIDs.
	ResultRuns []dag.ObjectRun `cbor:"14,keyasint,omitempty"`
	// ReleaseOnEnd says the driver released the job before it ended
	// (ReleaseOnEnd): its results are released when it ends.
	ReleaseOnEnd bool `cbor:"15,keyasint,omitempty"`
}

// ResultIDs returns the job's result object IDs, in order, from whichever
// form its record holds them in.
func (j Job) ResultIDs() []dag.ObjectID {
	if len(j.ResultRuns) == 0 {
		return j.Results
	}
	return dag.AppendRunIDs(make([]dag.ObjectID, 0, dag.RunsLen(j.ResultRuns)), j.ResultRuns)
}

// Raylet is the replicated identity of one raylet: who it is and where to
// reach it. Liveness (heartbeats, free slots, queue lengths) is soft state of
// the leader's scheduler and does not live in Raft.
type Raylet struct {
	ID            string    `cbor:"1,keyasint"`
	Addr          string    `cbor:"2,keyasint"`
	Slots         int       `cbor:"3,keyasint"`
	StoreCapacity int64     `cbor:"4,keyasint"`
	Registered    time.Time `cbor:"5,keyasint"`
}

// Times in commands and records must be zero or within [1970, 2100). They
// are kept to the microsecond, in UTC. The shared CBOR codec writes
// times as float seconds, which holds a microsecond exactly only within
// this range, and every replica must decode the same instant.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

func checkTime(what string, t time.Time) error {
	if !t.IsZero() && (t.Before(minTime) || !t.Before(maxTime)) {
		return invalid("%s: time %v is outside [%v, %v); pass the current time", what, t, minTime, maxTime)
	}
	return nil
}

// normTime rounds t to the microsecond in UTC, the precision the codec keeps.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Round(time.Microsecond).UTC()
}

// MaxRayletIDLen caps a raylet ID and address so that a careless caller cannot
// grow every replica's state without bound.
const MaxRayletIDLen = 256
