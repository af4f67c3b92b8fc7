package raylet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/ctxutil"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/leader"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/raylet/core"
	"github.com/phobos-project/phobos/runtime/tasklog"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// Raylet is a running raylet. Its methods are safe for concurrent use.
//
// Its decisions about local work (which subtask runs in which slot, how
// much to pull, when completions go, when a deaf kernel is abandoned) are
// made by a core.Machine; its goroutines only carry them out. A worker runs
// kernels, the puller and the reporter talk to the head, a timer ticks;
// each steps the machine with what happened (see step) and carries out the
// effects.
type Raylet struct {
	cfg   Config
	log   *slog.Logger
	id    string
	addr  string
	tcfg  transport.Config
	store *objectstore.Store
	ln    *transport.Listener
	head  *leader.Conn
	peers *peers
	// started counts the subtasks this raylet began to run (Started).
	started atomic.Int64
	// secret checks drivers' tickets (runtime/ticket); set by every
	// registration, nil before the first.
	secret atomic.Pointer[[]byte]

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the puller, reporter, heartbeats, accepts
	working sync.WaitGroup // workers, abandoned ones included
	kernels atomic.Int64   // kernels running now, abandoned ones included
	// soon says the running subtasks will release more waiting ones than
	// they have workers (set after every step): an idle worker looks for
	// its next order a while before it sleeps (see look).
	soon atomic.Bool

	stopOnce sync.Once
	stopped  chan struct{} // closed by stop
	stopErr  error         // why, set before stopped is closed

	pulls   chan pullOrder         // to the puller; room for the one pull out
	reports chan []wire.Completion // to the reporter; room for the one report out

	// regMu orders registrations against the frees and cancels leaders
	// send: regSess is the session of the latest registration, and only
	// its leader's are carried out. A deposed leader's frees, applied
	// after this raylet told a new leader what it holds, would delete
	// objects the new leader counts on (and whose readers' completions it
	// never got, so it runs them again).
	regMu   sync.Mutex
	regSess *transport.Session

	// mu is held for one step of the machine and the carrying out of its
	// effects, and guards what they use.
	mu      sync.Mutex
	m       *core.Machine[queued, wire.Completion]
	workers []*worker            // by slot
	retired map[core.Run]*worker // replaced workers whose kernels still run
	batches []*pullBatch         // free: decoded into by the next pull
	tasks   []core.Subtask[queued]
	timer   *time.Timer // ticks the machine

	// The web service (web.go), when cfg.HTTP is set; met is nil without
	// it. logs keeps the lines kernels log (fn.Logger) either way.
	web        *web.Server
	met        *metrics.Raylet
	logs       *tasklog.Store
	logHandler *tasklog.Handler
}

// pullWait is how long the head may hold a pull while it has no work: the
// most it allows (sched's maxPullWait). The head answers a held pull as
// soon as it has work for the raylet; a head that steps down answers the
// pulls it holds (and the call goes on to the new leader), and a session
// the leader check finds deaf is closed, ending its pull. So the wait
// only sets how often an idle raylet asks again, and each ask wakes both
// processes.
const pullWait = 30 * time.Second

// Start opens the store and listener, connects to the head leader and
// starts pulling work. It returns once the listener is up; registration
// happens in the background, and should the head refuse it for good (the
// ID is another live raylet's), Done is closed. A cfg that Validate
// refuses is refused with its error.
func Start(ctx context.Context, cfg Config) (*Raylet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	tcfg := cfg.Transport
	tcfg.Token = cfg.Token
	if tcfg.Insecure {
		tcfg.Role = transport.RoleRaylet // claimed: plaintext proves only the token
	}
	tcfg.MaxFrameSize = cfg.MaxFrame

	if cfg.ID == "" && cfg.IDFile != "" {
		id, err := StableID(cfg.IDFile)
		if err != nil {
			return nil, err
		}
		cfg.ID = id
	}
	// The ID is known before the listener accepts anything, so that the
	// handshake announces it and every error of the listener names it.
	ln, id, err := listen(cfg, &tcfg, log)
	if err != nil {
		return nil, err
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	log = tcfg.Logger

	scfg := cfg.Store
	if scfg.Name == "" {
		scfg.Name = id
	}
	if scfg.Logger == nil {
		scfg.Logger = log
	}
	store, err := objectstore.Open(scfg)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("raylet %s: %w", id, err)
	}
	abandoned := fmt.Sprintf("kernel ignored its interrupt for %v and was abandoned", cfg.CancelGrace)
	m, err := core.New(core.Config{Slots: cfg.Slots, Prefetch: cfg.Prefetch, CancelGrace: cfg.CancelGrace, Room: store.Stats().Capacity},
		func(t core.Subtask[queued], why core.Reason) wire.Completion {
			c := wire.Completion{ID: t.ID, Attempt: t.Attempt, Kind: dag.KindCancelled, Error: "cancelled before it started"}
			if why == core.Abandoned {
				c.Error = abandoned
			}
			if why == core.InputFailed {
				c.Kind, c.Error = dag.KindUnavailable, "an input it was to read from this raylet failed before it started"
			}
			return c
		}, func(c wire.Completion) bool { return c.Failed() })
	if err != nil {
		store.Close()
		ln.Close()
		return nil, fmt.Errorf("raylet %s: %w", id, err)
	}

	rctx, cancel := context.WithCancel(context.Background())
	r := &Raylet{
		cfg: cfg, log: log, id: id, addr: addr, tcfg: tcfg, store: store, ln: ln,
		ctx: rctx, cancel: cancel, stopped: make(chan struct{}),
		pulls:   make(chan pullOrder, 1),
		reports: make(chan []wire.Completion, 1),
		m:       m,
		retired: map[core.Run]*worker{},
		logs:    tasklog.NewStore(cfg.TaskLogs),
	}
	r.logHandler = tasklog.NewHandler(r.logs, nil)
	r.timer = time.AfterFunc(time.Hour, r.tick)
	r.timer.Stop()
	r.peers = newPeers(tcfg, log)
	// Before registering: the registration carries the web service's URL.
	if err := r.startWeb(); err != nil {
		cancel()
		r.peers.close()
		store.Close()
		ln.Close()
		return nil, err
	}
	r.head = leader.New(leader.Config{
		Heads:     cfg.Heads,
		Transport: tcfg,
		Handler:   headHandler{r},
		OnConnect: r.register,
		Logger:    log,
		// The heartbeat is the leader check: one call a second asks the
		// head who leads and tells it the raylet lives.
		CheckInterval: cfg.HeartbeatInterval,
		Check:         r.heartbeat,
	})
	r.mu.Lock()
	for k := range cfg.Slots {
		r.workers = append(r.workers, r.startWorker(core.Slot(k)))
	}
	r.mu.Unlock()
	r.wg.Add(5)
	go r.acceptLoop()
	go r.acceptBulk(ln.BulkListener())
	go r.pullLoop()
	go r.reportLoop()
	go r.keepSession()
	r.step(&event{kind: evRoom, room: store.Stats().Capacity, at: time.Now()}) // the first pull
	return r, nil
}

// listen opens the raylet's listener with tcfg.NodeID (and its logger)
// set to the raylet's ID first. Without cfg.ID the ID is
// "<hostname>-<port>": for a port chosen by the system (":0") the port is
// taken first, then listened on with the ID known; should another process
// grab it in between, another port is taken.
func listen(cfg Config, tcfg *transport.Config, log *slog.Logger) (*transport.Listener, string, error) {
	for tries := 1; ; tries++ {
		id, at := cfg.ID, cfg.Listen
		if id == "" {
			host, port, err := net.SplitHostPort(at)
			if err != nil {
				return nil, "", fmt.Errorf("raylet: listen address %q: %w", at, err)
			}
			if port == "0" || port == "" {
				probe, err := net.Listen("tcp", at)
				if err != nil {
					return nil, "", fmt.Errorf("raylet: listen on %s: %w", at, err)
				}
				_, port, _ = net.SplitHostPort(probe.Addr().String())
				probe.Close()
				at = net.JoinHostPort(host, port)
			}
			hostname, _ := os.Hostname()
			id = fmt.Sprintf("%s-%s", hostname, port)
		}
		tcfg.NodeID = id
		tcfg.Logger = log.With("raylet", id)
		ln, err := transport.Listen(at, *tcfg)
		if err == nil {
			return ln, id, nil
		}
		if at != cfg.Listen && tries < 3 && errors.Is(err, syscall.EADDRINUSE) {
			continue // the port was taken between the probe and now
		}
		if cfg.ID == "" {
			return nil, "", fmt.Errorf("raylet: %w", err)
		}
		return nil, "", fmt.Errorf("raylet %s: %w", id, err)
	}
}

// ID returns the raylet's cluster name.
func (r *Raylet) ID() string { return r.id }

// Done is closed when the raylet stops on its own because it cannot go
// on: the head refused to register it (its ID is held by another live
// raylet, or its registration is invalid). Err says why; the owner should
// Close it. It is not closed by Close.
func (r *Raylet) Done() <-chan struct{} { return r.stopped }

// Err returns why the raylet stopped on its own (see Done), or nil.
func (r *Raylet) Err() error {
	select {
	case <-r.stopped:
		return r.stopErr
	default:
		return nil
	}
}

// stop stops the raylet's work for good because of err; Close still
// releases its resources.
func (r *Raylet) stop(err error) {
	r.stopOnce.Do(func() {
		r.stopErr = err
		close(r.stopped)
		r.log.Info("raylet stopping", "err", err) // the owner reports Err
	})
	r.cancel()
}

// Started returns how many subtasks the raylet has begun to run since it
// started (attempts included). Safe to call at any time.
func (r *Raylet) Started() int64 { return r.started.Load() }

// Addr returns the address peers and drivers use.
func (r *Raylet) Addr() string { return r.addr }

// Store returns the raylet's object store.
func (r *Raylet) Store() *objectstore.Store { return r.store }

// Close stops pulling, interrupts running subtasks, closes connections and
// removes the store's arena.
func (r *Raylet) Close() error {
	if s := r.head.Current(); s != nil {
		// A clean departure, not a loss; acknowledged, so it cannot be cut
		// off by the close that follows.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.Call(ctx, wire.MethodGoodbye, struct{}{}, nil)
		cancel()
	}
	r.cancel()
	if r.web != nil {
		r.web.Close()
	}
	// Steps under way finish; later ones see the raylet stopping and do
	// nothing, so that no worker starts while Close waits for them.
	r.mu.Lock()
	r.timer.Stop()
	r.mu.Unlock()
	r.ln.Close()
	r.head.Close()
	r.peers.close()
	r.wg.Wait()
	// Kernels that ignore their interrupt may still write into the arena;
	// give them a moment, and if they are still there, leave the arena
	// mapped (the process is usually exiting) rather than pull memory from
	// under them.
	if !waitFor(&r.working, time.Second) {
		// The file goes now; its memory when the mapping does, at exit.
		r.log.Warn("closing with kernels that ignored their interrupt still running; the store arena stays mapped until the process exits", "kernels", r.kernels.Load(), "arena", r.store.Path())
		if err := os.Remove(r.store.Path()); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove arena of raylet %s: %w", r.id, err)
		}
		return nil
	}
	return r.store.Close()
}

// waitFor waits for wg at most d and reports whether it is done.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// register introduces the raylet on a new leader session.
func (r *Raylet) register(ctx context.Context, s *transport.Session) error {
	st := r.store.Stats()
	req := wire.RegisterRaylet{ID: r.id, Addr: r.addr, Slots: r.cfg.Slots, StoreCapacity: st.Capacity, HTTP: r.HTTPURL(), Pipeline: true}
	r.regMu.Lock()
	r.regSess = s // from now on, only this session's frees: see regMu
	for _, id := range r.store.IDs(nil) {
		req.Held = append(req.Held, wire.HeldObject{ID: id})
	}
	r.regMu.Unlock()
	var rep wire.RegisterReply
	if err := s.Call(ctx, wire.MethodRegisterRaylet, req, &rep); err != nil {
		err = fmt.Errorf("register with head %s: %w", s.RemoteID(), err)
		if errors.Is(err, dag.ErrInvalidArgument) || errors.Is(err, dag.ErrPermissionDenied) {
			// Asking again would be refused again (its ID is another live
			// raylet's, say): stop, so that the process exits saying why.
			r.stop(err)
		}
		return err
	}
	if len(rep.Secret) > 0 {
		r.secret.Store(&rep.Secret)
	}
	r.log.Info("registered with head leader", "head", rep.HeadID)
	// A pull or completions waiting after failures to reach the previous
	// leader go to this one at once.
	r.step(&event{kind: evRegistered, at: time.Now()})
	return nil
}

func (r *Raylet) acceptLoop() {
	defer r.wg.Done()
	for {
		s, err := r.ln.Accept()
		if err != nil {
			return
		}
		s.Serve(peerHandler{r})
	}
}

// acceptBulk serves the bulk conns peers and drivers open for large
// objects: one request each, as on a session stream.
func (r *Raylet) acceptBulk(bl net.Listener) {
	defer r.wg.Done()
	for {
		c, err := bl.Accept()
		if err != nil {
			return
		}
		peer, _ := transport.ConnPeer(c)
		go r.serveStream(peer, c)
	}
}

// pullLoop sends the pulls the machine asks for, one at a time, and steps
// the machine with each answer. Objects the reply frees are deleted before
// its subtasks are queued: one of them may make a freed object anew.
func (r *Raylet) pullLoop() {
	defer r.wg.Done()
	// One request maker for every pull (made per pull, it and the order
	// it captures were two allocations a pull).
	var o pullOrder
	req := func(_ *transport.Session, try int) any {
		if try > 0 {
			markResent(o.done)
		}
		return wire.Pull{Credits: o.credits, Wait: pullWait, Done: r.checkResent(o.done), FreesInReply: true}
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case o = <-r.pulls:
		}
		b := o.b
		s, err := r.head.CallEach(r.ctx, wire.MethodPull, req, &b.rep)
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.log.Warn("pull from head failed", "err", err)
			markResent(o.done)
			r.step(&event{kind: evPullFailed, b: b, at: time.Now()})
			continue
		}
		r.freeFrom(s, b.rep.Free)
		r.step(&event{kind: evPulled, b: b, at: time.Now()})
	}
}

// reportLoop sends the completion reports the machine asks for, one at a
// time, and steps the machine with each outcome.
func (r *Raylet) reportLoop() {
	defer r.wg.Done()
	for {
		var done []wire.Completion
		select {
		case <-r.ctx.Done():
			return
		case done = <-r.reports:
		}
		// The session first: completions sent before are checked once
		// the raylet is registered on the one they go on (checkResent).
		s, err := r.head.Session(r.ctx)
		if err == nil {
			err = s.Send(wire.MethodComplete, wire.Complete{Done: r.checkResent(done)})
		}
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.log.Warn("report completions", "n", len(done), "err", err)
			markResent(done)
			r.step(&event{kind: evReportFailed, at: time.Now()})
			continue
		}
		r.step(&event{kind: evReported, at: time.Now()})
	}
}

// markResent notes that completions went out in a call or message that
// failed: it may have reached a leader all the same.
func markResent(done []wire.Completion) {
	for i := range done {
		done[i].Resent = true
	}
}

// checkResent returns done without the successful completions sent before
// (Resent) whose outputs this raylet no longer holds, and with the inputs
// it no longer holds left out of their Fetched lists. done itself is left
// as it is (the machine owns it): a new slice is made only when something
// is left out.
//
// A leader applies a pull's completions when the pull arrives and may hold
// the pull until it has work; if the leader dies meanwhile, the pull fails
// and its completions go again, to the next leader. The first may have
// freed their outputs in between (every reader had finished), and this
// raylet carried out the free. The next leader did not dispatch the work
// and would take the outputs as made here by its predecessor's dispatch,
// sending readers to objects that are gone (a job then failed "no location
// has it"). Such a completion is dropped: whoever applied it has no need
// of it, and a leader that never had it does not wait for it either, since
// its outputs were freed by one that did, or lost.
//
// It runs once the raylet is registered on the session the completions go
// on: frees from an earlier session are ignored from then on (freeFrom),
// so an output found here stays until this leader frees it.
func (r *Raylet) checkResent(done []wire.Completion) []wire.Completion {
	var out []wire.Completion
	for i := range done {
		if !done[i].Resent { // the common case: nothing to check or copy
			if out != nil {
				out = append(out, done[i])
			}
			continue
		}
		c := done[i]
		if !c.Failed() && !r.holdsOutputs(&c) {
			r.log.Debug("dropped a completion sent before: its outputs were freed since", "subtask", c.ID)
			if out == nil {
				out = append(make([]wire.Completion, 0, len(done)), done[:i]...)
			}
			continue
		}
		if k := r.countHeld(c.Fetched); k < len(c.Fetched) {
			kept := make([]dag.ObjectID, 0, k)
			for _, id := range c.Fetched {
				if r.store.Contains(id) {
					kept = append(kept, id)
				}
			}
			c.Fetched = kept
			if out == nil {
				out = append(make([]wire.Completion, 0, len(done)), done[:i]...)
			}
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return done
	}
	return out
}

// holdsOutputs reports whether the store holds every output c names.
func (r *Raylet) holdsOutputs(c *wire.Completion) bool {
	for k := range c.Sizes {
		if !r.store.Contains(dag.NewObjectID(c.ID, uint32(k))) {
			return false
		}
	}
	return true
}

// countHeld counts the objects of ids the store holds.
func (r *Raylet) countHeld(ids []dag.ObjectID) int {
	n := 0
	for _, id := range ids {
		if r.store.Contains(id) {
			n++
		}
	}
	return n
}

// cancelSubtasks interrupts running subtasks and drops queued ones; each
// dropped subtask is reported cancelled.
func (r *Raylet) cancelSubtasks(ids []dag.SubtaskID) {
	r.step(&event{kind: evCancel, ids: ids, at: time.Now()})
}

// keepSession keeps a session to the leader open, so that the leader
// check, and with it the heartbeat, goes on while no pull or report needs
// one (every slot busy with a long subtask, say). It waits on the session
// and connects again when it ends: at once after a session that lasted,
// at most once a heartbeat interval otherwise.
func (r *Raylet) keepSession() {
	defer r.wg.Done()
	for {
		start := time.Now()
		if s, err := r.head.Session(r.ctx); err == nil {
			select {
			case <-s.Done():
			case <-r.ctx.Done():
				return
			}
		}
		if ctxutil.Sleep(r.ctx, r.cfg.HeartbeatInterval-time.Since(start)) != nil {
			return
		}
	}
}

// heartbeat tells the leader on s that the raylet lives and how it is
// doing, and asks it who leads: the leader check (leader.Config.Check),
// every HeartbeatInterval. A head from before heartbeats were calls
// refuses the call as an unknown method; it gets the heartbeat as a
// message and the question as MethodLeader.
func (r *Raylet) heartbeat(ctx context.Context, s *transport.Session) (wire.Leader, error) {
	r.mu.Lock()
	running := r.m.Running()
	r.mu.Unlock()
	hb := wire.Heartbeat{Store: r.storeStats(), Running: running}
	if src := r.tcfg.TLS; src != nil {
		hb.CertNotAfter = src.NotAfter()
	}
	var ld wire.Leader
	err := s.Call(ctx, wire.MethodHeartbeat, hb, &ld)
	if !errors.Is(err, dag.ErrInvalidArgument) {
		return ld, err
	}
	if err := s.Send(wire.MethodHeartbeat, hb); err != nil {
		return ld, fmt.Errorf("heartbeat: %w", err)
	}
	return leader.AskLeader(ctx, s)
}

// freeFrom deletes objects the leader of session s says nobody needs any
// more, if s is the session this raylet last registered on; a previous
// leader's are ignored (see regMu), and what they would have freed is
// the new leader's to free, from the list of held objects.
func (r *Raylet) freeFrom(s *transport.Session, ids []dag.ObjectID) {
	if len(ids) == 0 {
		return
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if s != r.regSess {
		r.log.Debug("ignored frees from a previous leader's session", "objects", len(ids))
		return
	}
	r.freeObjects(ids)
}

// freeObjects deletes objects the head says nobody needs any more.
func (r *Raylet) freeObjects(ids []dag.ObjectID) {
	for _, id := range ids {
		if err := r.store.Delete(id); err != nil && !errors.Is(err, objectstore.ErrNotFound) {
			r.log.Warn("free object", "id", id, "err", err)
		}
	}
}

// headHandler serves what the head leader sends to this raylet.
type headHandler struct{ r *Raylet }

func (h headHandler) HandleCall(ctx context.Context, s *transport.Session, m transport.Method, b transport.Body) (any, error) {
	return nil, dag.Errorf(dag.KindInvalidArgument, "raylet %s serves no call %d from the head", h.r.id, m)
}

func (h headHandler) HandleMessage(s *transport.Session, m transport.Method, b transport.Body) {
	switch m {
	case wire.MethodFreeObjects:
		var msg wire.FreeObjects
		if err := b.Decode(&msg); err != nil {
			h.r.log.Warn("free objects", "err", err)
			return
		}
		h.r.freeFrom(s, msg.IDs)
	case wire.MethodCancelSubtasks:
		var msg wire.CancelSubtasks
		if err := b.Decode(&msg); err != nil {
			h.r.log.Warn("cancel subtasks", "err", err)
			return
		}
		h.r.regMu.Lock()
		current := s == h.r.regSess
		h.r.regMu.Unlock()
		if current { // a previous leader's cancel could name the new one's work
			h.r.cancelSubtasks(msg.IDs)
		}
	case wire.MethodPeerLost:
		var msg wire.PeerLost
		if err := b.Decode(&msg); err != nil {
			h.r.log.Warn("peer lost", "err", err)
			return
		}
		if msg.Addr != h.r.addr {
			h.r.log.Info("peer lost", "raylet", msg.ID, "addr", msg.Addr)
			h.r.peers.lost(msg.Addr)
		}
	default:
		h.r.log.Warn("unknown message from head", "method", m)
	}
}

func (h headHandler) HandleStream(s *transport.Session, st net.Conn) { h.r.serveStream(s.Peer(), st) }
