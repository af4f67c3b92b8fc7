package transport

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// fuzzRW feeds the handshake code bytes from outside and swallows its writes.
type fuzzRW struct{ r io.Reader }

func (f fuzzRW) Read(p []byte) (int, error)  { return f.r.Read(p) }
func (f fuzzRW) Write(p []byte) (int, error) { return len(p), nil }

func goodHello() []byte {
	var b []byte
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, ProtocolVersion)
	b = append(b, byte(PurposeRPC), 3)
	b = binary.BigEndian.AppendUint32(b, DefaultMaxFrameSize)
	b = append(b, make([]byte, nonceSize)...)
	b = append(b, "cli"...)
	return append(b, proofOK)
}

func goodReply() []byte {
	var b []byte
	b = append(b, magic[:]...)
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint16(b, ProtocolVersion)
	b = binary.BigEndian.AppendUint32(b, DefaultMaxFrameSize)
	b = append(b, make([]byte, nonceSize)...)
	b = append(b, 3)
	b = append(b, "srv"...)
	return append(b, make([]byte, macSize+1)...)
}

func FuzzFrameHeader(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 1, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Add(make([]byte, 16))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			return
		}
		var back [headerSize]byte
		h.put(back[:])
		if !bytes.Equal(back[:], b[:headerSize]) {
			t.Fatalf("header %x re-encodes as %x", b[:headerSize], back)
		}
	})
}

// FuzzFrameStream reads a byte stream the way the session's read loop does:
// headers, then bodies kept, reused or discarded by the cap.
func FuzzFrameStream(f *testing.F) {
	var seed bytes.Buffer
	for _, typ := range []frameType{frameRequest, frameResponse, frameError, frameOneWay} {
		var h [headerSize]byte
		(&header{length: 3, typ: typ, method: 1, id: 1}).put(h[:])
		seed.Write(h[:])
		seed.Write([]byte{0x63, 'a', 'b'})
	}
	f.Add(seed.Bytes())
	f.Add([]byte{0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := newFrameReader(bytes.NewReader(b))
		const maxBody = 1 << 12
		for {
			h, err := fr.next()
			if err != nil {
				return
			}
			switch {
			case h.length > maxBody:
				err = fr.discard(h.length)
			case h.typ == frameRequest:
				_, err = fr.ownedBody(h.length)
			default:
				var body []byte
				body, err = fr.body(h.length)
				if err == nil {
					var v any
					Body{raw: body, method: h.method}.Decode(&v)
				}
			}
			if err == io.EOF {
				t.Fatal("a frame cut short ended as a clean EOF")
			}
			if err != nil {
				return
			}
		}
	})
}

func FuzzServerHandshake(f *testing.F) {
	f.Add(goodHello())
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(append(append([]byte{}, magic[:]...), 0, 9))
	cfg, err := Config{Token: testToken, NodeID: "srv"}.resolve("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := serverHandshake(fuzzRW{bytes.NewReader(b)}, "fuzz", &cfg, func(Purpose) string { return "" })
		if err == nil {
			t.Fatal("authenticated a peer without the token")
		}
	})
}

func FuzzClientHandshake(f *testing.F) {
	f.Add(goodReply())
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	f.Add(append(append([]byte{}, magic[:]...), statusVersion, 0, 2, 0, 3, 's', 'r', 'v'))
	cfg, err := Config{Token: testToken, NodeID: "cli"}.resolve("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := clientHandshake(fuzzRW{bytes.NewReader(b)}, "fuzz", PurposeRPC, &cfg)
		if err == nil {
			t.Fatal("authenticated a peer without the token")
		}
	})
}

func FuzzReadMsg(f *testing.F) {
	var seed bytes.Buffer
	WriteMsg(&seed, echoMsg{N: 1, S: "x", B: []byte{1}})
	f.Add(seed.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		err := ReadMsg(bytes.NewReader(b), &v, 1<<16)
		if err == nil {
			var again bytes.Buffer
			if err := WriteMsg(&again, v); err != nil {
				t.Fatalf("a decoded message does not encode again: %v", err)
			}
		}
	})
}
