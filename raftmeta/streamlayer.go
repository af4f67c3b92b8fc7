package raftmeta

import (
	"context"
	"net"
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
