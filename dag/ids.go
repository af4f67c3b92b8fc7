package dag

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Limits of the three ID sequences (MEP 0002). Every sequence starts at 1, so
// the zero value of each ID means "none".
const (
	MaxTaskID       = 1<<32 - 1
	MaxStageID      = 1<<16 - 1
	MaxSubtaskIndex = 1<<48 - 1
)

// TaskID names one job. Task IDs come from one cluster-wide Raft sequence.
type TaskID uint32

// StageID names one lowering stage of a task; stage IDs come from a per-task
// Raft sequence.
type StageID uint16

// SubtaskID is task (4 bytes) | stage (2 bytes) | index (6 bytes), each
// little-endian, as in Mars MEP 0002. (1,1,1) is 010000000100010000000000.
// Decode with the byte ranges [0:4], [4:6], [6:12]. SubtaskID is comparable
// and encodes in CBOR as a 12-byte string.
type SubtaskID [12]byte

// NewSubtaskID packs task, stage and index. Arguments are wide so that an
// out-of-range value is reported, never truncated.
func NewSubtaskID(task, stage, index uint64) (SubtaskID, error) {
	var id SubtaskID
	switch {
	case task > MaxTaskID:
		return id, fmt.Errorf("subtask id: task %d does not fit in 4 bytes (max %d)", task, uint64(MaxTaskID))
	case stage > MaxStageID:
		return id, fmt.Errorf("subtask id: stage %d does not fit in 2 bytes (max %d)", stage, MaxStageID)
	case index > MaxSubtaskIndex:
		return id, fmt.Errorf("subtask id: index %d does not fit in 6 bytes (max %d)", index, uint64(MaxSubtaskIndex))
	}
	return PackSubtaskID(TaskID(task), StageID(stage), index), nil
}

// PackSubtaskID packs values already known to be in range; index bits above
// 48 are dropped. Use NewSubtaskID for values from outside.
func PackSubtaskID(task TaskID, stage StageID, index uint64) SubtaskID {
	var id SubtaskID
	binary.LittleEndian.PutUint32(id[0:4], uint32(task))
	binary.LittleEndian.PutUint16(id[4:6], uint16(stage))
	var ix [8]byte
	binary.LittleEndian.PutUint64(ix[:], index)
	copy(id[6:12], ix[:6])
	return id
}

// Task returns bytes [0:4].
func (s SubtaskID) Task() TaskID { return TaskID(binary.LittleEndian.Uint32(s[0:4])) }

// Stage returns bytes [4:6].
func (s SubtaskID) Stage() StageID { return StageID(binary.LittleEndian.Uint16(s[4:6])) }

// Index returns bytes [6:12].
func (s SubtaskID) Index() uint64 {
	var ix [8]byte
	copy(ix[:6], s[6:12])
	return binary.LittleEndian.Uint64(ix[:])
}

// IsZero reports whether s is the zero ID.
func (s SubtaskID) IsZero() bool { return s == SubtaskID{} }

// String returns the 24 hex digits of the ID.
func (s SubtaskID) String() string { return hex.EncodeToString(s[:]) }

// MarshalText implements encoding.TextMarshaler (JSON shows the hex form).
func (s SubtaskID) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the hex form.
func (s *SubtaskID) UnmarshalText(b []byte) error {
	id, err := ParseSubtaskID(string(b))
	if err != nil {
		return err
	}
	*s = id
	return nil
}

// ParseSubtaskID parses the 24-hex-digit form printed by String.
func ParseSubtaskID(s string) (SubtaskID, error) {
	var id SubtaskID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("subtask id %q: want %d hex digits, got %d", s, 2*len(id), len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("subtask id %q: not hex: %w", s, err)
	}
	return id, nil
}

// ObjectID names one output of one subtask: the subtask ID followed by the
// output's index as 4 little-endian bytes. It is comparable and encodes in
// CBOR as a 16-byte string.
type ObjectID [16]byte

// NewObjectID returns the ID of output out of subtask st.
func NewObjectID(st SubtaskID, out uint32) ObjectID {
	var o ObjectID
	copy(o[:12], st[:])
	binary.LittleEndian.PutUint32(o[12:16], out)
	return o
}

// Subtask returns the producing subtask's ID.
func (o ObjectID) Subtask() SubtaskID {
	var s SubtaskID
	copy(s[:], o[:12])
	return s
}

// Output returns the output index within the producing subtask.
func (o ObjectID) Output() uint32 { return binary.LittleEndian.Uint32(o[12:16]) }

// IsZero reports whether o is the zero ID.
func (o ObjectID) IsZero() bool { return o == ObjectID{} }

// String returns "<subtask hex>:<output>".
func (o ObjectID) String() string { return fmt.Sprintf("%s:%d", o.Subtask(), o.Output()) }

// MarshalText implements encoding.TextMarshaler.
func (o ObjectID) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText parses the form printed by String.
func (o *ObjectID) UnmarshalText(b []byte) error {
	id, err := ParseObjectID(string(b))
	if err != nil {
		return err
	}
	*o = id
	return nil
}

// ParseObjectID parses "<24 hex digits>:<output>".
func ParseObjectID(s string) (ObjectID, error) {
	var hexPart string
	var out uint32
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			hexPart = s[:i]
			if _, err := fmt.Sscanf(s[i+1:], "%d", &out); err != nil {
				return ObjectID{}, fmt.Errorf("object id %q: output index after ':' is not a number", s)
			}
			break
		}
	}
	if hexPart == "" {
		return ObjectID{}, fmt.Errorf("object id %q: want <24 hex digits>:<output index>", s)
	}
	st, err := ParseSubtaskID(hexPart)
	if err != nil {
		return ObjectID{}, fmt.Errorf("object id %q: %w", s, err)
	}
	return NewObjectID(st, out), nil
}
