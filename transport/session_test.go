package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/internal/codec"
)

func TestCall(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)

		var out echoMsg
		in := echoMsg{N: 42, S: "héllo", B: []byte{0, 1, 2}}
		if err := c.Call(callCtx(t), mEcho, in, &out); err != nil {
			t.Fatalf("Call: %v", err)
		}
		if out.N != in.N || out.S != in.S || !bytes.Equal(out.B, in.B) {
			t.Fatalf("echo returned %+v, want %+v", out, in)
		}
		if err := c.Call(callCtx(t), mEcho, in, nil); err != nil {
			t.Fatalf("Call with nil resp: %v", err)
		}

		// 100 concurrent calls, each must get its own answer.
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out echoMsg
				want := echoMsg{N: i, S: strings.Repeat("x", i*37)}
				if err := c.Call(callCtx(t), mEcho, want, &out); err != nil {
					errs <- err
					return
				}
				if out.N != want.N || out.S != want.S {
					errs <- fmt.Errorf("call %d got %d/%d bytes", i, out.N, len(out.S))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		c.pmu.Lock()
		left := len(c.pending)
		c.pmu.Unlock()
		if left != 0 {
			t.Errorf("%d pending calls left after all returned", left)
		}
	})
}

func TestSendOrder(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		h := newTestHandler()
		ts := startServer(t, mk("srv", nil), h)
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		const n = 2000
		for i := range n {
			if err := c.Send(mSeq, echoMsg{N: i}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		for i := range n {
			select {
			case got := <-h.msgs:
				if got != i {
					t.Fatalf("message %d arrived as number %d", i, got)
				}
			case <-time.After(waitLimit):
				t.Fatalf("only %d of %d messages arrived", i, n)
			}
		}
	})
}

func TestErrorCodeSurvives(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		for _, code := range []uint16{CodeNotLeader, CodeInvalidArgument, 0, 500} {
			err := c.Call(callCtx(t), mFail, echoMsg{N: int(code)}, nil)
			var re *RemoteError
			if !errors.As(err, &re) {
				t.Fatalf("code %d: error %v is not a *RemoteError", code, err)
			}
			if re.Code != code || re.WireCode() != code {
				t.Errorf("remote error code %d, want %d", re.Code, code)
			}
			if want := fmt.Sprintf("handler says no: kind %d", code); err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
			if !errors.Is(err, kind(code)) {
				t.Errorf("errors.Is(err, kind(%d)) is false", code)
			}
			if errors.Is(err, kind(code+1)) {
				t.Errorf("errors.Is matches the wrong code %d", code+1)
			}
		}
	})
}

func TestHandlerPanicIsInternal(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		err := c.Call(callCtx(t), mPanic, echoMsg{}, nil)
		wantCode(t, err, CodeInternal)
		if !strings.Contains(err.Error(), "panicked: boom") {
			t.Errorf("panic error %q", err)
		}
		ts.logs.waitFor(t, "ERROR", "handler panicked", "boom")
		if err := c.Call(callCtx(t), mEcho, echoMsg{}, nil); err != nil {
			t.Fatalf("call after a panic: %v", err)
		}
	})
}

func TestOversizedFrames(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		const max = 64 << 10
		big := echoMsg{B: make([]byte, 100<<10)}
		scfg := mk("srv", nil)
		scfg.MaxFrameSize = max
		ts := startServer(t, scfg, newTestHandler())
		ccfg := mk("cli", nil)
		ccfg.MaxFrameSize = max
		c := dial(t, ts.addr(), ccfg, nil)
		s := ts.nextSession(t)

		stillWorks := func(t *testing.T) {
			t.Helper()
			var out echoMsg
			if err := c.Call(callCtx(t), mEcho, echoMsg{S: "next"}, &out); err != nil || out.S != "next" {
				t.Fatalf("the call after an oversized frame: %v, %+v", err, out)
			}
		}

		t.Run("sender refuses a request over the peer's cap", func(t *testing.T) {
			err := c.Call(callCtx(t), mEcho, big, nil)
			wantCode(t, err, CodeResourceExhausted)
			enc, _ := codec.Marshal(big)
			for _, part := range []string{fmt.Sprintf("is %d bytes", len(enc)), "max frame of 65536 bytes", "split it or raise the peer's max frame size"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q lacks %q", err, part)
				}
			}
			if err := c.Send(mSeq, big); !errors.Is(err, kind(CodeResourceExhausted)) {
				t.Errorf("Send of an oversized message: %v", err)
			}
			stillWorks(t)
		})
		t.Run("receiver discards a request over its cap", func(t *testing.T) {
			c.ignorePeerMax.Store(true)
			defer c.ignorePeerMax.Store(false)
			err := c.Call(callCtx(t), mEcho, big, nil)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != CodeResourceExhausted {
				t.Fatalf("oversized request got %v, want a remote code-8 error", err)
			}
			if !strings.Contains(err.Error(), `"srv"`) || !strings.Contains(err.Error(), "over its max frame of 65536") {
				t.Errorf("error %q does not name the node and its cap", err)
			}
			stillWorks(t)
		})
		t.Run("server refuses a response over the client's cap", func(t *testing.T) {
			err := c.Call(callCtx(t), mBig, echoMsg{N: 100 << 10}, nil)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != CodeResourceExhausted || !strings.Contains(err.Error(), "split it or raise the peer's max frame size") {
				t.Fatalf("oversized response got %v, want a remote code-8 error", err)
			}
			stillWorks(t)
		})
		t.Run("client discards a response over its cap", func(t *testing.T) {
			s.ignorePeerMax.Store(true)
			defer s.ignorePeerMax.Store(false)
			var out echoMsg
			err := c.Call(callCtx(t), mBig, echoMsg{N: 100 << 10}, &out)
			wantCode(t, err, CodeResourceExhausted)
			var re *RemoteError
			if errors.As(err, &re) {
				t.Errorf("got a remote error %v; the client itself should refuse", err)
			}
			if !strings.Contains(err.Error(), "over this node's max frame of 65536") {
				t.Errorf("error %q", err)
			}
			stillWorks(t)
		})
		t.Run("receiver drops a one-way message over its cap", func(t *testing.T) {
			h := newTestHandler()
			ts2 := startServer(t, scfg, h)
			c2 := dial(t, ts2.addr(), ccfg, nil)
			c2.ignorePeerMax.Store(true)
			if err := c2.Send(mSeq, echoMsg{N: 1, B: big.B}); err != nil {
				t.Fatal(err)
			}
			if err := c2.Send(mSeq, echoMsg{N: 2}); err != nil {
				t.Fatal(err)
			}
			select {
			case n := <-h.msgs:
				if n != 2 {
					t.Fatalf("got message %d, want only the small one (2)", n)
				}
			case <-time.After(waitLimit):
				t.Fatal("the small message after the dropped one never arrived")
			}
			ts2.logs.waitFor(t, "WARN", "dropped an oversized one-way message")
		})
	})
}

// costlyReq refuses to be decoded as too costly, as dag.TileableGraph
// refuses a graph of millions of tiny nodes.
type costlyReq struct{}

func (*costlyReq) UnmarshalCBOR([]byte) error {
	return errorf(CodeResourceExhausted, "would take 300 MB to decode")
}

// A decoder's own kind survives Decode (and so the wire); only unclassified
// failures are malformed bodies.
func TestDecodeKeepsTheDecodersKind(t *testing.T) {
	raw, err := codec.Marshal(map[int]int{1: 2})
	if err != nil {
		t.Fatal(err)
	}
	err = NewBody(mStrict, raw).Decode(&costlyReq{})
	wantCode(t, err, CodeResourceExhausted)
	if !strings.Contains(err.Error(), "body for method 8 (3 bytes) refused: would take 300 MB") || strings.Contains(err.Error(), "malformed") {
		t.Errorf("error %q", err)
	}
	err = NewBody(mStrict, raw).Decode(new(string))
	wantCode(t, err, CodeInvalidArgument)
	if !strings.Contains(err.Error(), "malformed body for method 8") {
		t.Errorf("error %q", err)
	}
}

func TestMalformedBody(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)

		// Well-formed CBOR of the wrong shape.
		err := c.Call(callCtx(t), mStrict, "not a struct", nil)
		wantCode(t, err, CodeInvalidArgument)
		if !strings.Contains(err.Error(), "malformed body for method 8") {
			t.Errorf("error %q does not name the method", err)
		}

		// Bytes that are not CBOR at all, written as a raw request frame.
		b := getBuf(headerSize, 0)
		b.Write([]byte{0xff, 0xfe, 0x1f})
		id := c.nextID.Add(1)
		cl := callPool.Get().(*call)
		cl.method, cl.resp = mStrict, nil
		c.pmu.Lock()
		c.pending[id] = cl
		c.pmu.Unlock()
		if err := c.writeFrame(b, header{typ: frameRequest, method: mStrict, id: id}); err != nil {
			t.Fatal(err)
		}
		putBuf(b)
		select {
		case err = <-cl.done:
		case <-time.After(waitLimit):
			t.Fatal("no answer to a malformed request")
		}
		wantCode(t, err, CodeInvalidArgument)
		if !strings.Contains(err.Error(), "malformed body for method 8") {
			t.Errorf("error %q does not name the method", err)
		}
		if err := c.Call(callCtx(t), mStrict, strictReq{A: 1}, nil); err != nil {
			t.Fatalf("call after malformed bodies: %v", err)
		}

		// A response that does not fit resp.
		var wrong struct {
			N string `cbor:"1,keyasint"`
		}
		err = c.Call(callCtx(t), mEcho, echoMsg{N: 5}, &wrong)
		wantCode(t, err, CodeInvalidArgument)
		if c.Err() != nil {
			t.Fatalf("session closed after an undecodable response: %v", c.Err())
		}
	})
}

func TestServerCallsClient(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), newTestHandler())
		s := ts.nextSession(t)

		var out echoMsg
		if err := s.Call(callCtx(t), mEcho, echoMsg{S: "from server"}, &out); err != nil || out.S != "from server" {
			t.Fatalf("server->client call: %v, %+v", err, out)
		}
		// A call whose handler calls back across the same session.
		if err := c.Call(callCtx(t), mCallBack, echoMsg{S: "round trip"}, &out); err != nil || out.S != "round trip" {
			t.Fatalf("nested call: %v, %+v", err, out)
		}
	})
}

func TestCallBeforeServeWaits(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		l, err := Listen("127.0.0.1:0", mk("srv", nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		c := dial(t, l.Addr().String(), mk("cli", nil), nil)
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		result := make(chan error, 1)
		go func() { result <- c.Call(callCtx(t), mEcho, echoMsg{}, nil) }()
		s.Serve(newTestHandler())
		select {
		case err := <-result:
			if err != nil {
				t.Fatalf("a call made before Serve: %v", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("a call made before Serve never finished")
		}
	})
}

func TestServeNilRefuses(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		dial(t, ts.addr(), mk("cli", nil), nil)
		s := ts.nextSession(t)
		err := s.Call(callCtx(t), mEcho, echoMsg{}, nil)
		wantCode(t, err, CodeUnavailable)
		if !strings.Contains(err.Error(), "serves no calls") {
			t.Errorf("error %q", err)
		}
	})
}

func TestInflightCap(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		h := newTestHandler()
		scfg := mk("srv", nil)
		scfg.MaxInflightCalls = 2
		ts := startServer(t, scfg, h)
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		results := make(chan error, 2)
		for range 2 {
			go func() { results <- c.Call(callCtx(t), mBlock, echoMsg{}, nil) }()
			<-h.started
		}
		err := c.Call(callCtx(t), mEcho, echoMsg{}, nil)
		wantCode(t, err, CodeResourceExhausted)
		if !strings.Contains(err.Error(), "retry later") {
			t.Errorf("error %q", err)
		}
		close(h.release)
		for range 2 {
			if err := <-results; err != nil {
				t.Errorf("blocked call: %v", err)
			}
		}
		if err := c.Call(callCtx(t), mEcho, echoMsg{}, nil); err != nil {
			t.Fatalf("call after the blocked ones finished: %v", err)
		}
	})
}

func TestCallContext(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		h := newTestHandler()
		ts := startServer(t, mk("srv", nil), h)
		c := dial(t, ts.addr(), mk("cli", nil), nil)

		ctx, cancel := context.WithCancel(context.Background())
		result := make(chan error, 1)
		go func() { result <- c.Call(ctx, mBlock, echoMsg{}, nil) }()
		<-h.started
		cancel()
		err := <-result
		wantCode(t, err, CodeCancelled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %q is not context.Canceled", err)
		}

		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err = c.Call(ctx, mBlock, echoMsg{}, nil)
		<-h.started
		wantCode(t, err, CodeDeadlineExceeded)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %q is not context.DeadlineExceeded", err)
		}

		c.pmu.Lock()
		left := len(c.pending)
		c.pmu.Unlock()
		if left != 0 {
			t.Errorf("%d pending entries left after cancelled calls", left)
		}
		// The late responses are dropped and the session carries on.
		close(h.release)
		var out echoMsg
		if err := c.Call(callCtx(t), mEcho, echoMsg{S: "next"}, &out); err != nil || out.S != "next" {
			t.Fatalf("call after cancelled calls: %v, %+v", err, out)
		}
	})
}

func TestCloseFailsPendingCalls(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		for _, who := range []string{"client closes", "server closes"} {
			t.Run(who, func(t *testing.T) {
				h := newTestHandler()
				ts := startServer(t, mk("srv", nil), h)
				c := dial(t, ts.addr(), mk("cli", nil), nil)
				s := ts.nextSession(t)
				result := make(chan error, 1)
				go func() { result <- c.Call(context.Background(), mBlock, echoMsg{}, nil) }()
				<-h.started
				if who == "client closes" {
					c.Close()
				} else {
					s.Close()
				}
				var err error
				select {
				case err = <-result:
				case <-time.After(waitLimit):
					t.Fatal("pending call still waiting after close")
				}
				wantCode(t, err, CodeUnavailable)
				select {
				case <-c.Done():
				case <-time.After(waitLimit):
					t.Fatal("client session not done")
				}
				if c.Err() == nil || !errors.Is(c.Err(), kind(CodeUnavailable)) {
					t.Errorf("Err() = %v", c.Err())
				}
				wantCode(t, c.Call(callCtx(t), mEcho, echoMsg{}, nil), CodeUnavailable)
				wantCode(t, c.Send(mSeq, echoMsg{}), CodeUnavailable)
				if _, err := c.OpenStream(callCtx(t)); !errors.Is(err, kind(CodeUnavailable)) {
					t.Errorf("OpenStream after close: %v", err)
				}
			})
		}
	})
}

// A peer that dies mid-frame is an error to pending calls, never a clean EOF.
func TestPeerDiesMidFrame(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		h := newTestHandler()
		ts := startServer(t, mk("srv", nil), h)
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		s := ts.nextSession(t)
		result := make(chan error, 1)
		go func() { result <- c.Call(context.Background(), mBlock, echoMsg{}, nil) }()
		<-h.started

		var hdr [headerSize]byte
		(&header{length: 1000, typ: frameResponse, method: mBlock, id: 1}).put(hdr[:])
		s.wmu.Lock()
		s.ctrl.Write(append(hdr[:], "ten bytes!"...))
		s.wmu.Unlock()
		s.ys.Close()

		select {
		case err := <-result:
			wantCode(t, err, CodeUnavailable)
			if !strings.Contains(err.Error(), "session closed") {
				t.Errorf("error %q does not say the session closed", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("the pending call survived the peer's death")
		}
	})
}

func TestUnknownFrameTypeClosesSession(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		s := ts.nextSession(t)
		b := getBuf(headerSize, 0)
		s.writeFrame(b, header{typ: 9, method: 1})
		putBuf(b)
		select {
		case <-c.Done():
		case <-time.After(waitLimit):
			t.Fatal("session survived a frame of unknown type")
		}
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "unknown type 9") || !strings.Contains(err.Error(), `"srv"`) {
			t.Fatalf("Err() = %v", err)
		}
	})
}

func TestBulkStream64MiB(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		st, err := c.OpenStream(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		const total = 64 << 20
		src := rand.NewChaCha8([32]byte{1})
		want := sha256.New()
		chunk := make([]byte, 1<<20)
		for sent := 0; sent < total; sent += len(chunk) {
			src.Read(chunk)
			want.Write(chunk)
			if _, err := st.Write(chunk); err != nil {
				t.Fatalf("write at %d: %v", sent, err)
			}
		}
		st.Close() // half-close: the server sees EOF, we can still read
		var got streamDigest
		if err := ReadMsg(st, &got, 1<<10); err != nil {
			t.Fatalf("reading the digest: %v", err)
		}
		if got.N != total || !bytes.Equal(got.Sum, want.Sum(nil)) {
			t.Fatalf("server read %d bytes with sum %x, want %d bytes with %x", got.N, got.Sum, total, want.Sum(nil))
		}
	})
}

func TestStreamFromServer(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		dial(t, ts.addr(), mk("cli", nil), newTestHandler())
		s := ts.nextSession(t)
		st, err := s.OpenStream(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		st.Write([]byte("abc"))
		st.Close()
		var got streamDigest
		if err := ReadMsg(st, &got, 0); err != nil || got.N != 3 {
			t.Fatalf("digest %+v, %v", got, err)
		}
	})
}

// freezeConn silently drops what is written and read once frozen: a peer
// that vanished without closing anything.
type freezeConn struct {
	net.Conn
	frozen *atomic.Bool
}

func (c freezeConn) Write(p []byte) (int, error) {
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c freezeConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.frozen.Load() {
			return n, err
		}
	}
}

// dropPongs drops the yamux ping answers written through it once armed
// (yamux's header: version 0, type 2 ping, flag 2 ACK), and counts them:
// a peer whose answers are late, as behind a large frame it is writing,
// while its data arrives. Plaintext only, where yamux's frames are what
// is written.
type dropPongs struct {
	net.Conn
	armed   *atomic.Bool
	dropped *atomic.Int32
}

func (c dropPongs) Write(p []byte) (int, error) {
	if c.armed.Load() && len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == 2 && binary.BigEndian.Uint16(p[2:4])&2 != 0 {
		c.dropped.Add(1)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// TestKeepaliveCountsTraffic: a session keeps a peer whose ping answers
// never come as long as its data does, and closes it once nothing comes
// at all. yamux's own keepalive closed it after the first unanswered ping
// (a head dropped clients in the middle of their 16 MiB requests that way).
func TestKeepaliveCountsTraffic(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		scfg := mk("srv", nil)
		scfg.KeepAliveInterval = 100 * time.Millisecond
		scfg.WriteTimeout = time.Second // the sender may stall that long (race detector, loaded machine)
		ts := startServer(t, scfg, newTestHandler())
		var armed atomic.Bool
		var dropped atomic.Int32
		ccfg := mk("cli", nil)
		ccfg.WrapConn = func(c net.Conn) net.Conn { return dropPongs{c, &armed, &dropped} }
		c := dial(t, ts.addr(), ccfg, nil)
		srv := <-ts.sessions
		if _, err := srv.ys.Ping(); err != nil {
			t.Fatalf("a ping before the pongs are dropped: %v", err)
		}
		armed.Store(true)
		// Twice what an unanswered ping takes to close the session, a
		// message every 10 ms.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(2 * (scfg.KeepAliveInterval + scfg.WriteTimeout)); time.Now().Before(end); <-tick.C {
			if err := c.Send(mSeq, echoMsg{N: 1}); err != nil {
				t.Fatalf("Send: %v", err)
			}
			if err := srv.Err(); err != nil {
				t.Fatalf("the server closed a session whose data kept arriving: %v", err)
			}
		}
		// Now silence: the server's ping goes unanswered, and it closes.
		select {
		case <-srv.Done():
		case <-time.After(waitLimit):
			t.Fatal("the server kept a silent session")
		}
		if err := srv.Err(); !strings.Contains(err.Error(), "stopped answering keepalives") {
			t.Fatalf("Err() = %v", err)
		}
		if dropped.Load() == 0 {
			t.Fatal("no ping answer was dropped: the session closed for another reason")
		}
		t.Logf("%v; %d answers dropped", srv.Err(), dropped.Load())
	})
}

func TestKeepaliveDetectsSilentPeer(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		h := newTestHandler()
		ts := startServer(t, mk("srv", nil), h)
		var frozen atomic.Bool
		cfg := mk("cli", nil)
		cfg.KeepAliveInterval = 50 * time.Millisecond
		cfg.WriteTimeout = 300 * time.Millisecond
		cfg.WrapConn = func(c net.Conn) net.Conn { return freezeConn{c, &frozen} }
		c := dial(t, ts.addr(), cfg, nil)
		result := make(chan error, 1)
		go func() { result <- c.Call(context.Background(), mBlock, echoMsg{}, nil) }()
		<-h.started
		frozen.Store(true)
		select {
		case err := <-result:
			wantCode(t, err, CodeUnavailable)
		case <-time.After(waitLimit):
			t.Fatal("a call to a silent peer never failed")
		}
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "stopped answering keepalives") {
			t.Fatalf("Err() = %v", err)
		}
	})
}

// TestEncodedResponse: a handler may return its response encoded already
// (Encode, into a pooled frame buffer); it arrives as if the session had
// encoded it, for concurrent calls of many sizes, and every buffer goes
// back to the pool once (a buffer given back twice would carry two
// frames at once, and some answer would arrive corrupt). The requests,
// of every body size, arrive in pooled buffers too, given back only once
// their handler returned: one given back before would be read into while
// its handler decodes it.
func TestEncodedResponse(t *testing.T) {
	nets(t, testConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		c := dial(t, ts.addr(), mk("cli", nil), nil)
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := echoMsg{N: i, S: strings.Repeat(string(rune('a'+i%26)), i*i*7)}
				var out echoMsg
				if err := c.Call(callCtx(t), mEncoded, want, &out); err != nil {
					errs <- err
					return
				}
				if out.N != want.N || out.S != want.S {
					errs <- fmt.Errorf("call %d: got %d and %d bytes, want %d and %d", i, out.N, len(out.S), want.N, len(want.S))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestEncodeDiscard(t *testing.T) {
	e, err := Encode(encodedEcho{N: 7, S: "x"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := codec.Marshal(echoMsg{N: 7, S: "x"})
	if e.Len() != len(want) {
		t.Fatalf("Len %d, want %d", e.Len(), len(want))
	}
	e.Discard()
	e.Discard() // a second Discard gives nothing back
	if e.b != nil {
		t.Fatal("a discarded Encoded still holds its buffer")
	}
}

// dataFrames records the length of every yamux data frame written through
// it (yamux's header: version 0, type 0 data), which coalesceConn writes
// as a 12-byte write of its own over a conn that is not a TCP conn.
// Plaintext only, where yamux's frames are what is written.
type dataFrames struct {
	net.Conn
	mu   *sync.Mutex
	lens *[]uint32
}

func (c dataFrames) Write(p []byte) (int, error) {
	if len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == yamuxTypeData {
		if n := binary.BigEndian.Uint32(p[8:12]); n > 0 {
			c.mu.Lock()
			*c.lens = append(*c.lens, n)
			c.mu.Unlock()
		}
	}
	return c.Conn.Write(p)
}

// TestFramesGoInPieces: a frame larger than writePiece reaches yamux in
// pieces, so that no data frame on the wire is larger (yamux alone sends as
// much as the stream's window allows in one: the whole 1.2 MB here), and
// arrives whole.
func TestFramesGoInPieces(t *testing.T) {
	nets(t, plainConfig, func(t *testing.T, mk func(string, *logRecorder) Config) {
		ts := startServer(t, mk("srv", nil), newTestHandler())
		var mu sync.Mutex
		var lens []uint32
		ccfg := mk("cli", nil)
		ccfg.WrapConn = func(c net.Conn) net.Conn { return dataFrames{c, &mu, &lens} }
		c := dial(t, ts.addr(), ccfg, nil)
		big := echoMsg{B: bytes.Repeat([]byte("phobos"), 200<<10)} // 1.2 MB
		var out echoMsg
		if err := c.Call(callCtx(t), mEcho, big, &out); err != nil {
			t.Fatalf("Call: %v", err)
		}
		if !bytes.Equal(out.B, big.B) {
			t.Fatalf("echoed %d bytes, not the %d sent", len(out.B), len(big.B))
		}
		mu.Lock()
		defer mu.Unlock()
		var total uint64
		for _, n := range lens {
			if n > writePiece {
				t.Errorf("a data frame of %d bytes, over %d", n, writePiece)
			}
			total += uint64(n)
		}
		if total < uint64(len(big.B)) {
			t.Fatalf("saw %d bytes of data frames for a %d-byte request: the recorder missed them", total, len(big.B))
		}
	})
}

// TestFailedOpenLeavesNoStream: an open that failed yields no stream, so
// the goroutine that closes a stream opened after its caller gave up
// finds nothing to close (a nil *yamux.Stream in a net.Conn is not nil,
// and closing it panicked, taking the process down: internal/sim's
// TestMixedFaults).
func TestFailedOpenLeavesNoStream(t *testing.T) {
	o := openedStream(nil, errors.New("session shutdown"))
	if o.st != nil || o.err == nil {
		t.Fatalf("a failed open gave stream %v (%T) and error %v; want no stream and the error", o.st, o.st, o.err)
	}
}
