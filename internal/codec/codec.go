// Package codec holds the one CBOR encoding and decoding configuration that every
// phobos process uses for bytes that cross a process boundary or are hashed.
//
// Encoding is Core Deterministic (RFC 8949 §4.2.1): map keys sorted, shortest
// forms, so equal values always give equal bytes. That is what lets a new head
// leader lower a job again and get byte-identical subtask graphs.
//
// Decoding is bounded: array and map sizes, nesting depth and byte-string lengths
// are capped, and duplicate map keys are an error, so a malformed or hostile
// message costs a bounded amount of memory and returns an error instead of
// panicking or exhausting the process.
package codec

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Limits applied to every decode. They are generous for real graphs (a
// 200,000-subtask job's tileable graph is tiny; the big arrays are the flat
// chunk-graph slices, which never cross the wire whole).
const (
	MaxArrayElements = 1 << 24
	MaxMapPairs      = 1 << 20
	MaxNestedLevels  = 32
)

var (
	enc cbor.EncMode
	dec cbor.DecMode
)

func init() {
	var err error
	eo := cbor.CoreDetEncOptions()
	eo.Time = cbor.TimeRFC3339Nano // exact and deterministic; float epoch times lose precision
	enc, err = eo.EncMode()
	if err != nil {
		panic(fmt.Sprintf("codec: building CBOR encoder: %v", err))
	}
	dec, err = cbor.DecOptions{
		MaxArrayElements: MaxArrayElements,
		MaxMapPairs:      MaxMapPairs,
		MaxNestedLevels:  MaxNestedLevels,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
	}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("codec: building CBOR decoder: %v", err))
	}
}

// Appender is a type that encodes itself, without reflection, to exactly
// the bytes the shared encoder would give (a message on the hot path).
type Appender interface {
	AppendCBOR(dst []byte) ([]byte, error)
}

// Sizer is a message that can tell, cheaply and roughly, how many bytes
// its encoding takes, so that it is encoded into a buffer that holds it
// rather than one grown by doubling (a pull carrying a thousand
// completions). Over or under is only slower, never wrong.
type Sizer interface {
	CBORSize() int
}

// Decoder is a type that decodes itself, without reflection, from
// anything the shared decoder takes for it, under the same limits.
type Decoder interface {
	DecodeCBOR(data []byte) error
}

// Marshal encodes v deterministically.
func Marshal(v any) ([]byte, error) {
	if a, ok := v.(Appender); ok {
		return a.AppendCBOR(nil)
	}
	return enc.Marshal(v)
}

// Unmarshal decodes data into v under the decode limits. Unknown struct fields
// are ignored so that messages can grow new (keyasint) fields; incompatible
// changes bump the protocol version checked at the handshake instead.
func Unmarshal(data []byte, v any) error {
	if d, ok := v.(Decoder); ok {
		return d.DecodeCBOR(data)
	}
	return dec.Unmarshal(data, v)
}

// EncMode returns the shared encoder, for callers that stream (NewEncoder).
func EncMode() cbor.EncMode { return enc }

// DecMode returns the shared decoder.
func DecMode() cbor.DecMode { return dec }

// RawMessage is an already-encoded CBOR value carried inside another message.
type RawMessage = cbor.RawMessage
