package raftmeta

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
)

// testLogger discards unless RAFTMETA_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("RAFTMETA_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// Loopback timings with headroom for -race on a shared 2-core machine.
func testConfig(id, dir string) Config {
	return Config{
		ID: id, DataDir: dir,
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		Logger:             testLogger(),
	}
}

type cluster struct {
	t     testing.TB
	cfgs  map[string]Config
	nodes map[string]*Node // nil while down
	ids   []string
}

func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return ln
}

func openNode(t testing.TB, cfg Config, ln net.Listener) *Node {
	t.Helper()
	n, err := Open(cfg, NewStreamLayer(ln, nil))
	if err != nil {
		t.Fatalf("open %s: %v", cfg.ID, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return n
}

// startCluster bootstraps n heads on loopback; tweak adjusts each config.
func startCluster(t testing.TB, n int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, cfgs: map[string]Config{}, nodes: map[string]*Node{}}
	var lns []net.Listener
	var boot []Server
	for i := range n {
		id := "h" + string(rune('1'+i))
		ln := listen(t, "127.0.0.1:0")
		lns = append(lns, ln)
		boot = append(boot, Server{ID: id, Addr: ln.Addr().String()})
		c.ids = append(c.ids, id)
	}
	for i, id := range c.ids {
		cfg := testConfig(id, filepath.Join(t.TempDir(), id))
		cfg.Bootstrap = boot
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs[id] = cfg
		c.nodes[id] = openNode(t, cfg, lns[i])
	}
	return c
}

func (c *cluster) stop(id string) {
	c.t.Helper()
	if err := c.nodes[id].Shutdown(); err != nil {
		c.t.Fatalf("shutdown %s: %v", id, err)
	}
	c.nodes[id] = nil
}

// restart reopens a stopped head on its old address and data dir.
func (c *cluster) restart(id string) *Node {
	c.t.Helper()
	addr := ""
	for _, s := range c.cfgs[id].Bootstrap {
		if s.ID == id {
			addr = s.Addr
		}
	}
	n := openNode(c.t, c.cfgs[id], listen(c.t, addr))
	c.nodes[id] = n
	return n
}

func (c *cluster) up() []*Node {
	var out []*Node
	for _, id := range c.ids {
		if n := c.nodes[id]; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// leader waits until one running head leads and every running head knows it.
func (c *cluster) leader() *Node {
	c.t.Helper()
	var l *Node
	testutil.WaitFor(c.t, 10*time.Second, "a leader known to every running head", func() bool {
		l = nil
		for _, n := range c.up() {
			if n.IsLeader() {
				l = n
			}
		}
		if l == nil {
			return false
		}
		for _, n := range c.up() {
			if id, _ := n.Leader(); id != l.id {
				return false
			}
		}
		return true
	})
	return l
}

func (c *cluster) followers(l *Node) []*Node {
	var out []*Node
	for _, n := range c.up() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// converged waits until every running head holds the leader's state.
func (c *cluster) converged(l *Node) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Barrier(ctx); err != nil {
		c.t.Fatalf("barrier: %v", err)
	}
	want := stateBytes(c.t, l.fsm)
	for _, n := range c.followers(l) {
		testutil.WaitFor(c.t, 10*time.Second, n.id+" to catch up with "+l.id, func() bool {
			return n.fsm.NextTask() == l.fsm.NextTask() && string(stateBytes(c.t, n.fsm)) == string(want)
		})
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// allocRetry allocates a task at whichever head leads, retrying with the
// same request ID across leader changes, as a head would.
func (c *cluster) allocRetry(req RequestID) dag.TaskID {
	c.t.Helper()
	return c.applyRetry(Command{RequestID: req, Body: AllocTask{}}).Task
}

// applyRetry applies cmd at whichever head leads, retrying with the same
// request ID across leader changes (a loaded machine can lose a leader
// mid-test), as a head would.
func (c *cluster) applyRetry(cmd Command) Result {
	c.t.Helper()
	var res Result
	testutil.WaitFor(c.t, 15*time.Second, "a write to succeed", func() bool {
		for _, n := range c.up() {
			if !n.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, err := n.Apply(ctx, cmd)
			cancel()
			if err == nil {
				res = r
				return true
			}
			if k := dag.KindOf(err); k != dag.KindNotLeader && k != dag.KindUnavailable && k != dag.KindDeadlineExceeded {
				c.t.Fatalf("%s: %v", cmd.Body.Type(), err)
			}
		}
		return false
	})
	return res
}

func TestSingleNode(t *testing.T) {
	rec := newRecordHandler()
	c := startCluster(t, 1, func(cfg *Config) { cfg.Logger = slog.New(rec) })
	n := c.nodes["h1"]
	ch := n.LeaderCh()
	testutil.WaitFor(t, 10*time.Second, "leadership on LeaderCh", func() bool {
		select {
		case v := <-ch:
			return v
		default:
			return false
		}
	})
	l := c.leader()
	ctx := ctxT(t)
	for want := dag.TaskID(1); want <= 3; want++ {
		got, err := l.AllocTask(ctx, NewRequestID())
		if err != nil || got != want {
			t.Fatalf("AllocTask = %d, %v; want %d", got, err, want)
		}
	}
	task, err := l.SubmitJob(ctx, NewRequestID(), []byte{0xa0}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.BeginStage(ctx, NewRequestID(), task, 8, nil)
	if err != nil || st.ID != 1 || st.Base != 1 || st.Count != 8 {
		t.Fatalf("BeginStage = %+v, %v", st, err)
	}
	if base, err := l.AllocSubtasks(ctx, NewRequestID(), task, 1, 2); err != nil || base != 9 {
		t.Fatalf("AllocSubtasks = %d, %v; want 9", base, err)
	}
	if s, err := l.AllocStage(ctx, NewRequestID(), task); err != nil || s != 2 {
		t.Fatalf("AllocStage = %d, %v; want 2", s, err)
	}
	if err := l.SetJobStatus(ctx, NewRequestID(), SetJobStatus{Task: task, Status: JobRunning}); err != nil {
		t.Fatal(err)
	}
	if err := l.RegisterRaylet(ctx, NewRequestID(), Raylet{ID: "r1", Addr: "127.0.0.1:9", Slots: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.DeregisterRaylet(ctx, NewRequestID(), "r2"); !errors.Is(err, dag.ErrNotFound) {
		t.Fatalf("deregister unknown raylet: %v, want NotFound", err)
	}
	if err := l.DeleteJob(ctx, NewRequestID(), task); !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("delete running job: %v, want InvalidArgument", err)
	}
	if j, ok := l.Job(task); !ok || j.Status != JobRunning || len(j.Stages) != 1 {
		t.Fatalf("job = %+v, %v", j, ok)
	}
	if rs := l.Raylets(); len(rs) != 1 || rs[0].ID != "r1" {
		t.Fatalf("raylets = %+v", rs)
	}
	if js := l.Jobs(); len(js) != 1 {
		t.Fatalf("jobs = %+v", js)
	}
	s := l.Stats()
	if s.State != "leader" || s.ID != "h1" || s.Term == 0 || s.AppliedIndex == 0 || s.LeaderID != "h1" || s.Addr != c.cfgs["h1"].Bootstrap[0].Addr {
		t.Fatalf("stats = %+v", s)
	}
	if srv, err := l.Servers(); err != nil || len(srv) != 1 || srv[0].ID != "h1" {
		t.Fatalf("servers = %+v, %v", srv, err)
	}
	if rec.count("raft") == 0 {
		t.Fatal("no raft log records reached the slog logger")
	}
	// invalid requests are refused before a round trip
	if _, err := l.Apply(ctx, Command{Body: AllocTask{}}); !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("zero request ID: %v", err)
	}
	if _, err := l.Apply(ctx, Command{RequestID: NewRequestID()}); !errors.Is(err, dag.ErrInvalidArgument) {
		t.Fatalf("nil body: %v", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.AllocTask(done, NewRequestID()); !errors.Is(err, dag.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}

	if err := l.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "LeaderCh to close", func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
	if _, err := l.AllocTask(ctx, NewRequestID()); !errors.Is(err, dag.ErrUnavailable) || !errors.Is(err, ErrShutdown) {
		t.Fatalf("write after shutdown: %v, want unavailable", err)
	}
	if err := l.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

// recordHandler counts log records per "component" attribute.
type recordHandler struct {
	counts *recordCounts
	attrs  []slog.Attr
}

type recordCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func newRecordHandler() *recordHandler {
	return &recordHandler{counts: &recordCounts{m: map[string]int{}}}
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(context.Context, slog.Record) error {
	comp := ""
	for _, a := range h.attrs {
		if a.Key == "component" {
			comp = a.Value.String()
		}
	}
	h.counts.mu.Lock()
	h.counts.m[comp]++
	h.counts.mu.Unlock()
	return nil
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{counts: h.counts, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

func (h *recordHandler) count(comp string) int {
	h.counts.mu.Lock()
	defer h.counts.mu.Unlock()
	return h.counts.m[comp]
}

func TestThreeNodes(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)

	// one by one: strictly increasing from 1
	var prev dag.TaskID
	for range 20 {
		got, err := l.AllocTask(ctx, NewRequestID())
		if err != nil {
			t.Fatal(err)
		}
		if got != prev+1 {
			t.Fatalf("AllocTask = %d after %d", got, prev)
		}
		prev = got
	}
	// concurrently: unique, and together exactly the next range
	const workers, each = 8, 15
	var mu sync.Mutex
	seen := map[dag.TaskID]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := dag.TaskID(0)
			for range each {
				got, err := l.AllocTask(ctx, NewRequestID())
				if err != nil {
					errs <- err
					return
				}
				if got <= last {
					errs <- errors.New("a caller saw task IDs go backwards")
					return
				}
				last = got
				mu.Lock()
				if seen[got] {
					mu.Unlock()
					errs <- errors.New("a task ID was handed out twice")
					return
				}
				seen[got] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id := prev + 1; id <= prev+workers*each; id++ {
		if !seen[id] {
			t.Fatalf("task %d missing from the concurrent allocations", id)
		}
	}

	task, err := l.SubmitJob(ctx, NewRequestID(), []byte{0xa0}, []byte{0xa0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	c.converged(l)
	for _, f := range c.followers(l) {
		if j, ok := f.Job(task); !ok || j.Status != JobSubmitted {
			t.Fatalf("follower %s: job %d = %+v, %v", f.id, task, j, ok)
		}
		// writes on a follower name the leader
		_, err := f.AllocTask(ctx, NewRequestID())
		var nle *NotLeaderError
		if !errors.As(err, &nle) || nle.LeaderID != l.id || nle.LeaderAddr != l.addr {
			t.Fatalf("follower write: %v, want NotLeaderError naming %s at %s", err, l.id, l.addr)
		}
		if !errors.Is(err, dag.ErrNotLeader) || dag.KindOf(err) != dag.KindNotLeader {
			t.Fatalf("follower write error %v does not carry KindNotLeader", err)
		}
		if err := f.Barrier(ctx); !errors.Is(err, dag.ErrNotLeader) {
			t.Fatalf("follower barrier: %v", err)
		}
		if err := f.AddVoter(ctx, "x", "127.0.0.1:1"); !errors.Is(err, dag.ErrNotLeader) {
			t.Fatalf("follower AddVoter: %v", err)
		}
		if s := f.Stats(); s.State != "follower" || s.LeaderID != l.id || s.LastContact.IsZero() {
			t.Fatalf("follower stats = %+v", s)
		}
	}
}

func TestLeaderFailoverAndRestart(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	var max dag.TaskID
	for range 10 {
		got, err := l.AllocTask(ctx, NewRequestID())
		if err != nil {
			t.Fatal(err)
		}
		max = got
	}
	// a request whose answer the caller "lost" when the leader died
	lost := NewRequestID()
	lostTask, err := l.AllocTask(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	if lostTask <= max {
		t.Fatalf("task %d allocated after task %d", lostTask, max)
	}
	max = lostTask
	old := l.id
	c.stop(old)

	l2 := c.leader()
	if l2.id == old {
		t.Fatal("the stopped head still leads")
	}
	// the retry with the same request ID is answered, not applied again
	if got := c.allocRetry(lost); got != lostTask {
		t.Fatalf("retried request got task %d, want the original %d", got, lostTask)
	}
	for range 10 {
		got, err := l2.AllocTask(ctx, NewRequestID())
		if err != nil {
			t.Fatal(err)
		}
		if got <= max {
			t.Fatalf("new leader handed out task %d, not above %d", got, max)
		}
		max = got
	}
	// the old leader comes back from its data dir and catches up
	c.restart(old)
	l3 := c.leader()
	c.converged(l3)
	if got := c.nodes[old].fsm.NextTask(); got != uint64(max)+1 {
		t.Fatalf("restarted head's next task = %d, want %d", got, max+1)
	}
}

// TestLeaderPace: the leader alone runs raft with 15×HeartbeatInterval as
// its heartbeat timeout (so that raft's own heartbeats leave the beat to
// fanOut), the others keep HeartbeatTimeout, and a head that stops leading
// gets it back.
func TestLeaderPace(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.LeaderLeaseTimeout = cfg.HeartbeatTimeout // the interval is then 3/10 of HeartbeatTimeout
	})
	hb := c.cfgs[c.ids[0]].HeartbeatTimeout
	lead := 15 * c.cfgs[c.ids[0]].withDefaults().HeartbeatInterval
	if lead != 15*hb*3/10 {
		t.Fatalf("leading heartbeat timeout %v, want 15 × 3/10 × %v", lead, hb)
	}
	paced := func(n *Node, want time.Duration) func() bool {
		return func() bool {
			rc := n.raft.ReloadableConfig()
			return rc.HeartbeatTimeout == want && rc.ElectionTimeout >= want
		}
	}
	l := c.leader()
	testutil.WaitFor(t, 10*time.Second, "the leader "+l.id+" to run raft with a heartbeat timeout of 15 intervals", paced(l, lead))
	for _, f := range c.followers(l) {
		if got := f.raft.ReloadableConfig().HeartbeatTimeout; got != hb {
			t.Fatalf("follower %s runs raft with heartbeat timeout %v, want %v", f.id, got, hb)
		}
	}
	if err := l.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	l2 := c.leader()
	if l2 == l {
		t.Fatal("the old leader still leads after a transfer")
	}
	testutil.WaitFor(t, 10*time.Second, "the new leader "+l2.id+" to run raft with a heartbeat timeout of 15 intervals", paced(l2, lead))
	testutil.WaitFor(t, 10*time.Second, "the old leader "+l.id+" to wait HeartbeatTimeout again", paced(l, hb))
	if got := l.raft.ReloadableConfig().ElectionTimeout; got != c.cfgs[l.id].ElectionTimeout {
		t.Fatalf("old leader's election timeout %v, want %v", got, c.cfgs[l.id].ElectionTimeout)
	}
	// Still one cluster that commits.
	c.allocRetry(NewRequestID())
}

func TestRestartFollowerCatchesUp(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	f := c.followers(l)[0].id
	c.stop(f)
	for range 30 {
		if _, err := l.SubmitJob(ctx, NewRequestID(), []byte{1, 2, 3}, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	c.restart(f)
	c.converged(c.leader())
	if n := len(c.nodes[f].Jobs()); n != 30 {
		t.Fatalf("restarted follower holds %d jobs, want 30", n)
	}
}

// Every head restarting with the same bootstrap list keeps its state.
func TestRestartWithSameBootstrap(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	var last dag.TaskID
	for range 5 {
		var err error
		if last, err = l.AllocTask(ctx, NewRequestID()); err != nil {
			t.Fatal(err)
		}
	}
	c.converged(l)
	for _, id := range c.ids {
		c.stop(id)
	}
	for _, id := range c.ids {
		c.restart(id) // same Config, same Bootstrap: not an error
	}
	l = c.leader()
	got, err := l.AllocTask(ctx, NewRequestID())
	if err != nil {
		t.Fatal(err)
	}
	if got != last+1 {
		t.Fatalf("after a full restart AllocTask = %d, want %d", got, last+1)
	}
}

func TestMembershipChange(t *testing.T) {
	c := startCluster(t, 1, nil)
	a := c.leader()
	ctx := ctxT(t)
	task, err := a.SubmitJob(ctx, NewRequestID(), []byte{9}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	// two heads join with no bootstrap list
	var joined []*Node
	for _, id := range []string{"h2", "h3"} {
		ln := listen(t, "127.0.0.1:0")
		cfg := testConfig(id, filepath.Join(t.TempDir(), id))
		n := openNode(t, cfg, ln)
		if err := a.AddVoter(ctx, id, ln.Addr().String()); err != nil {
			t.Fatalf("AddVoter %s: %v", id, err)
		}
		c.ids = append(c.ids, id)
		c.nodes[id], c.cfgs[id] = n, cfg
		joined = append(joined, n)
	}
	srv, err := a.Servers()
	if err != nil || len(srv) != 3 {
		t.Fatalf("servers after two AddVoter = %+v, %v", srv, err)
	}
	c.converged(a)
	for _, n := range joined {
		if _, ok := n.Job(task); !ok {
			t.Fatalf("%s did not receive job %d", n.id, task)
		}
	}
	if err := a.AddVoter(ctx, "h2", joined[0].addr); err != nil {
		t.Fatalf("adding an existing voter again: %v", err)
	}

	// remove h2: the cluster goes on with two voters, and h2 stops
	if err := a.RemoveServer(ctx, "h2"); err != nil {
		t.Fatal(err)
	}
	srv, _ = a.Servers()
	ids := []string{}
	for _, s := range srv {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	if !reflect.DeepEqual(ids, []string{"h1", "h3"}) {
		t.Fatalf("servers after RemoveServer = %v", ids)
	}
	c.stop("h2")
	// h1 and h3 now form the whole cluster: a write needs only them
	if _, err := a.AllocTask(ctx, NewRequestID()); err != nil {
		t.Fatalf("write after removal: %v", err)
	}
	c.converged(a)
}

// A head restarts from a snapshot, and a follower that missed compacted log
// entries is brought up to date with an installed snapshot.
func TestSnapshotRestoreOnRestart(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 64
		cfg.SnapshotInterval = 20 * time.Millisecond
		cfg.TrailingLogs = 8
	})
	l := c.leader()
	lagging := c.followers(l)[0].id
	c.stop(lagging)
	for i := range 200 {
		task := c.applyRetry(Command{RequestID: NewRequestID(), Body: SubmitJob{Graph: []byte{byte(i)}, Time: t0}}).Task
		c.applyRetry(Command{RequestID: NewRequestID(), Body: BeginStage{Task: task, N: uint64(i + 1)}})
	}
	l = c.leader()
	testutil.WaitFor(t, 10*time.Second, "the leader to snapshot and compact its log", func() bool {
		first, err := l.store.FirstIndex()
		return err == nil && first > 1
	})
	// the lagging follower needs entries the leader no longer has
	c.restart(lagging)
	c.converged(l)
	snaps, _ := filepath.Glob(filepath.Join(c.cfgs[lagging].DataDir, "snapshots", "*", "meta.json"))
	if len(snaps) == 0 {
		t.Fatal("the lagging follower caught up without a snapshot; the test did not test InstallSnapshot")
	}

	// the leader restarts from its own snapshot (plus the log tail)
	want := stateBytes(t, l.fsm)
	id := l.id
	c.stop(id)
	n := c.restart(id)
	testutil.WaitFor(t, 10*time.Second, "the restarted head to restore", func() bool {
		return string(stateBytes(t, n.fsm)) == string(want)
	})
	if got := c.allocRetry(NewRequestID()); got != 201 {
		t.Fatalf("AllocTask after restore = %d; want 201", got)
	}
}

// When the outcome of a write is unknown, a retry with the same request ID
// applies it exactly once.
func TestUnknownOutcomeRetry(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	base, err := l.AllocTask(ctx, NewRequestID())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.followers(l) {
		c.stop(f.id)
	}
	req := NewRequestID()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = l.AllocTask(short, req)
	cancel()
	switch dag.KindOf(err) {
	case dag.KindUnavailable, dag.KindDeadlineExceeded, dag.KindNotLeader:
	default:
		t.Fatalf("write without a quorum: %v, want an unknown-outcome or not-leader error", err)
	}
	for _, id := range c.ids {
		if c.nodes[id] == nil {
			c.restart(id)
		}
	}
	got := c.allocRetry(req)
	if got != base+1 {
		t.Fatalf("retried request got task %d, want %d", got, base+1)
	}
	next := c.allocRetry(NewRequestID())
	if next != base+2 {
		t.Fatalf("next task = %d, want %d (the retried request applied exactly once)", next, base+2)
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		cfg  func(addr string) Config
	}{
		{"no ID", func(string) Config { return Config{DataDir: dir} }},
		{"no data dir", func(string) Config { return Config{ID: "a"} }},
		{"bootstrap without self", func(addr string) Config {
			return Config{ID: "a", DataDir: dir, Bootstrap: []Server{{"b", "127.0.0.1:1"}}}
		}},
		{"bootstrap with another address", func(addr string) Config {
			return Config{ID: "a", DataDir: dir, Bootstrap: []Server{{"a", "127.0.0.1:1"}}}
		}},
		{"bootstrap duplicate ID", func(addr string) Config {
			return Config{ID: "a", DataDir: dir, Bootstrap: []Server{{"a", addr}, {"a", "127.0.0.1:1"}}}
		}},
		{"bootstrap duplicate address", func(addr string) Config {
			return Config{ID: "a", DataDir: dir, Bootstrap: []Server{{"a", addr}, {"b", addr}}}
		}},
		{"lease longer than heartbeat", func(string) Config {
			return Config{ID: "a", DataDir: dir, HeartbeatTimeout: time.Second, LeaderLeaseTimeout: 2 * time.Second}
		}},
		{"negative dedupe window", func(string) Config { return Config{ID: "a", DataDir: dir, DedupeWindow: -1} }},
		{"heartbeat interval under a tenth of the timeout", func(string) Config {
			return Config{ID: "a", DataDir: dir, HeartbeatTimeout: time.Second, HeartbeatInterval: 99 * time.Millisecond}
		}},
		{"heartbeat interval over half the timeout", func(string) Config {
			return Config{ID: "a", DataDir: dir, HeartbeatTimeout: time.Second, LeaderLeaseTimeout: time.Second, HeartbeatInterval: 501 * time.Millisecond}
		}},
		{"heartbeat interval over half the lease", func(string) Config {
			return Config{ID: "a", DataDir: dir, HeartbeatTimeout: time.Second, LeaderLeaseTimeout: 300 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln := listen(t, "127.0.0.1:0")
			n, err := Open(c.cfg(ln.Addr().String()), NewStreamLayer(ln, nil))
			if err == nil {
				n.Shutdown()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, dag.ErrInvalidArgument) {
				t.Fatalf("got %v, want an invalid-argument error", err)
			}
			if _, err := ln.Accept(); err == nil {
				t.Fatal("a failed Open left the listener open")
			}
		})
	}
}

func TestSecondOpenOfDataDirFails(t *testing.T) {
	c := startCluster(t, 1, nil)
	c.leader()
	ln := listen(t, "127.0.0.1:0")
	cfg := c.cfgs["h1"]
	cfg.Bootstrap = nil
	if n, err := Open(cfg, NewStreamLayer(ln, nil)); err == nil {
		n.Shutdown()
		t.Fatal("a second head opened a data dir in use")
	}
}

// A head that listens on one address and is reached at another advertises
// Config.Addr to its peers.
func TestAdvertisedAddress(t *testing.T) {
	ln := listen(t, "127.0.0.1:0")
	// "localhost:port" reaches the same listener under another name
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	adv := net.JoinHostPort("localhost", port)
	cfg := testConfig("h1", t.TempDir())
	cfg.Addr = adv
	cfg.Bootstrap = []Server{{"h1", adv}}
	n := openNode(t, cfg, ln)
	testutil.WaitFor(t, 10*time.Second, "leadership", n.IsLeader)
	if _, addr := n.Leader(); addr != adv {
		t.Fatalf("leader address = %q, want the advertised %q", addr, adv)
	}
	if s := n.Stats(); s.Addr != adv {
		t.Fatalf("stats addr = %q", s.Addr)
	}
}
