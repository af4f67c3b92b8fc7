package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func hashStream(r io.Reader) ([]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return h.Sum(nil), n, err
}

func TestHandshakeOK(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("srv", nil)
		scfg.MaxFrameSize = 1 << 20
		ts := startServer(t, scfg, newTestHandler())
		ccfg := mk("cli", nil)
		ccfg.MaxFrameSize = 2 << 20
		c := dial(t, ts.addr(), ccfg, newTestHandler())
		s := ts.nextSession(t)

		if c.RemoteID() != "srv" || s.RemoteID() != "cli" {
			t.Errorf("remote ids: client sees %q, server sees %q", c.RemoteID(), s.RemoteID())
		}
		if c.PeerMaxFrame() != 1<<20 || s.PeerMaxFrame() != 2<<20 {
			t.Errorf("peer max frames: client sees %d, server sees %d", c.PeerMaxFrame(), s.PeerMaxFrame())
		}
		if c.MaxFrame() != 2<<20 || s.MaxFrame() != 1<<20 {
			t.Errorf("own max frames: client %d, server %d", c.MaxFrame(), s.MaxFrame())
		}
		if c.RemoteAddr().String() != ts.addr() {
			t.Errorf("client RemoteAddr %s, want %s", c.RemoteAddr(), ts.addr())
		}
		if c.Err() != nil || s.Err() != nil {
			t.Errorf("open sessions report errors: %v / %v", c.Err(), s.Err())
		}
		for _, pe := range []struct {
			who  string
			got  Peer
			name string
		}{{"client", c.Peer(), "srv"}, {"server", s.Peer(), "cli"}} {
			p := pe.got
			if p.Name != pe.name || p.NodeID != pe.name || p.Role != RoleHead {
				t.Errorf("the %s sees peer %+v, want %q with role head", pe.who, p, pe.name)
			}
			if tls := !scfg.Insecure; p.Verified != tls || p.NotAfter.IsZero() == tls {
				t.Errorf("the %s sees Verified %v, NotAfter %v under TLS=%v", pe.who, p.Verified, p.NotAfter, tls)
			}
		}
	})
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no certificate", Config{NodeID: "a"}, "no TLS certificate: give this node a certificate"},
		{"both modes", Config{Insecure: true, Token: testToken, TLS: sourceFor("a", RoleHead)}, "both a TLS certificate and plaintext mode"},
		{"no token", Config{Insecure: true, NodeID: "a"}, "cluster token is empty"},
		{"short token", Config{Insecure: true, Token: []byte("correct horse battery staple")}, "is 28 bytes, shorter than 32"},
		{"bad role", Config{Insecure: true, Token: testToken, Role: 9}, "unknown role"},
		{"frame too small", Config{Insecure: true, Token: testToken, MaxFrameSize: 100}, "max frame size 100"},
		{"frame too big", Config{Insecure: true, Token: testToken, MaxFrameSize: 2 << 30}, "outside"},
		{"long id", Config{Insecure: true, Token: testToken, NodeID: strings.Repeat("x", 256)}, "at most 255 bytes"},
		{"bad utf8 id", Config{TLS: sourceFor("a", RoleHead), NodeID: "\xff"}, "UTF-8"},
		{"small window", Config{TLS: sourceFor("a", RoleHead), StreamWindow: 1024}, "stream window"},
		{"small budget", Config{TLS: sourceFor("a", RoleHead), MaxFrameSize: 1 << 20, SessionBudget: 1 << 19}, "must each hold at least one max-size frame"},
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
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		bad := mk("intruder", nil)
		bad.Token = bytes.Repeat([]byte("w"), MinTokenLen)
		bad.SettingNames = map[string]string{"Token": "--token-file"} // as the CLI names it
		_, err := Dial(callCtx(t), ts.addr(), bad)
		wantCode(t, err, CodePermissionDenied)
		for _, part := range []string{"permission denied", `"srv"`, "does not hold the cluster token", "check --token-file"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("client error %q lacks %q", err, part)
			}
		}
		// The server learns it too, names the client, and keeps serving.
		// (The server's Config maps no setting to a flag: it names the field.)
		ts.logs.waitFor(t, "WARN", "handshake failed", "permission denied", `"intruder"`, "does not hold the cluster token", "check this node's token: Config.Token")
		c := dial(t, ts.addr(), mk("good", nil), nil)
		var out echoMsg
		if err := c.Call(callCtx(t), mEcho, echoMsg{S: "after"}, &out); err != nil || out.S != "after" {
			t.Fatalf("call after a failed handshake: %v, %+v", err, out)
		}
	})
}

// rawHello is a plaintext client hello from node id, claiming role head.
func rawHello(id string) []byte {
	me := side{nodeID: id, maxFrame: DefaultMaxFrameSize, role: RoleHead}
	return appendHello(nil, ProtocolVersion, PurposeRPC, &me)
}

// A client without the token that sends a hello and then only listens
// gets nothing derived from the token: the accept carries a nonce and no
// MAC, and the server says nothing more until the client proves itself.
// (Before version 2 the accept carried the server's MAC, an offline oracle
// for guessing a weak token.)
func TestPlaintextServerSendsNoMACBeforeProof(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		conn := ts.rawDial(t)
		conn.SetDeadline(time.Now().Add(waitLimit))
		if _, err := conn.Write(rawHello("eve")); err != nil {
			t.Fatal(err)
		}
		rep, err := readReply(conn, ts.addr(), ProtocolVersion)
		if err != nil {
			t.Fatalf("reading the server's accept: %v", err)
		}
		if rep.nodeID != "srv" || rep.role != RoleHead {
			t.Errorf("accept %+v", rep)
		}
		// Everything else the server sends before giving up on us: nothing
		// until its handshake timeout closes the conn.
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var more [64]byte
		if n, err := conn.Read(more[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the server sent %d more bytes (%x), %v; want silence until the client's proof", n, more[:n], err)
		}
		// The accept is exactly its fixed layout plus the id: no MAC rides on it.
		var want bytes.Buffer
		srvSide := side{nodeID: "srv", maxFrame: DefaultMaxFrameSize, role: RoleHead, nonce: rep.nonce}
		want.Write(appendAccept(nil, ProtocolVersion, &srvSide))
		if want.Len() != 7+acceptFixedLen+3 {
			t.Fatalf("accept layout is %d bytes", want.Len())
		}
	})
}

// A client that skips verifying the server and sends a wrong proof is
// refused by the server's check of the client MAC, and gets no server MAC.
func TestServerRejectsBadProof(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		conn := ts.rawDial(t)
		conn.SetDeadline(time.Now().Add(waitLimit))
		if _, err := conn.Write(rawHello("evil")); err != nil {
			t.Fatal(err)
		}
		if _, err := readReply(conn, ts.addr(), ProtocolVersion); err != nil {
			t.Fatalf("reading the server's reply: %v", err)
		}
		if _, err := conn.Write(bytes.Repeat([]byte{7}, macSize)); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(conn)
		if err != nil || !bytes.Equal(rest, []byte{proofDenied}) {
			t.Fatalf("after a wrong proof the server sent %x, %v; want only the denial %d", rest, err, proofDenied)
		}
		ts.logs.waitFor(t, "WARN", "permission denied", `"evil"`, "does not hold the cluster token")
	})
}

// A server with another token is caught by the client, which tells it why.
func TestClientRejectsServerProof(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		// The impostor answers a proof it cannot check with a MAC it cannot make.
		addr := rawListener(t, mk("x", nil).Network, func(c net.Conn) {
			h, err := readHello(c, "impostor", ProtocolVersion)
			if err != nil {
				return
			}
			me := side{nodeID: "impostor", maxFrame: DefaultMaxFrameSize, role: RoleHead}
			c.Write(appendAccept(nil, ProtocolVersion, &me))
			var proof [macSize]byte
			if _, err := io.ReadFull(c, proof[:]); err != nil {
				return
			}
			c.Write(append([]byte{proofOK}, bytes.Repeat([]byte{1}, macSize)...))
			var confirm [1]byte
			io.ReadFull(c, confirm[:])
			if confirm[0] != proofDenied || h.nodeID != "cli" {
				t.Errorf("the client confirmed a forged proof (%d) or announced %q", confirm[0], h.nodeID)
			}
		})
		_, err := Dial(callCtx(t), addr, mk("cli", nil))
		wantCode(t, err, CodePermissionDenied)
		if !strings.Contains(err.Error(), `peer "impostor"`) || !strings.Contains(err.Error(), "does not hold the cluster token") {
			t.Errorf("client error %q does not name the peer and the token", err)
		}
	})
}

// The server learns when the client rejects its proof: both logs name the
// problem. (A server with another token never gets that far: the client
// proves first and the server denies it.)
func TestServerLearnsClientRejectedItsProof(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		conn := ts.rawDial(t)
		conn.SetDeadline(time.Now().Add(waitLimit))
		me := side{nodeID: "cli", maxFrame: DefaultMaxFrameSize, role: RoleHead}
		conn.Write(appendHello(nil, ProtocolVersion, PurposeRPC, &me))
		srv, err := readReply(conn, ts.addr(), ProtocolVersion)
		if err != nil {
			t.Fatal(err)
		}
		proof := computeMAC(testToken, labelClient, ProtocolVersion, PurposeRPC, &me, &srv)
		conn.Write(proof[:])
		var final [1 + macSize]byte
		if _, err := io.ReadFull(conn, final[:]); err != nil || final[0] != proofOK {
			t.Fatalf("final %x, %v", final, err)
		}
		if want := computeMAC(testToken, labelServer, ProtocolVersion, PurposeRPC, &me, &srv); !bytes.Equal(want[:], final[1:]) {
			t.Fatal("the server's proof does not verify")
		}
		conn.Write([]byte{proofDenied})
		ts.logs.waitFor(t, "WARN", "permission denied", `"cli"`, "rejected this node's proof")
	})
}

func TestVersionMismatch(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		ccfg := mk("future", nil)
		ccfg.version = 9
		_, err := Dial(callCtx(t), ts.addr(), ccfg)
		wantCode(t, err, CodeInvalidArgument)
		for _, part := range []string{"protocol version mismatch", "this node speaks v9", `peer "srv" speaks v2`} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("client error %q lacks %q", err, part)
			}
		}
		ts.logs.waitFor(t, "WARN", "protocol version mismatch", "this node speaks v2", "the peer speaks v9")

		// And the other way round: an old client against a newer server.
		scfg := mk("newsrv", nil)
		scfg.version = 3
		ts3 := startServer(t, scfg, newTestHandler())
		_, err = Dial(callCtx(t), ts3.addr(), mk("old", nil))
		if err == nil || !strings.Contains(err.Error(), "this node speaks v2") || !strings.Contains(err.Error(), "speaks v3") {
			t.Fatalf("old client error %v does not name both versions", err)
		}
	})
}

// A version-1 node (plaintext, its hello without a role) meeting this one
// learns the versions differ, in either mode.
func TestVersion1PeerIsToldTheVersions(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := ts.rawDial(t)
		c.SetDeadline(time.Now().Add(waitLimit))
		var v1 []byte
		v1 = append(v1, magic[:]...)
		v1 = binary.BigEndian.AppendUint16(v1, 1)
		v1 = append(v1, byte(PurposeRPC), 3)
		v1 = binary.BigEndian.AppendUint32(v1, DefaultMaxFrameSize)
		v1 = append(v1, make([]byte, nonceSize)...)
		v1 = append(v1, "old"...)
		c.Write(v1)
		_, err := readReply(c, ts.addr(), 1)
		if err == nil {
			t.Fatal("a version-1 hello was accepted")
		}
		t.Logf("a version-1 node sees: %v", err)
		if !strings.Contains(err.Error(), "v2") && !strings.Contains(err.Error(), "requires TLS") {
			t.Errorf("error %q names neither the version nor TLS", err)
		}
	})
}

func TestNotPhobos(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		tlsMode := !mk("x", nil).Insecure
		t.Run("client sends garbage", func(t *testing.T) {
			ts := startServer(t, mk("srv", nil), newTestHandler())
			c := ts.rawDial(t)
			c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			if tlsMode {
				ts.logs.waitFor(t, "WARN", "handshake failed", "not a TLS client", "GET ")
			} else {
				ts.logs.waitFor(t, "WARN", "handshake failed", "not a phobos peer", "GET ")
			}
			readUntilClosed(t, c)
			dial(t, ts.addr(), mk("good", nil), nil)
		})
		t.Run("server sends garbage", func(t *testing.T) {
			addr := rawListener(t, mk("x", nil).Network, func(c net.Conn) {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				io.Copy(io.Discard, c)
			})
			_, err := Dial(callCtx(t), addr, mk("cli", nil))
			wantCode(t, err, CodeInvalidArgument)
			want := "not a phobos peer"
			if tlsMode {
				want = "does not speak TLS"
			}
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "HTTP/") {
				t.Fatalf("error %q does not say %q and what the peer sent", err, want)
			}
		})
		t.Run("server says nothing", func(t *testing.T) {
			addr := rawListener(t, mk("x", nil).Network, func(c net.Conn) { io.Copy(io.Discard, c) })
			cfg := mk("cli", nil)
			cfg.HandshakeTimeout = 200 * time.Millisecond
			_, err := Dial(context.Background(), addr, cfg)
			wantCode(t, err, CodeDeadlineExceeded)
			if !strings.Contains(err.Error(), "timed out") {
				t.Fatalf("error %q does not say it timed out", err)
			}
		})
		t.Run("server hangs up", func(t *testing.T) {
			addr := rawListener(t, mk("x", nil).Network, func(c net.Conn) {})
			_, err := Dial(callCtx(t), addr, mk("cli", nil))
			wantCode(t, err, CodeUnavailable)
			if !strings.Contains(err.Error(), "closed the connection") {
				t.Fatalf("error %q does not say the peer hung up", err)
			}
		})
	})
}

// Slow and broken clients neither block others nor stop the listener.
func TestBadClientsDoNotBlockOthers(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("srv", nil)
		scfg.HandshakeTimeout = 300 * time.Millisecond
		ts := startServer(t, scfg, newTestHandler())

		half := ts.rawDial(t)
		step := "reading hello"
		if scfg.Insecure {
			half.Write(append(magic[:], 0)) // part of a hello, then gone
		} else {
			half.Write([]byte{0x16, 3, 1, 0, 200, 1}) // part of a TLS ClientHello
			step = "in the TLS handshake"
		}
		half.Close()

		slow := ts.rawDial(t) // connects and says nothing
		c := dial(t, ts.addr(), mk("good", nil), nil)
		if err := c.Call(callCtx(t), mEcho, echoMsg{}, nil); err != nil {
			t.Fatalf("call while a slow client handshakes: %v", err)
		}

		ts.logs.waitFor(t, "WARN", "handshake failed", "closed the connection", step)
		readUntilClosed(t, slow)
		ts.logs.waitFor(t, "WARN", "handshake failed", "timed out")
		dial(t, ts.addr(), mk("later", nil), nil)
	})
}

func TestDialContext(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Dial(ctx, ts.addr(), mk("cli", nil))
		wantCode(t, err, CodeCancelled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %q is not context.Canceled", err)
		}

		silent := rawListener(t, mk("x", nil).Network, func(c net.Conn) { io.Copy(io.Discard, c) })
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = Dial(ctx, silent, mk("cli", nil))
		wantCode(t, err, CodeDeadlineExceeded)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %q is not context.DeadlineExceeded", err)
		}

		_, err = Dial(callCtx(t), "127.0.0.1:1", mk("cli", nil))
		wantCode(t, err, CodeUnavailable)
		if !strings.Contains(err.Error(), "is a phobos node listening there?") {
			t.Errorf("dial error %q gives no hint", err)
		}
	})
}

func TestRaftConns(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
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
		c, err := DialRaw(callCtx(t), ts.addr(), PurposeRaft, mk("cli", nil))
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
		if p, ok := ConnPeer(c); !ok || p.Name != "srv" || p.Role != RoleHead {
			t.Errorf("the dialer's raft conn has peer %+v, %v", p, ok)
		}
		if p, ok := ConnPeer(sc); !ok || p.Name != "cli" || p.NodeID != "cli" || p.Role != RoleHead {
			t.Errorf("the accepted raft conn has peer %+v, %v", p, ok)
		}
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
		_, err = DialRaw(callCtx(t), ts.addr(), PurposeRaft, mk("cli", nil))
		if err == nil || !strings.Contains(err.Error(), "raft listener is closed") {
			t.Fatalf("raft dial after close: %v", err)
		}
		dial(t, ts.addr(), mk("rpc", nil), nil)

		if _, err := DialRaw(callCtx(t), ts.addr(), PurposeRPC, mk("cli", nil)); err == nil {
			t.Error("DialRaw accepted PurposeRPC")
		}
		_, err = DialRaw(callCtx(t), ts.addr(), Purpose(9), mk("cli", nil))
		if err == nil || !strings.Contains(err.Error(), "serves no purpose(9) connections") {
			t.Errorf("unknown purpose: %v", err)
		}
	})
}

func TestListenerClose(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		l, err := Listen("127.0.0.1:0", mk("srv", nil))
		if err != nil {
			t.Fatal(err)
		}
		pending := rawDial(t, mk("x", nil).Network, l.Addr().String()) // mid-handshake when Close runs
		pending.Write([]byte{0x16, 3, 1})
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
	})
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
		"role":    computeMAC(testToken, labelServer, 1, PurposeRPC, &side{nodeID: "a", maxFrame: MinFrameSize, nonce: c.nonce, role: RoleAdmin}, &s),
	}
	for name, v := range variants {
		if v == base {
			t.Errorf("changing the %s does not change the MAC", name)
		}
	}
}

func TestBulkConns(t *testing.T) {
	modes(t, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		// Not served until the owner asks for bulk conns: nothing can pile
		// up in a listener nobody reads.
		_, err := DialRaw(callCtx(t), ts.addr(), PurposeBulk, mk("cli", nil))
		if !errors.Is(err, ErrPurposeNotServed) || !strings.Contains(err.Error(), "serves no bulk connections") {
			t.Fatalf("bulk dial before BulkListener: %v, want ErrPurposeNotServed naming bulk", err)
		}
		bl := ts.l.BulkListener()
		accepted := make(chan net.Conn, 1)
		go func() {
			if c, err := bl.Accept(); err == nil {
				accepted <- c
			}
		}()
		c, err := DialRaw(callCtx(t), ts.addr(), PurposeBulk, mk("cli", nil))
		if err != nil {
			t.Fatalf("DialRaw bulk: %v", err)
		}
		defer c.Close()
		var sc net.Conn
		select {
		case sc = <-accepted:
		case <-time.After(waitLimit):
			t.Fatal("bulk listener accepted nothing")
		}
		defer sc.Close()
		if p, ok := ConnPeer(sc); !ok || p.Name != "cli" || p.NodeID != "cli" {
			t.Errorf("the accepted bulk conn has peer %+v, %v", p, ok)
		}
		// A megabyte each way, raw: no framing of transport's in between.
		msg := bytes.Repeat([]byte("bulk"), 1<<18)
		go c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(sc, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("server read %d bytes, %v", len(got), err)
		}
		// Raft conns still go to the raft listener, not this one.
		if rc, err := DialRaw(callCtx(t), ts.addr(), PurposeRaft, mk("cli", nil)); err != nil {
			t.Fatalf("raft dial beside bulk: %v", err)
		} else {
			rc.Close()
		}
		bl.Close()
		_, err = DialRaw(callCtx(t), ts.addr(), PurposeBulk, mk("cli", nil))
		if err == nil || !strings.Contains(err.Error(), "bulk listener is closed") {
			t.Fatalf("bulk dial after close: %v", err)
		}
	})
}

// countingConn counts the writes that reach the TCP conn.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestBulkTLSWritesAreGathered checks that a large Write on a TLS bulk conn
// reaches TCP in writes of many records, not one syscall per 16 KiB record.
func TestBulkTLSWritesAreGathered(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	bl := ts.l.BulkListener()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := bl.Accept(); err == nil {
			accepted <- c
		}
	}()
	var writes atomic.Int64
	cfg := testConfig("cli", nil)
	cfg.WrapConn = func(c net.Conn) net.Conn { return countingConn{c, &writes} }
	c, err := DialRaw(callCtx(t), ts.addr(), PurposeBulk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sc net.Conn
	select {
	case sc = <-accepted:
	case <-time.After(waitLimit):
		t.Fatal("bulk listener accepted nothing")
	}
	defer sc.Close()
	msg := bytes.Repeat([]byte{7}, 4<<20) // 256 records
	done := make(chan error, 1)
	go func() {
		got := make([]byte, len(msg))
		_, err := io.ReadFull(sc, got)
		if err == nil && !bytes.Equal(got, msg) {
			err = errors.New("the bytes differ")
		}
		done <- err
	}()
	before := writes.Load()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("reading the bulk bytes: %v", err)
	}
	// 4 MiB in 256 KiB writes is 16 of them (give or take one); one per
	// record would be 256.
	if n := writes.Load() - before; n > 20 {
		t.Errorf("a 4 MiB write reached TCP in %d writes, want at most 20", n)
	}
}
