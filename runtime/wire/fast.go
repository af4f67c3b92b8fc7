package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// A pull reply is the one message every subtask crosses the wire in, and
// the generic codec spent about a microsecond encoding each spec at the
// head and two decoding it at the raylet, by reflection: a quarter of the
// CPU an empty subtask costs end to end. PullReply therefore encodes and
// decodes itself (codec.Appender, codec.Decoder). The encoding is the
// generic encoder's, byte for byte (TestPullReplyCodecMatchesGeneric holds
// it to that); the decoder takes anything the generic one takes for these
// types, under the same limits, and skips fields it does not know.

// CBOR major types.
const (
	majUint  = 0
	majNeg   = 1
	majBytes = 2
	majText  = 3
	majArray = 4
	majMap   = 5
	majTag   = 6
	majOther = 7
)

const (
	cborFalse = 0xf4
	cborTrue  = 0xf5
	cborNull  = 0xf6
)

// appendHead appends a CBOR head of major type maj and argument n in its
// shortest form.
func appendHead(dst []byte, maj byte, n uint64) []byte {
	m := maj << 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return append(dst, m|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(dst, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, m|27), n)
}

func appendInt(dst []byte, v int64) []byte {
	if v < 0 {
		return appendHead(dst, majNeg, uint64(-(v + 1)))
	}
	return appendHead(dst, majUint, uint64(v))
}

func appendBytes(dst []byte, b []byte) []byte {
	return append(appendHead(dst, majBytes, uint64(len(b))), b...)
}

func appendInt32s(dst []byte, s []int32) []byte {
	if s == nil {
		return append(dst, cborNull)
	}
	dst = appendHead(dst, majArray, uint64(len(s)))
	for _, v := range s {
		dst = appendInt(dst, int64(v))
	}
	return dst
}

// AppendCBOR appends r's encoding, as codec.Marshal gives it, to dst.
func (r PullReply) AppendCBOR(dst []byte) ([]byte, error) {
	n := 0
	if len(r.Subtasks) > 0 {
		n++
	}
	if len(r.Free) > 0 {
		n++
	}
	if r.More {
		n++
	}
	dst = appendHead(dst, majMap, uint64(n))
	if len(r.Subtasks) > 0 {
		dst = appendHead(append(dst, 0x01), majArray, uint64(len(r.Subtasks)))
		for i := range r.Subtasks {
			dst = r.Subtasks[i].appendCBOR(dst)
		}
	}
	if len(r.Free) > 0 {
		dst = appendHead(append(dst, 0x02), majArray, uint64(len(r.Free)))
		for i := range r.Free {
			dst = appendBytes(dst, r.Free[i][:])
		}
	}
	if r.More {
		dst = append(dst, 0x03, cborTrue)
	}
	return dst, nil
}

// Bounds on the encodings above, for a sender that must keep a reply
// under its peer's max frame before it encodes it: a CBOR head or an
// integer takes at most 9 bytes, a key 1, an int32 at most 5.
const (
	specFixedBound  = 1 + (1 + 9 + len(dag.SubtaskID{})) + 5*(1+9) // map, ID, then Attempt, Ops, Outputs, Inputs, OutputBytes
	opFixedBound    = 1 + 6*(1+9)                                  // map, Op, Args, Inputs, Index, Shape, DType
	inputFixedBound = 1 + (1 + 9 + len(dag.ObjectID{})) + (1 + 9) + (1 + 9) + (1 + 5) + 2
	// PullReplyBound is what a PullReply takes beyond its specs'
	// SizeBound and FreeBound a freed ID.
	PullReplyBound = 1 + 2*(1+9) + 2
	FreeBound      = 1 + len(dag.ObjectID{})
)

// SizeBound bounds the bytes s's encoding takes in a PullReply. It walks
// the ops and inputs but encodes nothing.
func (s *SubtaskSpec) SizeBound() int {
	n := specFixedBound + 5*len(s.Outputs)
	for k := range s.Ops {
		o := &s.Ops[k]
		n += opFixedBound + len(o.Args) + 5*(len(o.Inputs)+len(o.Index)) + 9*len(o.Shape)
	}
	for k := range s.Inputs {
		n += inputFixedBound
		for _, l := range s.Inputs[k].Locations {
			n += 9 + len(l)
		}
	}
	return n
}

func (s *SubtaskSpec) appendCBOR(dst []byte) []byte {
	n := 3 // ID, Ops, Outputs: never omitted
	if s.Attempt != 0 {
		n++
	}
	if len(s.Inputs) > 0 {
		n++
	}
	if s.OutputBytes != 0 {
		n++
	}
	dst = appendHead(dst, majMap, uint64(n))
	dst = appendBytes(append(dst, 0x01), s.ID[:])
	if s.Attempt != 0 {
		dst = appendInt(append(dst, 0x02), int64(s.Attempt))
	}
	dst = append(dst, 0x03)
	if s.Ops == nil {
		dst = append(dst, cborNull)
	} else {
		dst = appendHead(dst, majArray, uint64(len(s.Ops)))
		for j := range s.Ops {
			dst = s.Ops[j].appendCBOR(dst)
		}
	}
	dst = appendInt32s(append(dst, 0x04), s.Outputs)
	if len(s.Inputs) > 0 {
		dst = appendHead(append(dst, 0x05), majArray, uint64(len(s.Inputs)))
		for k := range s.Inputs {
			dst = s.Inputs[k].appendCBOR(dst)
		}
	}
	if s.OutputBytes != 0 {
		dst = appendInt(append(dst, 0x06), s.OutputBytes)
	}
	return dst
}

func (o *OpSpec) appendCBOR(dst []byte) []byte {
	n := 2 // Op, DType
	if len(o.Args) > 0 {
		n++
	}
	if len(o.Inputs) > 0 {
		n++
	}
	if len(o.Index) > 0 {
		n++
	}
	if len(o.Shape) > 0 {
		n++
	}
	dst = appendHead(dst, majMap, uint64(n))
	dst = appendHead(append(dst, 0x01), majUint, uint64(o.Op))
	if len(o.Args) > 0 {
		dst = appendBytes(append(dst, 0x02), o.Args)
	}
	if len(o.Inputs) > 0 {
		dst = appendInt32s(append(dst, 0x03), o.Inputs)
	}
	if len(o.Index) > 0 {
		dst = appendInt32s(append(dst, 0x04), o.Index)
	}
	if len(o.Shape) > 0 {
		dst = appendHead(append(dst, 0x05), majArray, uint64(len(o.Shape)))
		for _, v := range o.Shape {
			dst = appendInt(dst, v)
		}
	}
	return appendHead(append(dst, 0x06), majUint, uint64(o.DType))
}

func (in *InputSpec) appendCBOR(dst []byte) []byte {
	n := 2 // Object, Size
	if len(in.Locations) > 0 {
		n++
	}
	if in.Part != 0 {
		n++
	}
	if in.Pending {
		n++
	}
	dst = appendHead(dst, majMap, uint64(n))
	dst = appendBytes(append(dst, 0x01), in.Object[:])
	dst = appendInt(append(dst, 0x02), in.Size)
	if len(in.Locations) > 0 {
		dst = appendHead(append(dst, 0x03), majArray, uint64(len(in.Locations)))
		for _, l := range in.Locations {
			dst = append(appendHead(dst, majText, uint64(len(l))), l...)
		}
	}
	if in.Part != 0 {
		dst = appendInt(append(dst, 0x04), int64(in.Part))
	}
	if in.Pending {
		dst = append(dst, 0x05, cborTrue)
	}
	return dst
}

// reader decodes CBOR from data, under codec's limits.
type reader struct {
	data []byte
	pos  int
	// intern keeps the raylet addresses decoded lately: a reply names the
	// same few in input after input, and a string per input was most of
	// what decoding a reply allocated.
	intern *[]string
}

func (d *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("cbor: at byte %d of %d: %s", d.pos, len(d.data), fmt.Sprintf(format, args...))
}

// head reads a data item's head: its major type, and its argument (for
// a simple value or float, the additional information).
func (d *reader) head() (maj byte, arg uint64, err error) {
	if d.pos >= len(d.data) {
		return 0, 0, d.errorf("unexpected end of data")
	}
	b := d.data[d.pos]
	d.pos++
	maj, ai := b>>5, b&0x1f
	var n int
	switch {
	case ai < 24:
		return maj, uint64(ai), nil
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	case ai == 31:
		return 0, 0, d.errorf("indefinite-length item (forbidden)")
	default:
		return 0, 0, d.errorf("reserved additional information %d", ai)
	}
	if len(d.data)-d.pos < n {
		return 0, 0, d.errorf("unexpected end of data")
	}
	for _, c := range d.data[d.pos : d.pos+n] {
		arg = arg<<8 | uint64(c)
	}
	d.pos += n
	if maj == majOther && ai == 24 && arg < 32 {
		return 0, 0, d.errorf("simple value %d in two bytes", arg)
	}
	return maj, arg, nil
}

// count reads the head of an array (or a map: pairs) of at most max
// items, or null (ok false), refusing a count the rest of data cannot hold.
func (d *reader) count(maj byte, max uint64, what string) (n int, ok bool, err error) {
	if d.pos < len(d.data) && d.data[d.pos] == cborNull {
		d.pos++
		return 0, false, nil
	}
	m, arg, err := d.head()
	switch {
	case err != nil:
		return 0, false, err
	case m != maj:
		return 0, false, d.errorf("%s: want major type %d, got %d", what, maj, m)
	case arg > max:
		return 0, false, d.errorf("%s: %d items, more than the %d allowed", what, arg, max)
	case arg > uint64(len(d.data)-d.pos):
		return 0, false, d.errorf("%s: %d items in %d bytes", what, arg, len(d.data)-d.pos)
	}
	return int(arg), true, nil
}

func (d *reader) array(what string) (int, bool, error) {
	return d.count(majArray, codec.MaxArrayElements, what)
}

// fields reads a map, giving field the value of each key that is an
// unsigned integer (met once: a duplicate is an error); it skips the
// others, key and value. field skips what it does not know (d.skip).
func (d *reader) fields(what string, field func(k uint64) error) error {
	n, _, err := d.count(majMap, codec.MaxMapPairs, what)
	if err != nil {
		return err
	}
	var seen uint64
	for range n {
		k, ok, err := d.key(&seen)
		switch {
		case err != nil:
			return err
		case !ok:
			err = d.skip(0)
		default:
			err = field(k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// list reads an array (null: nil) into dst's memory, each item by one,
// refusing before it grows dst a count of items smaller on average than
// min bytes.
func list[T any](d *reader, dst []T, min int, what string, one func(*T) error) ([]T, error) {
	n, some, err := d.array(what)
	if err != nil || !some {
		return nil, err
	}
	if err := d.fits(n, min, what); err != nil {
		return dst, err
	}
	dst = grow(dst, n)
	for i := range dst {
		if err := one(&dst[i]); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// fits refuses n items of at least min bytes each (min > 1) that the rest
// of the data cannot hold, before anything is sized by n.
func (d *reader) fits(n, min int, what string) error {
	if rest := len(d.data) - d.pos; min > 1 && n > 0 && rest/n < min {
		return d.errorf("%s: %d items in %d bytes; a real one takes at least %d", what, n, rest, min)
	}
	return nil
}

// key reads a map key: an unsigned integer k, or ok false for any other
// key (skipped, with its value, by the caller).
func (d *reader) key(seen *uint64) (k uint64, ok bool, err error) {
	if d.pos < len(d.data) && d.data[d.pos]>>5 == majUint {
		_, k, err = d.head()
		if err != nil {
			return 0, false, err
		}
		if k < 64 {
			if *seen&(1<<k) != 0 {
				return 0, false, d.errorf("duplicate map key %d", k)
			}
			*seen |= 1 << k
		}
		return k, true, nil
	}
	return 0, false, d.skip(0)
}

// skip skips one data item (of a field this version does not know).
func (d *reader) skip(depth int) error {
	if depth > codec.MaxNestedLevels {
		return d.errorf("nested more than %d levels", codec.MaxNestedLevels)
	}
	maj, arg, err := d.head()
	if err != nil {
		return err
	}
	switch maj {
	case majBytes, majText:
		if arg > uint64(len(d.data)-d.pos) {
			return d.errorf("string of %d bytes in %d", arg, len(d.data)-d.pos)
		}
		d.pos += int(arg)
	case majArray, majMap:
		if maj == majArray && arg > codec.MaxArrayElements || maj == majMap && arg > codec.MaxMapPairs {
			return d.errorf("%d items, more than allowed", arg)
		}
		if arg > uint64(len(d.data)-d.pos) {
			return d.errorf("%d items in %d bytes", arg, len(d.data)-d.pos)
		}
		items := arg
		if maj == majMap {
			items *= 2
		}
		for range items {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
	case majTag:
		return d.errorf("tag %d (forbidden)", arg)
	}
	return nil
}

// int reads an integer that fits in bits bits.
func (d *reader) int(bits int, what string) (int64, error) {
	maj, arg, err := d.head()
	if err != nil {
		return 0, err
	}
	lim := uint64(1)<<(bits-1) - 1
	switch {
	case maj == majUint && arg <= lim:
		return int64(arg), nil
	case maj == majNeg && arg <= lim:
		return -int64(arg) - 1, nil
	case maj == majUint || maj == majNeg:
		return 0, d.errorf("%s: integer overflows int%d", what, bits)
	}
	return 0, d.errorf("%s: want an integer, got major type %d", what, maj)
}

// uint reads an unsigned integer of at most max.
func (d *reader) uint(max uint64, what string) (uint64, error) {
	maj, arg, err := d.head()
	switch {
	case err != nil:
		return 0, err
	case maj != majUint:
		return 0, d.errorf("%s: want an unsigned integer, got major type %d", what, maj)
	case arg > max:
		return 0, d.errorf("%s: %d overflows", what, arg)
	}
	return arg, nil
}

func (d *reader) bool(what string) (bool, error) {
	if d.pos < len(d.data) {
		switch d.data[d.pos] {
		case cborTrue:
			d.pos++
			return true, nil
		case cborFalse, cborNull:
			d.pos++
			return false, nil
		}
	}
	return false, d.errorf("%s: want a bool", what)
}

// bytes reads a byte string (or null: nil), aliasing data.
func (d *reader) bytes(what string) ([]byte, error) {
	if d.pos < len(d.data) && d.data[d.pos] == cborNull {
		d.pos++
		return nil, nil
	}
	maj, arg, err := d.head()
	switch {
	case err != nil:
		return nil, err
	case maj != majBytes:
		return nil, d.errorf("%s: want a byte string, got major type %d", what, maj)
	case arg > uint64(len(d.data)-d.pos):
		return nil, d.errorf("%s: %d bytes in %d", what, arg, len(d.data)-d.pos)
	}
	b := d.data[d.pos : d.pos+int(arg)]
	d.pos += int(arg)
	return b, nil
}

// id reads a byte string into an ID of len(dst) bytes.
func (d *reader) id(dst []byte, what string) error {
	b, err := d.bytes(what)
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return d.errorf("%s: %d bytes, want %d", what, len(b), len(dst))
	}
	copy(dst, b)
	return nil
}

// textBytes reads a text string, returning the data's own bytes.
func (d *reader) textBytes(what string) ([]byte, error) {
	maj, arg, err := d.head()
	switch {
	case err != nil:
		return nil, err
	case maj != majText:
		return nil, d.errorf("%s: want a text string, got major type %d", what, maj)
	case arg > uint64(len(d.data)-d.pos):
		return nil, d.errorf("%s: %d bytes in %d", what, arg, len(d.data)-d.pos)
	}
	b := d.data[d.pos : d.pos+int(arg)]
	d.pos += int(arg)
	return b, nil
}

func (d *reader) text(what string) (string, error) {
	b, err := d.textBytes(what)
	if err != nil {
		return "", err
	}
	if d.intern != nil {
		for _, s := range *d.intern {
			if s == string(b) {
				return s, nil
			}
		}
	}
	s := string(b)
	if d.intern != nil {
		if len(*d.intern) == maxInterned {
			copy(*d.intern, (*d.intern)[1:])
			*d.intern = (*d.intern)[:maxInterned-1]
		}
		*d.intern = append(*d.intern, s)
	}
	return s, nil
}

const maxInterned = 16

func (d *reader) int32s(dst []int32, what string) ([]int32, error) {
	return list(d, dst, 0, what, func(v *int32) error {
		x, err := d.int(32, what)
		*v = int32(x)
		return err
	})
}

func (d *reader) int64s(dst []int64, what string) ([]int64, error) {
	return list(d, dst, 0, what, func(v *int64) (err error) {
		*v, err = d.int(64, what)
		return err
	})
}

// int64sOnto reads an array of integers onto the end of *arena and
// returns them as a slice of it (nil when there are none, as int64s).
func (d *reader) int64sOnto(arena *[]int64, what string) ([]int64, error) {
	n, some, err := d.array(what)
	if err != nil || !some {
		return nil, err
	}
	if rest := len(d.data) - d.pos; n > rest {
		return nil, d.errorf("%s: %d items in %d bytes", what, n, rest)
	}
	a := *arena
	start := len(a)
	a = reserve(a, n)
	for range n {
		v, err := d.int(64, what)
		if err != nil {
			*arena = a
			return nil, err
		}
		a = append(a, v)
	}
	*arena = a
	return a[start:len(a):len(a)], nil
}

// reserve returns a with room for n more, in new memory at least twice
// as large if it has not (one allocation, whatever the build: slices.Grow
// makes a second under the race detector).
func reserve(a []int64, n int) []int64 {
	if cap(a)-len(a) >= n {
		return a
	}
	b := make([]int64, len(a), max(2*cap(a), len(a)+n))
	copy(b, a)
	return b
}

func (d *reader) objectIDs(dst []dag.ObjectID, what string) ([]dag.ObjectID, error) {
	return list(d, dst, 0, what, func(v *dag.ObjectID) error { return d.id(v[:], what) })
}

// grow returns s with length n, reusing its memory when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// DecodeCBOR decodes data into r, as codec.Unmarshal would: into r's
// memory where it has room (see Reset), leaving fields data omits as
// they are.
func (r *PullReply) DecodeCBOR(data []byte) error {
	d := reader{data: data, intern: &r.intern}
	return d.end(r.decode(&d), "reply")
}

func (r *PullReply) decode(d *reader) error {
	return d.fields("pull reply", func(k uint64) (err error) {
		switch k {
		case 1:
			r.Subtasks, err = list(d, r.Subtasks, 0, "pull reply: subtasks", func(s *SubtaskSpec) error { return s.decode(d, false) })
		case 2:
			r.Free, err = d.objectIDs(r.Free, "pull reply: frees")
		case 3:
			r.More, err = d.bool("pull reply: more")
		default:
			err = d.skip(0)
		}
		return err
	})
}

// decode reads a subtask spec; with skim, its ops and inputs are checked
// as CBOR and skipped (SkimPullReply).
func (s *SubtaskSpec) decode(d *reader, skim bool) error {
	return d.fields("subtask", func(k uint64) (err error) {
		if skim && (k == 3 || k == 5) {
			return d.skip(0)
		}
		switch k {
		case 1:
			err = d.id(s.ID[:], "subtask: id")
		case 2:
			var v int64
			v, err = d.int(64, "subtask: attempt")
			s.Attempt = int(v)
		case 3:
			s.Ops, err = list(d, s.Ops, 0, "subtask: ops", func(o *OpSpec) error { return o.decode(d) })
		case 4:
			s.Outputs, err = d.int32s(s.Outputs, "subtask: outputs")
		case 5:
			s.Inputs, err = list(d, s.Inputs, 0, "subtask: inputs", func(in *InputSpec) error { return in.decode(d) })
		case 6:
			s.OutputBytes, err = d.int(64, "subtask: output bytes")
		default:
			err = d.skip(0)
		}
		return err
	})
}

func (o *OpSpec) decode(d *reader) error {
	return d.fields("op", func(k uint64) (err error) {
		switch k {
		case 1:
			var v uint64
			v, err = d.uint(math.MaxUint32, "op: id")
			o.Op = dag.OpID(v)
		case 2:
			var b []byte
			if b, err = d.bytes("op: args"); err == nil {
				if b == nil {
					o.Args = nil
				} else {
					o.Args = append(o.Args[:0], b...)
				}
			}
		case 3:
			o.Inputs, err = d.int32s(o.Inputs, "op: inputs")
		case 4:
			o.Index, err = d.int32s(o.Index, "op: index")
		case 5:
			o.Shape, err = d.int64s(o.Shape, "op: shape")
		case 6:
			var v uint64
			v, err = d.uint(math.MaxUint8, "op: dtype")
			o.DType = dag.DType(v)
		default:
			err = d.skip(0)
		}
		return err
	})
}

func (in *InputSpec) decode(d *reader) error {
	return d.fields("input", func(k uint64) (err error) {
		switch k {
		case 1:
			err = d.id(in.Object[:], "input: object")
		case 2:
			in.Size, err = d.int(64, "input: size")
		case 3:
			in.Locations, err = list(d, in.Locations, 0, "input: locations", func(l *string) (err error) {
				*l, err = d.text("input: location")
				return err
			})
		case 4:
			var v int64
			v, err = d.int(32, "input: part")
			in.Part = int32(v)
		case 5:
			in.Pending, err = d.bool("input: pending")
		default:
			err = d.skip(0)
		}
		return err
	})
}

// Completions ride from raylets to the head in Pull and Complete, one per
// subtask, and encode and decode themselves too (TestCompletionCodecMatchesGeneric).

// AppendCBOR appends p's encoding, as codec.Marshal gives it, to dst.
func (p Pull) AppendCBOR(dst []byte) ([]byte, error) {
	n := 1 // Credits
	if p.Wait != 0 {
		n++
	}
	if len(p.Done) > 0 {
		n++
	}
	if p.FreesInReply {
		n++
	}
	dst = appendHead(dst, majMap, uint64(n))
	dst = appendInt(append(dst, 0x01), int64(p.Credits))
	if p.Wait != 0 {
		dst = appendInt(append(dst, 0x02), int64(p.Wait))
	}
	if len(p.Done) > 0 {
		dst = appendCompletions(append(dst, 0x03), p.Done)
	}
	if p.FreesInReply {
		dst = append(dst, 0x04, cborTrue)
	}
	return dst, nil
}

// CBORSize is a bound, near enough, on p's encoding's size (codec.Sizer):
// a raylet's pull carries up to a window of completions.
func (p Pull) CBORSize() int {
	return 24 + completionsSize(p.Done)
}

// CBORSize is as Pull's.
func (c Complete) CBORSize() int { return 8 + completionsSize(c.Done) }

// completionsSize bounds done's encoding, field by field at each
// field's largest, without encoding it.
func completionsSize(done []Completion) int {
	n := 9
	for i := range done {
		c := &done[i]
		n += 3 + len(c.ID) // map head, ID
		if len(c.Sizes) > 0 {
			n += 2 + 9*len(c.Sizes)
		}
		if len(c.Fetched) > 0 {
			n += 2 + (2+len(dag.ObjectID{}))*len(c.Fetched)
		}
		if c.Error != "" {
			n += 4 + len(c.Error)
		}
		for _, v := range [...]bool{c.Attempt != 0, c.Kind != 0, c.Started != 0} {
			if v {
				n += 10
			}
		}
		for _, v := range [...]bool{c.Slot != 0, c.TookUS != 0, c.FetchUS != 0} {
			if v {
				n += 6
			}
		}
	}
	return n
}

// AppendCBOR appends c's encoding, as codec.Marshal gives it, to dst.
func (c Complete) AppendCBOR(dst []byte) ([]byte, error) {
	dst = append(dst, 0xa1, 0x01)
	if c.Done == nil {
		return append(dst, cborNull), nil
	}
	return appendCompletions(dst, c.Done), nil
}

func appendCompletions(dst []byte, done []Completion) []byte {
	dst = appendHead(dst, majArray, uint64(len(done)))
	for i := range done {
		dst = done[i].appendCBOR(dst)
	}
	return dst
}

func (c *Completion) appendCBOR(dst []byte) []byte {
	n := 1 // ID
	for _, set := range [...]bool{c.Attempt != 0, len(c.Sizes) > 0, c.Kind != 0, c.Error != "", len(c.Fetched) > 0,
		c.Slot != 0, c.Started != 0, c.TookUS != 0, c.FetchUS != 0} {
		if set {
			n++
		}
	}
	dst = appendHead(dst, majMap, uint64(n))
	dst = appendBytes(append(dst, 0x01), c.ID[:])
	if c.Attempt != 0 {
		dst = appendInt(append(dst, 0x02), int64(c.Attempt))
	}
	if len(c.Sizes) > 0 {
		dst = appendHead(append(dst, 0x03), majArray, uint64(len(c.Sizes)))
		for _, s := range c.Sizes {
			dst = appendInt(dst, s)
		}
	}
	if c.Kind != 0 {
		dst = appendHead(append(dst, 0x04), majUint, uint64(c.Kind))
	}
	if c.Error != "" {
		dst = append(appendHead(append(dst, 0x05), majText, uint64(len(c.Error))), c.Error...)
	}
	if len(c.Fetched) > 0 {
		dst = appendHead(append(dst, 0x06), majArray, uint64(len(c.Fetched)))
		for i := range c.Fetched {
			dst = appendBytes(dst, c.Fetched[i][:])
		}
	}
	if c.Slot != 0 {
		dst = appendInt(append(dst, 0x07), int64(c.Slot))
	}
	if c.Started != 0 {
		dst = appendInt(append(dst, 0x08), c.Started)
	}
	if c.TookUS != 0 {
		dst = appendHead(append(dst, 0x09), majUint, uint64(c.TookUS))
	}
	if c.FetchUS != 0 {
		dst = appendHead(append(dst, 0x0a), majUint, uint64(c.FetchUS))
	}
	return dst
}

// end finishes a decode that ended with err: the message must be all of
// the data. Errors are invalid argument (malformed input).
func (d *reader) end(err error, what string) error {
	if err == nil && d.pos != len(d.data) {
		err = d.errorf("%d bytes after the %s", len(d.data)-d.pos, what)
	}
	if err != nil {
		return dag.Errorf(dag.KindInvalidArgument, "%w", err)
	}
	return nil
}

// FreeObjects carries the frees that cannot ride on a pull reply, to
// raylets whose pulls are not being answered: at a thousand raylets the
// head sends about two of them for every pull it answers, and the generic
// codec spent a few microseconds on each end of each one. They encode and
// decode themselves too (TestFreeObjectsCodecMatchesGeneric).

// minFreeIDBytes is the smallest encoded ID in a FreeObjects: its 16
// bytes and their head.
const minFreeIDBytes = 1 + len(dag.ObjectID{})

// AppendCBOR appends f's encoding, as codec.Marshal gives it, to dst.
func (f FreeObjects) AppendCBOR(dst []byte) ([]byte, error) {
	dst = append(dst, 0xa1, 0x01)
	if f.IDs == nil {
		return append(dst, cborNull), nil
	}
	dst = appendHead(dst, majArray, uint64(len(f.IDs)))
	for i := range f.IDs {
		dst = appendBytes(dst, f.IDs[i][:])
	}
	return dst, nil
}

// CBORSize bounds f's encoding's size (codec.Sizer).
func (f FreeObjects) CBORSize() int {
	return 2 + 9 + len(f.IDs)*(1+len(dag.ObjectID{}))
}

// DecodeCBOR decodes data into f, as codec.Unmarshal would (into f's
// memory), refusing a count of IDs the data cannot hold before it takes
// memory for them.
func (f *FreeObjects) DecodeCBOR(data []byte) error {
	d := reader{data: data}
	err := d.fields("free objects", func(k uint64) (err error) {
		if k == 1 {
			f.IDs, err = list(&d, f.IDs, minFreeIDBytes, "free objects: ids", func(v *dag.ObjectID) error {
				return d.id(v[:], "free objects: id")
			})
		} else {
			err = d.skip(0)
		}
		return err
	})
	return d.end(err, "free objects")
}

// SkimPullReply reads a pull reply as a raylet that runs nothing needs it
// (the simulated raylets of `phobos bench --sim-raylets`): each subtask's
// ID, attempt, outputs and output bytes, given to each in order in a spec
// whose Ops and Inputs are left empty (valid during the call only), and
// the count of frees. Ops and inputs are checked as CBOR and skipped, not
// decoded: a full decode cost the simulated raylets a third of a
// microsecond a subtask and a reply's worth of memory each, on the cores
// the head they measure runs on. It refuses what DecodeCBOR refuses for
// the fields it reads.
func SkimPullReply(data []byte, each func(*SubtaskSpec)) (frees int, more bool, err error) {
	d := reader{data: data}
	var sp SubtaskSpec
	err = d.fields("pull reply", func(k uint64) error {
		switch k {
		case 1:
			n, _, err := d.array("pull reply: subtasks")
			if err != nil {
				return err
			}
			for range n {
				sp = SubtaskSpec{Outputs: sp.Outputs[:0]}
				if err := sp.decode(&d, true); err != nil {
					return err
				}
				each(&sp)
			}
			return nil
		case 2:
			n, _, err := d.array("pull reply: frees")
			if err != nil {
				return err
			}
			var id dag.ObjectID
			for range n {
				if err := d.id(id[:], "pull reply: frees"); err != nil {
					return err
				}
			}
			frees = n
			return nil
		case 3:
			more, err = d.bool("pull reply: more")
			return err
		}
		return d.skip(0)
	})
	return frees, more, d.end(err, "reply")
}
