package raftmeta

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// NewStreamLayer adapts a listener and a dial function (the head's
// authenticated transport) to raft.StreamLayer. dial gets a context that
// carries raft's dial timeout; a nil dial uses a plain TCP net.Dialer. The
// layer owns ln: closing the layer (as raft does on shutdown) closes ln.
// It is safe for concurrent use if ln and dial are.
func NewStreamLayer(ln net.Listener, dial func(ctx context.Context, addr string) (net.Conn, error)) raft.StreamLayer {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &streamLayer{Listener: ln, dial: dial}
}

type streamLayer struct {
	net.Listener
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return s.dial(ctx, string(addr))
}

// advertised reports addr as the layer's address, for a head that listens on
// one address (0.0.0.0:7071) and is reached at another (10.0.0.5:7071).
// NetworkTransport takes its local address, which peers see as the leader's
// address, from Addr.
type advertised struct {
	raft.StreamLayer
	addr advertisedAddr
}

func (a *advertised) Addr() net.Addr { return a.addr }

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// handlerLayer tracks the connections raft's NetworkTransport accepts, so
// that Shutdown can wait for their handlers before it closes the store.
//
// NetworkTransport serves each accepted connection on its own goroutine,
// which neither raft.Shutdown nor the transport's Close waits for: closing
// the transport closes the listener, not the connections already accepted.
// Heartbeats take a fast path from that goroutine straight into raft, which
// checks for shutdown once and then writes the term to the stable store. A
// heartbeat that passes the check as Shutdown begins writes after the store
// is closed, and raft panics on a failed term write ("failed to save
// current term: database not open"). The handler closes its connection when
// it returns, so a tracked connection's Close marks its handler done.
type handlerLayer struct {
	raft.StreamLayer

	mu      sync.Mutex
	closed  bool
	live    map[*handledConn]struct{}
	handled sync.WaitGroup
}

func newHandlerLayer(l raft.StreamLayer) *handlerLayer {
	return &handlerLayer{StreamLayer: l, live: make(map[*handledConn]struct{})}
}

// Accept returns the next connection, tracked until it is closed. After
// drain has begun it refuses connections: a handler started then could
// outlive the store.
func (h *handlerLayer) Accept() (net.Conn, error) {
	c, err := h.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	hc := &handledConn{Conn: c, layer: h}
	h.live[hc] = struct{}{}
	h.handled.Add(1)
	return hc, nil
}

// drain stops accepting, ends the reads and writes of every accepted
// connection (their handlers then fail and return) and waits up to wait
// for the handlers to close them. Connections still open then are closed
// outright, and drain waits up to wait again. It returns how many
// handlers had still not returned.
func (h *handlerLayer) drain(wait time.Duration) int {
	done := make(chan struct{})
	h.mu.Lock()
	h.closed = true
	for c := range h.live {
		// A deadline rather than Close: the handler's own Close is what
		// says it has returned.
		c.Conn.SetDeadline(time.Unix(1, 0))
	}
	h.mu.Unlock()
	go func() { h.handled.Wait(); close(done) }()
	for round := 0; round < 2; round++ {
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return 0
		case <-t.C:
		}
		h.mu.Lock()
		for c := range h.live {
			c.Conn.Close()
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

type handledConn struct {
	net.Conn
	layer *handlerLayer
	once  sync.Once
}

func (c *handledConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.live, c)
		c.layer.mu.Unlock()
		c.layer.handled.Done()
	})
	return err
}
