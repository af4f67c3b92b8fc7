package head

import (
	"context"
	"errors"
	"net"
	"sync"
)

// faultNet is a loopback network whose links can be cut, for partition
// tests. Every node dials through its own dialer (transport.Config.Dial),
// which tags each connection with (from, to); a partition closes the tagged
// connections that now cross it and refuses new dials across it until
// healed. So a cut looks like a reset (the far side sees the connection
// close), not like silently dropped packets; both raft and head-to-head
// sessions go through it.
//
// It lives in a test file; the fault-injection harness could lift it into
// transport (as transport/faultnet) once it needs the same thing.
type faultNet struct {
	mu    sync.Mutex
	side  map[string]int // node → partition side; 0 (absent) reaches every side
	conns map[*faultConn]struct{}
}

func newFaultNet() *faultNet {
	return &faultNet{side: map[string]int{}, conns: map[*faultConn]struct{}{}}
}

var errPartitioned = errors.New("faultnet: network partitioned")

// linked reports whether a and b can talk. n.mu must be held.
func (n *faultNet) linked(a, b string) bool {
	sa, sb := n.side[a], n.side[b]
	return sa == 0 || sb == 0 || sa == sb
}

// dialer returns the dial function for node from (its listen address, or
// any name for a client).
func (n *faultNet) dialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.mu.Lock()
		ok := n.linked(from, addr)
		n.mu.Unlock()
		if !ok {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		fc := &faultConn{Conn: c, net: n, from: from, to: addr}
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.linked(from, addr) { // cut while dialling
			c.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
		}
		n.conns[fc] = struct{}{}
		return fc, nil
	}
}

// partition splits the named nodes into groups that cannot reach each
// other; nodes not named reach everyone. It replaces any earlier partition.
func (n *faultNet) partition(groups ...[]string) {
	n.mu.Lock()
	n.side = map[string]int{}
	for i, g := range groups {
		for _, node := range g {
			n.side[node] = i + 1
		}
	}
	var cut []*faultConn
	for c := range n.conns {
		if !n.linked(c.from, c.to) {
			cut = append(cut, c)
			delete(n.conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.Conn.Close()
	}
}

// heal removes every partition.
func (n *faultNet) heal() { n.partition() }

type faultConn struct {
	net.Conn
	net      *faultNet
	from, to string
	once     sync.Once
}

func (c *faultConn) Close() error {
	c.once.Do(func() {
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
	})
	return c.Conn.Close()
}
