package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/internal/yamux"
)

// Handler serves what a peer sends over a Session. One Handler may serve
// many sessions at once; its methods are called concurrently.
type Handler interface {
	// HandleCall runs in its own goroutine; its result is CBOR-encoded as the
	// response body. Returning an error sends an error response carrying the
	// error's WireCode (0 if it has none) and its text. ctx is cancelled when
	// the session closes (the caller giving up is not sent over the wire).
	HandleCall(ctx context.Context, s *Session, m Method, body Body) (any, error)
	// HandleMessage handles one-way messages, called in arrival order from
	// the read loop; it must not block long (it holds up every frame behind it).
	HandleMessage(s *Session, m Method, body Body)
	// HandleStream gets a bulk stream the peer opened, in its own goroutine;
	// the handler must close it.
	HandleStream(s *Session, st net.Conn)
}

// Session is an authenticated yamux session with one control stream for
// calls and one-way messages in both directions, plus bulk streams.
//
// All methods are safe for concurrent use. Frames written by concurrent
// Call and Send are serialized whole; Send order is the order in which Send
// calls return. The session owns its connection: Close, or the peer going
// away, closes it and fails every pending Call with an unavailable error.
type Session struct {
	cfg        Config
	log        *slog.Logger
	ys         *yamux.Session
	conn       *coalesceConn // under ys; counts the bytes read for the keepalive
	ctrl       net.Conn      // the control stream
	remoteID   string
	remoteAddr net.Addr
	peer       Peer
	peerMax    int

	wmu       sync.Mutex // serializes frame writes on ctrl
	wdeadline time.Time  // ctrl's current write deadline; guarded by wmu

	pmu     sync.Mutex
	pending map[uint64]*call // calls waiting for a response, by request id
	closing bool             // no new pending calls; set with err
	err     error            // why the session closed
	nextID  atomic.Uint64

	serveOnce sync.Once
	served    chan struct{} // closed by Serve, after handler is set
	handler   Handler

	ctx      context.Context // handlers' context; cancelled at close
	cancel   context.CancelFunc
	inflight atomic.Int64 // incoming calls being handled

	// Bytes of the peer's requests and one-way messages held from their
	// frame's read until their handler returns (Config.SessionBudget), and
	// the listener's shared budget (nil for a dialed session).
	budget  *budget
	lbudget *budget

	ignorePeerMax atomic.Bool // test hook: send frames over the peer's cap

	closeOnce sync.Once
	done      chan struct{}

	// The loop accepting the peer's bulk streams starts with the first
	// of them (startAccepting).
	acceptOnce sync.Once

	// The keepalive's timer, and the bytes read as of its last check
	// (one check runs at a time, each in a goroutine of its own).
	keepTimer atomic.Pointer[time.Timer]
	keepSeen  atomic.Uint64
}

// call is one outstanding Call. Pooled: the done channel is reused.
type call struct {
	resp   any
	method Method
	done   chan error // buffered 1; exactly one send per use
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan error, 1)} }}

func newSession(ys *yamux.Session, conn *coalesceConn, ctrl net.Conn, remote net.Addr, info peerInfo, cfg *Config, lbudget *budget) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg:        *cfg,
		ys:         ys,
		conn:       conn,
		ctrl:       ctrl,
		remoteID:   info.nodeID,
		remoteAddr: remote,
		peer:       info.peer,
		peerMax:    info.maxFrame,
		pending:    make(map[uint64]*call),
		served:     make(chan struct{}),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		budget:     newBudget(cfg.SessionBudget),
		lbudget:    lbudget,
	}
	s.log = cfg.Logger.With("peer", info.nodeID, "remote", remote.String())
	s.keepSeen.Store(conn.read.Load())
	// Armed only once stored: the first check reads the timer back.
	t := time.AfterFunc(time.Duration(math.MaxInt64), s.keepalive)
	s.keepTimer.Store(t)
	t.Reset(s.cfg.KeepAliveInterval)
	go s.readLoop()
	// Bulk streams are rare (raylets fetching objects from one another;
	// none between a head and its raylets), so no goroutine waits for
	// them in every session: the accept loop starts with the first one.
	// With a thousand raylets the head kept a thousand such goroutines
	// waiting, and each collection read their stacks.
	if s.ys.OnIncoming(s.startAccepting) {
		s.startAccepting()
	}
	// yamux going down on its own (the peer closing the connection, a
	// reset) closes the session with yamux's reason, which the accept
	// loop, when it waited in every session, was there to notice.
	s.ys.OnShutdown(func() { s.closeWith(s.yamuxError(s.ys.ShutdownErr())) })
	return s
}

// startAccepting starts the accept loop, once.
func (s *Session) startAccepting() {
	s.acceptOnce.Do(func() { go s.acceptLoop() })
}

// keepalive checks every KeepAliveInterval that the peer is alive. Any
// byte that arrived since the last check shows it is. A peer silent for a
// whole interval is pinged, and the session closes if nothing at all, the
// answer included, arrives within WriteTimeout.
//
// It runs from a timer (keepTimer), not in a goroutine of its own that
// waits for one: a head holds a session for each of its raylets, and a
// thousand goroutines asleep between checks were a thousand stacks for
// the collector to scan. One check runs at a time: the timer is set again
// only at the end of a check.
//
// yamux's own keepalive (off) pings whatever the traffic and closes the
// session when the answer is late, even while the peer's data streams in:
// a peer busy writing a large frame queues its answer behind it, and on a
// loaded machine a head dropped clients in the middle of their 16 MiB
// requests that way.
func (s *Session) keepalive() {
	if isClosedChan(s.done) {
		return
	}
	if n := s.conn.read.Load(); n != s.keepSeen.Load() {
		s.keepSeen.Store(n)
		s.keepTimer.Load().Reset(s.cfg.KeepAliveInterval)
		return
	}
	_, err := s.ys.Ping() // waits up to WriteTimeout to send, and as long for the answer
	if n := s.conn.read.Load(); n != s.keepSeen.Load() || err == nil {
		s.keepSeen.Store(n)
		if !isClosedChan(s.done) {
			s.keepTimer.Load().Reset(s.cfg.KeepAliveInterval)
		}
		return
	}
	if !errors.Is(err, yamux.ErrSessionShutdown) {
		s.closeWith(errorf(CodeUnavailable, "peer %q (%s) stopped answering keepalives: nothing arrived for %v, nor within %v of a ping; closing the session: %w",
			s.remoteID, s.remoteAddr, s.cfg.KeepAliveInterval, s.cfg.WriteTimeout, err))
	}
}

func yamuxConfig(cfg *Config) *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = 256
	c.EnableKeepAlive = false                   // Session.keepalive does it, counting any traffic
	c.KeepAliveInterval = cfg.KeepAliveInterval // unused with its keepalive off, but yamux refuses 0
	c.ConnectionWriteTimeout = cfg.WriteTimeout
	c.MaxStreamWindowSize = cfg.StreamWindow
	c.LogOutput = nil
	c.Logger = yamuxLogger{cfg.Logger}
	return c
}

// yamuxLogger sends yamux's own messages to slog at debug level: yamux logs
// ordinary disconnects as "[ERR]", and the session reports what matters.
type yamuxLogger struct{ l *slog.Logger }

func (y yamuxLogger) Print(v ...any) {
	y.l.Debug(strings.TrimSpace(fmt.Sprint(v...)), "source", "yamux")
}
func (y yamuxLogger) Printf(f string, v ...any) {
	y.l.Debug(strings.TrimSpace(fmt.Sprintf(f, v...)), "source", "yamux")
}
func (y yamuxLogger) Println(v ...any) {
	y.l.Debug(strings.TrimSpace(fmt.Sprintln(v...)), "source", "yamux")
}

// RemoteID is the peer's NodeID from the handshake.
func (s *Session) RemoteID() string { return s.remoteID }

// RemoteAddr is the peer's network address.
func (s *Session) RemoteAddr() net.Addr { return s.remoteAddr }

// PeerMaxFrame is the largest frame body the peer accepts.
func (s *Session) PeerMaxFrame() int { return s.peerMax }

// MaxFrame is the largest frame body this end accepts (Config.MaxFrameSize).
func (s *Session) MaxFrame() int { return s.cfg.MaxFrameSize }

// BytesInFlight is the bytes of the peer's requests and one-way messages
// this session holds now (see Config.SessionBudget).
func (s *Session) BytesInFlight() int64 { return s.budget.inUse() }

// admit charges an n-byte request or message to the session's budget and,
// beyond the session's reserve, to the listener's, waiting for room: the
// read loop stops reading this peer meanwhile, and TCP pushes back on it
// alone. It returns the listener's share to give back with n, and false if
// the session closed first. (A handler that calls the peer back over this
// session while the budget is full waits for its reply until other
// handlers return: the reply is behind the frame that does not fit.)
func (s *Session) admit(n uint32) (int64, bool) {
	before, ok := s.budget.acquire(int64(n), s.done)
	if !ok {
		return 0, false
	}
	if s.lbudget == nil {
		return 0, true
	}
	share := int64(n) - max(0, SessionReserve-before)
	if share <= 0 {
		return 0, true
	}
	if _, ok := s.lbudget.acquire(share, s.done); !ok {
		s.budget.release(int64(n))
		return 0, false
	}
	return share, true
}

func (s *Session) release(n uint32, share int64) {
	s.budget.release(int64(n))
	if share > 0 {
		s.lbudget.release(share)
	}
}

// Done is closed when the session has closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// AfterClose arranges for f to run, in a goroutine of its own, once the
// session has closed (at once if it has; Err then says why), as a
// goroutine waiting on Done would, but with none waiting meanwhile: a head
// keeps a session for each of thousands of raylets. stop cancels f,
// reporting whether it did (false once f has started).
func (s *Session) AfterClose(f func()) (stop func() bool) {
	return context.AfterFunc(s.ctx, f)
}

// Err says why the session closed; nil while it is open.
func (s *Session) Err() error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.err
}

// Serve starts dispatching the peer's calls, messages and streams to h.
// Call it once, on both ends; later calls are ignored. Until Serve, incoming
// frames wait (responses to this side's own calls wait behind them too). A
// nil h refuses every incoming call and stream.
func (s *Session) Serve(h Handler) {
	s.serveOnce.Do(func() {
		if h == nil {
			h = refuseHandler{}
		}
		s.handler = h
		close(s.served)
	})
}

// Close closes the session and its connection, failing pending calls. It
// does not wait for running handlers (their context is cancelled).
func (s *Session) Close() error {
	s.closeWith(errorf(CodeUnavailable, "session with %q (%s) closed by this node: %w", s.remoteID, s.remoteAddr, net.ErrClosed))
	return nil
}

// closeWith records why the session ends (first reason wins) and tears it down.
func (s *Session) closeWith(reason error) {
	s.closeOnce.Do(func() {
		s.pmu.Lock()
		s.err = reason
		s.closing = true
		pend := s.pending
		s.pending = nil
		s.pmu.Unlock()
		// Close the connection before cancelling handlers, so that a handler
		// ending because of the cancel cannot slip its reply ("context
		// canceled") out ahead of the close its caller must see.
		s.ys.Close()
		s.cancel()
		for _, c := range pend {
			c.done <- s.closedErr(c.method, reason)
		}
		close(s.done)
		s.keepTimer.Load().Stop()
		if errors.Is(reason, net.ErrClosed) {
			s.log.Debug("transport: session closed", "err", reason)
		} else {
			s.log.Info("transport: session closed", "err", reason)
		}
	})
}

func (s *Session) closedErr(m Method, reason error) error {
	return errorf(CodeUnavailable, "%s to %q: session closed: %w", m, s.remoteID, reason)
}

// Call sends a request and waits for its response, which is decoded into
// resp (if non-nil). An error the peer's handler returned comes back as a
// *RemoteError, unwrapped. Errors transport makes carry a WireCode:
// unavailable (session closed), resource exhausted (request over the peer's
// max frame), cancelled / deadline exceeded (ctx; also errors.Is the
// context error), invalid argument (a response that does not decode).
//
// If ctx ends, Call returns at once (unless its response is being decoded
// at that moment) and a late response is dropped. The frame write itself is
// bounded by WriteTimeout, not ctx.
func (s *Session) Call(ctx context.Context, m Method, req, resp any) error {
	if ctx.Err() != nil {
		return ctxError(ctx, "%s to %q", m, s.remoteID)
	}
	b := getBuf(headerSize, sizeOf(req))
	if err := encodeInto(b, req); err != nil {
		putBuf(b)
		return errorf(CodeInvalidArgument, "%s to %q: encoding request %T: %w", m, s.remoteID, req, err)
	}
	if err := s.checkSize(b, "request for", m); err != nil {
		putBuf(b)
		return err
	}

	c := callPool.Get().(*call)
	c.resp, c.method = resp, m
	id := s.nextID.Add(1)
	s.pmu.Lock()
	if s.closing {
		reason := s.err
		s.pmu.Unlock()
		s.putCall(c)
		putBuf(b)
		return s.closedErr(m, reason)
	}
	s.pending[id] = c
	s.pmu.Unlock()

	err := s.writeFrame(b, header{typ: frameRequest, method: m, id: id})
	// Written (or given up on), the request's buffer is the pool's again
	// now, not once the answer comes: a call may wait long for it (a pull
	// waits at the head for work), and while a thousand raylets' pulls
	// waited, each held its buffer and the calls after them made theirs
	// anew rather than taking a warm one from the pool.
	putBuf(b)
	if err != nil {
		if !s.removePending(id) {
			<-c.done // closeWith claimed it and sent the close error; drain
		}
		s.putCall(c)
		return err
	}

	select {
	case err := <-c.done:
		s.putCall(c)
		return err
	case <-ctx.Done():
		if s.removePending(id) {
			s.putCall(c)
			return ctxError(ctx, "%s to %q", m, s.remoteID)
		}
		// The read loop already took the call and is delivering; take
		// what it delivers, since resp may be being written right now.
		err := <-c.done
		s.putCall(c)
		return err
	}
}

func (s *Session) putCall(c *call) {
	c.resp = nil
	callPool.Put(c)
}

// removePending deletes a pending call; false if someone else took it.
func (s *Session) removePending(id uint64) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if _, ok := s.pending[id]; !ok {
		return false
	}
	delete(s.pending, id)
	return true
}

func (s *Session) isPending(id uint64) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	_, ok := s.pending[id]
	return ok
}

func (s *Session) takePending(id uint64) *call {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	c := s.pending[id]
	if c != nil {
		delete(s.pending, id)
	}
	return c
}

// Send sends a one-way message. Messages arrive in the order Send calls
// return; there is no reply, and a nil error only means the frame was
// handed to the connection.
func (s *Session) Send(m Method, msg any) error {
	select {
	case <-s.done:
		return s.closedErr(m, s.Err())
	default:
	}
	b := getBuf(headerSize, sizeOf(msg))
	defer putBuf(b)
	if err := encodeInto(b, msg); err != nil {
		return errorf(CodeInvalidArgument, "%s to %q: encoding message %T: %w", m, s.remoteID, msg, err)
	}
	if err := s.checkSize(b, "message", m); err != nil {
		return err
	}
	return s.writeFrame(b, header{typ: frameOneWay, method: m})
}

// checkSize refuses a frame the peer announced it will not accept.
func (s *Session) checkSize(b *bytes.Buffer, what string, m Method) error {
	n := b.Len() - headerSize
	if n <= s.peerMax || s.ignorePeerMax.Load() {
		return nil
	}
	return errorf(CodeResourceExhausted,
		"%s %s to %q is %d bytes, over the peer's max frame of %d bytes; split it or raise the peer's max frame size",
		what, m, s.remoteID, n, s.peerMax)
}

// writePiece is the most of a frame handed to yamux in one write, and so
// the largest data frame yamux sends for it. yamux reads each data frame
// whole into a receive buffer and tells the reader only once the whole
// frame is in (and, as released, also copied it through its send loop's
// buffer); a frame of a thousand specs (120 KB) went through 120 KB of
// each, which with a thousand raylets the caches no longer held. In pieces,
// the second reuses what the first just warmed and the reader starts on the
// first while the next arrives. 64 KiB measured best of 16 KiB to 128 KiB
// (docs/performance.md, "Where a thousand raylets cost more"), with yamux
// as released; internal/yamux now shares receive buffers of 64 KiB and
// 256 KiB classes, so a 64 KiB piece fills one exactly.
const writePiece = 64 << 10

// writeFrame fills in b's header and writes the frame whole, in pieces of
// at most writePiece, none of another frame between them. A failed write
// may have sent half a frame, so it closes the session.
func (s *Session) writeFrame(b *bytes.Buffer, h header) error {
	h.length = uint32(b.Len() - headerSize)
	h.put(b.Bytes())
	s.wmu.Lock()
	// Refresh the deadline lazily (setting it allocates in yamux): every
	// write gets between WriteTimeout and 1.5 x WriteTimeout.
	now := time.Now()
	if s.wdeadline.Sub(now) < s.cfg.WriteTimeout {
		s.wdeadline = now.Add(s.cfg.WriteTimeout * 3 / 2)
		s.ctrl.SetWriteDeadline(s.wdeadline)
	}
	var err error
	for p := b.Bytes(); len(p) > 0 && err == nil; {
		k := min(len(p), writePiece)
		_, err = s.ctrl.Write(p[:k])
		p = p[k:]
	}
	s.wmu.Unlock()
	if err == nil {
		return nil
	}
	select {
	case <-s.done:
		return s.closedErr(h.method, s.Err())
	default:
	}
	var reason error
	if errors.Is(err, yamux.ErrTimeout) {
		reason = errorf(CodeUnavailable, "writing to %q (%s) timed out after %v: the peer is not reading; closing the session: %w",
			s.remoteID, s.remoteAddr, s.cfg.WriteTimeout, err)
	} else {
		reason = errorf(CodeUnavailable, "writing to %q (%s): %w", s.remoteID, s.remoteAddr, err)
	}
	s.closeWith(reason)
	return s.closedErr(h.method, s.Err())
}

// readLoop reads the control stream until it fails, routing each frame.
func (s *Session) readLoop() {
	fr := newFrameReader(s.ctrl)
	for {
		h, err := fr.next()
		if err != nil {
			s.closeWith(s.readError(err, h))
			return
		}
		switch h.typ {
		case frameRequest:
			err = s.readRequest(fr, h)
		case frameOneWay:
			err = s.readOneWay(fr, h)
		case frameResponse, frameError:
			err = s.readResponse(fr, h)
		}
		if err != nil {
			s.closeWith(s.readError(err, h))
			return
		}
	}
}

// readError explains why the read loop stopped. If yamux itself is down,
// its own reason (keepalive timeout, reset, the peer closing the
// connection) is the session's, recorded first.
func (s *Session) readError(err error, h header) error {
	if s.ys.IsClosed() {
		if yerr := s.ys.ShutdownErr(); yerr != nil {
			s.closeWith(s.yamuxError(yerr))
		}
	}
	switch {
	case errors.Is(err, errBadFrameType):
		return errorf(CodeInvalidArgument,
			"peer %q (%s) sent a frame of unknown type %d (a corrupted stream or another protocol version); closing the session: %w",
			s.remoteID, s.remoteAddr, h.typ, err)
	case errors.Is(err, errNotServing):
		return errorf(CodeUnavailable, "session with %q (%s) ended before Serve was called: %w", s.remoteID, s.remoteAddr, err)
	case err == io.EOF:
		return errorf(CodeUnavailable, "peer %q (%s) closed the session: %w", s.remoteID, s.remoteAddr, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeUnavailable, "connection to %q (%s) was lost in the middle of a frame: %w", s.remoteID, s.remoteAddr, err)
	}
	return errorf(CodeUnavailable, "reading from %q (%s): %w", s.remoteID, s.remoteAddr, err)
}

var errNotServing = errors.New("session closed before Serve")

// waitServed blocks until Serve (true) or until the session ends (false).
func (s *Session) waitServed() bool {
	select {
	case <-s.served:
		return true
	case <-s.done:
		return false
	case <-s.ys.CloseChan():
		return false
	}
}

func (s *Session) readRequest(fr *frameReader, h header) error {
	if h.length > uint32(s.cfg.MaxFrameSize) {
		if err := fr.discard(h.length); err != nil {
			return err
		}
		s.log.Warn("transport: refused an oversized request", "method", h.method, "bytes", h.length, "max", s.cfg.MaxFrameSize)
		go s.replyError(h.id, h.method, CodeResourceExhausted, fmt.Sprintf(
			"request for %s to %q is %d bytes, over its max frame of %d bytes; split it or raise that node's max frame size",
			h.method, s.cfg.NodeID, h.length, s.cfg.MaxFrameSize))
		return nil
	}
	share, ok := s.admit(h.length)
	if !ok {
		return errClosedWaiting
	}
	raw, pooled, err := fr.ownedBody(h.length)
	if err != nil {
		s.release(h.length, share)
		return err
	}
	if !s.waitServed() {
		putBody(pooled)
		s.release(h.length, share)
		return errNotServing
	}
	if s.inflight.Add(1) > int64(s.cfg.MaxInflightCalls) {
		s.inflight.Add(-1)
		putBody(pooled)
		s.release(h.length, share)
		go s.replyError(h.id, h.method, CodeResourceExhausted, fmt.Sprintf(
			"%s refused: node %q is already running %d calls from this session; retry later",
			h.method, s.cfg.NodeID, s.cfg.MaxInflightCalls))
		return nil
	}
	calls.run(callJob{s: s, m: h.method, id: h.id, raw: raw, pooled: pooled, share: share})
	return nil
}

// errClosedWaiting: the session closed while a frame waited for budget.
var errClosedWaiting = errors.New("session closed while a frame waited for room in its byte budget")

func (s *Session) readOneWay(fr *frameReader, h header) error {
	if h.length > uint32(s.cfg.MaxFrameSize) {
		s.log.Warn("transport: dropped an oversized one-way message", "method", h.method, "bytes", h.length, "max", s.cfg.MaxFrameSize)
		return fr.discard(h.length)
	}
	share, ok := s.admit(h.length)
	if !ok {
		return errClosedWaiting
	}
	defer s.release(h.length, share)
	raw, err := fr.body(h.length)
	if err != nil {
		return err
	}
	defer fr.done()
	if !s.waitServed() {
		return errNotServing
	}
	s.handleMessage(h.method, raw)
	return nil
}

func (s *Session) handleMessage(m Method, raw []byte) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("transport: message handler panicked", "method", m, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	s.handler.HandleMessage(s, m, Body{raw: raw, method: m})
}

// readResponse reads the whole body before claiming the pending call, so
// a caller whose ctx ends meanwhile can still withdraw at once. A response
// no call waits for is skipped unread, so the peer cannot make this node
// hold bytes it never asked for; responses are not charged to the budget,
// since a call's reply must never wait behind the peer's requests.
func (s *Session) readResponse(fr *frameReader, h header) error {
	if !s.isPending(h.id) {
		return fr.discard(h.length)
	}
	if h.length > uint32(s.cfg.MaxFrameSize) {
		if err := fr.discard(h.length); err != nil {
			return err
		}
		if c := s.takePending(h.id); c != nil {
			c.done <- errorf(CodeResourceExhausted,
				"the response to %s from %q is %d bytes, over this node's max frame of %d bytes; split it or raise this node's max frame size (%s)",
				c.method, s.remoteID, h.length, s.cfg.MaxFrameSize, s.cfg.setting("MaxFrameSize"))
		}
		return nil
	}
	raw, err := fr.body(h.length)
	if err != nil {
		return err
	}
	defer fr.done()
	if c := s.takePending(h.id); c != nil { // nil: cancelled, or an id never sent
		c.done <- s.decodeResponse(c, h.typ, raw)
	}
	return nil
}

func (s *Session) decodeResponse(c *call, typ frameType, raw []byte) error {
	if typ == frameError {
		var we wireError
		if err := codec.Unmarshal(raw, &we); err != nil {
			return errorf(CodeInvalidArgument, "%s to %q: malformed error response (%d bytes): %w", c.method, s.remoteID, len(raw), err)
		}
		return &RemoteError{Code: we.Code, Message: we.Message}
	}
	if c.resp == nil {
		return nil
	}
	if err := codec.Unmarshal(raw, c.resp); err != nil {
		return errorf(CodeInvalidArgument, "%s to %q: decoding the %d-byte response into %T: %w", c.method, s.remoteID, len(raw), c.resp, err)
	}
	return nil
}

// runCall runs one incoming request and writes its response. raw is in
// pooled when pooled is not nil.
func (s *Session) runCall(m Method, id uint64, raw []byte, pooled *bytes.Buffer, share int64) {
	defer s.inflight.Add(-1)
	held := heldBodies.Get().(*heldBody)
	*held = heldBody{s: s, pooled: pooled, n: uint32(len(raw)), share: share}
	result, err := s.invoke(m, Body{raw: raw, method: m, held: held})
	held.release() // the handler is done with the request, if it did not say so before
	*held = heldBody{}
	heldBodies.Put(held)
	if err != nil {
		s.replyError(id, m, codeOf(err), err.Error())
		return
	}
	var b *bytes.Buffer
	if e, ok := result.(*Encoded); ok && e.b != nil {
		b, e.b = e.b, nil // encoded already, header room first
	} else {
		b = getBuf(headerSize, sizeOf(result))
		if err := encodeInto(b, result); err != nil {
			putBuf(b)
			s.replyError(id, m, CodeInternal, fmt.Sprintf("node %q could not encode its result for %s (%T): %v", s.cfg.NodeID, m, result, err))
			return
		}
	}
	defer putBuf(b)
	if n := b.Len() - headerSize; n > s.peerMax && !s.ignorePeerMax.Load() {
		s.replyError(id, m, CodeResourceExhausted, fmt.Sprintf(
			"the response to %s from %q is %d bytes, over the peer's max frame of %d bytes; split it or raise the peer's max frame size",
			m, s.cfg.NodeID, n, s.peerMax))
		return
	}
	if err := s.writeFrame(b, header{typ: frameResponse, method: m, id: id}); err != nil {
		s.log.Debug("transport: response not sent", "method", m, "err", err)
	}
}

func (s *Session) invoke(m Method, b Body) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("transport: call handler panicked", "method", m, "panic", p, "stack", string(debug.Stack()))
			err = errorf(CodeInternal, "node %q: the handler for %s panicked: %v", s.cfg.NodeID, m, p)
		}
	}()
	return s.handler.HandleCall(s.ctx, s, m, b)
}

// replyError sends an error response, trimming the text to fit the peer's cap.
func (s *Session) replyError(id uint64, m Method, code uint16, msg string) {
	if limit := s.peerMax - 64; len(msg) > limit {
		msg = msg[:limit]
	}
	msg = strings.ToValidUTF8(msg, "\uFFFD") // CBOR text must be UTF-8
	b := getBuf(headerSize, 0)
	defer putBuf(b)
	if err := encodeInto(b, wireError{Code: code, Message: msg}); err != nil {
		s.log.Error("transport: encoding an error response", "method", m, "err", err)
		return
	}
	if err := s.writeFrame(b, header{typ: frameError, method: m, id: id}); err != nil {
		s.log.Debug("transport: error response not sent", "method", m, "err", err)
	}
}

// acceptLoop hands the peer's bulk streams to the handler.
func (s *Session) acceptLoop() {
	for {
		st, err := s.ys.AcceptStream()
		if err != nil {
			s.closeWith(s.yamuxError(err))
			return
		}
		if !s.waitServed() {
			st.Close()
			continue // AcceptStream now fails with the reason
		}
		go s.runStream(st)
	}
}

func (s *Session) yamuxError(err error) error {
	switch {
	case errors.Is(err, yamux.ErrSessionShutdown):
		return errorf(CodeUnavailable, "session with %q (%s) shut down: %w", s.remoteID, s.remoteAddr, err)
	case errors.Is(err, io.EOF):
		return errorf(CodeUnavailable, "peer %q (%s) closed the connection: %w", s.remoteID, s.remoteAddr, err)
	}
	return errorf(CodeUnavailable, "connection to %q (%s) failed: %w", s.remoteID, s.remoteAddr, err)
}

func (s *Session) runStream(st net.Conn) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("transport: stream handler panicked", "panic", p, "stack", string(debug.Stack()))
			st.Close()
		}
	}()
	s.handler.HandleStream(s, st)
}

// OpenStream opens a bulk stream to the peer, which gets it in
// HandleStream. The caller owns the stream and must close it. Keep raft
// traffic off sessions that carry bulk streams (use DialRaw).
func (s *Session) OpenStream(ctx context.Context) (net.Conn, error) {
	select {
	case <-s.done:
		return nil, errorf(CodeUnavailable, "open stream to %q: session closed: %w", s.remoteID, s.Err())
	default:
	}
	ch := make(chan opened, 1)
	go func() { // yamux blocks only when 256 opens await the peer's ack
		ch <- openedStream(s.ys.OpenStream())
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, errorf(CodeUnavailable, "open stream to %q (%s): %w", s.remoteID, s.remoteAddr, o.err)
		}
		return o.st, nil
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.st != nil {
				o.st.Close()
			}
		}()
		return nil, ctxError(ctx, "open stream to %q", s.remoteID)
	}
}

// opened is what a stream open came to.
type opened struct {
	st  net.Conn
	err error
}

// openedStream wraps yamux's answer to an open. A failed open returns a
// nil *yamux.Stream, which put in st as it is would make a net.Conn that
// is not nil: the goroutine that closes a stream opened after its caller
// gave up then closed a nil stream and took the process down.
func openedStream(st *yamux.Stream, err error) opened {
	if err != nil || st == nil {
		return opened{err: err}
	}
	return opened{st: st}
}

// refuseHandler serves sessions whose owner passed a nil Handler to Serve.
type refuseHandler struct{}

func (refuseHandler) HandleCall(_ context.Context, s *Session, m Method, _ Body) (any, error) {
	return nil, errorf(CodeUnavailable, "node %q serves no calls on this session (%s)", s.cfg.NodeID, m)
}
func (refuseHandler) HandleMessage(*Session, Method, Body) {}
func (refuseHandler) HandleStream(_ *Session, st net.Conn) { st.Close() }
