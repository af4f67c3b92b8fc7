package wire

import "github.com/phobos-project/phobos/dag"

// Object transfer and zero-copy reads on bulk streams (see wire.go for
// StreamRequest and ObjectHeader).

// StreamLocateObject asks a raylet where a sealed object lies in its arena,
// for a reader on the same node that maps the arena itself. The raylet
// pins the object, answers one ObjectLocation and keeps the pin until the
// reader closes the stream, writes anything on it, or its session ends.
const StreamLocateObject = 2

// ObjectTrailer follows the bytes of a StreamGetObject answer when the
// request set Checksum. CRC32C is CRC-32C (Castagnoli) of exactly the Size
// bytes sent. A non-zero Kind means the sender failed after the header;
// the bytes before it must be thrown away.
type ObjectTrailer struct {
	CRC32C uint32   `cbor:"1,keyasint"`
	Kind   dag.Kind `cbor:"2,keyasint,omitempty"`
	Error  string   `cbor:"3,keyasint,omitempty"`
}

// ObjectLocation answers StreamLocateObject: the object is Size bytes at
// arena offset Offset of the arena file Arena, whose header carries
// ArenaID (16 bytes). A non-zero Kind means it is not lent; see Error.
type ObjectLocation struct {
	Size    int64    `cbor:"1,keyasint"`
	Meta    []byte   `cbor:"2,keyasint,omitempty"`
	Kind    dag.Kind `cbor:"3,keyasint,omitempty"`
	Error   string   `cbor:"4,keyasint,omitempty"`
	Arena   string   `cbor:"5,keyasint,omitempty"`
	ArenaID []byte   `cbor:"6,keyasint,omitempty"`
	Offset  int64    `cbor:"7,keyasint,omitempty"`
}
