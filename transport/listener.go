package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// maxHandshakes caps handshakes in progress on one listener; connections
// beyond it are closed at once, so a flood costs bounded memory.
const maxHandshakes = 1024

// Listener accepts TCP connections, authenticates each in its own
// goroutine (bounded by HandshakeTimeout, so a slow or hostile client never
// holds up another), and routes them by purpose: RPC sessions to Accept,
// raft conns to RaftListener. Failed handshakes are logged at Warn and never
// stop the listener.
//
// All methods are safe for concurrent use. Sessions and conns already
// handed out belong to the caller and outlive Close.
type Listener struct {
	cfg      Config
	ln       net.Listener
	sessions chan *Session
	raft     *raftListener
	closed   chan struct{}
	slots    chan struct{} // handshake semaphore

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // conns not yet handed out, closed by Close
}

// Listen listens on addr ("host:port"; port 0 picks one) and starts
// accepting. Close it to stop.
func Listen(addr string, cfg Config) (*Listener, error) {
	cfg, err := cfg.resolve("listen on " + addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errorf(CodeUnavailable, "listen on %s: %w (is the port in use? check --listen)", addr, err)
	}
	l := &Listener{
		cfg:      cfg,
		ln:       ln,
		sessions: make(chan *Session),
		closed:   make(chan struct{}),
		slots:    make(chan struct{}, maxHandshakes),
		conns:    make(map[net.Conn]struct{}),
	}
	l.raft = &raftListener{l: l, conns: make(chan net.Conn), closed: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept returns the next authenticated PurposeRPC session. The caller owns
// it: call Serve, and Close it when done.
func (l *Listener) Accept() (*Session, error) {
	select {
	case s := <-l.sessions:
		return s, nil
	case <-l.closed:
		return nil, errorf(CodeUnavailable, "accept on %s: listener closed: %w", l.Addr(), net.ErrClosed)
	}
}

// RaftListener yields authenticated PurposeRaft conns, for hashicorp/raft's
// network transport. Its Addr is l.Addr(). Closing it refuses later raft
// conns at the handshake but leaves l open. Every call returns the same one.
func (l *Listener) RaftListener() net.Listener { return l.raft }

// Close stops accepting, aborts handshakes in progress and waits for them.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		if err := l.ln.Close(); err != nil {
			l.closeErr = errorf(CodeUnavailable, "close listener on %s: %w", l.Addr(), err)
		}
		l.mu.Lock()
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l.closeErr
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			// Out of file descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.cfg.Logger.Warn("transport: accept failed; retrying", "addr", l.Addr().String(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		select {
		case l.slots <- struct{}{}:
		default:
			l.cfg.Logger.Warn("transport: too many handshakes in progress; dropping connection",
				"remote", conn.RemoteAddr().String(), "limit", maxHandshakes)
			conn.Close()
			continue
		}
		if !l.track(conn) {
			conn.Close()
			<-l.slots
			return
		}
		l.wg.Add(1)
		go l.handshake(conn)
	}
}

// track registers a conn for Close to abort; false if already closed.
func (l *Listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return false
	default:
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Listener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// handshake authenticates one accepted conn and hands it out.
func (l *Listener) handshake(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.slots }()
	defer l.untrack(raw)
	conn := raw
	if l.cfg.WrapConn != nil {
		conn = l.cfg.WrapConn(raw)
	}
	remote := raw.RemoteAddr()
	fail := func(err error) {
		l.cfg.Logger.Warn("transport: handshake failed", "remote", remote.String(), "err", err)
		lingeringClose(conn)
	}
	deadline := time.Now().Add(l.cfg.HandshakeTimeout)
	conn.SetDeadline(deadline)
	info, err := serverHandshake(conn, remote.String(), &l.cfg, l.refuse)
	if err != nil {
		fail(err)
		return
	}
	// Clear the deadline before yamux starts reading the conn.
	conn.SetDeadline(time.Time{})

	if info.purpose == PurposeRaft {
		l.untrack(raw) // from here on, Close reaches it through the select
		select {
		case l.raft.conns <- conn:
			l.cfg.Logger.Debug("transport: raft conn accepted", "peer", info.nodeID, "remote", remote.String())
		case <-l.raft.closed:
			conn.Close()
		case <-l.closed:
			conn.Close()
		}
		return
	}

	ys, err := yamux.Server(&coalesceConn{Conn: conn}, yamuxConfig(&l.cfg))
	if err != nil {
		fail(errorf(CodeInternal, "handshake from %s: starting yamux: %w", remote, err))
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	ctrl, err := ys.AcceptStreamWithContext(ctx)
	cancel()
	if err == nil && ctrl.StreamID() != 1 {
		ctrl.Close()
		err = errors.New("the first stream is not the control stream")
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = errorf(CodeDeadlineExceeded, "handshake from %q at %s: no control stream within %v: %w", info.nodeID, remote, l.cfg.HandshakeTimeout, os.ErrDeadlineExceeded)
		} else {
			err = errorf(CodeUnavailable, "handshake from %q at %s: waiting for the control stream: %w", info.nodeID, remote, err)
		}
		ys.Close()
		fail(err)
		return
	}
	l.untrack(raw)
	s := newSession(ys, ctrl, remote, info, &l.cfg)
	l.cfg.Logger.Debug("transport: session accepted", "peer", info.nodeID, "remote", remote.String())
	select {
	case l.sessions <- s:
	case <-l.closed:
		s.Close()
	}
}

// refuse says why a purpose is not served here ("" if it is).
func (l *Listener) refuse(p Purpose) string {
	switch p {
	case PurposeRPC:
		return ""
	case PurposeRaft:
		select {
		case <-l.raft.closed:
			return "its raft listener is closed"
		default:
			return ""
		}
	}
	return "it serves no " + p.String() + " connections"
}

// raftListener is the net.Listener for PurposeRaft conns.
type raftListener struct {
	l      *Listener
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (r *raftListener) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.closed:
	case <-r.l.closed:
	}
	return nil, errorf(CodeUnavailable, "accept raft conn on %s: listener closed: %w", r.l.Addr(), net.ErrClosed)
}

func (r *raftListener) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

func (r *raftListener) Addr() net.Addr { return r.l.Addr() }

// Dial connects to a listener at addr and returns an authenticated
// PurposeRPC session; call Serve on it (nil if this side serves nothing).
// ctx bounds the dial and the handshake, not the session.
func Dial(ctx context.Context, addr string, cfg Config) (*Session, error) {
	cfg, err := cfg.resolve("dial " + addr)
	if err != nil {
		return nil, err
	}
	conn, info, err := dialHandshake(ctx, addr, PurposeRPC, &cfg)
	if err != nil {
		return nil, err
	}
	ys, err := yamux.Client(&coalesceConn{Conn: conn}, yamuxConfig(&cfg))
	if err != nil {
		conn.Close()
		return nil, errorf(CodeInternal, "dial %s: starting yamux: %w", addr, err)
	}
	ctrl, err := ys.OpenStream()
	if err != nil {
		ys.Close()
		return nil, errorf(CodeUnavailable, "dial %s: opening the control stream: %w", addr, err)
	}
	return newSession(ys, ctrl, conn.RemoteAddr(), info, &cfg), nil
}

// DialRaw connects to a listener at addr for purpose p (not PurposeRPC) and
// returns the authenticated raw conn, e.g. for raft. The caller owns it.
func DialRaw(ctx context.Context, addr string, p Purpose, cfg Config) (net.Conn, error) {
	cfg, err := cfg.resolve("dial " + addr)
	if err != nil {
		return nil, err
	}
	if p == PurposeRPC || p == 0 {
		return nil, errorf(CodeInvalidArgument, "dial %s: DialRaw takes a raw purpose such as PurposeRaft, not %s; use Dial for sessions", addr, p)
	}
	conn, _, err := dialHandshake(ctx, addr, p, &cfg)
	return conn, err
}

// dialHandshake dials addr and authenticates, returning the conn with no
// deadline set.
func dialHandshake(ctx context.Context, addr string, p Purpose, cfg *Config) (net.Conn, peerInfo, error) {
	dial := cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, peerInfo{}, ctxError(ctx, "dial %s", addr)
		}
		return nil, peerInfo{}, errorf(CodeUnavailable, "dial %s: %w (is a phobos node listening there?)", addr, err)
	}
	if cfg.WrapConn != nil {
		conn = cfg.WrapConn(conn)
	}
	deadline := time.Now().Add(cfg.HandshakeTimeout)
	ctxDeadline, byCtx := ctx.Deadline()
	byCtx = byCtx && ctxDeadline.Before(deadline)
	if byCtx {
		deadline = ctxDeadline
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	info, err := clientHandshake(conn, addr, p, cfg)
	if !stop() && err == nil {
		err = ctx.Err() // ctx ended just as the handshake finished
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil || (byCtx && errors.Is(err, os.ErrDeadlineExceeded)) {
			if ctx.Err() == nil { // the conn deadline fired a hair before ctx's
				return nil, peerInfo{}, &codedError{code: CodeDeadlineExceeded, msg: "handshake with " + addr + ": " + context.DeadlineExceeded.Error(), err: context.DeadlineExceeded}
			}
			return nil, peerInfo{}, ctxError(ctx, "handshake with %s", addr)
		}
		return nil, peerInfo{}, err
	}
	conn.SetDeadline(time.Time{})
	return conn, info, nil
}

// lingeringClose closes a conn we may have just written a rejection to.
// Closing with unread input (the rest of a hello in another version's
// layout) makes TCP send a reset, which can destroy the rejection before
// the peer reads it; so half-close, drain briefly, then close.
func lingeringClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.Copy(io.Discard, io.LimitReader(c, lingerBytes))
	c.Close()
}

const (
	lingerTimeout = 250 * time.Millisecond
	lingerBytes   = 64 << 10
)
