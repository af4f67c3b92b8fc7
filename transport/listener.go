package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/internal/backoff"
	"github.com/phobos-project/phobos/internal/yamux"
)

// Listener accepts connections on Config.Network (TCP by default),
// authenticates each in its own goroutine (bounded by HandshakeTimeout, so
// a slow or hostile client never holds up another), and routes them by
// purpose: RPC sessions to Accept, raft conns to RaftListener. Connections over MaxHandshakes, or over
// MaxHandshakesPerSource from one address, are answered "busy" and closed
// at once. Failed handshakes and busy refusals are logged at Warn, at most
// once per source address per FailureLogInterval, and never stop the
// listener.
//
// All methods are safe for concurrent use. Sessions and conns already
// handed out belong to the caller and outlive Close.
type Listener struct {
	cfg      Config
	ln       net.Listener
	tlsConf  *tls.Config // nil in plaintext mode
	sessions chan *Session
	raft     *purposeListener
	bulk     *purposeListener
	closed   chan struct{}
	budget   *budget // bytes in flight across sessions (Config.ListenerBudget)
	fails    *failLog
	lingers  chan struct{} // bounds goroutines lingering over busy refusals

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup

	mu          sync.Mutex
	conns       map[net.Conn]struct{} // conns not yet handed out, closed by Close
	inHandshake int                   // connections admitted and not yet done
	perSource   map[netip.Addr]int    // the same, by source address
}

// Listen listens on addr ("host:port"; port 0 picks one) and starts
// accepting. Close it to stop.
func Listen(addr string, cfg Config) (*Listener, error) {
	cfg, err := cfg.resolve("listen on " + addr)
	if err != nil {
		return nil, err
	}
	var tlsConf *tls.Config
	if !cfg.Insecure {
		if r := cfg.TLS.Role(); !isServerRole(r) {
			return nil, errorf(CodeInvalidArgument, "listen on %s: certificate %q has role %s; only head and raylet certificates may accept connections",
				addr, cfg.TLS.Name(), r)
		}
		tlsConf = serverTLSConfig(cfg.TLS)
	}
	ln, err := cfg.network().Listen(addr)
	if err != nil {
		return nil, errorf(CodeUnavailable, "listen on %s: %w (is the port in use?)", addr, err)
	}
	l := &Listener{
		cfg:       cfg,
		ln:        ln,
		tlsConf:   tlsConf,
		sessions:  make(chan *Session),
		closed:    make(chan struct{}),
		budget:    newBudget(cfg.ListenerBudget),
		fails:     newFailLog(cfg.Logger, cfg.FailureLogInterval, cfg.now),
		lingers:   make(chan struct{}, maxLingers),
		conns:     make(map[net.Conn]struct{}),
		perSource: make(map[netip.Addr]int),
	}
	l.raft = &purposeListener{l: l, purpose: PurposeRaft, conns: make(chan net.Conn), closed: make(chan struct{})}
	l.raft.on.Store(true)
	l.bulk = &purposeListener{l: l, purpose: PurposeBulk, conns: make(chan net.Conn), closed: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// maxLingers caps the busy refusals that linger to let the peer read the
// reason; past it they close at once.
const maxLingers = 64

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// BytesInFlight is the bytes of requests and one-way messages the
// listener's sessions hold beyond their reserves (see Config.ListenerBudget).
func (l *Listener) BytesInFlight() int64 { return l.budget.inUse() }

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
// network transport; ConnPeer tells who is at the other end of one. Its
// Addr is l.Addr(). Closing it refuses later raft conns at the handshake
// but leaves l open. Every call returns the same one.
func (l *Listener) RaftListener() net.Listener { return l.raft }

// BulkListener yields authenticated PurposeBulk conns (ConnPeer tells who
// is at the other end). Until it is first called the listener refuses bulk
// conns at the handshake, so a node that serves none never holds one;
// closing it refuses them again. Every call returns the same one.
func (l *Listener) BulkListener() net.Listener {
	l.bulk.on.Store(true)
	return l.bulk
}

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
	// Out of file descriptors and the like: wait, as net/http does.
	retry := backoff.Policy{Base: 5 * time.Millisecond, Max: time.Second}.Start()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			d := retry.Next()
			l.cfg.Logger.Warn("transport: accept failed; retrying", "addr", l.Addr().String(), "err", err, "retry_in", d)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return
			}
			continue
		}
		retry.Reset()
		src := sourceOf(conn.RemoteAddr())
		busy, ok := l.admit(conn, src)
		if !ok {
			conn.Close()
			return
		}
		if busy != "" {
			l.refuseBusy(conn, src, busy)
			continue
		}
		l.wg.Add(1)
		go l.handshake(conn, src)
	}
}

// admit counts a new conn against the handshake caps and registers it for
// Close to abort. It returns why the conn is refused ("" if it is not),
// and false if the listener is closed.
func (l *Listener) admit(c net.Conn, src netip.Addr) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return "", false
	default:
	}
	switch {
	case l.inHandshake >= l.cfg.MaxHandshakes:
		return fmt.Sprintf("too many connections in the handshake (%d)", l.cfg.MaxHandshakes), true
	case l.perSource[src] >= l.cfg.MaxHandshakesPerSource:
		return fmt.Sprintf("too many connections from %s in the handshake (%d)", src, l.cfg.MaxHandshakesPerSource), true
	}
	l.inHandshake++
	l.perSource[src]++
	l.conns[c] = struct{}{}
	return "", true
}

// done releases what admit counted, once per admitted conn, when its
// handshake ends; from then on Close no longer closes the conn.
func (l *Listener) done(c net.Conn, src netip.Addr) {
	l.mu.Lock()
	l.inHandshake--
	if l.perSource[src]--; l.perSource[src] <= 0 {
		delete(l.perSource, src)
	}
	delete(l.conns, c)
	l.mu.Unlock()
}

// refuseBusy answers a conn over a cap with a busy reject, before any TLS
// (a TLS dialer reads it as a reject too), and closes it.
func (l *Listener) refuseBusy(c net.Conn, src netip.Addr, reason string) {
	l.fails.warn(src, "transport: refused a connection: busy", "remote", c.RemoteAddr().String(), "reason", reason)
	msg := fmt.Sprintf("node %q is busy: %s; retry later", l.cfg.NodeID, reason)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	writeReject(c, statusBusy, l.cfg.version, msg)
	select {
	case l.lingers <- struct{}{}:
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.lingers }()
			lingeringClose(c)
		}()
	default:
		c.Close()
	}
}

// handshake authenticates one accepted conn and hands it out.
func (l *Listener) handshake(raw net.Conn, src netip.Addr) {
	defer l.wg.Done()
	var doneOnce sync.Once
	release := func() { doneOnce.Do(func() { l.done(raw, src) }) }
	defer release()
	conn := raw
	if l.cfg.WrapConn != nil {
		conn = l.cfg.WrapConn(raw)
	}
	remote := raw.RemoteAddr()
	fail := func(c net.Conn, err error) {
		l.fails.warn(src, "transport: handshake failed", "remote", remote.String(), "err", err)
		lingeringClose(c)
	}
	deadline := time.Now().Add(l.cfg.HandshakeTimeout)
	conn.SetDeadline(deadline)
	var info peerInfo
	var err error
	if l.cfg.Insecure {
		info, err = serverHandshake(conn, remote.String(), &l.cfg, l.refuse)
	} else {
		conn, info, err = l.acceptTLS(conn, remote.String())
	}
	if err != nil {
		fail(conn, err)
		return
	}
	// Clear the deadline before yamux starts reading the conn.
	conn.SetDeadline(time.Time{})

	if raw := l.rawFor(info.purpose); raw != nil {
		release() // from here on, Close reaches it through the select
		select {
		case raw.conns <- &peerConn{Conn: conn, peer: info.peer}:
			l.cfg.Logger.Debug("transport: raw conn accepted", "purpose", info.purpose.String(), "peer", info.nodeID, "remote", remote.String())
		case <-raw.closed:
			conn.Close()
		case <-l.closed:
			conn.Close()
		}
		return
	}

	cc := newCoalesceConn(conn)
	ys, err := yamux.Server(cc, yamuxConfig(&l.cfg))
	if err != nil {
		fail(conn, errorf(CodeInternal, "handshake from %s: starting yamux: %w", remote, err))
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
		} else if errors.Is(err, yamux.ErrSessionShutdown) {
			// An authenticated peer that went away before its first
			// stream (a client closing as it connected): not a failure
			// worth a warning.
			ys.Close()
			l.cfg.Logger.Debug("transport: peer left during the handshake", "peer", info.nodeID, "remote", remote.String())
			return
		} else {
			err = errorf(CodeUnavailable, "handshake from %q at %s: waiting for the control stream: %w", info.nodeID, remote, err)
		}
		ys.Close()
		fail(conn, err)
		return
	}
	release()
	s := newSession(ys, cc, ctrl, remote, info, &l.cfg, l.budget)
	l.cfg.Logger.Debug("transport: session accepted", "peer", info.nodeID, "name", info.peer.Name, "role", info.peer.Role.String(), "remote", remote.String())
	select {
	case l.sessions <- s:
	case <-l.closed:
		s.Close()
	}
}

// sourceOf is the address a connection's handshake slots are counted by.
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// rawFor is the listener of raw conns of purpose p (nil for PurposeRPC).
func (l *Listener) rawFor(p Purpose) *purposeListener {
	switch p {
	case PurposeRaft:
		return l.raft
	case PurposeBulk:
		return l.bulk
	}
	return nil
}

// refuse says why a purpose is not served here ("" if it is).
func (l *Listener) refuse(p Purpose) string {
	if p == PurposeRPC {
		return ""
	}
	r := l.rawFor(p)
	if r == nil || !r.on.Load() {
		return "it serves no " + p.String() + " connections"
	}
	select {
	case <-r.closed:
		return "its " + p.String() + " listener is closed"
	default:
		return ""
	}
}

// purposeListener is the net.Listener for the raw conns of one purpose.
type purposeListener struct {
	l       *Listener
	purpose Purpose
	on      atomic.Bool // conns of this purpose are accepted
	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
}

func (r *purposeListener) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.closed:
	case <-r.l.closed:
	}
	return nil, errorf(CodeUnavailable, "accept %s conn on %s: listener closed: %w", r.purpose, r.l.Addr(), net.ErrClosed)
}

func (r *purposeListener) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

func (r *purposeListener) Addr() net.Addr { return r.l.Addr() }

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
	cc := newCoalesceConn(conn)
	ys, err := yamux.Client(cc, yamuxConfig(&cfg))
	if err != nil {
		conn.Close()
		return nil, errorf(CodeInternal, "dial %s: starting yamux: %w", addr, err)
	}
	ctrl, err := ys.OpenStream()
	if err != nil {
		ys.Close()
		return nil, errorf(CodeUnavailable, "dial %s: opening the control stream: %w", addr, err)
	}
	return newSession(ys, cc, ctrl, conn.RemoteAddr(), info, &cfg, nil), nil
}

// DialRaw connects to a listener at addr for purpose p (not PurposeRPC) and
// returns the authenticated raw conn, e.g. for raft (ConnPeer tells who
// accepted it). The caller owns it. Under TLS, raft needs head
// certificates on both ends.
func DialRaw(ctx context.Context, addr string, p Purpose, cfg Config) (net.Conn, error) {
	cfg, err := cfg.resolve("dial " + addr)
	if err != nil {
		return nil, err
	}
	if p == PurposeRPC || p == 0 {
		return nil, errorf(CodeInvalidArgument, "dial %s: DialRaw takes a raw purpose such as PurposeRaft or PurposeBulk, not %s; use Dial for sessions", addr, p)
	}
	conn, info, err := dialHandshake(ctx, addr, p, &cfg)
	if err != nil {
		return nil, err
	}
	return &peerConn{Conn: conn, peer: info.peer}, nil
}

// dialHandshake dials addr and authenticates, returning the conn with no
// deadline set.
func dialHandshake(ctx context.Context, addr string, p Purpose, cfg *Config) (net.Conn, peerInfo, error) {
	conn, err := cfg.dial(ctx, addr)
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
	var info peerInfo
	hc := conn
	if cfg.Insecure {
		info, err = clientHandshake(conn, addr, p, cfg)
	} else {
		hc, info, err = dialTLS(conn, addr, p, cfg)
	}
	if !stop() && err == nil {
		err = ctx.Err() // ctx ended just as the handshake finished
	}
	if err != nil {
		if hc != nil {
			hc.Close()
		}
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
	return hc, info, nil
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

// peerConn is a raw (raft) conn that knows who is at its other end.
type peerConn struct {
	net.Conn
	peer Peer
}

// ConnPeer returns who is at the other end of a conn from DialRaw or
// RaftListener (false for any other conn).
func ConnPeer(c net.Conn) (Peer, bool) {
	if pc, ok := c.(*peerConn); ok {
		return pc.peer, true
	}
	return Peer{}, false
}
