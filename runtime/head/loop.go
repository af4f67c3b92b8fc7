package head

import (
	"container/heap"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// The event loop. One goroutine (run) owns the leader machine
// (sched.Leader) while this head leads, as etcd's node.run owns its raft:
// call handlers, Raft's leadership channel, timers, Raft commits and
// lowering workers send it events and, when they wait for an answer, get
// it on a channel of their own. The loop steps the machine with each event
// and the current time, then carries out the effects: it answers calls,
// encodes pull replies, hands messages to raylets' sessions, and starts
// the work that blocks (Raft commits, estimates, lowering) on goroutines
// that report back as events. Nothing else touches the machine, so it
// needs no lock.
//
// Each leadership has an epoch. Work a leadership started reports back
// with its epoch; an event of an earlier epoch is dropped, so a commit or
// a lowering that outlives its leadership changes nothing.

// envelope carries one event to the loop.
type envelope struct {
	ev    sched.Event
	call  sched.Call  // the call the event opens (0: none)
	reply chan result // where the answer goes (buffered: the loop never blocks on it)
	epoch uint64      // the leadership that made the event (0: any)
	ack   bool        // answer once stepped even without a call
	pull  sched.Pull  // storage for a pull's event, so a pull allocates nothing here
}

type result struct {
	val any
	err error
	// after, when set, holds messages for the caller's raylet that must be
	// written before this reply: the handler waits for message seq.
	after *outbox
	seq   uint64
}

// waitAfter returns once the messages the reply must follow are sent.
func (r result) waitAfter(ctx context.Context) error {
	if r.after == nil {
		return nil
	}
	return r.after.wait(ctx, r.seq)
}

// envelopes are reused by pulls, the calls that come all the time.
var envelopes = sync.Pool{New: func() any { return &envelope{reply: make(chan result, 1)} }}

// errNotLeading is the loop's answer while this head does not lead; the
// handler turns it into a NotLeader error naming the leader.
var errNotLeading = errors.New("head: not leading")

// leadership is what the loop keeps while this head leads.
type leadership struct {
	m       *sched.Leader
	epoch   uint64
	ctx     context.Context // ends when the leadership does
	cancel  context.CancelFunc
	pending map[sched.Call]*envelope
	resume  bool // the last step asked for Resume (Effects.Resume)
	// replyBuf is where pull replies are encoded before they are copied
	// into frame buffers of the sizes they need (transport.EncodeVia).
	replyBuf []byte
	// out is each raylet's outbox (by sched.Raylet), for its session.
	out  []*outbox
	msgs []outMsg // a step's messages for one raylet, reused
}

// run is the event loop.
func (s *Server) run() {
	defer s.wg.Done()
	leaderCh := s.node.LeaderCh()
	tick := time.NewTicker(max(s.cfg.RayletTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if l := s.lead; l != nil && l.resume {
			// A wave of work is being handed out a slice a step: first
			// the events waiting now (pulls that bring back the last
			// slices' completions, calls), then the next slice. Only
			// this loop receives from events, so they are there.
			for n := len(s.events); n > 0 && s.lead == l; n-- {
				s.handle(<-s.events)
			}
			if s.lead == l && l.resume {
				s.step(&sched.Resume{})
			}
			continue
		}
		select {
		case env := <-s.events:
			s.handle(env)
		case <-s.beats.ready:
			s.stepBeats()
		case <-s.timers.C():
			s.fireTimers()
		case <-tick.C:
			if s.lead != nil {
				// Every heartbeat that arrived counts before liveness is
				// judged, however long the loop was busy.
				s.stepBeats()
				s.step(&sched.Tick{})
			}
			s.checkRemoved()
		case <-s.relead:
			if s.lead != nil && s.node.IsLeader() {
				s.stepDown()
				s.becomeLeader()
			}
		case leader, ok := <-leaderCh:
			if !ok {
				leaderCh = nil
				continue
			}
			switch {
			case leader && s.lead == nil:
				s.becomeLeader()
			case !leader && s.lead != nil:
				s.stepDown()
			}
		case <-s.ctx.Done():
			s.stepDown()
			s.drainEvents()
			return
		}
	}
}

// handle steps the machine with one event, or answers it when the machine
// cannot take it.
func (s *Server) handle(env *envelope) {
	if s.lead == nil || env.epoch != 0 && env.epoch != s.lead.epoch {
		if env.reply != nil {
			env.reply <- result{err: errNotLeading}
		}
		return
	}
	// Once the step answers the call, the envelope is its sender's again:
	// read nothing of it after.
	ack, reply := env.ack, env.reply
	if env.call != 0 {
		s.lead.pending[env.call] = env
	}
	if _, ok := env.ev.(*sched.Register); ok {
		// A claim on a raylet ID is refused if its holder beat after it:
		// heartbeats that arrived before it count as before it, not as
		// of whenever the loop would have stepped them.
		s.stepBeats()
	}
	s.step(env.ev)
	if ack {
		reply <- result{}
	}
}

// drainEvents answers the events still queued when the head stops.
func (s *Server) drainEvents() {
	for {
		select {
		case env := <-s.events:
			if env.reply != nil {
				env.reply <- result{err: errNotLeading}
			}
		default:
			return
		}
	}
}

// step runs one event through the machine and carries out its effects.
func (s *Server) step(ev sched.Event) {
	s.observeEvent(ev)
	fx := s.lead.m.Step(time.Now(), ev)
	s.observeEffects(fx)
	s.carryOut(fx)
}

// carryOut does what one Step asked, in the loop: nothing here blocks.
func (s *Server) carryOut(fx *sched.Effects) {
	l := s.lead
	l.resume = fx.Resume
	// Messages first, each raylet's in its outbox, then the pull replies,
	// each waiting for the messages made for its raylet before it: a free
	// this step (or an earlier one) reaches the raylet before work a reply
	// hands out, which may make the freed object again (see outbox).
	//
	// A job's release is recorded in Raft, and its caller answered, once
	// the frees it made were handed to the raylets' sessions: a driver
	// that releases job after job waits for each one's frees instead of
	// piling them up in this head, and once Release returns the head
	// holds nothing of the job.
	release := slices.ContainsFunc(fx.Commits, isRelease)
	var marks []mark
	for _, r := range fx.Told {
		msgs := l.msgs[:0]
		// Bounded batches, each its own copy: the frees of a big job's
		// release (ten million IDs, 160 MB) go as the raylet's session
		// takes them, each batch let go once sent, and no message
		// outgrows a raylet's max frame (one list of a million IDs did).
		for ids := fx.Free[r]; len(ids) > 0; {
			k := min(len(ids), maxFreeBatch)
			msgs = append(msgs, outMsg{wire.MethodFreeObjects, wire.FreeObjects{IDs: append([]dag.ObjectID(nil), ids[:k]...)}})
			ids = ids[k:]
		}
		if ids := fx.Interrupt[r]; len(ids) > 0 {
			msgs = append(msgs, outMsg{wire.MethodCancelSubtasks, wire.CancelSubtasks{IDs: append([]dag.SubtaskID(nil), ids...)}})
		}
		marks = s.queueMsgs(marks, r, msgs, release)
		clear(msgs)
		l.msgs = msgs[:0]
	}
	for _, p := range fx.PeerLost {
		marks = s.queueMsgs(marks, p.To, []outMsg{{wire.MethodPeerLost, wire.PeerLost{ID: p.ID, Addr: p.Addr}}}, release)
	}
	for i := range fx.Pulls {
		p := &fx.Pulls[i]
		// The specs share the machine's buffers: encode them now, into
		// the loop's own buffer, and copy that into a pooled frame buffer
		// of the size it needs, which the call's goroutine sends as it is.
		// (Encoded straight into a frame buffer, a reply grew whatever
		// buffer the pool gave by doubling, an allocation and a copy a
		// step, with a thousand replies in flight at the start of a job
		// on a thousand raylets; and a new allocation of the reply's
		// size, as before that, costs the loop more than the copy.)
		e, err := transport.EncodeVia(wire.PullReply{Subtasks: p.Subtasks, Free: p.Free, More: p.More}, &l.replyBuf)
		if err != nil {
			s.deliver(p.Call, result{err: dag.Errorf(dag.KindInternal, "encode pull reply: %w", err)})
			continue
		}
		res := result{val: e}
		if ob := s.outboxOf(p.Raylet, false); ob != nil {
			if seq := ob.pending(); seq != 0 {
				res.after, res.seq = ob, seq
			}
		}
		if !s.deliver(p.Call, res) {
			e.Discard()
		}
	}
	for _, r := range fx.Replies {
		s.deliver(r.Call, result{val: r.Value, err: r.Err})
	}
	commits := fx.Commits
	if len(marks) > 0 && release {
		var after []sched.Commit
		commits = nil
		for _, c := range fx.Commits {
			if isRelease(c) {
				after = append(after, c)
			} else {
				commits = append(commits, c)
			}
		}
		s.wg.Add(1)
		go s.commitAfter(l, marks, after)
	}
	for _, sess := range fx.Disconnect {
		go sess.(*transport.Session).Close()
	}
	for _, sess := range fx.Watch {
		s.watch(sess.(*transport.Session))
	}
	for _, c := range commits {
		s.wg.Add(1)
		go s.commit(l, c)
	}
	for _, tm := range fx.Timers {
		if tm.Clear {
			s.timers.clear(tm.ID)
		} else {
			s.timers.set(tm.ID, tm.At)
		}
	}
	for _, task := range fx.Estimate {
		s.wg.Add(1)
		go s.estimate(l, task)
	}
	for _, lw := range fx.Lower {
		s.wg.Add(1)
		go s.lower(l, lw)
	}
	for _, e := range fx.Ended {
		s.log.Debug("job ended", "task", e.Task, "status", e.State)
	}
}

// deliver answers an open call; false if no call waits for the answer.
func (s *Server) deliver(c sched.Call, res result) bool {
	env, ok := s.lead.pending[c]
	if !ok {
		return false
	}
	delete(s.lead.pending, c)
	env.reply <- res
	return true
}

// outMsg is a one-way message for a raylet.
type outMsg struct {
	m   transport.Method
	msg any
}

// mark is a message an outbox was given: what waits for it to be sent
// waits for sent >= seq.
type mark struct {
	ob  *outbox
	seq uint64
}

// queueMsgs queues one raylet's messages of a step in its outbox, and when
// keep says so adds a mark for the last of them to marks.
func (s *Server) queueMsgs(marks []mark, r sched.Raylet, msgs []outMsg, keep bool) []mark {
	if len(msgs) == 0 {
		return marks
	}
	ob := s.outboxOf(r, true)
	if ob == nil {
		return marks
	}
	seq := ob.put(msgs...)
	if keep {
		marks = append(marks, mark{ob, seq})
	}
	return marks
}

// outboxOf returns raylet r's outbox for its current session, made if
// create says so (nil: r has no session, or no outbox and create is
// false).
// A raylet that registered again gets a new one: its old session's
// messages have nothing to keep order with.
func (s *Server) outboxOf(r sched.Raylet, create bool) *outbox {
	l := s.lead
	sess, _ := l.m.Session(r).(sender)
	if sess == nil {
		return nil
	}
	if int(r) < len(l.out) {
		if ob := l.out[r]; ob != nil && ob.sess == sess {
			return ob
		}
	}
	if !create {
		return nil
	}
	if int(r) >= len(l.out) {
		l.out = slices.Grow(l.out, int(r)+1-len(l.out))[:int(r)+1]
	}
	ob := newOutbox(s, sess)
	l.out[r] = ob
	return ob
}

func isRelease(c sched.Commit) bool {
	_, ok := c.Cmd.(sched.ReleaseJobCmd)
	return ok
}

// maxFreeBatch bounds the object IDs of one FreeObjects message (16 bytes
// each: 128 KiB, far below any raylet's max frame).
const maxFreeBatch = 8192

// commitAfter starts the commits that waited for messages to be sent (a
// session that does not take a message fails it within its write timeout,
// so they wait that long at most).
func (s *Server) commitAfter(l *leadership, marks []mark, then []sched.Commit) {
	defer s.wg.Done()
	for _, m := range marks {
		if m.ob.wait(l.ctx, m.seq) != nil {
			return // the leadership ended: its commits with it
		}
	}
	for _, c := range then {
		s.wg.Add(1)
		go s.commit(l, c)
	}
}

// post sends an event from work this head started back to the loop.
func (s *Server) post(l *leadership, ev sched.Event) {
	select {
	case s.events <- &envelope{ev: ev, epoch: l.epoch}:
	case <-l.ctx.Done():
	}
}

// watch reports the end of a session the machine cares about. The report
// is made when the session closes, by the session (AfterClose), not by a
// goroutine waiting for it: a leader watches every raylet's session. A
// report after the leadership ended goes nowhere (post).
func (s *Server) watch(sess *transport.Session) {
	l := s.lead
	sess.AfterClose(func() {
		s.post(l, &sched.SessionClosed{Session: sess, Err: sess.Err()})
	})
}

// becomeLeader starts a leadership: a new machine, which gets Raft's
// records once this head has applied everything committed before it led.
func (s *Server) becomeLeader() {
	s.log.Info("became leader")
	if s.met != nil {
		s.met.SetLeader(true)
	}
	s.epochs++
	ctx, cancel := context.WithCancel(s.ctx)
	var prefix [8]byte
	rand.Read(prefix[:])
	c := s.cfg
	m := sched.New(sched.Config{
		Head: c.ID, Retries: c.Retries, RayletTimeout: c.RayletTimeout, HeartbeatInterval: c.HeartbeatInterval,
		ResultTTL: c.ResultTTL, CancelGrace: c.CancelGrace, PutGrace: c.PutGrace, MaxLowerings: c.MaxLowerings,
		JobBudget: c.JobBudget, AdmitBudget: c.AdmitBudget, AdmitQueue: c.AdmitQueue,
		JobRetention: c.JobRetention, JobRetentionCount: c.JobRetentionCount, RayletPurgeAfter: c.RayletPurgeAfter,
		RequestPrefix: prefix, SettingNames: c.SettingNames, Logger: s.log, OwnMarks: s.ownMarks,
		NoPipeline: c.NoPipeline,
	})
	s.lead = &leadership{m: m, epoch: s.epochs, ctx: ctx, cancel: cancel, pending: map[sched.Call]*envelope{}}
	s.wg.Add(1)
	go s.readRecords(s.lead)
}

// stepDown ends the leadership: raylets are disconnected (they find the
// new leader), open calls are answered, and work under way is abandoned.
func (s *Server) stepDown() {
	l := s.lead
	if l == nil {
		return
	}
	if s.met != nil {
		s.met.SetLeader(false)
	}
	s.log.Info("stepped down")
	s.step(&sched.StepDown{})
	l.cancel()
	for c, env := range l.pending {
		delete(l.pending, c)
		env.reply <- result{err: errNotLeading}
	}
	s.timers.reset()
	s.lead = nil
}

// readRecords waits until this head has applied every entry committed
// before it led, makes sure the cluster has its secret, and hands the
// machine Raft's records.
func (s *Server) readRecords(l *leadership) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
	defer cancel()
	if err := s.node.Barrier(ctx); err != nil {
		s.log.Warn("read the records: raft barrier", "err", err)
		return
	}
	if _, err := s.secret(ctx); err != nil {
		s.log.Warn("read the records", "err", err)
		return
	}
	ev := &sched.Records{}
	for _, rec := range s.node.Jobs() {
		ev.Jobs = append(ev.Jobs, jobRecord(rec))
	}
	for _, p := range s.node.PutTasks() {
		pr := sched.PutRecord{Task: p.Task, Owner: p.Owner}
		for _, sh := range p.Shares {
			pr.Shares = append(pr.Shares, sched.Share{Object: sh.Object, With: sh.With})
		}
		ev.Puts = append(ev.Puts, pr)
	}
	for _, r := range s.node.Raylets() {
		ev.Raylets = append(ev.Raylets, r.ID)
	}
	s.post(l, ev)
}

// jobRecord is the machine's copy of a Raft job record.
func jobRecord(rec raftmeta.Job) sched.JobRecord {
	out := sched.JobRecord{Task: rec.Task, Owner: rec.Owner, State: rec.Status, Error: rec.Error, Cause: rec.Cause,
		Submitted: rec.Submitted, Finished: rec.Finished, Released: rec.Released, ReleaseOnEnd: rec.ReleaseOnEnd, Lowering: rec.Lowering}
	codec.Unmarshal(rec.Options, &out.Options) // a record's options were checked when it was submitted
	for _, st := range rec.Stages {
		out.Stages = append(out.Stages, sched.StageRecord{ID: st.ID, Base: st.Base, Count: st.Count, Metas: st.Metas})
	}
	return out
}

// commit proposes a machine's command to Raft, retrying an unknown outcome
// under the same request ID, and reports the outcome.
func (s *Server) commit(l *leadership, c sched.Commit) {
	defer s.wg.Done()
	cmd := raftmeta.Command{RequestID: raftmeta.RequestID(c.Req), Body: raftBody(c.Cmd)}
	var res raftmeta.Result
	err := retry(l.ctx, func(ctx context.Context) error {
		var err error
		res, err = s.node.Apply(ctx, cmd)
		return err
	})
	s.post(l, &sched.Committed{Req: c.Req, Err: err,
		Result: sched.CommitResult{Task: res.Task, Stage: res.Stage, Base: res.Base, Count: res.Count, Deduped: res.Deduped}})
}

// raftBody is the Raft command for a machine's command.
func raftBody(c sched.Command) raftmeta.Body {
	switch c := c.(type) {
	case sched.SubmitJob:
		return raftmeta.SubmitJob{Graph: c.Graph, Options: c.Options, Time: c.Time, Owner: c.Owner, Leader: c.Leader}
	case sched.SetJobStatus:
		return raftmeta.SetJobStatus{Task: c.Task, Status: c.State, Error: c.Error, Cause: c.Cause, ResultRuns: c.Results, Time: c.Time}
	case sched.BeginStage:
		return raftmeta.BeginStage{Task: c.Task, N: c.N, Metas: c.Metas}
	case sched.BeginLowering:
		return raftmeta.BeginLowering{Task: c.Task, Leader: c.Leader}
	case sched.EndLowering:
		return raftmeta.EndLowering{Task: c.Task}
	case sched.ReleaseJobCmd:
		return raftmeta.ReleaseJob{Task: c.Task}
	case sched.ReleaseOnEndCmd:
		return raftmeta.ReleaseOnEnd{Task: c.Task}
	case sched.RegisterRayletCmd:
		return raftmeta.RegisterRaylet{Raylet: raftmeta.Raylet{ID: c.ID, Addr: c.Addr, Slots: c.Slots, StoreCapacity: c.StoreCapacity, Registered: c.Time}}
	case sched.DeleteJobCmd:
		return raftmeta.DeleteJob{Task: c.Task}
	case sched.DeregisterRayletCmd:
		return raftmeta.DeregisterRaylet{ID: c.ID}
	case sched.OpenPutsCmd:
		return raftmeta.OpenPuts{Owner: c.Owner, Time: c.Time}
	case sched.ClosePuts:
		return raftmeta.ClosePuts{Task: c.Task}
	case sched.SharePut:
		return raftmeta.SharePut{Object: c.Object, With: c.With}
	}
	panic(fmt.Sprintf("head: no Raft command for %T", c))
}

// estimate reads a job's graph back from Raft and estimates it.
func (s *Server) estimate(l *leadership, task dag.TaskID) {
	defer s.wg.Done()
	if !s.acquireLowering(l.ctx) {
		return
	}
	defer s.releaseLowering()
	ev := &sched.Estimated{Task: task}
	rec, ok := s.node.Job(task)
	if !ok {
		ev.Err = dag.Errorf(dag.KindNotFound, "job %d has no record", task)
	} else {
		var opts wire.JobOptions
		codec.Unmarshal(rec.Options, &opts)
		ev.Graph, ev.Estimate, ev.Err = sched.EstimateGraph(rec.Graph, opts)
	}
	s.post(l, ev)
}

// lower lowers a stage off the loop; a new stage's IDs come from the
// machine, which commits them.
func (s *Server) lower(l *leadership, lw sched.Lower) {
	defer s.wg.Done()
	if !s.acquireLowering(l.ctx) {
		return
	}
	defer s.releaseLowering()
	out := lw.Run(func(n uint64, metas []byte) (sched.StageIDs, error) {
		call := s.newCall()
		v, err := s.call(l.ctx, &sched.AllocStage{Call: call, Task: lw.Task, N: n, Metas: metas}, call, l.epoch)
		if err != nil {
			return sched.StageIDs{}, err
		}
		return v.(sched.StageIDs), nil
	})
	s.post(l, out)
}

// lowerSlots bounds estimates and lowerings at once: each is CPU- and
// memory-heavy.
func lowerSlots() int { return max(2, runtime.GOMAXPROCS(0)) }

func (s *Server) acquireLowering(ctx context.Context) bool {
	select {
	case s.lowering <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) releaseLowering() { <-s.lowering }

func (s *Server) newCall() sched.Call { return sched.Call(s.calls.Add(1)) }

// call sends an event that opens call to the loop and waits for the
// answer. epoch, when not 0, ties it to one leadership.
func (s *Server) call(ctx context.Context, ev sched.Event, call sched.Call, epoch uint64) (any, error) {
	env := &envelope{ev: ev, call: call, reply: make(chan result, 1), epoch: epoch}
	return s.await(ctx, env)
}

// tell sends an event that opens no call and waits until it was stepped
// (its memory may then be reused).
func (s *Server) tell(ctx context.Context, ev sched.Event) error {
	env := &envelope{ev: ev, reply: make(chan result, 1), ack: true}
	_, err := s.await(ctx, env)
	return err
}

func (s *Server) await(ctx context.Context, env *envelope) (any, error) {
	select {
	case s.events <- env:
	case <-ctx.Done():
		return nil, dag.Errorf(dag.KindUnavailable, "head %s: %w", s.cfg.ID, ctx.Err())
	case <-s.ctx.Done():
		return nil, dag.Errorf(dag.KindUnavailable, "head %s is shutting down", s.cfg.ID)
	}
	select {
	case r := <-env.reply:
		return r.val, r.err
	case <-ctx.Done():
		return nil, dag.Errorf(dag.KindUnavailable, "head %s: %w", s.cfg.ID, ctx.Err())
	case <-s.ctx.Done():
		return nil, dag.Errorf(dag.KindUnavailable, "head %s is shutting down", s.cfg.ID)
	}
}

// leaderErr turns the loop's errNotLeading into the NotLeader error
// callers retry on.
func (s *Server) leaderErr(err error) error {
	if errors.Is(err, errNotLeading) {
		return s.notLeader()
	}
	return err
}

// timers is the loop's timers: a heap of deadlines by TimerID, behind one
// time.Timer.
type timers struct {
	h     timerHeap
	at    map[sched.TimerID]*timerItem
	t     *time.Timer
	armed time.Time
}

type timerItem struct {
	id  sched.TimerID
	at  time.Time
	idx int
}

type timerHeap []*timerItem

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	it := x.(*timerItem)
	it.idx = len(*h)
	*h = append(*h, it)
}
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// C is the channel that fires when the earliest timer is due (nil when
// there is none: a nil channel blocks forever in select).
func (t *timers) C() <-chan time.Time {
	if t.t == nil || len(t.h) == 0 {
		return nil
	}
	return t.t.C
}

func (t *timers) set(id sched.TimerID, at time.Time) {
	if t.at == nil {
		t.at = map[sched.TimerID]*timerItem{}
	}
	if it, ok := t.at[id]; ok {
		it.at = at
		heap.Fix(&t.h, it.idx)
	} else {
		it := &timerItem{id: id, at: at}
		t.at[id] = it
		heap.Push(&t.h, it)
	}
	t.arm()
}

func (t *timers) clear(id sched.TimerID) {
	if it, ok := t.at[id]; ok {
		heap.Remove(&t.h, it.idx)
		delete(t.at, id)
		t.arm()
	}
}

func (t *timers) reset() {
	t.h, t.at = nil, nil
	if t.t != nil {
		t.t.Stop()
	}
	t.armed = time.Time{}
}

// arm points the time.Timer at the earliest deadline.
func (t *timers) arm() {
	if len(t.h) == 0 {
		return
	}
	first := t.h[0].at
	if first.Equal(t.armed) && t.t != nil {
		return
	}
	t.armed = first
	d := max(time.Until(first), 0)
	if t.t == nil {
		t.t = time.NewTimer(d)
	} else {
		t.t.Reset(d)
	}
}

// due pops the timers due at now.
func (t *timers) due(now time.Time) []sched.TimerID {
	var ids []sched.TimerID
	for len(t.h) > 0 && !t.h[0].at.After(now) {
		it := heap.Pop(&t.h).(*timerItem)
		delete(t.at, it.id)
		ids = append(ids, it.id)
	}
	t.armed = time.Time{}
	t.arm()
	return ids
}

// fireTimers steps the machine with every timer due.
func (s *Server) fireTimers() {
	for _, id := range s.timers.due(time.Now()) {
		if s.lead == nil {
			return
		}
		s.step(&sched.TimerFired{ID: id})
	}
}
