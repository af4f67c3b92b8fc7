package head

import (
	"context"
	"net"

	"github.com/phobos-project/phobos/transport/faultnet"
)

// faultNet is the loopback network of the in-process head tests: every
// node dials through its own faultnet.Injector (transport.Config.Dial), so
// a partition closes the connections that now cross it and refuses new
// dials across it until healed. A cut looks like a reset (the far side sees
// the connection close), not like silently dropped packets; both raft and
// head-to-head sessions go through it.
type faultNet struct{ n *faultnet.Network }

func newFaultNet() *faultNet { return &faultNet{n: faultnet.NewNetwork(nil)} }

// dialer returns the dial function for node from (its listen address, or
// any name for a client).
func (n *faultNet) dialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return n.n.Dialer(from)
}

// partition splits the named nodes into groups that cannot reach each
// other; nodes not named reach everyone. It replaces any earlier partition.
func (n *faultNet) partition(groups ...[]string) { n.n.Partition(groups...) }

// heal removes every partition.
func (n *faultNet) heal() { n.n.Heal() }

// dropNode closes every connection to or from node (its process died);
// unlike partition it refuses nothing afterwards.
func (n *faultNet) dropNode(node string) { n.n.Drop(node) }
