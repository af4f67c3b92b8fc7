package raftmeta

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// CommandType names a command on the wire. Values are numbered for the Raft
// log; never renumber one.
type CommandType uint8

const (
	TypeAllocTask        CommandType = 1
	TypeAllocStage       CommandType = 2
	TypeAllocSubtasks    CommandType = 3
	TypeSubmitJob        CommandType = 4
	TypeBeginStage       CommandType = 5
	TypeSetJobStatus     CommandType = 6
	TypeDeleteJob        CommandType = 7
	TypeRegisterRaylet   CommandType = 8
	TypeDeregisterRaylet CommandType = 9
	TypeReleaseJob       CommandType = 10
	TypeReleaseOnEnd     CommandType = 17
)

var commandTypeNames = [...]string{
	TypeAllocTask:        "AllocTask",
	TypeAllocStage:       "AllocStage",
	TypeAllocSubtasks:    "AllocSubtasks",
	TypeSubmitJob:        "SubmitJob",
	TypeBeginStage:       "BeginStage",
	TypeSetJobStatus:     "SetJobStatus",
	TypeDeleteJob:        "DeleteJob",
	TypeRegisterRaylet:   "RegisterRaylet",
	TypeDeregisterRaylet: "DeregisterRaylet",
	TypeReleaseJob:       "ReleaseJob",
	TypeOpenPuts:         "OpenPuts",
	TypeClosePuts:        "ClosePuts",
	TypeSharePut:         "SharePut",
	TypeBeginLowering:    "BeginLowering",
	TypeEndLowering:      "EndLowering",
	TypeSetSecret:        "SetSecret",
	TypeReleaseOnEnd:     "ReleaseOnEnd",
}

func (t CommandType) String() string {
	if t >= TypeAllocTask && int(t) < len(commandTypeNames) {
		return commandTypeNames[t]
	}
	return fmt.Sprintf("CommandType(%d)", uint8(t))
}

// RequestID identifies one logical request. The caller picks it at random
// (NewRequestID) and reuses it when it retries the same request, so that a
// retry after an unknown outcome is answered from the dedupe table instead of
// being applied twice. The zero RequestID is invalid.
type RequestID [16]byte

// NewRequestID returns a random request ID.
func NewRequestID() RequestID {
	var id RequestID
	rand.Read(id[:]) // never fails (crypto/rand crashes the process instead)
	return id
}

// IsZero reports whether id is the zero (invalid) ID.
func (id RequestID) IsZero() bool { return id == RequestID{} }

// String returns the 32 hex digits of id.
func (id RequestID) String() string { return hex.EncodeToString(id[:]) }

// Body is the payload of a command: one of AllocTask, AllocStage,
// AllocSubtasks, SubmitJob, BeginStage, SetJobStatus, DeleteJob, ReleaseJob,
// ReleaseOnEnd, RegisterRaylet, DeregisterRaylet, and those of owners.go.
// The set is closed.
type Body interface {
	Type() CommandType
	// validate checks what can be checked without the state, so that the
	// leader rejects obviously bad requests before a Raft round trip. The
	// state machine checks again: it is the authority.
	validate() error
}

// Command is one replicated write: a request ID chosen by the caller and a
// body. A Command is a plain value; it is safe to share once built.
type Command struct {
	RequestID RequestID
	Body      Body
}

// Validate checks what can be checked without the state: a body, a
// non-zero request ID and the body's own fields (a zero task ID, N = 0, a
// time out of range). It is a dag.KindInvalidArgument error naming the
// problem. The state machine checks again; Validate lets a head refuse a
// hopeless command before it travels to the leader.
func (c Command) Validate() error {
	if c.Body == nil {
		return invalid("command %s has no body", c.RequestID)
	}
	if c.RequestID.IsZero() {
		return invalid("%s command: zero request ID; pick 16 random bytes (NewRequestID) and reuse them when retrying", c.Body.Type())
	}
	return c.Body.validate()
}

// AllocTask allocates the next task ID. Result.Task holds it.
type AllocTask struct{}

// AllocStage allocates the next stage ID of Task. Result.Stage holds it.
type AllocStage struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// AllocSubtasks allocates N subtask indexes of (Task, Stage); the range is
// [Result.Base, Result.Base+Result.Count).
type AllocSubtasks struct {
	Task  dag.TaskID  `cbor:"1,keyasint"`
	Stage dag.StageID `cbor:"2,keyasint"`
	N     uint64      `cbor:"3,keyasint"`
}

// SubmitJob allocates a task ID and records a SUBMITTED job with the given
// tileable graph and options (opaque CBOR). Time is the submission time as
// the proposer saw it. Result.Task holds the new task ID.
type SubmitJob struct {
	Graph   []byte    `cbor:"1,keyasint"`
	Options []byte    `cbor:"2,keyasint,omitempty"`
	Time    time.Time `cbor:"3,keyasint"`
	// Owner is the submitting client's identity (Job.Owner).
	Owner string `cbor:"4,keyasint,omitempty"`
	// Leader, when set, is the head that will lower the job: the job
	// starts with its lowering marked in flight there (Job.Lowering).
	Leader string `cbor:"5,keyasint,omitempty"`
}

// BeginStage allocates a stage ID of Task and N subtask indexes of that stage,
// and appends the Stage to the job record, in one entry. Result.Stage,
// Result.Base and Result.Count describe it.
type BeginStage struct {
	Task dag.TaskID `cbor:"1,keyasint"`
	N    uint64     `cbor:"2,keyasint"`
	// Metas is what lowering was fed (the computed metas of earlier stages'
	// objects) before it lowered this stage, as opaque CBOR: a new leader
	// feeds the same to lower the stage to the same subtasks.
	Metas []byte `cbor:"3,keyasint,omitempty"`
}

// SetJobStatus moves a job forward. Error and the results are stored as
// given; Time becomes Job.Finished when Status is terminal.
//
// The results come in one of two forms. Heads write ResultRuns: the result
// object IDs as runs of consecutive subtasks (a job of ten million results
// in order is one run of a few bytes, where the list took 17 bytes an ID in
// every replica's log, log cache and state). Results, the list, is what
// earlier heads wrote; such entries still decode and apply. A command
// holds at most one of the two.
type SetJobStatus struct {
	Task    dag.TaskID     `cbor:"1,keyasint"`
	Status  JobStatus      `cbor:"2,keyasint"`
	Error   string         `cbor:"3,keyasint,omitempty"`
	Results []dag.ObjectID `cbor:"4,keyasint,omitempty"`
	Time    time.Time      `cbor:"5,keyasint"`
	// Cause is the kind of the error that failed the job (user code, a
	// missing function, ...), beside its status.
	Cause      dag.Kind        `cbor:"6,keyasint,omitempty"`
	ResultRuns []dag.ObjectRun `cbor:"7,keyasint,omitempty"`
}

// DeleteJob forgets a terminal job and its stage and subtask sequences. The
// task ID is never handed out again.
type DeleteJob struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// ReleaseJob records that a terminal job's results were released by its
// driver, so that no leader keeps or rebuilds them.
type ReleaseJob struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// ReleaseOnEnd records that a job's driver released it before it ended:
// whichever leader records its end releases its results then (ReleaseJob),
// and a leader that takes over finds the request in the record.
type ReleaseOnEnd struct {
	Task dag.TaskID `cbor:"1,keyasint"`
}

// RegisterRaylet records (or replaces) a raylet's identity and address.
type RegisterRaylet struct {
	Raylet Raylet `cbor:"1,keyasint"`
}

// DeregisterRaylet forgets a raylet.
type DeregisterRaylet struct {
	ID string `cbor:"1,keyasint"`
}

func (AllocTask) Type() CommandType        { return TypeAllocTask }
func (AllocStage) Type() CommandType       { return TypeAllocStage }
func (AllocSubtasks) Type() CommandType    { return TypeAllocSubtasks }
func (SubmitJob) Type() CommandType        { return TypeSubmitJob }
func (BeginStage) Type() CommandType       { return TypeBeginStage }
func (SetJobStatus) Type() CommandType     { return TypeSetJobStatus }
func (DeleteJob) Type() CommandType        { return TypeDeleteJob }
func (RegisterRaylet) Type() CommandType   { return TypeRegisterRaylet }
func (DeregisterRaylet) Type() CommandType { return TypeDeregisterRaylet }
func (ReleaseJob) Type() CommandType       { return TypeReleaseJob }
func (ReleaseOnEnd) Type() CommandType     { return TypeReleaseOnEnd }

func invalid(format string, args ...any) error {
	return dag.Errorf(dag.KindInvalidArgument, format, args...)
}

func (AllocTask) validate() error { return nil }

func (c AllocStage) validate() error {
	if c.Task == 0 {
		return invalid("alloc stage: task 0 is not a task ID; pass the ID AllocTask or SubmitJob returned")
	}
	return nil
}

func (c AllocSubtasks) validate() error {
	switch {
	case c.Task == 0:
		return invalid("alloc subtasks: task 0 is not a task ID; pass the ID AllocTask or SubmitJob returned")
	case c.Stage == 0:
		return invalid("alloc subtasks: stage 0 of task %d is not a stage ID; pass the ID AllocStage returned", c.Task)
	}
	return validateCount("alloc subtasks", c.N)
}

func validateCount(what string, n uint64) error {
	switch {
	case n == 0:
		return invalid("%s: N is 0; ask for at least one subtask index", what)
	case n > dag.MaxSubtaskIndex:
		return invalid("%s: N = %d is more than a stage can ever hold (%d)", what, n, uint64(dag.MaxSubtaskIndex))
	}
	return nil
}

func (c SubmitJob) validate() error {
	if len(c.Graph) == 0 {
		return invalid("submit job: the graph is empty; submit the CBOR-encoded tileable graph")
	}
	if len(c.Owner) > MaxOwnerLen || len(c.Leader) > MaxOwnerLen {
		return invalid("submit job: owner %.40q or leader %.40q is longer than %d bytes", c.Owner, c.Leader, MaxOwnerLen)
	}
	return checkTime("submit job", c.Time)
}

func (c BeginStage) validate() error {
	if c.Task == 0 {
		return invalid("begin stage: task 0 is not a task ID; pass the ID SubmitJob returned")
	}
	if c.N == 0 {
		return nil // a stage may be empty (its data-dependent tiling made no subtasks)
	}
	if len(c.Metas) > maxStageMetas {
		return invalid("begin stage: %d bytes of metas is more than %d", len(c.Metas), maxStageMetas)
	}
	return validateCount("begin stage", c.N)
}

// maxStageMetas bounds the metas recorded with a stage.
const maxStageMetas = 16 << 20

func (c SetJobStatus) validate() error {
	switch {
	case c.Task == 0:
		return invalid("set job status: task 0 is not a task ID; pass the ID SubmitJob returned")
	case !c.Status.Valid():
		return invalid("set job status: %v is not a job status", c.Status)
	case c.Status == JobSubmitted:
		return invalid("set job status: job %d cannot be set back to SUBMITTED", c.Task)
	case len(c.Results) > 0 && len(c.ResultRuns) > 0:
		return invalid("set job %d status: both a result list and result runs; send one", c.Task)
	}
	for _, r := range c.ResultRuns {
		if err := r.Check(); err != nil {
			return invalid("set job %d status: %v", c.Task, err)
		}
	}
	return checkTime(fmt.Sprintf("set job %d status", c.Task), c.Time)
}

func (c DeleteJob) validate() error {
	if c.Task == 0 {
		return invalid("delete job: task 0 is not a task ID")
	}
	return nil
}

func (c ReleaseJob) validate() error {
	if c.Task == 0 {
		return invalid("release job: task 0 is not a task ID")
	}
	return nil
}

func (c ReleaseOnEnd) validate() error {
	if c.Task == 0 {
		return invalid("release job on its end: task 0 is not a task ID")
	}
	return nil
}

func (c RegisterRaylet) validate() error {
	r := c.Raylet
	switch {
	case r.ID == "" || len(r.ID) > MaxRayletIDLen:
		return invalid("register raylet: ID %q must be 1 to %d bytes", r.ID, MaxRayletIDLen)
	case r.Addr == "" || len(r.Addr) > MaxRayletIDLen:
		return invalid("register raylet %q: address %q must be 1 to %d bytes", r.ID, r.Addr, MaxRayletIDLen)
	case r.Slots < 0:
		return invalid("register raylet %q: %d slots; slots cannot be negative", r.ID, r.Slots)
	case r.StoreCapacity < 0:
		return invalid("register raylet %q: store capacity %d; capacity cannot be negative", r.ID, r.StoreCapacity)
	}
	return checkTime(fmt.Sprintf("register raylet %q", r.ID), r.Registered)
}

func (c DeregisterRaylet) validate() error {
	if c.ID == "" {
		return invalid("deregister raylet: empty raylet ID")
	}
	return nil
}

// envelope is a command as it sits in the Raft log.
type envelope struct {
	Type      CommandType      `cbor:"1,keyasint"`
	RequestID []byte           `cbor:"2,keyasint"`
	Body      codec.RawMessage `cbor:"3,keyasint"`
}

// EncodeCommand returns the bytes of c as they go into the Raft log (and as a
// head may forward them to the leader). It fails only for a nil Body.
func EncodeCommand(c Command) ([]byte, error) {
	if c.Body == nil {
		return nil, invalid("encode command %s: no body", c.RequestID)
	}
	body, err := codec.Marshal(c.Body)
	if err != nil {
		return nil, fmt.Errorf("encode %s command %s: %w", c.Body.Type(), c.RequestID, err)
	}
	data, err := codec.Marshal(envelope{Type: c.Body.Type(), RequestID: c.RequestID[:], Body: body})
	if err != nil {
		return nil, fmt.Errorf("encode %s command %s: %w", c.Body.Type(), c.RequestID, err)
	}
	return data, nil
}

// DecodeCommand parses bytes written by EncodeCommand. Malformed input, or
// a command that no state could accept (a zero task ID, N = 0, a time out of
// range), is a dag.KindInvalidArgument error, never a panic. Whether the
// command fits the current state is for the state machine to say.
func DecodeCommand(data []byte) (Command, error) {
	typ, id, raw, err := decodeEnvelope(data)
	if err != nil {
		return Command{}, err
	}
	body, err := decodeBody(typ, raw)
	if err != nil {
		return Command{}, err
	}
	if err := body.validate(); err != nil {
		return Command{}, err
	}
	return Command{RequestID: id, Body: body}, nil
}

func decodeEnvelope(data []byte) (CommandType, RequestID, []byte, error) {
	var env envelope
	var id RequestID
	if err := codec.Unmarshal(data, &env); err != nil {
		return 0, id, nil, invalid("decode command: malformed CBOR envelope: %w", err)
	}
	if len(env.RequestID) != len(id) {
		return 0, id, nil, invalid("decode %s command: request ID is %d bytes, want %d", env.Type, len(env.RequestID), len(id))
	}
	copy(id[:], env.RequestID)
	if id.IsZero() {
		return 0, id, nil, invalid("decode %s command: zero request ID; pick one with NewRequestID", env.Type)
	}
	return env.Type, id, env.Body, nil
}

func decodeBody(typ CommandType, raw []byte) (Body, error) {
	var body Body
	var err error
	switch typ {
	case TypeAllocTask:
		body, err = decodeAs[AllocTask](raw)
	case TypeAllocStage:
		body, err = decodeAs[AllocStage](raw)
	case TypeAllocSubtasks:
		body, err = decodeAs[AllocSubtasks](raw)
	case TypeSubmitJob:
		body, err = decodeAs[SubmitJob](raw)
	case TypeBeginStage:
		body, err = decodeAs[BeginStage](raw)
	case TypeSetJobStatus:
		body, err = decodeAs[SetJobStatus](raw)
	case TypeDeleteJob:
		body, err = decodeAs[DeleteJob](raw)
	case TypeRegisterRaylet:
		body, err = decodeAs[RegisterRaylet](raw)
	case TypeDeregisterRaylet:
		body, err = decodeAs[DeregisterRaylet](raw)
	case TypeReleaseJob:
		body, err = decodeAs[ReleaseJob](raw)
	case TypeReleaseOnEnd:
		body, err = decodeAs[ReleaseOnEnd](raw)
	default:
		var ok bool
		if body, err, ok = decodeOwners(typ, raw); ok {
			break
		}
		return nil, invalid("decode command: unknown command type %d; is this head older than the leader that wrote it?", uint8(typ))
	}
	if err != nil {
		return nil, invalid("decode %s command: malformed CBOR body: %w", typ, err)
	}
	return body, nil
}

func decodeAs[T Body](raw []byte) (Body, error) {
	var v T
	if len(raw) == 0 || raw[0]>>5 != 5 { // CBOR major type 5: a map
		return v, fmt.Errorf("the body is not a CBOR map")
	}
	if err := codec.Unmarshal(raw, &v); err != nil {
		return v, err
	}
	return v, nil
}

// Result is what the state machine answered to one command: the IDs it
// allocated, or the error it refused the command with. Results are values
// and are remembered in the dedupe table, so they hold no pointers into the
// state.
type Result struct {
	Task  dag.TaskID  `cbor:"1,keyasint,omitempty"`
	Stage dag.StageID `cbor:"2,keyasint,omitempty"`
	// Base and Count describe a range [Base, Base+Count) of subtask indexes.
	Base  uint64 `cbor:"3,keyasint,omitempty"`
	Count uint64 `cbor:"4,keyasint,omitempty"`

	ErrKind dag.Kind `cbor:"5,keyasint,omitempty"`
	ErrMsg  string   `cbor:"6,keyasint,omitempty"`

	// Deduped is set on the answer to a repeated request ID: the command was
	// not applied again and this is the remembered result. Not replicated.
	Deduped bool `cbor:"-"`
}

// Err returns the error the state machine refused the command with, or nil.
// Its kind survives errors.Is against the dag sentinels.
func (r Result) Err() error {
	if r.ErrKind == dag.KindUnknown && r.ErrMsg == "" {
		return nil
	}
	k := r.ErrKind
	if k == dag.KindUnknown {
		k = dag.KindInternal
	}
	return &dag.Error{Kind: k, Msg: r.ErrMsg}
}

func errResult(err error) Result {
	k := dag.KindOf(err)
	if k == dag.KindUnknown {
		k = dag.KindInternal
	}
	return Result{ErrKind: k, ErrMsg: err.Error()}
}
