package raftmeta

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
)

// inmemCluster is a cluster on raft.InmemTransport and InmemStorage: no
// sockets, no files. Its storages outlive the nodes, so a restarted head
// finds its state as a head whose disk survived would.
type inmemCluster struct {
	*cluster
	trans    map[string]*raft.InmemTransport
	storages map[string]*Storage
}

func startInmemCluster(t *testing.T, n int, tweaks ...func(*Config)) *inmemCluster {
	t.Helper()
	c := &inmemCluster{
		cluster:  &cluster{t: t, cfgs: map[string]Config{}, nodes: map[string]*Node{}},
		trans:    map[string]*raft.InmemTransport{},
		storages: map[string]*Storage{},
	}
	var boot []Server
	for i := range n {
		id := "h" + string(rune('1'+i))
		c.ids = append(c.ids, id)
		boot = append(boot, Server{ID: id, Addr: "inmem-" + id})
	}
	for _, id := range c.ids {
		cfg := testConfig(id, "")
		cfg.Bootstrap = boot
		for _, tw := range tweaks {
			tw(&cfg)
		}
		c.cfgs[id] = cfg
		c.storages[id] = NewInmemStorage()
		c.open(id)
	}
	return c
}

// open starts id on a new transport at its address, connected both ways
// to every other head's current transport.
func (c *inmemCluster) open(id string) *Node {
	c.t.Helper()
	addr, tr := raft.NewInmemTransport(raft.ServerAddress("inmem-" + id))
	c.trans[id] = tr
	for other, ot := range c.trans {
		if other != id {
			tr.Connect(ot.LocalAddr(), ot)
			ot.Connect(addr, tr)
		}
	}
	cfg := c.cfgs[id]
	cfg.Storage, cfg.Transport = c.storages[id], tr
	n, err := Open(cfg, nil)
	if err != nil {
		c.t.Fatalf("open %s: %v", id, err)
	}
	c.t.Cleanup(func() { n.Shutdown() })
	c.nodes[id] = n
	return n
}

// isolate cuts id off from every other head, both ways; heal undoes it.
func (c *inmemCluster) isolate(id string) {
	for other, ot := range c.trans {
		if other != id {
			c.trans[id].Disconnect(ot.LocalAddr())
			ot.Disconnect(c.trans[id].LocalAddr())
		}
	}
}

func (c *inmemCluster) heal() {
	for id, tr := range c.trans {
		for other, ot := range c.trans {
			if other != id {
				tr.Connect(ot.LocalAddr(), ot)
			}
		}
	}
}

// A cluster on InmemTransport and InmemStorage elects, replicates, fails
// over and restarts like one on TCP and bolt: a partitioned leader is
// replaced, its write fails with an unknown outcome, no task ID is handed
// out twice, and a head restarted on its storage rejoins with its state.
func TestInmemClusterFailover(t *testing.T) {
	c := startInmemCluster(t, 3)
	l := c.leader()
	ctx := ctxT(t)
	var max dag.TaskID
	for range 5 {
		got, err := l.AllocTask(ctx, NewRequestID())
		if err != nil {
			t.Fatal(err)
		}
		max = got
	}
	c.converged(l)

	// Partition the leader away: the others elect a new one; the old one
	// cannot commit, and says the outcome is unknown.
	old := l.id
	c.isolate(old)
	l2 := c.leaderAmong(c.followers(c.nodes[old]))
	sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := c.nodes[old].AllocTask(sctx, NewRequestID())
	cancel()
	if k := dag.KindOf(err); err == nil || (k != dag.KindNotLeader && k != dag.KindUnavailable && k != dag.KindDeadlineExceeded) {
		t.Fatalf("a write at the partitioned leader: %v, want not-leader or an unknown outcome", err)
	}
	for range 5 {
		got, err := l2.AllocTask(ctx, NewRequestID())
		if err != nil {
			t.Fatal(err)
		}
		if got <= max {
			t.Fatalf("the new leader handed out task %d, not above %d", got, max)
		}
		max = got
	}
	c.heal()
	l3 := c.leader()
	c.converged(l3)

	// Crash a follower and restart it on its storage: not fresh, same state.
	f := c.followers(l3)[0].id
	c.stop(f)
	for range 5 {
		max = c.allocRetry(NewRequestID())
	}
	n := c.open(f)
	if n.Fresh() {
		t.Fatal("a head restarted on its storage reports fresh")
	}
	c.converged(c.leader())
	if got := n.fsm.NextTask(); got != uint64(max)+1 {
		t.Fatalf("the restarted head's next task = %d, want %d", got, max+1)
	}
}

// leaderAmong waits for one of ns to lead.
func (c *inmemCluster) leaderAmong(ns []*Node) *Node {
	c.t.Helper()
	sub := &cluster{t: c.t, cfgs: c.cfgs, nodes: map[string]*Node{}}
	for _, n := range ns {
		sub.nodes[n.id] = n
		sub.ids = append(sub.ids, n.id)
	}
	return sub.leader()
}

// closeCounter is a stream layer that counts its Closes.
type closeCounter struct {
	raft.StreamLayer
	closes atomic.Int32
}

func (l *closeCounter) Close() error { l.closes.Add(1); return nil }

func TestOpenWithTwins(t *testing.T) {
	_, tr := raft.NewInmemTransport("inmem-a")
	base := testConfig("a", "")
	base.Bootstrap = []Server{{ID: "a", Addr: "inmem-a"}}

	// No data dir is needed with a Storage, and a stream layer given
	// beside a Transport is closed, not leaked.
	cfg := base
	cfg.Storage, cfg.Transport = NewInmemStorage(), tr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	layer := &closeCounter{StreamLayer: NewStreamLayer(ln, nil)}
	defer ln.Close()
	n, err := Open(cfg, layer)
	if err != nil {
		t.Fatal(err)
	}
	if layer.closes.Load() == 0 {
		t.Error("the unused stream layer was not closed")
	}
	if n.Addr() != "inmem-a" {
		t.Errorf("node address %q, want the transport's", n.Addr())
	}
	c := &cluster{t: t, nodes: map[string]*Node{"a": n}, ids: []string{"a"}}
	if task, err := c.leader().AllocTask(ctxT(t), NewRequestID()); err != nil || task != 1 {
		t.Fatalf("first task %d, %v", task, err)
	}
	if err := n.DiskFull(); err != nil {
		t.Errorf("DiskFull on in-memory storage: %v", err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no layer, no transport", func(c *Config) { c.Storage = NewInmemStorage() }, "no stream layer and no Config.Transport"},
		{"no data dir, no storage", func(c *Config) { c.Transport = tr }, "Config.DataDir is empty"},
		{"half a storage", func(c *Config) { c.Transport, c.Storage = tr, &Storage{Logs: raft.NewInmemStore()} }, "needs a log store, a stable store and a snapshot store"},
		{"wrong address", func(c *Config) { c.Transport, c.Storage, c.Addr = tr, NewInmemStorage(), "10.0.0.1:7" }, "is not the address of Config.Transport"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			_, err := Open(cfg, nil)
			if !errors.Is(err, dag.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an invalid-argument error containing %q", err, tc.want)
			}
		})
	}
}

// TestInmemPacedLeaderIsolated: a leader cut off from the others loses its
// lease, steps down and waits for a leader with the configured heartbeat
// timeout again, while the new leader heartbeats at its own pace; healed,
// it follows and the cluster commits.
func TestInmemPacedLeaderIsolated(t *testing.T) {
	c := startInmemCluster(t, 3, func(cfg *Config) { cfg.LeaderLeaseTimeout = cfg.HeartbeatTimeout })
	hb := c.cfgs[c.ids[0]].HeartbeatTimeout
	paced := func(n *Node, want time.Duration) func() bool {
		return func() bool { return n.raft.ReloadableConfig().HeartbeatTimeout == want }
	}
	l := c.leader()
	testutil.WaitFor(t, 10*time.Second, "the leader "+l.id+" to heartbeat every HeartbeatTimeout/5", paced(l, 2*hb))
	c.isolate(l.id)
	l2 := c.leaderAmong(c.followers(l))
	testutil.WaitFor(t, 10*time.Second, "the new leader "+l2.id+" to heartbeat every HeartbeatTimeout/5", paced(l2, 2*hb))
	testutil.WaitFor(t, 10*time.Second, "the isolated head "+l.id+" to step down and wait HeartbeatTimeout again", func() bool {
		return !l.IsLeader() && paced(l, hb)()
	})
	c.heal()
	c.converged(c.leader())
	c.allocRetry(NewRequestID())
}
