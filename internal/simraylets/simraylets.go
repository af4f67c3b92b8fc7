// Package simraylets runs real heads against many simulated raylets in one
// process, to measure the head alone: how many subtasks a second it
// places, dispatches and completes, and what each costs it in CPU, heap
// and bytes on the wire.
//
// The heads are real (head.Start, Raft on disk under Config.Dir). The
// raylets are not: each registers, heartbeats and pulls with credits over
// the in-memory network twin (transport.MemNetwork), in plaintext, and
// reports every subtask it pulled as finished on its next pull, with
// outputs of the size the head estimated. They run no kernel, hold no
// object and serve no fetch, so a job whose results are fetched cannot be
// benchmarked with them; jobs are submitted, waited for and released.
package simraylets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/backoff"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head"
	"github.com/phobos-project/phobos/runtime/leader"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// Config configures a simulated cluster. A zero field takes the default
// noted.
type Config struct {
	// Raylets is how many simulated raylets register (at least 1).
	Raylets int
	// Slots is each raylet's slots (16).
	Slots int
	// Credits is what each raylet asks for in a pull: min(64 × Slots,
	// 1024), the window a real raylet opens for subtasks shorter than a
	// millisecond.
	Credits int
	// Heads is how many heads run Raft (1; 3 or 5 for a replicated head).
	Heads int
	// Dir holds each head's Raft data (required).
	Dir string
	// JobBudget is each head's per-job memory budget (0: the head's
	// default, a quarter of the machine's memory); its admission budget is
	// twice that. A job of ten million subtasks needs more than the
	// default on a small machine.
	JobBudget int64
	// HeartbeatInterval is how often each raylet beats (1s, the head's
	// default).
	HeartbeatInterval time.Duration
	// Logger receives the heads' logs (nil discards them).
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Raylets < 1 {
		return c, fmt.Errorf("simraylets: %d raylets: want at least 1", c.Raylets)
	}
	if c.Dir == "" {
		return c, errors.New("simraylets: no directory for the heads' Raft data")
	}
	if c.Slots <= 0 {
		c.Slots = 16
	}
	if c.Credits <= 0 {
		c.Credits = min(64*c.Slots, 1024)
	}
	if c.Heads <= 0 {
		c.Heads = 1
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Goroutines the heads start carry the pprof label Label=LabelHead, those
// of the simulated raylets Label=LabelRaylets, so that a CPU profile can
// tell the head's CPU from theirs (see Bench).
const (
	Label        = "phobos"
	LabelHead    = "head"
	LabelRaylets = "sim-raylets"
	LabelDriver  = "driver"
)

// joinWave is how many raylets register at once.
const joinWave = 64

// Cluster is a running simulated cluster. Its methods are safe to call
// concurrently.
type Cluster struct {
	cfg   Config
	mem   *transport.MemNetwork
	token []byte
	addrs []string
	heads []*head.Server
	conns []*leader.Conn
	bytes atomic.Int64 // bytes through every head's conns, both ways

	ctx    context.Context // the pulls'
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lat    histogram
	pulls  atomic.Int64
	done   atomic.Int64
	// freed counts the objects the head told raylets to free, and
	// maxFree the most one FreeObjects message named; freedMore is
	// signalled (without blocking) after each count.
	freed     atomic.Int64
	maxFree   atomic.Int64
	freeMsgs  atomic.Int64
	freedMore chan struct{}

	mu      sync.Mutex
	clients []*phobos.Client
	closed  bool
}

// Start starts the heads and the raylets and returns once every raylet has
// registered with the leader (or ctx ends).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, mem: transport.NewMemNetwork(), token: []byte(strings.Repeat("simraylets-token", 2)), freedMore: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var peers []raftmeta.Server
	for i := range cfg.Heads {
		addr := fmt.Sprintf("10.0.1.%d:7000", i+1)
		c.addrs = append(c.addrs, addr)
		peers = append(peers, raftmeta.Server{ID: fmt.Sprintf("h%d", i+1), Addr: addr})
	}
	for i := range cfg.Heads {
		var srv *head.Server
		var err error
		pprof.Do(context.Background(), pprof.Labels(Label, LabelHead), func(context.Context) {
			srv, err = head.Start(head.Config{
				ID: peers[i].ID, Listen: c.addrs[i], DataDir: filepath.Join(cfg.Dir, peers[i].ID),
				Peers: peers, Token: c.token,
				JobBudget: cfg.JobBudget, AdmitBudget: 2 * cfg.JobBudget,
				HeartbeatInterval: cfg.HeartbeatInterval,
				Transport:         c.transport(fmt.Sprintf("10.0.1.%d", i+1), transport.RoleHead, true),
				Logger:            cfg.Logger,
			})
		})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("simraylets: start head %s: %w", peers[i].ID, err)
		}
		c.heads = append(c.heads, srv)
	}
	// Raylets join in waves: a thousand handshakes and Raft writes at
	// once time out and retry, which only adds to the storm.
	registered := make(chan struct{}, cfg.Raylets)
	var err2 error
	pprof.Do(context.Background(), pprof.Labels(Label, LabelRaylets), func(context.Context) {
		for i := 0; i < cfg.Raylets && err2 == nil; i += joinWave {
			wave := min(joinWave, cfg.Raylets-i)
			for k := range wave {
				c.startRaylet(i+k, registered)
			}
			for range wave {
				select {
				case <-registered:
				case <-ctx.Done():
					err2 = fmt.Errorf("simraylets: waiting for %d raylets to register: %w", cfg.Raylets, ctx.Err())
					return
				}
			}
		}
	})
	if err2 != nil {
		c.Close()
		return nil, err2
	}
	return c, nil
}

// transport is the transport of a node at host; a head's counts its bytes.
func (c *Cluster) transport(host string, role transport.Role, count bool) transport.Config {
	var nw transport.Network = c.mem.Host(host)
	if count {
		nw = countingNetwork{nw, &c.bytes}
	}
	return transport.Config{Network: nw, Insecure: true, Token: c.token, Role: role}
}

// startRaylet starts simulated raylet i: a leader-following session that
// registers on every new leader, and a goroutine that pulls.
func (c *Cluster) startRaylet(i int, registered chan<- struct{}) {
	id := fmt.Sprintf("sim%05d", i)
	var once sync.Once
	lc := leader.New(leader.Config{
		Heads:     c.addrs,
		Transport: c.transport(fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), transport.RoleRaylet, false),
		Handler:   sink{c},
		// A head that the benchmark keeps busy (or a machine shared with
		// other work) may take seconds to answer the leader check; a
		// raylet that gave up would reconnect and register again, and
		// measure that rather than the head's steady state.
		CheckTimeout:   30 * time.Second,
		AttemptTimeout: 30 * time.Second,
		// The heartbeat is the leader check, a call a second, as a real
		// raylet makes it (one goroutine a raylet: one beating for a
		// thousand raylets falls behind as soon as a few calls wait).
		// It goes on until the raylet's Conn closes, after its goodbye.
		CheckInterval: c.cfg.HeartbeatInterval,
		Check: func(ctx context.Context, s *transport.Session) (wire.Leader, error) {
			var ld wire.Leader
			err := s.Call(ctx, wire.MethodHeartbeat, wire.Heartbeat{Store: wire.StoreStats{Capacity: 1 << 30}}, &ld)
			return ld, err
		},
		OnConnect: func(ctx context.Context, s *transport.Session) error {
			// It takes subtasks ahead of their inputs, as a real raylet
			// does: it completes a pull's subtasks in the order they came,
			// so what one reads is always reported done before it.
			req := wire.RegisterRaylet{ID: id, Addr: id + ":7001", Slots: c.cfg.Slots, StoreCapacity: 1 << 30, Pipeline: true}
			var rep wire.RegisterReply
			if err := s.Call(ctx, wire.MethodRegisterRaylet, req, &rep); err != nil {
				return fmt.Errorf("register simulated raylet %s: %w", id, err)
			}
			once.Do(func() { registered <- struct{}{} })
			return nil
		},
		Logger: c.cfg.Logger,
	})
	c.mu.Lock()
	c.conns = append(c.conns, lc)
	c.mu.Unlock()
	c.wg.Add(1)
	go c.pullLoop(lc)
}

// pullLoop is a raylet that finishes every subtask the moment it arrives:
// it pulls with its credits, and its next pull carries the completions.
func (c *Cluster) pullLoop(lc *leader.Conn) {
	defer c.wg.Done()
	var (
		rep   simReply // the completions of the reply being decoded
		done  simReply // those of the last reply, sent with this pull
		retry backoff.Backoff
	)
	pull := simPull{credits: c.cfg.Credits, done: &done}
	for c.ctx.Err() == nil {
		start := time.Now()
		rep.reset()
		if err := lc.Call(c.ctx, wire.MethodPull, pull, &rep); err != nil {
			if c.ctx.Err() != nil {
				return
			}
			if retry.Wait(c.ctx) != nil {
				return
			}
			continue // the completions go with the next pull
		}
		retry = backoff.Backoff{}
		c.pulls.Add(1)
		sent, got := done.len(), rep.len()
		if sent > 0 && got > 0 {
			// A pull that carried completions and got work: one that
			// carried none may have waited at the head for a job to come.
			c.lat.add(time.Since(start))
		}
		c.done.Add(int64(sent))
		if rep.free > 0 {
			c.countFreed(rep.free)
		}
		done.release() // encoded and sent
		rep, done = done, rep
	}
}

// simPull is a simulated raylet's pull: its completions are encoded from
// the pointer-free form they are kept in (simBuf), through a pooled
// scratch list of wire.Completions that lives only while it is encoded.
type simPull struct {
	credits int
	done    *simReply
}

// completionScratch holds the lists simPull encodes through.
var completionScratch = sync.Pool{New: func() any { return new([]wire.Completion) }}

// CBORSize bounds p's encoding, as wire.Pull's does (codec.Sizer).
func (p simPull) CBORSize() int {
	n := 24
	if b := p.done.buf; b != nil {
		n += 9 + (3+len(dag.SubtaskID{})+2+10)*len(b.done) + 9*len(b.sizes)
	}
	return n
}

func (p simPull) AppendCBOR(dst []byte) ([]byte, error) {
	pull := wire.Pull{Credits: p.credits, Wait: 2 * time.Second, FreesInReply: true}
	b := p.done.buf
	if b == nil || len(b.done) == 0 {
		return pull.AppendCBOR(dst)
	}
	scratch := completionScratch.Get().(*[]wire.Completion)
	cs := (*scratch)[:0]
	off := 0
	for _, d := range b.done {
		n := int(d.outputs)
		cs = append(cs, wire.Completion{ID: d.id, Attempt: int(d.attempt), Sizes: b.sizes[off : off+n : off+n]})
		off += n
	}
	pull.Done = cs
	out, err := pull.AppendCBOR(dst)
	clear(cs)
	*scratch = cs[:0]
	completionScratch.Put(scratch)
	return out, err
}

// simReply decodes a pull reply as a simulated raylet reads it: into the
// completions it will report, one per subtask, each with outputs of the
// size the head estimated, and the count of objects to free. It skims the
// reply (wire.SkimPullReply): a raylet that runs nothing needs each
// subtask's identity and outputs, not its ops and inputs, and decoding
// those too cost the simulated raylets about a third of a microsecond a
// subtask and, at 1,000 raylets, some 100 MB of decoded replies, on the
// two cores the head shares with them. The completions go into buffers
// taken from a pool until the pull that carries them is sent. A thousand
// simulated raylets thus share the few sets of buffers in use at once:
// each keeping its own, or letting them go when idle, had a wave of a job
// write a thousand cold sets (the heap figures are meant to be the
// head's, and on this machine fresh pages cost a fault each).
//
// The pool is a free list, not a sync.Pool: a sync.Pool is emptied by
// two collections, and the bench collects between jobs, so every job's
// first wave made its thousand sets of buffers again (0.1–0.2 s of the
// process's CPU at 1,000 raylets, on the cores the head runs on). The
// buffers hold no pointers, so the collector does not scan them: kept as
// wire.Completions (each with its slice of sizes), the free list's
// thousand sets at 1,000 raylets were 140 MB it scanned in every cycle,
// cycles that run during the head's jobs and are the head's cost only
// because the raylets share its process.
type simReply struct {
	buf  *simBuf // nil while it holds no completions
	free int
}

// simBuf is a reply's completions: each subtask's identity and number of
// outputs, and the outputs' sizes one after another.
type simBuf struct {
	done  []simDone
	sizes []int64
}

type simDone struct {
	id      dag.SubtaskID
	attempt int32
	outputs int32
}

var simBufs freeList[simBuf]

// freeList keeps values for reuse until the process ends.
type freeList[T any] struct {
	mu   sync.Mutex
	free []*T
}

func (l *freeList[T]) get() *T {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		v := l.free[n-1]
		l.free = l.free[:n-1]
		return v
	}
	return new(T)
}

func (l *freeList[T]) put(v *T) {
	l.mu.Lock()
	l.free = append(l.free, v)
	l.mu.Unlock()
}

// len is the number of completions r holds.
func (r *simReply) len() int {
	if r.buf == nil {
		return 0
	}
	return len(r.buf.done)
}

func (r *simReply) reset() {
	r.free = 0
	if r.buf != nil {
		r.buf.done, r.buf.sizes = r.buf.done[:0], r.buf.sizes[:0]
	}
}

// release gives the completions' buffers back to the pool.
func (r *simReply) release() {
	if r.buf != nil {
		r.buf.done, r.buf.sizes = r.buf.done[:0], r.buf.sizes[:0]
		simBufs.put(r.buf)
		r.buf = nil
	}
	r.free = 0
}

// DecodeCBOR is called by the session's read loop with the reply's bytes.
func (r *simReply) DecodeCBOR(data []byte) error {
	b := r.buf // nil until the reply has a subtask
	if b != nil {
		b.done, b.sizes = b.done[:0], b.sizes[:0]
	}
	free, _, err := wire.SkimPullReply(data, func(sp *wire.SubtaskSpec) {
		if b == nil {
			b = simBufs.get()
			r.buf = b
		}
		for range sp.Outputs {
			b.sizes = append(b.sizes, max(1, sp.OutputBytes/int64(len(sp.Outputs))))
		}
		b.done = append(b.done, simDone{id: sp.ID, attempt: int32(sp.Attempt), outputs: int32(len(sp.Outputs))})
	})
	if err != nil {
		return err
	}
	r.free = free
	return nil
}

// Client connects a driver (plaintext, name "bench"); Close closes it.
func (c *Cluster) Client(ctx context.Context, opts phobos.Options) (*phobos.Client, error) {
	opts.Transport = c.transport("10.0.3.1", transport.RoleClient, false)
	opts.Transport.Insecure, opts.Transport.Token = false, nil // the credentials say
	if opts.Logger == nil {
		opts.Logger = c.cfg.Logger
	}
	var cl *phobos.Client
	var err error
	pprof.Do(ctx, pprof.Labels(Label, LabelDriver), func(ctx context.Context) {
		cl, err = phobos.Connect(ctx, strings.Join(c.addrs, ","), phobos.Credentials{Token: c.token, Name: "bench"}, opts)
	})
	if err != nil {
		return nil, fmt.Errorf("simraylets: connect a driver: %w", err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

// Stats are what the simulated raylets saw.
type Stats struct {
	Pulls     int64 // pulls answered
	Completed int64 // subtasks reported finished
	// Freed is the objects the head told raylets to free (in FreeObjects
	// messages and pull replies), and MaxFreeBatch the most one
	// FreeObjects message named.
	Freed, MaxFreeBatch int64
	// FreeMessages is how many FreeObjects messages came (frees that
	// did not ride on a pull reply).
	FreeMessages int64
	// HeadBytes is the bytes through every head's connections, both ways
	// (Raft between heads included).
	HeadBytes int64
	// PullP50 and PullP99 are quantiles of the time from sending a pull to
	// its answer, over pulls that carried completions and were answered
	// with work (within 1/8 of the value).
	PullP50, PullP99 time.Duration
}

// Stats reports what happened since the start or the last ResetStats.
func (c *Cluster) Stats() Stats {
	return Stats{
		Pulls: c.pulls.Load(), Completed: c.done.Load(), HeadBytes: c.bytes.Load(),
		Freed: c.freed.Load(), MaxFreeBatch: c.maxFree.Load(), FreeMessages: c.freeMsgs.Load(),
		PullP50: c.lat.quantile(0.5), PullP99: c.lat.quantile(0.99),
	}
}

// ResetStats starts the counts again.
func (c *Cluster) ResetStats() {
	c.pulls.Store(0)
	c.done.Store(0)
	c.freed.Store(0)
	c.maxFree.Store(0)
	c.freeMsgs.Store(0)
	c.bytes.Store(0)
	c.lat.reset()
}

// Close stops the drivers, the raylets and the heads.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	clients, conns := c.clients, c.conns
	c.mu.Unlock()
	for _, cl := range clients {
		cl.Close()
	}
	// Each raylet says goodbye, as a real one does when it stops, while
	// all still heartbeat: a raylet that leaves is no loss to tell every
	// other raylet about (a thousand losses would be a million messages).
	var closing sync.WaitGroup
	for _, lc := range conns {
		closing.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if s := lc.Current(); s != nil {
				_ = s.Call(ctx, wire.MethodGoodbye, struct{}{}, nil)
			}
		})
	}
	closing.Wait()
	c.cancel()
	c.wg.Wait()
	for _, lc := range conns {
		closing.Go(func() { lc.Close() })
	}
	closing.Wait()
	var errs []error
	for _, h := range c.heads {
		if err := h.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sink is a simulated raylet's handler for what the head sends: cancels
// and lost peers need nothing of a raylet that holds nothing and runs
// nothing; frees are only counted.
type sink struct{ c *Cluster }

func (sink) HandleCall(context.Context, *transport.Session, transport.Method, transport.Body) (any, error) {
	return nil, errors.New("simulated raylet: no calls")
}

func (k sink) HandleMessage(_ *transport.Session, m transport.Method, b transport.Body) {
	if m != wire.MethodFreeObjects {
		return
	}
	var msg wire.FreeObjects
	if b.Decode(&msg) != nil {
		return
	}
	k.c.freeMsgs.Add(1)
	n := int64(len(msg.IDs))
	for cur := k.c.maxFree.Load(); n > cur && !k.c.maxFree.CompareAndSwap(cur, n); cur = k.c.maxFree.Load() {
	}
	k.c.countFreed(len(msg.IDs))
}

// countFreed counts n objects the head told a raylet to free.
func (c *Cluster) countFreed(n int) {
	c.freed.Add(int64(n))
	select {
	case c.freedMore <- struct{}{}:
	default:
	}
}

func (sink) HandleStream(_ *transport.Session, st net.Conn) { st.Close() }

// WaitFreed waits until the raylets were told to free n objects since the
// last ResetStats, or ctx ends.
func (c *Cluster) WaitFreed(ctx context.Context, n int64) error {
	for c.freed.Load() < n {
		select {
		case <-c.freedMore:
		case <-ctx.Done():
			return fmt.Errorf("simraylets: raylets were told to free %d of %d objects: %w", c.freed.Load(), n, ctx.Err())
		}
	}
	return nil
}

// histogram counts durations in buckets of 1/8 of a power of two of
// nanoseconds.
type histogram struct {
	b [64 * 8]atomic.Int64
}

func bucketOf(d time.Duration) int {
	ns := uint64(max(d, 1))
	e := bits.Len64(ns) - 1 // 2^e <= ns
	sub := 0
	if e >= 3 {
		sub = int(ns>>(e-3)) & 7
	}
	return e*8 + sub
}

// upper is the largest duration of bucket k.
func upper(k int) time.Duration {
	e, sub := k/8, k%8
	if e < 3 {
		return time.Duration(uint64(1) << e)
	}
	return time.Duration((uint64(8+sub+1) << (e - 3)) - 1)
}

func (h *histogram) add(d time.Duration) { h.b[bucketOf(d)].Add(1) }

func (h *histogram) reset() {
	for i := range h.b {
		h.b[i].Store(0)
	}
}

func (h *histogram) quantile(q float64) time.Duration {
	var n int64
	for i := range h.b {
		n += h.b[i].Load()
	}
	if n == 0 {
		return 0
	}
	want := int64(q*float64(n-1)) + 1
	var seen int64
	for i := range h.b {
		seen += h.b[i].Load()
		if seen >= want {
			return upper(i)
		}
	}
	return upper(len(h.b) - 1)
}

// countingNetwork counts the bytes through every conn it makes or accepts.
type countingNetwork struct {
	transport.Network
	n *atomic.Int64
}

func (c countingNetwork) Listen(addr string) (net.Listener, error) {
	ln, err := c.Network.Listen(addr)
	if err != nil {
		return nil, err
	}
	return countingListener{ln, c.n}, nil
}

func (c countingNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := c.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, c.n}, nil
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{conn, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

func (c countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}
