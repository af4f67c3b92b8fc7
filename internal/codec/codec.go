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
	"reflect"
	"sync"
	"time"

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
	if err := dec.Unmarshal(data, v); err != nil {
		return err
	}
	rv := reflect.ValueOf(v)
	if !holdsTime(rv.Type()) {
		return nil
	}
	return checkTimes(rv, "")
}

// Times. The encoder writes a time.Time as RFC 3339 text, which holds
// years 0 to 9999. The decoder also takes integer and float seconds,
// which can name any year; such a time would decode here and then encode
// to text that no decoder takes back, so a message relayed or stored
// would fail whoever read it next, and so would the JSON the web service
// and the CLI print (raftmeta checks its own records' times). Unmarshal
// refuses a decoded time outside the years the encoder can write.

var (
	timeType  = reflect.TypeFor[time.Time]()
	timeTypes sync.Map // reflect.Type -> bool: can a value of the type hold a time.Time?
)

// holdsTime reports whether a value of type t can hold a time.Time in a
// field the decoder fills (an exported field, an element, a map entry).
func holdsTime(t reflect.Type) bool {
	if h, ok := timeTypes.Load(t); ok {
		return h.(bool)
	}
	h := holdsTimeWalk(t, map[reflect.Type]bool{})
	timeTypes.Store(t, h)
	return h
}

func holdsTimeWalk(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType {
		return true
	}
	if seen[t] {
		return false // a cycle: any time below is reached by another path
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsTimeWalk(t.Elem(), seen)
	case reflect.Map:
		return holdsTimeWalk(t.Key(), seen) || holdsTimeWalk(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsTimeWalk(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// checkTimes returns an error naming the first time in v whose year the
// encoder could not write. path names where v sits, for the error.
func checkTimes(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return checkTimes(v.Elem(), path)
	case reflect.Slice, reflect.Array:
		if !holdsTime(v.Type().Elem()) {
			return nil
		}
		for i := range v.Len() {
			if err := checkTimes(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if !holdsTime(v.Type().Key()) && !holdsTime(v.Type().Elem()) {
			return nil
		}
		for it := v.MapRange(); it.Next(); {
			p := fmt.Sprintf("%s[%v]", path, it.Key())
			if err := checkTimes(it.Key(), p); err != nil {
				return err
			}
			if err := checkTimes(it.Value(), p); err != nil {
				return err
			}
		}
	case reflect.Struct:
		if v.Type() == timeType {
			t := v.Interface().(time.Time)
			if y := t.Year(); !t.IsZero() && (y < 0 || y > 9999) {
				if path == "" {
					path = "time"
				}
				return fmt.Errorf("cbor: %s: year %d is outside 0 to 9999, the years an RFC 3339 time can hold; send times as RFC 3339 text", path, y)
			}
			return nil
		}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || !holdsTime(f.Type) {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			if err := checkTimes(v.Field(i), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// EncMode returns the shared encoder, for callers that stream (NewEncoder).
func EncMode() cbor.EncMode { return enc }

// DecMode returns the shared decoder.
func DecMode() cbor.DecMode { return dec }

// RawMessage is an already-encoded CBOR value carried inside another message.
type RawMessage = cbor.RawMessage
