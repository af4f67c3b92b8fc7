package transport

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// fuzzRW feeds the handshake code bytes from outside and swallows its writes.
type fuzzRW struct{ r io.Reader }

func (f fuzzRW) Read(p []byte) (int, error)  { return f.r.Read(p) }
func (f fuzzRW) Write(p []byte) (int, error) { return len(p), nil }

// goodHello is a hello and a (wrong) proof, then a confirmation.
func goodHello() []byte {
	b := appendHello(nil, ProtocolVersion, PurposeRPC, &side{nodeID: "cli", maxFrame: DefaultMaxFrameSize, role: RoleClient})
	b = append(b, make([]byte, macSize)...)
	return append(b, proofOK)
}

// goodReply is an accept and a (wrong) server proof.
func goodReply() []byte {
	b := appendAccept(nil, ProtocolVersion, &side{nodeID: "srv", maxFrame: DefaultMaxFrameSize, role: RoleHead})
	return append(b, make([]byte, 1+macSize)...)
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
				var pooled *bytes.Buffer
				_, pooled, err = fr.ownedBody(h.length)
				putBody(pooled)
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
	cfg, err := plainConfig("srv", nil).resolve("fuzz")
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
	f.Add(appendReject(nil, statusBusy, ProtocolVersion, "node \"srv\" is busy"))
	cfg, err := plainConfig("cli", nil).resolve("fuzz")
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

// fuzzConn is a net.Conn whose reads come from the fuzzer and whose
// writes vanish, for driving the TLS handshakes with hostile bytes.
type fuzzConn struct {
	net.Conn // nil: methods not overridden below panic
	r        io.Reader
}

func (c *fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9} }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// FuzzDialTLS feeds the dialer's TLS handshake what a server might send
// first: TLS records, or a phobos reject sent before TLS.
func FuzzDialTLS(f *testing.F) {
	f.Add(appendReject(nil, statusBusy, ProtocolVersion, "node \"h1\" is busy: too many connections"))
	f.Add(appendReject(nil, statusPlaintext, ProtocolVersion, "plaintext"))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	f.Add([]byte{0x16, 3, 3, 0, 4, 2, 0, 0, 0})
	cfg, err := testConfig("cli", nil).resolve("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := dialTLS(&fuzzConn{r: bytes.NewReader(b)}, "fuzz", PurposeRPC, &cfg)
		if err == nil {
			t.Fatal("a TLS session with a server that sent no valid certificate")
		}
	})
}

// FuzzAcceptTLS feeds the listener's TLS handshake what a client might
// send first: TLS records, a plaintext hello, anything.
func FuzzAcceptTLS(f *testing.F) {
	f.Add(goodHello())
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	cfg, err := testConfig("srv", nil).resolve("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	l := &Listener{cfg: cfg, tlsConf: serverTLSConfig(cfg.TLS)}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := l.acceptTLS(&fuzzConn{r: bytes.NewReader(b)}, "fuzz")
		if err == nil {
			t.Fatal("authenticated a client that sent no valid certificate")
		}
	})
}
