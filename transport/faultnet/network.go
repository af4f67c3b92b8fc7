package faultnet

import (
	"context"
	"log/slog"
	"net"
	"sync"
)

// Network simulates a network of nodes inside one process: each node (by
// name: for a server, the address others dial) has its own Injector, and
// Partition writes the symmetric rules that cut groups of nodes apart. It
// is the in-process twin of per-process fault files. Safe for concurrent
// use.
type Network struct {
	log *slog.Logger

	mu      sync.Mutex
	nodes   map[string]*Injector
	version int64
}

// NewNetwork returns a network with no faults. log may be nil.
func NewNetwork(log *slog.Logger) *Network {
	return &Network{log: log, nodes: map[string]*Injector{}}
}

// Node returns node's Injector, making it on first use.
func (n *Network) Node(name string) *Injector {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodeLocked(name)
}

func (n *Network) nodeLocked(name string) *Injector {
	in := n.nodes[name]
	if in == nil {
		in = New(n.log)
		n.nodes[name] = in
	}
	return in
}

// Dialer returns node's dial function, for transport.Config.Dial.
func (n *Network) Dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return n.Node(name).Dial
}

// Partition splits the named nodes into groups that cannot reach each
// other (CutReset both ways: existing conns across a cut close, new dials
// fail). Nodes not named reach everyone. It replaces every earlier rule.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	n.version++
	side := map[string]int{}
	for i, g := range groups {
		for _, node := range g {
			side[node] = i + 1
			n.nodeLocked(node)
		}
	}
	rules := map[*Injector]Rules{}
	for name, in := range n.nodes {
		r := Rules{Version: n.version}
		if s := side[name]; s != 0 {
			for other, o := range side {
				if o != s {
					r.Links = append(r.Links, Link{Peer: other, Cut: CutReset})
				}
			}
		}
		rules[in] = r
	}
	n.mu.Unlock()
	for in, r := range rules {
		in.Set(r) // cannot fail: the links are well formed
	}
}

// Heal removes every rule.
func (n *Network) Heal() { n.Partition() }

// Drop closes every conn from or to node, as its crash would, and refuses
// nothing afterwards.
func (n *Network) Drop(node string) {
	n.mu.Lock()
	self := n.nodes[node]
	var others []*Injector
	for name, in := range n.nodes {
		if name != node {
			others = append(others, in)
		}
	}
	n.mu.Unlock()
	if self != nil {
		self.Reset(AnyPeer)
	}
	for _, in := range others {
		in.Reset(node)
	}
}
