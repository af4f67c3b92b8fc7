package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    header
		wantErr error
	}{
		{"request", []byte{0, 0, 1, 0, 1, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9},
			header{length: 256, typ: frameRequest, method: 7, id: 9}, nil},
		{"one-way with flags", []byte{0, 0, 0, 3, 4, 0x80, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0},
			header{length: 3, typ: frameOneWay, flags: 0x80, method: 0xffff}, nil},
		{"max length is not the parser's business", []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			header{length: 0xffffffff, typ: frameResponse, method: 1, id: 1<<64 - 1}, nil},
		{"type 0", make([]byte, 16), header{}, errBadFrameType},
		{"type 5", []byte{0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, header{}, errBadFrameType},
		{"short", []byte{0, 0, 0}, header{}, io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHeader(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			var back [headerSize]byte
			got.put(back[:])
			if !bytes.Equal(back[:], tc.in) {
				t.Fatalf("re-encoded %x, want %x", back, tc.in)
			}
		})
	}
}

func TestMsgRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := []echoMsg{{N: 1}, {S: "two"}, {B: make([]byte, 1000)}}
	for _, m := range in {
		if err := WriteMsg(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range in {
		var got echoMsg
		if err := ReadMsg(&buf, &got, 0); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got.N != want.N || got.S != want.S || len(got.B) != len(want.B) {
			t.Fatalf("message %d: got %+v", i, got)
		}
	}
	var got echoMsg
	if err := ReadMsg(&buf, &got, 0); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF itself", err)
	}
}

func TestReadMsgErrors(t *testing.T) {
	var ok bytes.Buffer
	WriteMsg(&ok, echoMsg{S: strings.Repeat("x", 100)})
	whole := ok.Bytes()
	tests := []struct {
		name string
		in   []byte
		max  int
		code uint16
		is   error
		text string
	}{
		{"over the cap", whole, 50, CodeResourceExhausted, nil, "over the cap of 50 bytes"},
		{"cut in the prefix", whole[:2], 0, CodeUnavailable, io.ErrUnexpectedEOF, ""},
		{"cut in the body", whole[:20], 0, CodeUnavailable, io.ErrUnexpectedEOF, ""},
		{"not CBOR", []byte{0, 0, 0, 2, 0xff, 0xff}, 0, CodeInvalidArgument, nil, "malformed 2-byte body"},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, 0, CodeResourceExhausted, nil, "4294967295-byte message"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v echoMsg
			err := ReadMsg(bytes.NewReader(tc.in), &v, tc.max)
			wantCode(t, err, tc.code)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q lacks %q", err, tc.text)
			}
		})
	}
	if err := WriteMsg(io.Discard, make(chan int)); !errors.Is(err, kind(CodeInvalidArgument)) {
		t.Errorf("WriteMsg of a channel: %v", err)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want uint16
	}{
		{errors.New("plain"), CodeUnknown},
		{kind(6), 6},
		{fmt.Errorf("wrapped: %w", kind(3)), 3},
		{&RemoteError{Code: 8}, 8},
		{errorf(CodeUnavailable, "x: %w", kind(1)), CodeUnavailable}, // outermost wins
		{context.DeadlineExceeded, CodeDeadlineExceeded},
		{fmt.Errorf("x: %w", context.Canceled), CodeCancelled},
	}
	for _, tc := range tests {
		if got := codeOf(tc.err); got != tc.want {
			t.Errorf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestErrorMatching(t *testing.T) {
	re := &RemoteError{Code: 7, Message: "gone"}
	if re.Error() != "gone" || !errors.Is(re, kind(7)) || errors.Is(re, kind(6)) || errors.Is(re, errors.New("gone")) {
		t.Error("RemoteError matching is wrong")
	}
	ce := ctxError(canceledCtx(), "call %d", 1)
	if !errors.Is(ce, context.Canceled) || !errors.Is(ce, kind(CodeCancelled)) || ce.Error() != "call 1: context canceled" {
		t.Errorf("ctxError: %v", ce)
	}
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestFrameReaderBodies: bodies of every size class read back whole, in
// order, and between frames the reader holds no large buffer: a small
// body reuses the session's own 4 KiB, a larger one a pooled buffer that
// goes back when the read loop is done with it.
func TestFrameReaderBodies(t *testing.T) {
	sizes := []int{0, 1, 4 << 10, 4<<10 + 1, 64 << 10, 64<<10 + 1, 256 << 10, 1 << 20, 1<<20 + 1, 100, 200 << 10}
	var stream bytes.Buffer
	for i, n := range sizes {
		var hdr [headerSize]byte
		h := header{length: uint32(n), typ: frameOneWay, method: Method(i + 1)}
		h.put(hdr[:])
		stream.Write(hdr[:])
		stream.Write(bytes.Repeat([]byte{byte(i + 1)}, n))
	}
	fr := newFrameReader(&stream)
	for i, n := range sizes {
		h, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		b, err := fr.body(h.length)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if len(b) != n || (n > 0 && (b[0] != byte(i+1) || b[n-1] != byte(i+1))) {
			t.Fatalf("frame %d: %d bytes read, want %d of %d", i, len(b), n, i+1)
		}
		fr.done()
		if fr.pooled != nil || cap(fr.buf) > keepBodyBuffer {
			t.Fatalf("frame %d (%d bytes): the reader keeps a %d-byte buffer (pooled %v) between frames", i, n, cap(fr.buf), fr.pooled != nil)
		}
	}
}

// TestFrameBuffersBySize checks that a frame buffer asked for with a size
// holds it without growing, whatever the pools held before (a small
// buffer put back is never handed out for a big frame), and that a
// buffer goes back to a pool whose class its capacity holds, or to the GC
// past keepFrameBuffer.
func TestFrameBuffersBySize(t *testing.T) {
	// Fill every pool with buffers of the smallest capacity it takes.
	for _, c := range []int{16, 4 << 10, 6 << 10, 64 << 10, 256 << 10, 1 << 20} {
		putBuf(bytes.NewBuffer(make([]byte, 0, c)))
	}
	for _, size := range []int{0, 100, 4 << 10, 64<<10 - headerSize, 64 << 10, 200 << 10, 256 << 10, 1<<20 - headerSize} {
		b := getBuf(headerSize, size)
		if b.Len() != headerSize {
			t.Fatalf("size %d: the buffer holds %d bytes, want the %d of the header", size, b.Len(), headerSize)
		}
		if b.Cap() < headerSize+size {
			t.Fatalf("size %d: a buffer of capacity %d, want at least %d", size, b.Cap(), headerSize+size)
		}
		putBuf(b)
	}
	if raceEnabled {
		return // the race detector's pools drop what is put at random
	}
	// A pool empties over two collections; none may run in between.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range []struct{ cap, class int }{{100, 0}, {4<<10 - 1, 0}, {4 << 10, 1}, {64<<10 - 1, 4}, {64 << 10, 5}, {200 << 10, 6}, {256 << 10, 7}, {1 << 20, 9}} {
		putBuf(bytes.NewBuffer(make([]byte, 0, c.cap)))
		got, _ := framePools[c.class].Get().(*bytes.Buffer)
		for got != nil && got.Cap() != c.cap {
			got, _ = framePools[c.class].Get().(*bytes.Buffer)
		}
		if got == nil {
			t.Fatalf("a buffer of capacity %d did not go back to class %d", c.cap, c.class)
		}
	}
	big := bytes.NewBuffer(make([]byte, 0, keepFrameBuffer+1))
	putBuf(big)
	for k := range framePools {
		for b, _ := framePools[k].Get().(*bytes.Buffer); b != nil; b, _ = framePools[k].Get().(*bytes.Buffer) {
			if b == big {
				t.Fatalf("a buffer over keepFrameBuffer went back to class %d", k)
			}
		}
	}
}

// TestEncodeVia checks that EncodeVia gives Encode's bytes, keeps its
// scratch buffer for the next, and copies into a buffer that holds the
// message whether the pools have one or not.
func TestEncodeVia(t *testing.T) {
	var scratch []byte
	for i, n := range []int{0, 10, 5000, 70 << 10, 300 << 10, 2 << 20, 3} {
		msg := encodedEcho{N: i, S: strings.Repeat("v", n)}
		want, err := Encode(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeVia(msg, &scratch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.b.Bytes(), want.b.Bytes()) {
			t.Fatalf("message %d (%d bytes): EncodeVia gives %d bytes, Encode %d", i, n, got.b.Len(), want.b.Len())
		}
		if n < keepFrameBuffer && cap(scratch) < got.b.Len() {
			t.Fatalf("message %d: scratch of capacity %d after a %d-byte message", i, cap(scratch), got.b.Len())
		}
		if c := got.b.Cap(); got.b.Len() <= keepFrameBuffer && floorClass(c) < frameClass(got.b.Len()) {
			t.Fatalf("message %d: a %d-byte frame in a buffer of capacity %d goes back to class %d, below the %d it needs", i, got.b.Len(), c, floorClass(c), frameClass(got.b.Len()))
		}
		want.Discard()
		got.Discard()
	}
}

// TestEncodeViaCopies checks that what EncodeVia returns is its own: the
// scratch buffer it encoded into is reused by the next message, whatever
// its size (one that fills a class exactly, one under the classes), and
// the first message's frame must not change.
func TestEncodeViaCopies(t *testing.T) {
	var scratch []byte
	for _, n := range []int{10, 3000, 8<<10 - headerSize - 5, 8 << 10} {
		first, err := EncodeVia(encodedEcho{N: 1, S: strings.Repeat("a", n)}, &scratch)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(first.b.Bytes())
		second, err := EncodeVia(encodedEcho{N: 2, S: strings.Repeat("b", n)}, &scratch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.b.Bytes(), want) {
			t.Fatalf("a %d-byte message's frame changed when the next was encoded: it shares the scratch buffer", len(want))
		}
		first.Discard()
		second.Discard()
	}
}
