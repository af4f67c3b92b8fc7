package head

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/internal/backoff"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// graphsAtOnce bounds the submitted graphs a head decodes and checks at
// once: each may take 8× its frame (16 MiB by default) to decode and about
// as much to validate and estimate.
const graphsAtOnce = 2

// Server is a running head: the Raft replica, the listener, and, while
// the head leads, the leader machine run by one event loop (loop.go).
// Its exported methods are safe to call concurrently.
type Server struct {
	// ownMarks are the lowering marks this process made (the loop's; see
	// sched.Config.OwnMarks).
	ownMarks sched.OwnMarks
	cfg      Config
	log      *slog.Logger
	tcfg     transport.Config
	ln       *transport.Listener
	node     *raftmeta.Node
	addr     string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sessMu   sync.Mutex
	accepted map[*transport.Session]struct{} // open sessions others dialled; nil once closing

	// events is the event loop's inbox; everything below it to meta is the
	// loop's own.
	events chan *envelope
	beats  *beats
	calls  atomic.Uint64
	lead   *leadership // nil unless this head leads
	epochs uint64
	timers timers

	graphSlots chan struct{} // submitted graphs decoded and checked at once
	relead     chan struct{} // a restore replaced the state: lead afresh (ops.go)
	lowering   chan struct{} // estimates and lowerings at once

	meta metaState // forwarding and membership (meta_forward.go)

	removed     chan struct{} // closed when this head learns it was removed from the voters
	removedOnce sync.Once
	gone        goneState
	// The web service (web.go), when cfg.HTTP is set; met and rec are nil
	// without it.
	web       *web.Server
	webHead   *webHead
	httpToken []byte
	met       *metrics.Head
	rec       *timeline.Recorder
	obs       observer // the loop's own
}

// Start opens the head's Raft state, starts listening and joins the
// cluster. It returns once the listener is up.
func Start(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("head", cfg.ID)
	tcfg := cfg.Transport
	tcfg.Token, tcfg.NodeID, tcfg.Logger = cfg.Token, cfg.ID, log
	if tcfg.Insecure {
		tcfg.Role = transport.RoleHead // claimed: plaintext proves only the token
	}

	ln, err := transport.Listen(cfg.Listen, tcfg)
	if err != nil {
		return nil, fmt.Errorf("head %s: listen on %s: %w", cfg.ID, cfg.Listen, err)
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	rcfg := cfg.Raft
	rcfg.ID, rcfg.Addr, rcfg.DataDir, rcfg.Logger = cfg.ID, addr, cfg.DataDir, log
	rcfg.Bootstrap = cfg.Peers
	if len(rcfg.Bootstrap) == 0 && len(cfg.Join) == 0 {
		rcfg.Bootstrap = []raftmeta.Server{{ID: cfg.ID, Addr: addr}}
	}
	layer := raftmeta.NewStreamLayer(ln.RaftListener(), func(ctx context.Context, a string) (net.Conn, error) {
		return transport.DialRaw(ctx, a, transport.PurposeRaft, tcfg)
	})
	node, err := raftmeta.Open(rcfg, layer)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("head %s: %w", cfg.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, log: log, tcfg: tcfg, ln: ln, node: node, addr: addr,
		ctx: ctx, cancel: cancel,
		accepted:   map[*transport.Session]struct{}{},
		events:     make(chan *envelope, 256),
		beats:      newBeats(),
		ownMarks:   sched.OwnMarks{},
		graphSlots: make(chan struct{}, graphsAtOnce),
		relead:     make(chan struct{}, 1),
		lowering:   make(chan struct{}, lowerSlots()),
		removed:    make(chan struct{}),
	}
	s.webHead = &webHead{s: s}
	if err := s.startWeb(); err != nil {
		cancel()
		node.Shutdown()
		ln.Close()
		return nil, err
	}
	s.startMeta()
	s.wg.Add(2)
	go s.acceptLoop()
	go s.run()
	return s, nil
}

// Addr returns the address raylets and drivers dial.
func (s *Server) Addr() string { return s.addr }

// ID returns the head's Raft ID.
func (s *Server) ID() string { return s.cfg.ID }

// Node returns the head's Raft replica.
func (s *Server) Node() *raftmeta.Node { return s.node }

// Removed is closed when this head learns that it was removed from the
// Raft voters (phobos raft remove-peer; see checkRemoved): it no longer
// takes part, and its owner should Close it and stop.
func (s *Server) Removed() <-chan struct{} { return s.removed }

// checkRemoved notices that this head was removed from the voters. A
// leader that removes itself shuts Raft down. A removed follower may
// never receive the configuration without itself (the leader stops
// replicating to it), so a head that has heard from a leader and has then
// known none for several election timeouts asks the other heads it knows:
// a leader whose voters leave this head out has removed it. A partitioned
// head reaches no leader and keeps waiting. The event loop calls it.
func (s *Server) checkRemoved() {
	if s.ctx.Err() != nil {
		return
	}
	st := s.node.Stats()
	if st.State == "shutdown" {
		s.markRemoved()
		return
	}
	g := &s.gone
	if st.LeaderID != "" {
		g.leaderless = time.Time{}
		return
	}
	quiet := 3 * max(s.cfg.Raft.HeartbeatTimeout, s.cfg.Raft.ElectionTimeout)
	switch {
	case st.LastContact.IsZero(): // never part of a cluster with a leader (a head waiting to join)
		return
	case g.leaderless.IsZero():
		g.leaderless = time.Now()
		return
	case time.Since(g.leaderless) < quiet || time.Since(g.probed) < quiet || g.probing.Load():
		return
	}
	servers, err := s.node.Servers()
	if err != nil {
		return
	}
	g.probed = time.Now()
	g.probing.Store(true)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer g.probing.Store(false)
		for _, sv := range servers {
			if sv.ID != s.cfg.ID && s.leaderLeftOut(sv.Addr) {
				s.markRemoved()
				return
			}
		}
	}()
}

// leaderLeftOut reports whether the head at addr leads with voters that
// leave this head out.
func (s *Server) leaderLeftOut(addr string) bool {
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	defer cancel()
	sess, err := s.peerSession(ctx, addr)
	if err != nil {
		return false
	}
	var self wire.HeadSelf
	if err := sess.Call(ctx, wire.MethodHeadInfo, wire.HeadInfoRequest{}, &self); err != nil {
		return false
	}
	return self.Head.Role == "leader" && len(self.Voters) > 0 &&
		!slices.ContainsFunc(self.Voters, func(h wire.HeadInfo) bool { return h.ID == s.cfg.ID })
}

func (s *Server) markRemoved() {
	s.removedOnce.Do(func() {
		s.log.Warn("this head was removed from the Raft voters (raft remove-peer) and stops serving; to bring it back, wipe its data dir and start it joining the cluster (" + s.cfg.setting("Join") + ")")
		close(s.removed)
	})
}

// goneState is what checkRemoved has seen (the event loop's own, but for
// probing).
type goneState struct {
	leaderless time.Time // since when it has known no leader
	probed     time.Time // when it last asked the other heads
	probing    atomic.Bool
}

// Close stops serving and shuts Raft down.
func (s *Server) Close() error {
	s.cancel() // the loop steps down: raylets are disconnected
	s.closeWeb()
	s.ln.Close()
	s.sessMu.Lock()
	open := s.accepted
	s.accepted = nil
	s.sessMu.Unlock()
	for sess := range open {
		sess.Close() // drivers, raylets and other heads see the head go
	}
	err := s.node.Shutdown()
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		sess, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.sessMu.Lock()
		if s.accepted == nil {
			s.sessMu.Unlock()
			sess.Close()
			return
		}
		s.accepted[sess] = struct{}{}
		s.sessMu.Unlock()
		sess.Serve(s)
		// No goroutine waits for each session (a thousand raylets,
		// a thousand stacks): the close runs this.
		sess.AfterClose(func() {
			s.sessMu.Lock()
			delete(s.accepted, sess) // nil once the head closes: no-op
			s.sessMu.Unlock()
		})
	}
}

// retry runs f until it succeeds, fails for good, or a minute passes.
// Raft writes that fail with an unknown outcome are retried with the same
// request ID by f, so they apply once.
func retry(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b := backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second}.Start()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		ccancel()
		if err == nil || !errors.Is(err, dag.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		if b.Wait(ctx) != nil {
			return err
		}
	}
}

// notLeader is the error a follower returns for leader-only methods.
func (s *Server) notLeader() error {
	id, addr := s.node.Leader()
	if id == "" || id == s.cfg.ID {
		if full := s.node.DiskFull(); full != nil {
			return full
		}
		return dag.Errorf(dag.KindUnavailable, "head %s: no leader elected yet; retry shortly", s.cfg.ID)
	}
	return &raftmeta.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// HandleCall implements transport.Handler: it checks the caller's role,
// then serves the call (see access.go).
func (s *Server) HandleCall(ctx context.Context, sess *transport.Session, m transport.Method, b transport.Body) (any, error) {
	c := callerOf(sess)
	if !mayCall(m, c.role) {
		return nil, s.refuseRole(c, m)
	}
	if m == wire.MethodProxy {
		return s.proxyCall(ctx, sess, b)
	}
	return s.serveCall(ctx, sess, c, m, b)
}

// serveCall serves a call whose caller's role was checked. Calls for the
// leader go to the event loop as events; the machine answers them.
func (s *Server) serveCall(ctx context.Context, sess *transport.Session, c caller, m transport.Method, b transport.Body) (any, error) {
	if reply, handled, err := s.proxy(ctx, sess, c, m, b); handled { // a follower passes driver calls to the leader
		return reply, err
	}
	switch m {
	case wire.MethodLeader:
		id, addr := s.node.Leader()
		return wire.Leader{ID: id, Addr: addr}, nil
	case wire.MethodHeartbeat:
		// A raylet's heartbeat as a call is also its leader check: one
		// exchange a second instead of a message and a call.
		var msg wire.Heartbeat
		if err := b.Decode(&msg); err != nil {
			return nil, err
		}
		s.heartbeat(sess, msg)
		id, addr := s.node.Leader()
		return wire.Leader{ID: id, Addr: addr}, nil
	case wire.MethodClusterStatus:
		return s.clusterStatus(ctx, b)
	case wire.MethodRegisterRaylet:
		var req wire.RegisterRaylet
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.registerRaylet(ctx, sess, req)
	case wire.MethodPull:
		return s.pull(ctx, sess, b)
	case wire.MethodSubmitJob:
		// A graph takes up to 8× its frame to decode and as much again to
		// check; a few at a time keep a burst of big ones within memory.
		select {
		case s.graphSlots <- struct{}{}:
			defer func() { <-s.graphSlots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var req wire.SubmitJob
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.submit(ctx, c, req)
	case wire.MethodWaitJob:
		var req wire.WaitJob
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.waitJob(ctx, c, req)
	case wire.MethodCancelJob:
		var req wire.JobRef
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		call := s.newCall()
		return s.ask(ctx, &sched.CancelJob{Call: call, Caller: c.machine(), Task: req.Task}, call)
	case wire.MethodReleaseJob:
		var req wire.JobRef
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		call := s.newCall()
		return s.ask(ctx, &sched.ReleaseJob{Call: call, Caller: c.machine(), Task: req.Task}, call)
	case wire.MethodListJobs:
		call := s.newCall()
		return s.ask(ctx, &sched.ListJobs{Call: call, Caller: c.machine()}, call)
	case wire.MethodOpenPuts:
		var req wire.OpenPuts
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.openPuts(ctx, sess, c, req)
	case wire.MethodAttachPuts:
		var req wire.AttachPuts
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.attachPuts(ctx, sess, c, req.Task)
	case wire.MethodShareObject:
		var req wire.ShareObject
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		call := s.newCall()
		return s.ask(ctx, &sched.ShareObject{Call: call, Caller: c.machine(), ShareObject: req}, call)
	case wire.MethodPutObject:
		var req wire.PutObject
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		call := s.newCall()
		return s.ask(ctx, &sched.PutObject{Call: call, Caller: c.machine(), PutObject: req}, call)
	case wire.MethodReleaseObject:
		var req wire.ObjectRefMsg
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		call := s.newCall()
		return s.ask(ctx, &sched.ReleaseObject{Call: call, Caller: c.machine(), ID: req.ID}, call)
	case wire.MethodJobLogs:
		var req wire.JobLogs
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.jobLogs(ctx, c, req)
	case wire.MethodJobTimeline:
		var req wire.JobRef
		if err := b.Decode(&req); err != nil {
			return nil, err
		}
		return s.jobTimeline(ctx, c, req.Task)
	case wire.MethodGoodbye:
		call := s.newCall()
		return s.ask(ctx, &sched.Goodbye{Call: call, Session: sess}, call)
	case wire.MethodDrainRaylet, wire.MethodSnapshotSave, wire.MethodSnapshotRestore:
		return s.serveOps(ctx, sess, c, m, b)
	}
	return s.handleMeta(ctx, sess, m, b)
}

// ask sends a call to the leader machine and waits for its answer.
func (s *Server) ask(ctx context.Context, ev sched.Event, call sched.Call) (any, error) {
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	v, err := s.call(ctx, ev, call, 0)
	return v, s.leaderErr(err)
}

// pulls and completes hold decoded pull requests and completion batches
// for reuse.
var (
	pulls     = sync.Pool{New: func() any { return new(wire.PullIn) }}
	completes = sync.Pool{New: func() any { return new(wire.CompleteIn) }}
)

// HandleMessage implements transport.Handler.
func (s *Server) HandleMessage(sess *transport.Session, m transport.Method, b transport.Body) {
	switch m {
	case wire.MethodComplete:
		msg := completes.Get().(*wire.CompleteIn)
		msg.Reset()
		if err := b.Decode(msg); err != nil {
			completes.Put(msg)
			s.log.Warn("bad completion batch", "from", sess.RemoteID(), "err", err)
			return
		}
		// The batch is the pool's again once the loop has stepped it.
		if err := s.tell(s.ctx, &sched.Complete{Session: sess, Done: msg.Done}); err == nil {
			completes.Put(msg)
		}
	case wire.MethodHeartbeat:
		var msg wire.Heartbeat
		if err := b.Decode(&msg); err != nil {
			s.log.Warn("bad heartbeat", "from", sess.RemoteID(), "err", err)
			return
		}
		s.heartbeat(sess, msg)
	default:
		s.log.Warn("unknown message", "method", m, "from", sess.RemoteID())
	}
}

// heartbeat hands a raylet's heartbeat, a message or a call, to the loop.
func (s *Server) heartbeat(sess *transport.Session, msg wire.Heartbeat) {
	s.beats.add(sess, msg) // the loop applies it before its next liveness check (beats.go)
}

// HandleStream implements transport.Handler; heads serve no bulk streams.
func (s *Server) HandleStream(sess *transport.Session, st net.Conn) { st.Close() }

// registerRaylet admits a raylet under its ID; the machine decides whether
// the ID is free (see sched/raylets.go), waiting, if it must, for its
// holder's next heartbeat or the raylet timeout.
func (s *Server) registerRaylet(ctx context.Context, sess *transport.Session, req wire.RegisterRaylet) (any, error) {
	if req.ID == "" || req.Addr == "" || req.Slots <= 0 {
		return nil, dag.Errorf(dag.KindInvalidArgument, "register raylet: id %q, addr %q and slots %d must all be set", req.ID, req.Addr, req.Slots)
	}
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	key, err := s.secret(ctx)
	if err != nil {
		return nil, err
	}
	call := s.newCall()
	// A pull reply must fit the raylet's max frame; it is also kept to
	// this head's own, so that a raylet announcing the largest frame the
	// transport allows cannot have the head build gigabyte replies.
	maxReply := min(sess.PeerMaxFrame(), sess.MaxFrame())
	v, err := s.call(ctx, &sched.Register{Call: call, Session: sess, RegisterRaylet: req, CertNotAfter: sess.Peer().NotAfter, MaxReply: maxReply}, call, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil, dag.Errorf(dag.KindUnavailable, "register raylet %s: gave up waiting for the leader's answer: %w", req.ID, ctx.Err())
		}
		return nil, s.leaderErr(err)
	}
	rep := v.(wire.RegisterReply)
	rep.Secret = key
	return rep, nil
}

// pull hands a raylet up to its credits of subtasks, once the completions
// riding on the pull are applied; the machine holds the pull up to its
// wait for work to appear.
func (s *Server) pull(ctx context.Context, sess *transport.Session, b transport.Body) (any, error) {
	// Pulls come all the time: the request decodes into memory kept from
	// earlier pulls (the machine copies what it keeps), and the envelope is
	// reused.
	req := pulls.Get().(*wire.PullIn)
	req.Reset()
	if err := b.Decode(req); err != nil {
		pulls.Put(req)
		return nil, err
	}
	// The pull may wait here for work a long time: its completions are
	// decoded, so its body's buffer goes back now.
	b.Release()
	env := envelopes.Get().(*envelope)
	call := s.newCall()
	env.call, env.epoch, env.ack = call, 0, false
	env.pull = sched.Pull{Call: call, Session: sess, PullIn: req}
	env.ev = &env.pull
	select {
	case s.events <- env:
	case <-sess.Done():
		pulls.Put(req)
		return nil, sess.Err()
	case <-s.ctx.Done():
		pulls.Put(req)
		return nil, dag.Errorf(dag.KindUnavailable, "head %s is shutting down", s.cfg.ID)
	}
	select {
	case r := <-env.reply:
		env.ev, env.pull = nil, sched.Pull{}
		envelopes.Put(env)
		pulls.Put(req)
		if errors.Is(r.err, errNotLeading) {
			return nil, s.notLeader()
		}
		if r.err != nil {
			return nil, fmt.Errorf("raylet %s: %w", sess.RemoteID(), r.err)
		}
		// Messages the loop made for this raylet before the reply (frees
		// above all) go first: see outbox.
		if err := r.waitAfter(ctx); err != nil {
			if e, ok := r.val.(*transport.Encoded); ok {
				e.Discard()
			}
			return nil, dag.Errorf(dag.KindUnavailable, "raylet %s: pull reply: %w", sess.RemoteID(), err)
		}
		return r.val, nil
	case <-sess.Done():
		return nil, sess.Err() // the envelope may still be answered: not reused
	case <-s.ctx.Done():
		return nil, dag.Errorf(dag.KindUnavailable, "head %s is shutting down", s.cfg.ID)
	}
}

// submit checks a job's options, decodes nothing more (the transport did),
// bounds what the job will cost from its tileable graph, and hands it to
// the machine, which commits it, admits it and has it lowered.
func (s *Server) submit(ctx context.Context, c caller, req wire.SubmitJob) (any, error) {
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	fusion, err := lowering.ParseFusion(req.Options.Fusion)
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "submit: %v", err)
	}
	if req.Options.Retries < 0 || req.Options.Retries > sched.MaxRetries {
		return nil, dag.Errorf(dag.KindInvalidArgument, "submit: retries %d is out of range; use 0 (the cluster's default) to %d", req.Options.Retries, sched.MaxRetries)
	}
	var zero [16]byte
	if req.RequestID == zero {
		return nil, dag.Errorf(dag.KindInvalidArgument, "submit: missing request id")
	}
	est, err := lowering.EstimateJob(&req.Graph, dag.Ops, fusion)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	graph, err := codec.Marshal(req.Graph)
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "submit: encode graph: %w", err)
	}
	opts, err := codec.Marshal(req.Options)
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "submit: encode options: %w", err)
	}
	call := s.newCall()
	return s.ask(ctx, &sched.Submit{Call: call, Caller: c.machine(), RequestID: sched.RequestID(req.RequestID),
		Graph: &req.Graph, GraphBytes: graph, Options: req.Options, OptionsBytes: opts, Estimate: est}, call)
}

// waitJob asks the machine to report a job when it ends or the timeout
// passes, and gives the owner a ticket for the results it locates.
func (s *Server) waitJob(ctx context.Context, c caller, req wire.WaitJob) (any, error) {
	call := s.newCall()
	v, err := s.ask(ctx, &sched.WaitJob{Call: call, Caller: c.machine(), WaitJob: req}, call)
	if err != nil {
		return nil, err
	}
	st := v.(wire.JobStatus)
	if len(st.Results) > 0 {
		if st.Ticket, err = s.resultTicket(ctx, c, req.Task); err != nil {
			return nil, err
		}
	}
	return st, nil
}
