package phobos

import (
	"fmt"
	"strings"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// JobStatus is a job as the head leader reports it. Its JSON form is what
// `phobos jobs --json` prints. A JobStatus is a value: the client does not
// change it after returning it.
type JobStatus struct {
	Task dag.TaskID `json:"job"`
	// Name is the name given at submission (JobOptions.Name).
	Name string `json:"name,omitempty"`
	// Status is SUBMITTED, RUNNING, SUCCEEDED, FAILED or CANCELLED.
	Status JobState `json:"status"`
	// Subtasks counts the subtasks lowered so far (every stage lowered so
	// far), Finished those of them that finished.
	Subtasks int `json:"subtasks"`
	Finished int `json:"finished"`
	// Owner is the identity of the client that submitted the job.
	Owner     string    `json:"owner,omitempty"`
	Submitted time.Time `json:"submitted,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	// Error says why a failed or cancelled job ended; Err returns it as an
	// error with its kind.
	Error string `json:"error,omitempty"`
	// Released says the job's results were released (Job.Release, or the
	// end of their TTL); a job released while it runs says so too, and its
	// results go as it ends.
	Released bool `json:"released,omitempty"`

	kind, cause dag.Kind
}

// Terminal reports whether the job has ended.
func (s JobStatus) Terminal() bool { return s.Status.Terminal() }

// Err returns why the job failed or was cancelled, as the error Done and
// Wait return: errors.Is matches ErrFatal or ErrCancelled, and for a job
// failed by user code ErrUserCode too. It is nil for a job that has not
// ended or that succeeded.
func (s JobStatus) Err() error {
	if !s.Terminal() || (s.Status == JobSucceeded && s.Error == "") {
		return nil
	}
	kind := s.kind
	if kind == 0 {
		kind = dag.KindFatal
	}
	err := &dag.Error{Kind: kind, Msg: fmt.Sprintf("phobos: job %d %s: %s", s.Task, strings.ToLower(s.Status.String()), s.Error)}
	if s.cause != 0 {
		err.Err = s.cause // errors.Is(err, ErrUserCode) and the like
	}
	return err
}

// JobStatusOf converts a job's status as the wire carries it. Drivers get
// JobStatus values from Client and Job; programs that speak the protocol
// themselves (the CLI) convert with it.
func JobStatusOf(st *wire.JobStatus) JobStatus {
	return JobStatus{
		Task: st.Task, Name: st.Name, Status: st.Status, Subtasks: st.Subtasks, Finished: st.Finished,
		Owner: st.Owner, Submitted: st.Submitted, Ended: st.Ended, Error: st.Error, Released: st.Released,
		kind: st.Kind, cause: st.Cause,
	}
}

// ClusterStatus is the cluster as one head sees it: the leader, the heads
// (Raft voters) and the raylets. Its JSON form is what `phobos status
// --json` prints; Heads and Raylets are never nil, so they print as
// arrays.
type ClusterStatus struct {
	Leader  string         `json:"leader"`
	Term    uint64         `json:"term"`
	Heads   []HeadStatus   `json:"heads"`
	Raylets []RayletStatus `json:"raylets"`
	// Warnings say what puts the cluster at risk: fewer than three
	// voters, or so many unreachable that one more lost head breaks
	// quorum (see QuorumWarnings).
	Warnings []string `json:"warnings,omitempty"`
}

// HeadStatus is one head as the answering head sees it.
type HeadStatus struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Role is leader, follower or candidate, or unreachable (then Error
	// says why it did not answer).
	Role         string `json:"role"`
	CommitIndex  uint64 `json:"commit_index"`
	Term         uint64 `json:"term,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	Error        string `json:"error,omitempty"`
	// CertNotAfter is when the head's certificate expires (zero without
	// TLS).
	CertNotAfter time.Time `json:"cert_not_after,omitzero"`
	// Version is the head's build: module version and VCS revision
	// (empty from a head older than the field).
	Version string `json:"version,omitempty"`
	// HTTP is the base URL of the head's web service ("" when it serves none).
	HTTP string `json:"http,omitempty"`
}

// RayletStatus is one raylet as the leader sees it.
type RayletStatus struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// State is RayletAlive, RayletDraining, RayletDrained, RayletLeft,
	// RayletLost or RayletRegistered.
	State string     `json:"state"`
	Slots int        `json:"slots"`
	Store StoreStats `json:"store"`
	// CertNotAfter is when the raylet's certificate expires, as the leader
	// saw it at registration (zero without TLS).
	CertNotAfter time.Time `json:"cert_not_after,omitzero"`
	// HTTP is the base URL of the raylet's web service, as it registered.
	HTTP string `json:"http,omitempty"`
}

// The values of RayletStatus.State.
const (
	RayletAlive = "alive"
	RayletLost  = "lost"
	// RayletDraining takes no new work while some still runs on it;
	// RayletDrained runs nothing (see Client.DrainRaylet).
	RayletDraining = "draining"
	RayletDrained  = "drained"
	// RayletLeft stopped cleanly (it said goodbye). Lost and left raylets
	// are purged from the status after a while (the head's
	// RayletPurgeAfter, 1h by default).
	RayletLeft = "left"
	// RayletRegistered is a raylet known to Raft that has not connected
	// to the answering head.
	RayletRegistered = "registered"
)

// StoreStats describe a raylet's object store and its transfers; the
// counters run from the raylet's start.
type StoreStats struct {
	Capacity int64 `json:"capacity"` // arena bytes
	Used     int64 `json:"used"`     // arena bytes in use
	Objects  int   `json:"objects"`  // objects held, in the arena or spilled
	Pinned   int   `json:"pinned"`   // objects pinned by readers

	Spilled      int   `json:"spilled"`       // objects now only in spill files
	SpilledBytes int64 `json:"spilled_bytes"` // their bytes
	SpillBytes   int64 `json:"spill_bytes"`   // bytes in spill files (spilled objects and clean copies)
	Spills       int64 `json:"spills"`        // objects written to spill files
	Restores     int64 `json:"restores"`      // objects read back from spill files

	TransfersIn  int64 `json:"transfers_in"`    // objects fetched from peers
	BytesIn      int64 `json:"bytes_in"`        // their bytes
	TransfersOut int64 `json:"transfers_out"`   // objects sent to peers and drivers
	BytesOut     int64 `json:"bytes_out"`       // their bytes
	TransferErrs int64 `json:"transfer_errors"` // failed fetch attempts (broken, bad checksum)
	Locates      int64 `json:"locates"`         // objects lent to local readers (zero-copy)
}

// ClusterStatusOf converts a cluster status as the wire carries it (see
// JobStatusOf).
func ClusterStatusOf(st *wire.ClusterStatus) ClusterStatus {
	out := ClusterStatus{Leader: st.Leader, Term: st.Term, Heads: make([]HeadStatus, len(st.Heads)), Raylets: make([]RayletStatus, len(st.Raylets))}
	for i, h := range st.Heads {
		out.Heads[i] = HeadStatus{ID: h.ID, Addr: h.Addr, Role: h.Role, Term: h.Term, CommitIndex: h.CommitIndex,
			AppliedIndex: h.AppliedIndex, Error: h.Error, CertNotAfter: h.CertNotAfter, Version: h.Version, HTTP: h.HTTP}
	}
	for i, r := range st.Raylets {
		out.Raylets[i] = RayletStatus{ID: r.ID, Addr: r.Addr, State: r.State, Slots: r.Slots, Store: StoreStats(r.Store), CertNotAfter: r.CertNotAfter, HTTP: r.HTTP}
	}
	out.Warnings = QuorumWarnings(out.Heads)
	return out
}

// QuorumWarnings says when the cluster cannot lose a head: it has fewer
// than three voters (losing one stops a two-head cluster, and one head
// has no spare), or enough voters are unreachable that one more loss
// breaks quorum. heads are the voters as ClusterStatus lists them.
func QuorumWarnings(heads []HeadStatus) []string {
	n := len(heads)
	if n == 0 {
		return nil
	}
	quorum := n/2 + 1
	var down []string
	for _, h := range heads {
		if h.Role == "unreachable" {
			down = append(down, h.ID)
		}
	}
	up := n - len(down)
	var out []string
	switch {
	case up < quorum:
		out = append(out, fmt.Sprintf("no quorum: %d of %d heads are unreachable (%s); the cluster cannot make progress until %d of them are back",
			len(down), n, strings.Join(down, ", "), quorum-up))
	case up-1 < quorum && len(down) > 0:
		out = append(out, fmt.Sprintf("the cluster cannot lose a head: %d of %d heads are unreachable (%s) and losing one more breaks quorum; bring them back or replace them",
			len(down), n, strings.Join(down, ", ")))
	}
	if n < 3 {
		out = append(out, fmt.Sprintf("only %d head(s) vote: losing one stops the cluster; run 3 (or 5) heads to survive the loss of one (or two)", n))
	}
	return out
}
