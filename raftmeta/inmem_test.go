package raftmeta

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
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
	// wrap, if set, gives each head's raft its transport (in place of
	// the bare one, which still carries the RPCs to it).
	wrap func(id string, tr *raft.InmemTransport) raft.Transport
}

func startInmemCluster(t *testing.T, n int, tweaks ...func(*Config)) *inmemCluster {
	t.Helper()
	return startInmemClusterWrapped(t, n, nil, tweaks...)
}

// startInmemClusterWrapped is startInmemCluster with inmemCluster.wrap.
func startInmemClusterWrapped(t *testing.T, n int, wrap func(string, *raft.InmemTransport) raft.Transport, tweaks ...func(*Config)) *inmemCluster {
	t.Helper()
	c := &inmemCluster{
		cluster:  &cluster{t: t, cfgs: map[string]Config{}, nodes: map[string]*Node{}},
		trans:    map[string]*raft.InmemTransport{},
		storages: map[string]*Storage{},
		wrap:     wrap,
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
	if c.wrap != nil {
		cfg.Transport = c.wrap(id, tr)
	}
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
	lead := 15 * c.cfgs[c.ids[0]].withDefaults().HeartbeatInterval
	paced := func(n *Node, want time.Duration) func() bool {
		return func() bool { return n.raft.ReloadableConfig().HeartbeatTimeout == want }
	}
	l := c.leader()
	testutil.WaitFor(t, 10*time.Second, "the leader "+l.id+" to run raft with a heartbeat timeout of 15 intervals", paced(l, lead))
	c.isolate(l.id)
	l2 := c.leaderAmong(c.followers(l))
	testutil.WaitFor(t, 10*time.Second, "the new leader "+l2.id+" to run raft with a heartbeat timeout of 15 intervals", paced(l2, lead))
	testutil.WaitFor(t, 10*time.Second, "the isolated head "+l.id+" to step down and wait HeartbeatTimeout again", func() bool {
		return !l.IsLeader() && paced(l, hb)()
	})
	c.heal()
	c.converged(c.leader())
	c.allocRetry(NewRequestID())
}

// beatTransport records when its head's raft sends each peer a heartbeat
// (an AppendEntries carrying nothing but the term and the leader: no
// entries, no previous entry, no commit index).
type beatTransport struct {
	*raft.InmemTransport
	mu    sync.Mutex
	beats map[raft.ServerID][]time.Time
}

func (b *beatTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if len(args.Entries) == 0 && args.PrevLogEntry == 0 && args.PrevLogTerm == 0 && args.LeaderCommitIndex == 0 {
		b.mu.Lock()
		b.beats[id] = append(b.beats[id], time.Now())
		b.mu.Unlock()
	}
	return b.InmemTransport.AppendEntries(id, target, args, resp)
}

func (b *beatTransport) sent() map[raft.ServerID][]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[raft.ServerID][]time.Time{}
	for id, ts := range b.beats {
		out[id] = slices.Clone(ts)
	}
	return out
}

// TestLeaderBeatsFollowersTogether: the leader sends its followers their
// heartbeats together, about every HeartbeatInterval, rather than each on
// a timer of its own (hashicorp/raft's way: every interval to twice that,
// the followers' heartbeats apart, each one waking the leader).
func TestLeaderBeatsFollowersTogether(t *testing.T) {
	const interval = 100 * time.Millisecond
	trs := map[string]*beatTransport{}
	var mu sync.Mutex
	wrap := func(id string, tr *raft.InmemTransport) raft.Transport {
		b := &beatTransport{InmemTransport: tr, beats: map[raft.ServerID][]time.Time{}}
		mu.Lock()
		trs[id] = b
		mu.Unlock()
		return b
	}
	c := startInmemClusterWrapped(t, 3, wrap, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		cfg.HeartbeatInterval = interval
	})
	l := c.leader()
	mu.Lock()
	tr := trs[l.id]
	mu.Unlock()
	fs := c.followers(l)
	const want = 15
	testutil.WaitFor(t, 20*time.Second, "the leader to send each follower 15 heartbeats", func() bool {
		got := tr.sent()
		for _, f := range fs {
			if len(got[raft.ServerID(f.id)]) < want {
				return false
			}
		}
		return true
	})
	if !l.IsLeader() {
		t.Fatalf("%s lost the leadership while its heartbeats were counted", l.id)
	}
	got := tr.sent()
	a, b := got[raft.ServerID(fs[0].id)], got[raft.ServerID(fs[1].id)]
	// Each heartbeat to one follower has one to the other within a
	// quarter interval; on timers of their own about a third would.
	together := 0
	for _, ta := range a {
		i, _ := slices.BinarySearchFunc(b, ta, func(x, y time.Time) int { return x.Compare(y) })
		near := false
		for _, j := range []int{i - 1, i} {
			if j >= 0 && j < len(b) && b[j].Sub(ta).Abs() < interval/4 {
				near = true
			}
		}
		if near {
			together++
		}
	}
	if together < len(a)*3/4 {
		t.Errorf("%d of %d heartbeats to %s went within %v of one to %s; want at least three quarters", together, len(a), fs[0].id, interval/4, fs[1].id)
	}
	// And about every interval: the median gap is not under 0.8 of it
	// (raft's own heartbeats on top of the beat would halve it) nor over
	// 1.5 (raft's own alone: 1.5 to 3 intervals, with the beat gone).
	if med := medianGap(a); med < interval*8/10 || med > interval*3/2 {
		t.Errorf("median gap between heartbeats to %s is %v; want about %v", fs[0].id, med, interval)
	}
}

// TestLoneLeaderBeatsOnceJoined: a head alone has no one to beat to; once
// a second head is added, the leader hears of it from raft and beats to
// it every HeartbeatInterval.
func TestLoneLeaderBeatsOnceJoined(t *testing.T) {
	const interval = 100 * time.Millisecond
	tweak := func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		cfg.HeartbeatInterval = interval
	}
	var tr *beatTransport
	wrap := func(id string, in *raft.InmemTransport) raft.Transport {
		b := &beatTransport{InmemTransport: in, beats: map[raft.ServerID][]time.Time{}}
		if id == "h1" {
			tr = b
		}
		return b
	}
	c := startInmemClusterWrapped(t, 1, wrap, tweak)
	l := c.leader()
	if l.hasFollowers() {
		t.Fatal("a head alone has followers")
	}
	cfg := testConfig("h2", "")
	tweak(&cfg)
	c.cfgs["h2"], c.storages["h2"] = cfg, NewInmemStorage()
	c.ids = append(c.ids, "h2")
	c.open("h2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.AddVoter(ctx, "h2", "inmem-h2"); err != nil {
		t.Fatalf("add h2: %v", err)
	}
	testutil.WaitFor(t, 20*time.Second, "the leader to send h2 10 heartbeats", func() bool {
		return len(tr.sent()["h2"]) >= 10
	})
	if !l.IsLeader() {
		t.Fatalf("%s lost the leadership while its heartbeats were counted", l.id)
	}
	a := tr.sent()["h2"]
	// raft's own heartbeats alone come every 1.5 to 3 intervals.
	if med := medianGap(a); med > interval*3/2 {
		t.Errorf("median gap between heartbeats to h2 is %v; want about %v", med, interval)
	}
}

// medianGap is the median time between consecutive times of ts (at least
// two, in order).
func medianGap(ts []time.Time) time.Duration {
	gaps := make([]time.Duration, 0, len(ts)-1)
	for k := 1; k < len(ts); k++ {
		gaps = append(gaps, ts[k].Sub(ts[k-1]))
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}
