// Package wire defines the messages phobos processes exchange over
// transport sessions: method numbers and their CBOR request and reply
// bodies. Every struct uses integer keys (keyasint) so fields can be added
// without breaking older peers; never renumber a key or a method.
//
// wire holds no behaviour beyond small helpers on the messages.
package wire

import (
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/transport"
)

// Method numbers by area: 1-9 any head; 10-39 the leader's scheduler;
// 40-59 head to raylet; 60-79 replicated metadata (allocation, forwarding,
// membership); 80-99 object store and transfer.

// Methods served by every head.
const (
	// MethodLeader asks a head who the leader is. Any head answers.
	MethodLeader transport.Method = 1
	// MethodClusterStatus returns heads and raylets. Any head answers.
	MethodClusterStatus transport.Method = 2

	// Leader-only methods: a follower answers dag.KindNotLeader.
	MethodRegisterRaylet transport.Method = 10
	MethodPull           transport.Method = 11 // call; long-polls until work or timeout
	MethodComplete       transport.Method = 12 // one-way batch of completions
	MethodHeartbeat      transport.Method = 13 // one-way, or a call answered with Leader (the raylet's leader check)
	MethodGoodbye        transport.Method = 14 // call: the raylet is shutting down

	MethodSubmitJob  transport.Method = 20
	MethodWaitJob    transport.Method = 21
	MethodReleaseJob transport.Method = 22
	MethodCancelJob  transport.Method = 23
	MethodListJobs   transport.Method = 24
	// MethodPutObject registers an object a driver put on a raylet;
	// MethodReleaseObject forgets it and frees it there.
	MethodPutObject     transport.Method = 25
	MethodReleaseObject transport.Method = 26
	// MethodOpenPuts gives the caller a put task (an ID for its objects)
	// and a ticket to write them; MethodAttachPuts ties an existing put task
	// to a new session after a reconnect (and renews the ticket), so that
	// its objects outlive the old session. MethodShareObject lets another
	// client's jobs read one put object.
	MethodOpenPuts    transport.Method = 27
	MethodAttachPuts  transport.Method = 28
	MethodShareObject transport.Method = 29
	// MethodProxy carries a driver call a follower passes on to the leader,
	// with the identity of the driver that made it. Only heads may send it.
	MethodProxy transport.Method = 30
)

// Methods a head sends to a raylet over the raylet's session.
const (
	MethodFreeObjects    transport.Method = 40 // one-way
	MethodCancelSubtasks transport.Method = 41 // one-way
	MethodPeerLost       transport.Method = 42 // one-way
)

// Leader answers MethodLeader.
type Leader struct {
	ID   string `cbor:"1,keyasint,omitempty"`
	Addr string `cbor:"2,keyasint,omitempty"`
}

// RegisterRaylet introduces a raylet to the leader.
type RegisterRaylet struct {
	ID            string `cbor:"1,keyasint"`
	Addr          string `cbor:"2,keyasint"` // where peers and drivers reach its objects
	Slots         int    `cbor:"3,keyasint"`
	StoreCapacity int64  `cbor:"4,keyasint"`
	// Held lists the objects already in its store, so that a new leader
	// keeps what exists instead of computing it again.
	Held []HeldObject `cbor:"5,keyasint,omitempty"`
	// HTTP is the base URL of the raylet's web service ("" when it serves
	// none), which heads list in the cluster's status.
	HTTP string `cbor:"6,keyasint,omitempty"`
	// Pipeline says the raylet understands InputSpec.Pending: it holds a
	// subtask sent ahead of its inputs until they are made there. The
	// leader sends such subtasks only to raylets that say so.
	Pipeline bool `cbor:"7,keyasint,omitempty"`
}

// HeldObject is an object a raylet holds, with its size.
type HeldObject struct {
	ID   dag.ObjectID `cbor:"1,keyasint"`
	Size int64        `cbor:"2,keyasint"`
}

// RegisterReply answers RegisterRaylet.
type RegisterReply struct {
	HeadID            string        `cbor:"1,keyasint"`
	HeartbeatInterval time.Duration `cbor:"2,keyasint"`
	// Secret is the cluster secret that signs tickets (runtime/ticket):
	// the raylet checks drivers' object requests with it.
	Secret []byte `cbor:"3,keyasint,omitempty"`
}

// Pull asks for up to Credits subtasks. The head answers as soon as it has
// at least one, or with none after Wait.
type Pull struct {
	Credits int           `cbor:"1,keyasint"`
	Wait    time.Duration `cbor:"2,keyasint,omitempty"`
	// Done are completions riding on the pull; the head applies them
	// before it picks subtasks.
	Done []Completion `cbor:"3,keyasint,omitempty"`
	// FreesInReply says the raylet takes frees in PullReply.Free: objects
	// on it that Done made garbage then ride on the reply (when it goes at
	// once) instead of a FreeObjects message of their own.
	FreesInReply bool `cbor:"4,keyasint,omitempty"`
}

// PullReply carries subtasks, highest priority first, and objects the
// raylet is to delete before it runs them.
type PullReply struct {
	Subtasks []SubtaskSpec  `cbor:"1,keyasint,omitempty"`
	Free     []dag.ObjectID `cbor:"2,keyasint,omitempty"`
	// More says the head stopped at the pull's credits with more subtasks
	// queued for this raylet: its next pull is answered at once. (A head
	// that predates it never sets it; the raylet then takes it as idle and
	// reports completions without holding them.)
	More bool `cbor:"3,keyasint,omitempty"`

	intern []string // raylet addresses decoded lately (see reader)
}

// Reset empties r for decoding into again while keeping its memory: every
// spec, op and input keeps its slices' capacity, so decoding a reply no
// larger than earlier ones allocates nothing but strings and byte strings.
// Fields a reply omits stay zero.
//
// Only the specs up to the reply's length are emptied: those past it were
// emptied by an earlier Reset, since a decode sets a slice's length before
// it fills its elements from the front (a reply of a few subtasks into
// memory that once held a thousand must not cost a thousand resets: a
// raylet pulling a chain ahead resets a batch for every small reply).
func (r *PullReply) Reset() {
	for i := range r.Subtasks {
		r.Subtasks[i].reset()
	}
	r.Subtasks = r.Subtasks[:0]
	r.Free = r.Free[:0]
	r.More = false
}

func (s *SubtaskSpec) reset() {
	ops := s.Ops[:cap(s.Ops)]
	for j := range ops {
		o := &ops[j]
		*o = OpSpec{Args: o.Args[:0], Inputs: o.Inputs[:0], Index: o.Index[:0], Shape: o.Shape[:0]}
	}
	ins := s.Inputs[:cap(s.Inputs)]
	for k := range ins {
		locs := ins[k].Locations[:cap(ins[k].Locations)]
		clear(locs)
		ins[k] = InputSpec{Locations: locs[:0]}
	}
	*s = SubtaskSpec{Ops: s.Ops[:0], Outputs: s.Outputs[:0], Inputs: s.Inputs[:0]}
}

// SubtaskSpec is everything a raylet needs to run one subtask.
type SubtaskSpec struct {
	ID      dag.SubtaskID `cbor:"1,keyasint"`
	Attempt int           `cbor:"2,keyasint,omitempty"`
	Ops     []OpSpec      `cbor:"3,keyasint"`
	// Outputs lists, by output index, which op's result is exported: output
	// k is stored as object NewObjectID(ID, k).
	Outputs []int32     `cbor:"4,keyasint"`
	Inputs  []InputSpec `cbor:"5,keyasint,omitempty"`
	// OutputBytes estimates the bytes the outputs take (from their shapes),
	// for memory admission; 0 when unknown.
	OutputBytes int64 `cbor:"6,keyasint,omitempty"`
}

// WorkingSet is the store space a subtask needs while it runs: its pinned
// inputs and the outputs it writes.
func (s *SubtaskSpec) WorkingSet() int64 {
	n := s.OutputBytes
	for i := range s.Inputs {
		n += s.Inputs[i].Size
	}
	return n
}

// OpSpec is one chunk op in a subtask, in execution order.
type OpSpec struct {
	Op   dag.OpID `cbor:"1,keyasint"`
	Args []byte   `cbor:"2,keyasint,omitempty"`
	// Inputs refer to earlier ops of the subtask (k >= 0) or to the
	// subtask's external inputs (-(k+1) is Inputs[k] of the SubtaskSpec).
	Inputs []int32   `cbor:"3,keyasint,omitempty"`
	Index  []int32   `cbor:"4,keyasint,omitempty"`
	Shape  []int64   `cbor:"5,keyasint,omitempty"`
	DType  dag.DType `cbor:"6,keyasint"`
}

// InputSpec is an object a subtask reads from another subtask.
type InputSpec struct {
	Object dag.ObjectID `cbor:"1,keyasint"`
	Size   int64        `cbor:"2,keyasint"`
	// Locations are raylet addresses holding the object, best first
	// (none when Pending: it is made on the raylet that reads it).
	Locations []string `cbor:"3,keyasint,omitempty"`
	// Part, when not 0, says the subtask reads only part Part-1 of this
	// partitioned object (a shuffle); Size then estimates that part.
	Part int32 `cbor:"4,keyasint,omitempty"`
	// Pending says the object is not stored yet: the subtask that makes
	// it was dispatched to this same raylet ahead of the reader, which
	// waits for it there (and is dropped if it fails) rather than
	// fetching it.
	Pending bool `cbor:"5,keyasint,omitempty"`
}

// ExternalInput encodes a reference to the subtask's k-th external input.
func ExternalInput(k int) int32 { return int32(-(k + 1)) }

// IsExternal splits an OpSpec input reference.
func IsExternal(ref int32) (k int, ok bool) {
	if ref < 0 {
		return int(-ref - 1), true
	}
	return int(ref), false
}

// Complete reports finished (or failed) subtasks.
type Complete struct {
	Done []Completion `cbor:"1,keyasint"`
}

// Completion is the outcome of one attempt of one subtask.
//
// Its fields are ordered to pack (Kind and Slot fill the ID's padding). The
// head decodes them into a batch without pointers instead (Completions).
type Completion struct {
	ID dag.SubtaskID `cbor:"1,keyasint"`
	// Kind and Error describe a failure; Kind 0 with an empty Error is success.
	Kind dag.Kind `cbor:"4,keyasint,omitempty"`
	// Slot is the raylet's slot that ran the attempt (for timelines).
	Slot    int16 `cbor:"7,keyasint,omitempty"`
	Attempt int   `cbor:"2,keyasint,omitempty"`
	// Sizes are the byte sizes of the outputs, by output index (success only).
	Sizes []int64 `cbor:"3,keyasint,omitempty"`
	Error string  `cbor:"5,keyasint,omitempty"`
	// Fetched lists input objects the raylet copied into its store to run
	// the subtask; it now holds them too.
	Fetched []dag.ObjectID `cbor:"6,keyasint,omitempty"`
	// When the attempt ran, for timelines: its start (Unix nanoseconds,
	// the raylet's clock; 0: it never started), how long it took and the
	// part spent fetching inputs from peers, in microseconds (at most
	// MaxMicros, about 71 minutes: longer is reported as that).
	Started int64  `cbor:"8,keyasint,omitempty"`
	TookUS  uint32 `cbor:"9,keyasint,omitempty"`
	FetchUS uint32 `cbor:"10,keyasint,omitempty"`

	// Resent is the raylet's own note, never encoded: the completion went
	// out before in a call or message that failed, and may have reached a
	// leader already (see runtime/raylet's checkResent).
	Resent bool `cbor:"-"`
}

// MaxMicros is the longest time a Completion reports.
const MaxMicros = 1<<32 - 1

// Micros returns d in whole microseconds for a Completion, at most
// MaxMicros.
func Micros(d time.Duration) uint32 {
	return uint32(min(max(d.Microseconds(), 0), MaxMicros))
}

// Failed reports whether the attempt failed.
func (c *Completion) Failed() bool { return c.Kind != 0 || c.Error != "" }

// Heartbeat tells the leader a raylet is alive and how it is doing.
type Heartbeat struct {
	Store StoreStats `cbor:"1,keyasint"`
	// Running is the number of subtasks executing now.
	Running int `cbor:"2,keyasint"`
	// CertNotAfter is when the raylet's current certificate expires: it
	// changes when the raylet reloads a renewed one (zero without TLS).
	CertNotAfter time.Time `cbor:"3,keyasint,omitempty"`
}

// StoreStats summarises a raylet's object store: its occupancy now, and
// counters since the raylet started (spills, restores, transfers).
type StoreStats struct {
	Capacity int64 `cbor:"1,keyasint" json:"capacity"` // arena bytes
	Used     int64 `cbor:"2,keyasint" json:"used"`     // arena bytes in use
	Objects  int   `cbor:"3,keyasint" json:"objects"`  // objects held, in the arena or spilled
	Pinned   int   `cbor:"4,keyasint" json:"pinned"`   // objects pinned by readers

	Spilled      int   `cbor:"5,keyasint,omitempty" json:"spilled"`       // objects now only in spill files
	SpilledBytes int64 `cbor:"6,keyasint,omitempty" json:"spilled_bytes"` // their bytes
	SpillBytes   int64 `cbor:"7,keyasint,omitempty" json:"spill_bytes"`   // bytes in spill files (spilled objects and clean copies)
	Spills       int64 `cbor:"8,keyasint,omitempty" json:"spills"`        // objects written to spill files
	Restores     int64 `cbor:"9,keyasint,omitempty" json:"restores"`      // objects read back from spill files

	TransfersIn  int64 `cbor:"10,keyasint,omitempty" json:"transfers_in"`    // objects fetched from peers
	BytesIn      int64 `cbor:"11,keyasint,omitempty" json:"bytes_in"`        // their bytes
	TransfersOut int64 `cbor:"12,keyasint,omitempty" json:"transfers_out"`   // objects sent to peers and drivers
	BytesOut     int64 `cbor:"13,keyasint,omitempty" json:"bytes_out"`       // their bytes
	TransferErrs int64 `cbor:"14,keyasint,omitempty" json:"transfer_errors"` // failed fetch attempts (broken, bad checksum)
	Locates      int64 `cbor:"15,keyasint,omitempty" json:"locates"`         // objects lent to local readers (zero-copy)
}

// FreeObjects tells a raylet to delete objects nobody needs any more.
type FreeObjects struct {
	IDs []dag.ObjectID `cbor:"1,keyasint"`
}

// PeerLost tells a raylet that the head declared another raylet lost (its
// session closed or its heartbeats stopped), so that transfers from it
// stop waiting at once instead of when their streams time out.
type PeerLost struct {
	ID   string `cbor:"1,keyasint"`
	Addr string `cbor:"2,keyasint"`
}

// CancelSubtasks tells a raylet to interrupt running subtasks.
type CancelSubtasks struct {
	IDs []dag.SubtaskID `cbor:"1,keyasint"`
}

// JobOptions are a job's settings, chosen by the driver.
type JobOptions struct {
	Retries   int           `cbor:"1,keyasint,omitempty"` // re-runs of a failed subtask before FATAL; 0 = default
	ResultTTL time.Duration `cbor:"2,keyasint,omitempty"` // results are freed this long after the job ends unless released; 0 = default
	Fusion    string        `cbor:"3,keyasint,omitempty"` // "chain" (default) or "none"
	Name      string        `cbor:"4,keyasint,omitempty"`
	// NoPipeline keeps every subtask of the job at the head until its
	// inputs are stored (see head.Config.NoPipeline, which does so for
	// every job).
	NoPipeline bool `cbor:"5,keyasint,omitempty"`
}

// SubmitJob submits a tileable graph. RequestID makes a retried submission
// create the job once.
type SubmitJob struct {
	RequestID [16]byte          `cbor:"1,keyasint"`
	Graph     dag.TileableGraph `cbor:"2,keyasint"`
	Options   JobOptions        `cbor:"3,keyasint"`
}

// SubmitReply answers SubmitJob once the job is committed.
type SubmitReply struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// WaitJob waits up to Timeout for a job to end, then reports it.
type WaitJob struct {
	Task    dag.TaskID    `cbor:"1,keyasint"`
	Timeout time.Duration `cbor:"2,keyasint,omitempty"`
	// Results asks for the located results of a succeeded job; without it
	// the answer is the status alone (a job may have many result chunks).
	Results bool `cbor:"3,keyasint,omitempty"`
}

// JobRef names a job.
type JobRef struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// JobStatus describes a job.
type JobStatus struct {
	Task   dag.TaskID   `cbor:"1,keyasint"`
	Status dag.JobState `cbor:"2,keyasint"`
	Kind   dag.Kind     `cbor:"3,keyasint,omitempty"`
	Error  string       `cbor:"4,keyasint,omitempty"`
	// Subtasks and Finished count the job's subtasks.
	Subtasks  int         `cbor:"5,keyasint,omitempty"`
	Finished  int         `cbor:"6,keyasint,omitempty"`
	Results   []ResultRef `cbor:"7,keyasint,omitempty"`
	Name      string      `cbor:"8,keyasint,omitempty"`
	Submitted time.Time   `cbor:"9,keyasint,omitempty"`
	Ended     time.Time   `cbor:"10,keyasint,omitempty"`
	// Owner is the identity of the client that submitted the job.
	Owner string `cbor:"11,keyasint,omitempty"`
	// Ticket lets the owner read the results from the raylets holding
	// them; it comes with Results.
	Ticket *ticket.Ticket `cbor:"12,keyasint,omitempty"`
	// Cause is the kind of the error under Kind: a job FAILED (Kind 5)
	// because user code returned an error has Cause 12.
	Cause dag.Kind `cbor:"13,keyasint,omitempty"`
	// Released says the job's results were released (by ReleaseJob or at
	// the end of their TTL), or, for a job still running, will be as it
	// ends.
	Released bool `cbor:"14,keyasint,omitempty"`
}

// Terminal reports whether the job has ended.
func (j *JobStatus) Terminal() bool { return j.Status.Terminal() }

// ResultRef locates one output tileable of a job.
type ResultRef struct {
	Meta    dag.Meta    `cbor:"1,keyasint"`
	NSplits [][]int64   `cbor:"2,keyasint,omitempty"`
	Chunks  []ObjectRef `cbor:"3,keyasint"`
}

// ObjectRef locates one object.
type ObjectRef struct {
	ID        dag.ObjectID `cbor:"1,keyasint"`
	Size      int64        `cbor:"2,keyasint"`
	Meta      dag.Meta     `cbor:"3,keyasint"`
	Locations []string     `cbor:"4,keyasint,omitempty"`
}

// ListJobs answers MethodListJobs.
type ListJobs struct {
	Jobs []JobStatus `cbor:"1,keyasint"`
}

// ClusterStatus answers MethodClusterStatus.
type ClusterStatus struct {
	Leader  string       `cbor:"1,keyasint"`
	Term    uint64       `cbor:"2,keyasint"`
	Heads   []HeadInfo   `cbor:"3,keyasint"`
	Raylets []RayletInfo `cbor:"4,keyasint"`
}

// HeadInfo describes one head as the answering head sees it.
type HeadInfo struct {
	ID          string `cbor:"1,keyasint" json:"id"`
	Addr        string `cbor:"2,keyasint" json:"addr"`
	Role        string `cbor:"3,keyasint" json:"role"`
	CommitIndex uint64 `cbor:"4,keyasint" json:"commit_index"`
	Term        uint64 `cbor:"5,keyasint" json:"term,omitempty"`
	// AppliedIndex and Error: see HeadSelf (runtime/wire/meta.go); Error
	// says why an unreachable head did not answer.
	AppliedIndex uint64 `cbor:"6,keyasint,omitempty" json:"applied_index,omitempty"`
	Error        string `cbor:"7,keyasint,omitempty" json:"error,omitempty"`
	// CertNotAfter is when the head's certificate expires (zero without TLS).
	CertNotAfter time.Time `cbor:"8,keyasint,omitempty" json:"cert_not_after,omitzero"`
	// Version is the head's build (module version and VCS revision;
	// empty from an older head).
	Version string `cbor:"9,keyasint,omitempty" json:"version,omitempty"`
	// HTTP is the base URL of the head's web service ("" when it serves none).
	HTTP string `cbor:"10,keyasint,omitempty" json:"http,omitempty"`
}

// RayletInfo describes one registered raylet.
type RayletInfo struct {
	ID    string     `cbor:"1,keyasint" json:"id"`
	Addr  string     `cbor:"2,keyasint" json:"addr"`
	State string     `cbor:"3,keyasint" json:"state"` // alive, draining, drained, left, lost, registered (known to Raft; asked of a follower)
	Slots int        `cbor:"4,keyasint" json:"slots"`
	Store StoreStats `cbor:"5,keyasint" json:"store"`
	// CertNotAfter is when the raylet's certificate expires, as the
	// leader saw it at registration (zero without TLS).
	CertNotAfter time.Time `cbor:"6,keyasint,omitempty" json:"cert_not_after,omitzero"`
	// HTTP is the base URL of the raylet's web service, as it registered.
	HTTP string `cbor:"7,keyasint,omitempty" json:"http,omitempty"`
	// Busy and Queued are the subtasks running on it and queued for it at
	// the leader (alive raylets, from the leader).
	Busy   int `cbor:"8,keyasint,omitempty" json:"busy,omitempty"`
	Queued int `cbor:"9,keyasint,omitempty" json:"queued,omitempty"`
}

// Bulk streams: the opener writes one StreamRequest (transport.WriteMsg).
// For StreamGetObject the server answers with one ObjectHeader and, if
// found, Size raw bytes, then an ObjectTrailer if Checksum was asked for.
// StreamLocateObject is in objects.go.

// StreamGetObject asks a raylet for an object's bytes.
const StreamGetObject = 1

// StreamRequest opens a bulk stream.
type StreamRequest struct {
	Kind int          `cbor:"1,keyasint"`
	ID   dag.ObjectID `cbor:"2,keyasint"`
	// Checksum asks for an ObjectTrailer after the bytes (StreamGetObject).
	Checksum bool `cbor:"3,keyasint,omitempty"`
	// Offset and Length ask for a range of the object's bytes
	// (StreamGetObject); Length 0 means to the end. The header still gives
	// the whole object's Size; the bytes sent are the range, and the
	// trailer's CRC covers just them. A fetcher splits a large object into
	// ranges on several connections.
	Offset int64 `cbor:"4,keyasint,omitempty"`
	Length int64 `cbor:"5,keyasint,omitempty"`
	// Part, when not 0, asks for part Part-1 of a partitioned object (a
	// shuffle read; see dag.PartitionRange) instead of a byte range: the
	// header then gives the part's size and a Bytes meta of it.
	Part int32 `cbor:"6,keyasint,omitempty"`
	// Size and Meta describe the object a StreamPutObject carries.
	Size int64  `cbor:"7,keyasint,omitempty"`
	Meta []byte `cbor:"8,keyasint,omitempty"`
	// Ticket authorises a driver's request (raylets need none): read for
	// StreamGetObject and StreamLocateObject, write for StreamPutObject.
	Ticket *ticket.Ticket `cbor:"9,keyasint,omitempty"`
	// SkipCRC, with Checksum, lets the sender leave the trailer's CRC32C
	// zero instead of computing it: the connection is TLS, whose AEAD
	// already authenticates every byte. The trailer still comes, so that
	// a sender failing after the header can say so. Older senders ignore
	// it and send the CRC.
	SkipCRC bool `cbor:"10,keyasint,omitempty"`
}

// StreamPutObject stores a driver's object on a raylet: after the request
// (ID, Size, Meta) come Size raw bytes and an ObjectTrailer with their
// CRC-32C; the raylet answers one ObjectHeader (Size set on success, Kind
// and Error otherwise) once the object is sealed.
const StreamPutObject = 3

// PutObject registers an object a driver stored on a raylet, so that
// graphs can read it (see dag.ExternalReader).
type PutObject struct {
	ID     dag.ObjectID `cbor:"1,keyasint"`
	Raylet string       `cbor:"2,keyasint"` // the raylet's ID
	Size   int64        `cbor:"3,keyasint"`
}

// OpenPuts asks for a put task. RequestID makes a retry return the same one.
type OpenPuts struct {
	RequestID [16]byte `cbor:"1,keyasint"`
}

// AttachPuts ties put task Task to the caller's session (after a reconnect).
type AttachPuts struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// PutSession answers OpenPuts and AttachPuts: the put task and a ticket to
// write and read its objects.
type PutSession struct {
	Task   dag.TaskID    `cbor:"1,keyasint"`
	Ticket ticket.Ticket `cbor:"2,keyasint"`
	// Grace is how long the put task's objects outlive the last session
	// attached to it.
	Grace time.Duration `cbor:"3,keyasint,omitempty"`
}

// ShareObject lets principal With read put object ID in its jobs.
type ShareObject struct {
	ID   dag.ObjectID `cbor:"1,keyasint"`
	With string       `cbor:"2,keyasint"`
}

// Proxy is a driver call passed on by a follower: the method and body as
// the driver sent them, and who the driver is.
type Proxy struct {
	Method transport.Method `cbor:"1,keyasint"`
	Caller string           `cbor:"2,keyasint"`
	Role   transport.Role   `cbor:"3,keyasint"`
	Body   []byte           `cbor:"4,keyasint"`
}

// ObjectRefMsg names one object.
type ObjectRefMsg struct {
	ID dag.ObjectID `cbor:"1,keyasint"`
}

// Range returns the byte range of an object of size bytes that r asks
// for, or ok=false if it lies outside the object.
func (r *StreamRequest) Range(size int64) (off, n int64, ok bool) {
	if r.Offset < 0 || r.Length < 0 || r.Offset > size {
		return 0, 0, false
	}
	n = size - r.Offset
	if r.Length > 0 {
		if r.Length > n {
			return 0, 0, false
		}
		n = r.Length
	}
	return r.Offset, n, true
}

// ObjectHeader precedes an object's bytes on a bulk stream.
type ObjectHeader struct {
	Size  int64    `cbor:"1,keyasint"`
	Meta  []byte   `cbor:"2,keyasint,omitempty"`
	Kind  dag.Kind `cbor:"3,keyasint,omitempty"` // non-zero: not served, see Error
	Error string   `cbor:"4,keyasint,omitempty"`
}
