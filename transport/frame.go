package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/fxamacker/cbor/v2"

	"github.com/phobos-project/phobos/internal/codec"
)

// Method names a call or message. The numbers belong to the packages that
// define the messages (runtime/wire); transport only routes them.
type Method uint16

func (m Method) String() string { return "method " + strconv.Itoa(int(m)) }

// frameType is the second field of a frame header.
type frameType uint8

const (
	frameRequest  frameType = 1 // expects a response or error-response with the same id
	frameResponse frameType = 2 // CBOR result of the request with this id
	frameError    frameType = 3 // CBOR wireError for the request with this id
	frameOneWay   frameType = 4 // no reply; id is 0
)

// headerSize is the fixed frame header:
//
//	length u32 | type u8 | flags u8 | method u16 | id u64   (big-endian)
//
// then length bytes of CBOR body. Flags are reserved: sent as 0, ignored.
const headerSize = 16

type header struct {
	length uint32
	typ    frameType
	flags  uint8
	method Method
	id     uint64
}

func (h *header) put(b []byte) {
	_ = b[headerSize-1]
	binary.BigEndian.PutUint32(b[0:4], h.length)
	b[4] = byte(h.typ)
	b[5] = h.flags
	binary.BigEndian.PutUint16(b[6:8], uint16(h.method))
	binary.BigEndian.PutUint64(b[8:16], h.id)
}

// errBadFrameType is returned for a header whose type is not one of the four.
var errBadFrameType = errors.New("unknown frame type")

// parseHeader decodes a header. Only an unknown type is an error: a length
// over the cap is the receiver's to handle (it discards the body and keeps
// the session).
func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, io.ErrUnexpectedEOF
	}
	h := header{
		length: binary.BigEndian.Uint32(b[0:4]),
		typ:    frameType(b[4]),
		flags:  b[5],
		method: Method(binary.BigEndian.Uint16(b[6:8])),
		id:     binary.BigEndian.Uint64(b[8:16]),
	}
	if h.typ < frameRequest || h.typ > frameOneWay {
		return h, errBadFrameType
	}
	return h, nil
}

// frameReader reads frames from the control stream. Owned by the session's
// read loop; not safe for concurrent use.
type frameReader struct {
	r      *bufio.Reader
	hdr    [headerSize]byte
	buf    []byte        // reused for small bodies the read loop consumes itself
	pooled *bytes.Buffer // the body's pooled frame buffer, until done
}

const (
	// readBufferSize is a session's read buffer: enough for a run of small
	// frames (heartbeats, short pulls) in one read from the stream; most of
	// a body larger than it is read straight into the body's buffer, past
	// this one (bufio reads past an empty buffer for a larger read).
	// It was 32 KiB; at 1,000 raylets that was 64 MB of the simulated
	// bench's memory (both ends), for no rate (docs/performance.md).
	readBufferSize = 4 << 10
	keepBodyBuffer = 4 << 10 // small bodies reuse fr.buf; larger ones come from the frame pools
)

// Bodies larger than a session keeps are read into buffers of the frame
// pools (framePools), up to keepFrameBuffer. A session that kept the
// largest body it ever read (a pull reply of a thousand specs) held it
// while idle, and a head with a thousand raylets held a thousand such
// buffers, each cold when next used; and a request's body, allocated for
// its call, was a large allocation each time (a pull carrying a thousand
// completions), whose growth of the heap the runtime paid for by
// returning pages to the system as it went. Shared, the few bodies in use
// at once reuse warm buffers.

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, readBufferSize)}
}

// next reads one header. io.EOF means the stream ended between frames.
func (fr *frameReader) next() (header, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return header{}, err
	}
	return parseHeader(fr.hdr[:])
}

// body reads an n-byte body into a buffer valid until done (or the next
// body).
func (fr *frameReader) body(n uint32) ([]byte, error) {
	fr.done()
	var b []byte
	switch {
	case int(n) <= keepBodyBuffer:
		if cap(fr.buf) < int(n) {
			fr.buf = make([]byte, keepBodyBuffer)
		}
		b = fr.buf[:n]
	case int(n) <= keepFrameBuffer:
		fr.pooled, b = getBody(int(n))
	default:
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(fr.r, b); err != nil {
		fr.done()
		return nil, midFrame(err)
	}
	return b, nil
}

// done gives back the pooled buffer of the last body, if it had one: the
// read loop consumed it.
func (fr *frameReader) done() {
	putBody(fr.pooled)
	fr.pooled = nil
}

// ownedBody reads an n-byte body into a slice the caller owns: its own
// when small, else a pooled frame buffer (pooled non-nil) that the caller
// gives back with putBody once done with the body.
func (fr *frameReader) ownedBody(n uint32) (b []byte, pooled *bytes.Buffer, err error) {
	if int(n) > keepBodyBuffer && int(n) <= keepFrameBuffer {
		pooled, b = getBody(int(n))
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(fr.r, b); err != nil {
		putBody(pooled)
		return nil, nil, midFrame(err)
	}
	return b, pooled, nil
}

// getBody takes a frame buffer that holds n bytes from its pool, and its
// first n bytes to read a body into.
func getBody(n int) (*bytes.Buffer, []byte) {
	p := getBuf(0, n)
	return p, p.AvailableBuffer()[:n]
}

// putBody gives a body's pooled buffer back (nil: none).
func putBody(p *bytes.Buffer) {
	if p != nil {
		putBuf(p)
	}
}

// discard skips an n-byte body that is over the cap.
func (fr *frameReader) discard(n uint32) error {
	if _, err := io.CopyN(io.Discard, fr.r, int64(n)); err != nil {
		return midFrame(err)
	}
	return nil
}

// midFrame turns a clean EOF inside a frame into the error it really is.
func midFrame(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Frame buffers: header space, then the CBOR body, written with one Write.
var (
	zeroHeader [headerSize]byte
	bufEnc, _  = codec.EncMode().(cbor.UserBufferEncMode)
)

const keepFrameBuffer = 1 << 20 // larger buffers go back to the GC, not a pool

// framePools hold frame buffers by capacity: framePools[0] any under
// minFrameClass, framePools[k] at least minFrameClass<<(k-1), up to
// keepFrameBuffer. One pool of every size handed a big reply whatever
// buffer came first, often a small one that then grew by doubling, an
// allocation and a copy a step: at a thousand raylets, whose first pulls
// are each answered with a thousand specs at once, a seventh of the
// head's CPU. Classes a power of two apart waste at most half a buffer.
var framePools [frameClasses + 1]sync.Pool

const (
	minFrameClass = 4 << 10
	frameClasses  = 9 // 4 KiB … 1 MiB
)

// frameClass is the pool whose buffers all hold n bytes: 0 under
// minFrameClass, else the smallest class at least n (the last for more).
func frameClass(n int) int {
	k := 0
	for c := minFrameClass >> 1; k < frameClasses && c < n; c <<= 1 {
		k++
	}
	return k
}

// floorClass is the pool a buffer of capacity c goes back to: the largest
// class it holds.
func floorClass(c int) int {
	k := 0
	for k < frameClasses && c >= minFrameClass<<k {
		k++
	}
	return k
}

// getBuf returns an empty pooled buffer with reserve zero bytes at the
// front and room for size more (0: size unknown).
func getBuf(reserve, size int) *bytes.Buffer {
	n := reserve + size
	k := frameClass(n)
	b, _ := framePools[k].Get().(*bytes.Buffer)
	if b == nil {
		c := 512
		if k > 0 {
			c = minFrameClass << (k - 1)
		}
		b = bytes.NewBuffer(make([]byte, 0, max(c, n)))
	}
	b.Reset()
	b.Grow(n) // only a class-0 buffer smaller than n, or n past the classes, grows
	b.Write(zeroHeader[:reserve])
	return b
}

// putBuf gives b back to the pool of the largest class its capacity holds.
func putBuf(b *bytes.Buffer) {
	if c := b.Cap(); c <= keepFrameBuffer {
		framePools[floorClass(c)].Put(b)
	}
}

// sizeOf is v's guess at its encoding's size (codec.Sizer), 0 if none.
func sizeOf(v any) int {
	if s, ok := v.(codec.Sizer); ok {
		return s.CBORSize()
	}
	return 0
}

// Encoded is a response encoded before its handler returns, into a frame
// buffer of the session's pool with room for the frame header: a handler
// that returns it has its response written as it is, with no copy, and
// the buffer goes back to the pool once written. (The head encodes pull
// replies in its event loop, where the specs' memory is valid, and
// another goroutine answers the call.)
//
// Encode it once; a handler that does not return it calls Discard.
type Encoded struct{ b *bytes.Buffer }

// Encode appends a's encoding to a new Encoded, in a buffer with room for
// a's own guess at its size (codec.Sizer) if it has one.
func Encode(a codec.Appender) (*Encoded, error) {
	e := &Encoded{b: getBuf(headerSize, sizeOf(a))}
	if err := appendTo(e.b, a); err != nil {
		e.Discard()
		return nil, err
	}
	return e, nil
}

// EncodeVia encodes a into *scratch, the caller's buffer (grown as a
// needs, and kept for the next), then copies it into a new Encoded: a
// pooled buffer of its size's class, or one made by the copy. For messages
// whose size is not known before and varies widely, such as pull replies
// (a spec of a sum over a thousand inputs is a thousand times another's).
// A buffer made for the copy is not zeroed first, as one made empty to
// encode into is: at the start of a job on a thousand raylets, a thousand
// replies are in flight at once, more than the pools hold.
func EncodeVia(a codec.Appender, scratch *[]byte) (*Encoded, error) {
	out, err := a.AppendCBOR(append((*scratch)[:0], zeroHeader[:]...))
	if err != nil {
		return nil, err
	}
	if cap(out) <= keepFrameBuffer {
		*scratch = out[:0]
	}
	k := frameClass(len(out))
	b, _ := framePools[k].Get().(*bytes.Buffer)
	switch {
	case b == nil:
		b = bytes.NewBuffer(newFrame(out, k))
	case b.Cap() < len(out): // class 0, or past the classes
		putBuf(b)
		b = bytes.NewBuffer(newFrame(out, k))
	default:
		b.Reset()
		b.Write(out)
	}
	return &Encoded{b: b}, nil
}

// newFrame copies out into new memory the size of class k's buffers (or
// out's, if larger), so that it goes back to class k and serves the next
// message of its size: made at out's size, it would go back a class
// below, and no message that needs its class would ever take it. Only
// the room after the copy is zeroed.
func newFrame(out []byte, k int) []byte {
	c := len(out)
	if k > 0 {
		c = max(c, minFrameClass<<(k-1))
	}
	// One byte more than out holds, at least, so that append copies even
	// when out fills the class: out is the caller's scratch, reused next.
	return append(out[:len(out):len(out)], make([]byte, c-len(out)+1)...)[:len(out)]
}

// appendTo appends a's encoding to b in place: a encodes after b's bytes,
// and b takes the result as its own, whether it fit b's room or a grew it
// (writing it back would copy it once more, and grow b as a grew it).
func appendTo(b *bytes.Buffer, a codec.Appender) error {
	out, err := a.AppendCBOR(b.Bytes())
	if err != nil {
		return err
	}
	*b = *bytes.NewBuffer(out)
	return nil
}

// Len is the encoding's length in bytes.
func (e *Encoded) Len() int { return e.b.Len() - headerSize }

// Discard gives the buffer back without sending it.
func (e *Encoded) Discard() {
	if e.b != nil {
		putBuf(e.b)
		e.b = nil
	}
}

// encodeInto appends v's CBOR encoding to b.
func encodeInto(b *bytes.Buffer, v any) error {
	if raw, ok := v.(codec.RawMessage); ok && len(raw) > 0 {
		// Encoded already, by this process (a pull reply, a proxied
		// answer): the generic encoder would walk it to check it is well
		// formed; its reader checks that anyway.
		b.Write(raw)
		return nil
	}
	if a, ok := v.(codec.Appender); ok {
		return appendTo(b, a)
	}
	if bufEnc != nil {
		return bufEnc.MarshalToBuffer(v, b)
	}
	data, err := codec.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(data)
	return nil
}

// Body is the CBOR body of an incoming request or one-way message.
//
// A Body is valid until the handler returns (HandleCall or HandleMessage),
// or until Release: its bytes are reused after. Decode copies what it
// keeps.
type Body struct {
	raw    []byte
	method Method
	held   *heldBody // a request's buffer and budget share; nil for others
}

// heldBody is what an incoming request holds until its handler returns
// or releases it: its pooled buffer (nil if its own) and its share of the
// session's byte budget.
type heldBody struct {
	s      *Session
	pooled *bytes.Buffer
	n      uint32
	share  int64
	done   bool
}

var heldBodies = sync.Pool{New: func() any { return new(heldBody) }}

func (h *heldBody) release() {
	if !h.done {
		h.done = true
		putBody(h.pooled)
		h.pooled = nil // the pool's now: a waiting handler's heldBody must not keep it alive
		h.s.release(h.n, h.share)
	}
}

// Release gives the body's memory back before the handler returns, for a
// handler that decodes its request and then waits (a raylet's pull that
// waits at the head for work): a thousand such calls each held a buffer
// of the size of the completions they carried, and their share of the
// session's budget, while they waited. The body is empty after. Call it
// only from the handler's goroutine, before it returns; again, it does
// nothing.
func (b *Body) Release() {
	if b.held != nil {
		b.held.release()
	}
	b.raw = nil
}

// Decode decodes the body into v (codec.Unmarshal). A malformed body gives an
// invalid-argument error naming the method, which a handler can return as is.
// A decoder that classifies its refusal keeps its kind: a graph too costly to
// decode (dag.TileableGraph) is resource exhausted, not malformed.
func (b Body) Decode(v any) error {
	if err := codec.Unmarshal(b.raw, v); err != nil {
		if code := codeOf(err); code != CodeUnknown && code != CodeInvalidArgument {
			return errorf(code, "body for %s (%d bytes) refused: %w", b.method, len(b.raw), err)
		}
		return errorf(CodeInvalidArgument, "malformed body for %s (%d bytes): %w", b.method, len(b.raw), err)
	}
	return nil
}

// Raw returns the body's CBOR bytes (see Body for how long they stay valid).
func (b Body) Raw() []byte { return b.raw }

// NewBody wraps raw as the body of method m, for a handler that unpacks a
// call carried inside another (a proxied call).
func NewBody(m Method, raw []byte) Body { return Body{raw: raw, method: m} }

// WriteMsg writes v as one length-prefixed CBOR message (u32 big-endian
// length, then the body) with a single Write, for bulk streams. Safe for
// concurrent use only if w is.
func WriteMsg(w io.Writer, v any) error {
	b := getBuf(4, sizeOf(v))
	defer putBuf(b)
	if err := encodeInto(b, v); err != nil {
		return errorf(CodeInvalidArgument, "write message: encoding %T: %w", v, err)
	}
	n := b.Len() - 4
	if n > MaxFrameLimit {
		return errorf(CodeResourceExhausted, "write message: %T encodes to %d bytes, over the %d-byte limit; split it", v, n, MaxFrameLimit)
	}
	binary.BigEndian.PutUint32(b.Bytes()[:4], uint32(n))
	if _, err := w.Write(b.Bytes()); err != nil {
		return errorf(CodeUnavailable, "write message: %w", err)
	}
	return nil
}

// ReadMsg reads one message written by WriteMsg into v. A body over max bytes
// (max <= 0 means DefaultMaxFrameSize) is refused with a resource-exhausted
// error before it is read; the stream is then out of step and should be
// closed. A stream that ends cleanly before the message returns io.EOF
// itself; one that ends inside it returns an error wrapping
// io.ErrUnexpectedEOF.
func ReadMsg(r io.Reader, v any, max int) error {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	var p [4]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return errorf(CodeUnavailable, "read message: %w", err)
	}
	n := binary.BigEndian.Uint32(p[:])
	if uint64(n) > uint64(max) {
		return errorf(CodeResourceExhausted, "read message: %d-byte message is over the cap of %d bytes", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return errorf(CodeUnavailable, "read message: %d-byte body: %w", n, midFrame(err))
	}
	if err := codec.Unmarshal(body, v); err != nil {
		return errorf(CodeInvalidArgument, "read message: malformed %d-byte body for %T: %w", n, v, err)
	}
	return nil
}
