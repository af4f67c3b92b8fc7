package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func hashStream(r io.Reader) ([]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return h.Sum(nil), n, err
}

func TestHandshakeOK(t *testing.T) {
	scfg := testConfig("srv", nil)
	scfg.MaxFrameSize = 1 << 20
	ts := startServer(t, scfg, newTestHandler())
	ccfg := testConfig("cli", nil)
	ccfg.MaxFrameSize = 2 << 20
	c := dial(t, ts.addr(), ccfg, newTestHandler())
	s := ts.nextSession(t)

	if c.RemoteID() != "srv" || s.RemoteID() != "cli" {
		t.Errorf("remote ids: client sees %q, server sees %q", c.RemoteID(), s.RemoteID())
	}
	if c.PeerMaxFrame() != 1<<20 || s.PeerMaxFrame() != 2<<20 {
		t.Errorf("peer max frames: client sees %d, server sees %d", c.PeerMaxFrame(), s.PeerMaxFrame())
	}
	if c.RemoteAddr().String() != ts.addr() {
		t.Errorf("client RemoteAddr %s, want %s", c.RemoteAddr(), ts.addr())
	}
	if c.Err() != nil || s.Err() != nil {
		t.Errorf("open sessions report errors: %v / %v", c.Err(), s.Err())
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no token", Config{NodeID: "a"}, "cluster token is empty"},
		{"frame too small", Config{Token: testToken, MaxFrameSize: 100}, "max frame size 100"},
		{"frame too big", Config{Token: testToken, MaxFrameSize: 2 << 30}, "outside"},
		{"long id", Config{Token: testToken, NodeID: strings.Repeat("x", 256)}, "at most 255 bytes"},
		{"bad utf8 id", Config{Token: testToken, NodeID: "\xff"}, "UTF-8"},
		{"small window", Config{Token: testToken, StreamWindow: 1024}, "stream window"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Listen("127.0.0.1:0", tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Listen error %v, want one containing %q", err, tc.want)
			}
			wantCode(t, err, CodeInvalidArgument)
			_, err = Dial(context.Background(), "127.0.0.1:1", tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestWrongToken(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	bad := testConfig("intruder", nil)
	bad.Token = []byte("wrong token")
	_, err := Dial(callCtx(t), ts.addr(), bad)
	wantCode(t, err, CodePermissionDenied)
	for _, part := range []string{"permission denied", `"srv"`, "does not hold the cluster token", "check --token-file"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("client error %q lacks %q", err, part)
		}
	}
	// The server learns it too, names the client, and keeps serving.
	ts.logs.waitFor(t, "WARN", "handshake failed", "permission denied", `"intruder"`, "does not hold the cluster token", "check --token-file")
	c := dial(t, ts.addr(), testConfig("good", nil), nil)
	var out echoMsg
	if err := c.Call(callCtx(t), mEcho, echoMsg{S: "after"}, &out); err != nil || out.S != "after" {
		t.Fatalf("call after a failed handshake: %v, %+v", err, out)
	}
}

// A client that skips verifying the server and sends a wrong proof is
// refused by the server's check of the client MAC.
func TestServerRejectsBadProof(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	conn := rawDial(t, ts.addr())
	conn.SetDeadline(time.Now().Add(waitLimit))
	var hello []byte
	hello = append(hello, magic[:]...)
	hello = binary.BigEndian.AppendUint16(hello, ProtocolVersion)
	hello = append(hello, byte(PurposeRPC), 4)
	hello = binary.BigEndian.AppendUint32(hello, DefaultMaxFrameSize)
	hello = append(hello, make([]byte, nonceSize)...)
	hello = append(hello, "evil"...)
	if _, err := conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	if _, err := readReply(conn, ts.addr(), ProtocolVersion); err != nil {
		t.Fatalf("reading the server's reply: %v", err)
	}
	proof := append([]byte{proofOK}, bytes.Repeat([]byte{7}, macSize)...)
	if _, err := conn.Write(proof); err != nil {
		t.Fatal(err)
	}
	var final [1]byte
	if _, err := io.ReadFull(conn, final[:]); err != nil || final[0] != proofDenied {
		t.Fatalf("final status %d, %v; want %d", final[0], err, proofDenied)
	}
	ts.logs.waitFor(t, "WARN", "permission denied", `"evil"`, "does not hold the cluster token")
	readUntilClosed(t, conn)
}

// A server with another token is caught by the client, which tells it why.
func TestClientRejectsServerProof(t *testing.T) {
	scfg := testConfig("impostor", nil)
	scfg.Token = []byte("other token")
	ts := startServer(t, scfg, newTestHandler())
	_, err := Dial(callCtx(t), ts.addr(), testConfig("cli", nil))
	wantCode(t, err, CodePermissionDenied)
	if !strings.Contains(err.Error(), `peer "impostor"`) || !strings.Contains(err.Error(), "does not hold the cluster token") {
		t.Errorf("client error %q does not name the peer and the token", err)
	}
	ts.logs.waitFor(t, "permission denied", `"cli"`, "rejected this node's proof")
}

func TestVersionMismatch(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	ccfg := testConfig("future", nil)
	ccfg.version = 2
	_, err := Dial(callCtx(t), ts.addr(), ccfg)
	wantCode(t, err, CodeInvalidArgument)
	for _, part := range []string{"protocol version mismatch", "this node speaks v2", `peer "srv" speaks v1`} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("client error %q lacks %q", err, part)
		}
	}
	ts.logs.waitFor(t, "WARN", "protocol version mismatch", "this node speaks v1", "the peer speaks v2")

	// And the other way round: an old client against a newer server.
	scfg := testConfig("newsrv", nil)
	scfg.version = 3
	ts3 := startServer(t, scfg, newTestHandler())
	_, err = Dial(callCtx(t), ts3.addr(), testConfig("old", nil))
	if err == nil || !strings.Contains(err.Error(), "this node speaks v1") || !strings.Contains(err.Error(), "speaks v3") {
		t.Fatalf("old client error %v does not name both versions", err)
	}
}

func TestNotPhobos(t *testing.T) {
	t.Run("client sends garbage", func(t *testing.T) {
		ts := startServer(t, testConfig("srv", nil), newTestHandler())
		c := rawDial(t, ts.addr())
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		ts.logs.waitFor(t, "WARN", "handshake failed", "not a phobos peer", "GET ")
		readUntilClosed(t, c)
		dial(t, ts.addr(), testConfig("good", nil), nil)
	})
	t.Run("server sends garbage", func(t *testing.T) {
		addr := rawListener(t, func(c net.Conn) {
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			io.Copy(io.Discard, c)
		})
		_, err := Dial(callCtx(t), addr, testConfig("cli", nil))
		wantCode(t, err, CodeInvalidArgument)
		if !strings.Contains(err.Error(), "not a phobos peer") {
			t.Fatalf("error %q does not say the peer is not phobos", err)
		}
	})
	t.Run("server says nothing", func(t *testing.T) {
		addr := rawListener(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		cfg := testConfig("cli", nil)
		cfg.HandshakeTimeout = 200 * time.Millisecond
		_, err := Dial(context.Background(), addr, cfg)
		wantCode(t, err, CodeDeadlineExceeded)
		if !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("error %q does not say it timed out", err)
		}
	})
	t.Run("server hangs up", func(t *testing.T) {
		addr := rawListener(t, func(c net.Conn) {})
		_, err := Dial(callCtx(t), addr, testConfig("cli", nil))
		wantCode(t, err, CodeUnavailable)
		if !strings.Contains(err.Error(), "closed the connection") {
			t.Fatalf("error %q does not say the peer hung up", err)
		}
	})
}

// Slow and broken clients neither block others nor stop the listener.
func TestBadClientsDoNotBlockOthers(t *testing.T) {
	scfg := testConfig("srv", nil)
	scfg.HandshakeTimeout = 300 * time.Millisecond
	ts := startServer(t, scfg, newTestHandler())

	half := rawDial(t, ts.addr())
	half.Write(append(magic[:], 0)) // part of a hello, then gone
	half.Close()

	slow := rawDial(t, ts.addr()) // connects and says nothing
	c := dial(t, ts.addr(), testConfig("good", nil), nil)
	if err := c.Call(callCtx(t), mEcho, echoMsg{}, nil); err != nil {
		t.Fatalf("call while a slow client handshakes: %v", err)
	}

	ts.logs.waitFor(t, "WARN", "handshake failed", "closed the connection", "reading hello")
	readUntilClosed(t, slow)
	ts.logs.waitFor(t, "WARN", "handshake failed", "timed out")
	dial(t, ts.addr(), testConfig("later", nil), nil)
}

func TestDialContext(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Dial(ctx, ts.addr(), testConfig("cli", nil))
	wantCode(t, err, CodeCancelled)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q is not context.Canceled", err)
	}

	silent := rawListener(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, silent, testConfig("cli", nil))
	wantCode(t, err, CodeDeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q is not context.DeadlineExceeded", err)
	}

	_, err = Dial(callCtx(t), "127.0.0.1:1", testConfig("cli", nil))
	wantCode(t, err, CodeUnavailable)
	if !strings.Contains(err.Error(), "is a phobos node listening there?") {
		t.Errorf("dial error %q gives no hint", err)
	}
}

func TestRaftConns(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	rl := ts.l.RaftListener()
	if rl.Addr().String() != ts.addr() {
		t.Fatalf("raft listener addr %s, want %s", rl.Addr(), ts.addr())
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := rl.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := DialRaw(callCtx(t), ts.addr(), PurposeRaft, testConfig("cli", nil))
	if err != nil {
		t.Fatalf("DialRaw: %v", err)
	}
	defer c.Close()
	var sc net.Conn
	select {
	case sc = <-accepted:
	case <-time.After(waitLimit):
		t.Fatal("raft listener accepted nothing")
	}
	defer sc.Close()
	// Raw bytes in both directions, nothing of the handshake left over.
	msg := []byte("append entries")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(sc, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("server read %q, %v", got, err)
	}
	if _, err := sc.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got[:2]); err != nil || string(got[:2]) != "ok" {
		t.Fatalf("client read %q, %v", got[:2], err)
	}

	// Closing the raft listener refuses raft conns but keeps RPC.
	rl.Close()
	if _, err := rl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed raft listener: %v", err)
	}
	_, err = DialRaw(callCtx(t), ts.addr(), PurposeRaft, testConfig("cli", nil))
	if err == nil || !strings.Contains(err.Error(), "raft listener is closed") {
		t.Fatalf("raft dial after close: %v", err)
	}
	dial(t, ts.addr(), testConfig("rpc", nil), nil)

	if _, err := DialRaw(callCtx(t), ts.addr(), PurposeRPC, testConfig("cli", nil)); err == nil {
		t.Error("DialRaw accepted PurposeRPC")
	}
	_, err = DialRaw(callCtx(t), ts.addr(), Purpose(9), testConfig("cli", nil))
	if err == nil || !strings.Contains(err.Error(), "serves no purpose(9) connections") {
		t.Errorf("unknown purpose: %v", err)
	}
}

func TestListenerClose(t *testing.T) {
	l, err := Listen("127.0.0.1:0", testConfig("srv", nil))
	if err != nil {
		t.Fatal(err)
	}
	pending := rawDial(t, l.Addr().String()) // mid-handshake when Close runs
	pending.Write(magic[:])
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	readUntilClosed(t, pending)
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) || !errors.Is(err, kind(CodeUnavailable)) {
		t.Errorf("Accept after Close: %v", err)
	}
	if _, err := l.RaftListener().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("raft Accept after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestComputeMACSeparatesSides(t *testing.T) {
	c := side{nodeID: "a", maxFrame: MinFrameSize}
	s := side{nodeID: "b", maxFrame: MinFrameSize}
	c.nonce[0], s.nonce[0] = 1, 2
	base := computeMAC(testToken, labelServer, 1, PurposeRPC, &c, &s)
	variants := map[string][macSize]byte{
		"label":   computeMAC(testToken, labelClient, 1, PurposeRPC, &c, &s),
		"token":   computeMAC([]byte("x"), labelServer, 1, PurposeRPC, &c, &s),
		"version": computeMAC(testToken, labelServer, 2, PurposeRPC, &c, &s),
		"purpose": computeMAC(testToken, labelServer, 1, PurposeRaft, &c, &s),
		"swapped": computeMAC(testToken, labelServer, 1, PurposeRPC, &s, &c),
	}
	for name, v := range variants {
		if v == base {
			t.Errorf("changing the %s does not change the MAC", name)
		}
	}
}
