package sched

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// harness is the one test driver of the Leader: a shell in miniature. It
// feeds events with a fake clock, checks the invariants after every Step,
// carries out the effects (a fake Raft applies commits, lowering runs
// inline, timers fire when the clock passes them, raylets keep what they
// made in a fake store) and, for scripts, prints every effect.
type harness struct {
	t   testing.TB
	l   *Leader
	cfg Config
	// marks are each head process's lowering marks (Config.OwnMarks);
	// "restart H" forgets H's.
	marks map[string]OwnMarks
	now   time.Time
	out   *strings.Builder // nil: do not print
	raft  *fakeRaft

	calls  Call
	labels map[Call]string
	got    map[Call]Reply // replies by call (pull replies as Reply{Value: []wire.SubtaskSpec})

	raylets map[string]*fakeRaylet
	byR     map[Raylet]string
	drivers map[string]*fakeSession

	timers map[TimerID]time.Time
	work   []any // effects to carry out: Commit, Lower, dag.TaskID (estimate)

	holdRaft, holdLower bool
	// holdResume leaves a step's Resume to the test (a wave's backlog
	// waits meanwhile).
	holdResume bool

	// What tests look at.
	plans map[dag.TaskID][]*lowering.Plan
	freed map[Raylet]map[dag.ObjectID]bool
	// pullFrees says whether a pull with these completions asks for
	// frees in its reply; nil: always, as raylets do.
	pullFrees func(done []wire.Completion) bool
	// freeMsgs counts the free messages sent (Effects.Free lists);
	// inReply, the frees that rode on pull replies.
	freeMsgs, inReply int
	cxl               map[Raylet][]dag.SubtaskID
	ended             []dag.TaskID
	// widest is the most subtasks one Step handed out.
	widest int
	// maxReply, when set, is the max frame raylets register with, and
	// biggestReply the most bytes a pull reply took encoded; a reply over
	// maxReply fails the test.
	maxReply, biggestReply int
}

// fakeSession is a session token: a pointer, so each connection is its own.
type fakeSession struct{ name string }

// fakeRaylet is a raylet process as the harness plays it: name is the
// process's, id the raylet ID it registers as (usually the same).
type fakeRaylet struct {
	name    string
	id      string
	addr    string
	slots   int
	sess    *fakeSession
	r       Raylet
	running []wire.SubtaskSpec     // dispatched, not yet reported
	store   map[dag.ObjectID]int64 // what it holds: made or fetched, not freed
	old     bool                   // a release that predates pipelining (wire.RegisterRaylet.Pipeline)
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, cfg: cfg, now: epoch, raft: newFakeRaft(),
		labels: map[Call]string{}, got: map[Call]Reply{},
		raylets: map[string]*fakeRaylet{}, byR: map[Raylet]string{}, drivers: map[string]*fakeSession{},
		timers: map[TimerID]time.Time{}, plans: map[dag.TaskID][]*lowering.Plan{},
		freed: map[Raylet]map[dag.ObjectID]bool{}, cxl: map[Raylet][]dag.SubtaskID{}, marks: map[string]OwnMarks{}}
	h.lead()
	return h
}

// newTestHarness is a harness with n raylets A, B, ... of 2 slots each,
// for Go tests (it prints nothing).
func newTestHarness(t testing.TB, n int) *harness {
	h := newHarness(t, Config{Head: "h1"})
	h.records()
	for i := 0; i < n; i++ {
		h.addRaylet(string(rune('A'+i)), 2)
	}
	return h
}

// lead starts a new leadership (a new Leader over the same fake Raft).
func (h *harness) lead() {
	cfg := h.cfg
	if h.marks[cfg.Head] == nil {
		h.marks[cfg.Head] = OwnMarks{} // the head process's, across its leaderships
	}
	cfg.OwnMarks = h.marks[cfg.Head]
	cfg.RequestPrefix = [8]byte{byte(h.raft.terms)}
	h.raft.terms++
	h.l = New(cfg)
	h.timers = map[TimerID]time.Time{}
	h.work = nil
	for _, fr := range h.raylets {
		fr.sess = nil // the process goes on, and finds the new leader
	}
	h.byR = map[Raylet]string{}
}

// records hands the Leader Raft's records, as the shell does once Raft has
// caught up.
func (h *harness) records() {
	ev := &Records{}
	for _, task := range sortedKeys(h.raft.jobs) {
		ev.Jobs = append(ev.Jobs, h.raft.jobs[task].rec)
	}
	for _, task := range sortedKeys(h.raft.puts) {
		ev.Puts = append(ev.Puts, *h.raft.puts[task])
	}
	ev.Raylets = append(ev.Raylets, sortedKeys(h.raft.raylets)...)
	h.step(ev)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (h *harness) emit(format string, args ...any) {
	if h.out != nil {
		fmt.Fprintf(h.out, "> "+format+"\n", args...)
	}
}

// call opens a call labelled for printing.
func (h *harness) call(label string) Call {
	h.calls++
	h.labels[h.calls] = label
	return h.calls
}

// step feeds one event, checks the invariants, and carries out the
// effects (and whatever work they make, unless held).
func (h *harness) step(ev Event) {
	h.t.Helper()
	fx := h.l.Step(h.now, ev)
	if err := h.l.Check(); err != nil {
		h.t.Fatalf("after %T: %v", ev, err)
	}
	resume := fx.Resume
	h.take(fx)
	h.drain()
	h.checkStores(ev)
	if resume && !h.holdResume {
		h.step(&Resume{})
	}
}

// checkStores fails the test if the leader records a subtask finished on
// a live raylet whose store (as the fake raylet keeps it: made or
// fetched, less what the leader freed) lacks one of its outputs: readers
// sent there would find nothing, and no attempt of theirs could pass.
func (h *harness) checkStores(ev Event) {
	h.t.Helper()
	for _, j := range h.l.s.jobs {
		for i, st := range j.state {
			r := j.where[i]
			if st != Finished || r < 0 || !h.l.s.raylets[r].alive {
				continue
			}
			fr := h.raylets[h.byR[Raylet(r)]]
			if fr == nil {
				continue
			}
			for k := range j.sg.OutputsOf(int32(i)) {
				id := dag.NewObjectID(j.sg.ID(int32(i)), uint32(k))
				if _, ok := fr.store[id]; !ok {
					h.t.Fatalf("after %T: the leader records %s finished on raylet %s, whose store lacks %s", ev, h.sid(j.sg.ID(int32(i))), fr.name, h.objName(id))
				}
			}
		}
	}
}

// take records and prints one Step's effects, and queues the work they
// ask for. It copies what it keeps: the Effects are the Leader's.
func (h *harness) take(fx *Effects) {
	// Names first: a registration's effects may already address the
	// raylet (frees of what it reported holding).
	for _, rp := range fx.Replies {
		if _, ok := rp.Value.(wire.RegisterReply); ok && rp.Err == nil {
			name := strings.TrimPrefix(h.labels[rp.Call], "register ")
			fr := h.raylets[name]
			if r, ok := h.l.s.RayletByID(fr.id); ok {
				h.byR[r] = name
				fr.r = r
			}
		}
	}
	handed := 0
	for _, p := range fx.Pulls {
		handed += len(p.Subtasks)
	}
	h.widest = max(h.widest, handed)
	if h.maxReply > 0 {
		for _, p := range fx.Pulls {
			b, err := wire.PullReply{Subtasks: p.Subtasks, Free: p.Free, More: p.More}.AppendCBOR(nil)
			if err != nil || len(b) > h.maxReply {
				h.t.Errorf("a pull reply of %d subtasks and %d frees takes %d bytes, over the max frame of %d (%v)", len(p.Subtasks), len(p.Free), len(b), h.maxReply, err)
			}
			h.biggestReply = max(h.biggestReply, len(b))
		}
	}
	for _, p := range fx.Pulls {
		name := h.byR[p.Raylet]
		fr := h.raylets[name]
		specs := cloneSpecs(p.Subtasks)
		var ids []string
		for _, sp := range specs {
			id := fmt.Sprintf("%s/%d", h.sid(sp.ID), sp.Attempt)
			for _, in := range sp.Inputs {
				if in.Pending && len(in.Locations) > 0 {
					// The raylet waits for it where it is made, itself.
					h.t.Errorf("%s: pending input %v names locations %v", h.sid(sp.ID), in.Object, in.Locations)
				}
				if in.Pending { // dispatched ahead of this input: ^ names its maker
					id += "^" + h.sid(in.Object.Subtask())
				}
			}
			ids = append(ids, id)
			if fr != nil {
				fr.running = append(fr.running, sp)
			}
		}
		if p.More {
			ids = append(ids, "(more)")
		}
		h.emit("run %s: %s", name, strings.Join(ids, " "))
		if len(p.Free) > 0 {
			h.inReply += len(p.Free)
			h.takeFree(p.Raylet, p.Free, "free-in-reply")
		}
		h.got[p.Call] = Reply{Call: p.Call, Value: specs}
	}
	for r, ids := range fx.Free {
		if len(ids) > 0 {
			h.freeMsgs++
			h.takeFree(Raylet(r), ids, "free")
		}
	}
	for r, ids := range fx.Interrupt {
		if len(ids) == 0 {
			continue
		}
		h.cxl[Raylet(r)] = append(h.cxl[Raylet(r)], ids...)
		var s []string
		for _, id := range ids {
			s = append(s, h.sid(id))
		}
		h.emit("interrupt %s %s", h.byR[Raylet(r)], strings.Join(s, " "))
	}
	for _, p := range fx.PeerLost {
		h.emit("peer-lost to %s: %s", h.byR[p.To], p.ID)
	}
	for _, s := range fx.Disconnect {
		h.emit("disconnect %s", s.(*fakeSession).name)
	}
	for _, s := range fx.Watch {
		h.emit("watch %s", s.(*fakeSession).name)
	}
	for _, c := range fx.Commits {
		h.emit("commit %s", describeCommand(c.Cmd))
		h.work = append(h.work, c)
	}
	for _, tm := range fx.Timers {
		if tm.Clear {
			if _, ok := h.timers[tm.ID]; ok {
				delete(h.timers, tm.ID)
				h.emit("timer clear %s", h.describeTimer(tm.ID))
			}
			continue
		}
		h.timers[tm.ID] = tm.At
		h.emit("timer %s at +%v", h.describeTimer(tm.ID), tm.At.Sub(epoch))
	}
	for _, task := range fx.Estimate {
		h.emit("estimate %d", task)
		h.work = append(h.work, task)
	}
	for _, lw := range fx.Lower {
		h.emit("lower %d stage %d", lw.Task, lw.Stage)
		index, _ := h.l.s.AliveSlots()
		h.work = append(h.work, lowerWork{lw, index})
	}
	for _, e := range fx.Ended {
		h.ended = append(h.ended, e.Task)
		if e.Err != nil && e.State != dag.JobSucceeded {
			h.emit("ended %d %s: %v", e.Task, e.State, e.Err)
		} else {
			h.emit("ended %d %s", e.Task, e.State)
		}
	}
	for _, rp := range fx.Replies {
		h.got[rp.Call] = rp
		h.emit("reply %s: %s", h.labels[rp.Call], describeReply(rp))
	}
}

func (h *harness) takeFree(r Raylet, ids []dag.ObjectID, what string) {
	if h.freed[r] == nil {
		h.freed[r] = map[dag.ObjectID]bool{}
	}
	name := h.byR[r]
	var s []string
	for _, id := range ids {
		h.freed[r][id] = true
		if fr := h.raylets[name]; fr != nil {
			delete(fr.store, id)
		}
		s = append(s, h.objName(id))
	}
	sort.Strings(s)
	h.emit("%s %s %s", what, name, strings.Join(s, " "))
}

type lowerWork struct {
	lw    Lower
	index []Raylet
}

// drain carries out queued work: commits (unless Raft is held) and
// lowering (unless held, and only with Raft answering: it commits stages).
func (h *harness) drain() {
	for {
		k := slices.IndexFunc(h.work, func(w any) bool {
			switch w.(type) {
			case Commit, dag.TaskID:
				return !h.holdRaft
			default:
				return !h.holdRaft && !h.holdLower
			}
		})
		if k < 0 {
			return
		}
		w := h.work[k]
		h.work = slices.Delete(h.work, k, k+1)
		switch w := w.(type) {
		case Commit:
			h.applyCommit(w)
		case dag.TaskID:
			fj := h.raft.jobs[w]
			ev := &Estimated{Task: w}
			if fj == nil {
				ev.Err = dag.Errorf(dag.KindNotFound, "no record")
			} else {
				ev.Graph, ev.Estimate, ev.Err = EstimateGraph(fj.graph, fj.rec.Options)
			}
			h.step(ev)
		case lowerWork:
			h.lower(w)
		}
	}
}

func (h *harness) applyCommit(c Commit) {
	res, err := h.raft.apply(c)
	if err != nil {
		h.emit("raft refused %s: %v", describeCommand(c.Cmd), err)
	}
	h.step(&Committed{Req: c.Req, Result: res, Err: err})
}

// applyOne applies the first queued commit, though Raft is held: what it
// queues in turn waits.
func (h *harness) applyOne() {
	k := slices.IndexFunc(h.work, func(w any) bool { _, ok := w.(Commit); return ok })
	if k < 0 {
		h.t.Fatalf("raft one: no commit is queued")
	}
	c := h.work[k].(Commit)
	h.work = slices.Delete(h.work, k, k+1)
	h.applyCommit(c)
}

// lower runs a Lower as the shell would, off the loop: alloc steps an
// AllocStage through the Leader and applies its commit.
func (h *harness) lower(w lowerWork) {
	ev := w.lw.Run(func(n uint64, metas []byte) (StageIDs, error) {
		c := h.call(fmt.Sprintf("alloc-stage %d", w.lw.Task))
		h.step(&AllocStage{Call: c, Task: w.lw.Task, N: n, Metas: metas})
		rp, ok := h.got[c]
		if !ok {
			return StageIDs{}, fmt.Errorf("harness: no answer to AllocStage")
		}
		if rp.Err != nil {
			return StageIDs{}, rp.Err
		}
		return rp.Value.(StageIDs), nil
	})
	if ev.Plan != nil {
		h.plans[ev.Task] = append(h.plans[ev.Task], ev.Plan)
		h.printPlan(ev.Plan, w.index)
	} else {
		h.emit("lowering failed: %v", ev.Err)
	}
	h.step(ev)
}

func (h *harness) printPlan(p *lowering.Plan, index []Raylet) {
	if h.out == nil {
		return
	}
	var parts []string
	for i := 0; i < p.Stage.Len(); i++ {
		a := "-"
		if ra := p.Stage.Subtasks[i].Raylet; ra >= 0 && int(ra) < len(index) {
			a = h.byR[index[ra]]
		}
		parts = append(parts, fmt.Sprintf("%d%s@%s", i, preds(p, int32(i)), a))
	}
	h.emit("plan stage %d: %s", p.Stage.Stage, strings.Join(parts, " "))
}

// advance moves the clock by d, firing the timers due on the way, earliest
// first.
func (h *harness) advance(d time.Duration) {
	end := h.now.Add(d)
	for {
		var next TimerID
		var at time.Time
		found := false
		for id, t := range h.timers {
			if t.After(end) {
				continue
			}
			if !found || t.Before(at) || t.Equal(at) && lessTimer(id, next) {
				next, at, found = id, t, true
			}
		}
		if !found {
			break
		}
		delete(h.timers, next)
		if at.After(h.now) {
			h.now = at
		}
		h.emit("fired %s", h.describeTimer(next))
		h.step(&TimerFired{ID: next})
	}
	h.now = end
}

func lessTimer(a, b TimerID) bool {
	return fmt.Sprint(a) < fmt.Sprint(b)
}

// Raylets.

func (h *harness) addRaylet(name string, slots int) *fakeRaylet {
	return h.registerAs(name, name, "addr-"+name, slots)
}

// registerAs registers raylet process name as raylet id on a new session;
// a process registering again reports what its store holds.
func (h *harness) registerAs(name, id, addr string, slots int) *fakeRaylet {
	fr := h.rayletOf(name)
	fr.id, fr.addr, fr.slots = id, addr, slots
	fr.sess = &fakeSession{name: name}
	ev := &Register{Call: h.call("register " + name), Session: fr.sess}
	ev.ID, ev.Addr, ev.Slots, ev.Pipeline, ev.MaxReply = id, addr, slots, !fr.old, h.maxReply
	for _, id := range sortedObjects(fr.store) {
		ev.Held = append(ev.Held, wire.HeldObject{ID: id, Size: fr.store[id]})
	}
	h.step(ev)
	return fr
}

func sortedObjects(m map[dag.ObjectID]int64) []dag.ObjectID {
	ids := make([]dag.ObjectID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b dag.ObjectID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}

// rayletOf returns raylet process name, making it if it is new.
func (h *harness) rayletOf(name string) *fakeRaylet {
	fr := h.raylets[name]
	if fr == nil {
		fr = &fakeRaylet{name: name, store: map[dag.ObjectID]int64{}}
		h.raylets[name] = fr
	}
	return fr
}

func (h *harness) raylet(name string) *fakeRaylet {
	fr := h.raylets[name]
	if fr == nil {
		h.t.Fatalf("no raylet %q", name)
	}
	return fr
}

// pull pulls up to n subtasks for a raylet and returns them (also kept as
// running on it).
func (h *harness) pull(name string, n int, wait time.Duration, done ...wire.Completion) []wire.SubtaskSpec {
	fr := h.raylet(name)
	c := h.call("pull " + name)
	p := &wire.PullIn{Credits: n, Wait: wait, Done: wire.CompletionsOf(done...), FreesInReply: h.pullFrees == nil || h.pullFrees(done)}
	h.noteDone(fr, done)
	h.step(&Pull{Call: c, Session: fr.sess, PullIn: p})
	rp, ok := h.got[c]
	if !ok || rp.Err != nil {
		return nil
	}
	specs, _ := rp.Value.([]wire.SubtaskSpec)
	return specs
}

// finish reports subtasks of a raylet done (one-way), with outputs of
// size each (-1: failed with kind and msg).
func (h *harness) report(name string, done []wire.Completion) {
	fr := h.raylet(name)
	h.noteDone(fr, done)
	h.step(&Complete{Session: fr.sess, Done: wire.CompletionsOf(done...)})
}

// noteDone takes reported subtasks off a raylet's running list and puts
// their outputs, and the inputs they fetched, in its store.
func (h *harness) noteDone(fr *fakeRaylet, done []wire.Completion) {
	for _, c := range done {
		fr.running = slices.DeleteFunc(fr.running, func(sp wire.SubtaskSpec) bool { return sp.ID == c.ID && sp.Attempt == c.Attempt })
		if !c.Failed() {
			for k, size := range c.Sizes {
				fr.store[dag.NewObjectID(c.ID, uint32(k))] = size
			}
		}
		for _, id := range c.Fetched {
			fr.store[id] = 8
		}
	}
}

// ok is the completion of sp with outputs of 8 bytes.
func ok(sp wire.SubtaskSpec) wire.Completion {
	sizes := make([]int64, len(sp.Outputs))
	for i := range sizes {
		sizes[i] = 8
	}
	return wire.Completion{ID: sp.ID, Attempt: sp.Attempt, Sizes: sizes}
}

// failed is a failed completion of sp.
func failed(sp wire.SubtaskSpec, kind dag.Kind, msg string) wire.Completion {
	return wire.Completion{ID: sp.ID, Attempt: sp.Attempt, Kind: kind, Error: msg}
}

// lose ends a raylet's session.
func (h *harness) lose(name string) {
	fr := h.raylet(name)
	if fr.sess == nil {
		return
	}
	s := fr.sess
	fr.sess, fr.running = nil, nil
	h.step(&SessionClosed{Session: s, Err: fmt.Errorf("connection lost")})
}

// Jobs.

// submit submits a graph as client and returns the task (0 if refused).
// A task > 0 makes the fake Raft hand out that ID.
func (h *harness) submit(client string, task dag.TaskID, g *dag.TileableGraph, opts wire.JobOptions) dag.TaskID {
	if task > 0 {
		h.raft.nextTask = max(h.raft.nextTask, task)
	}
	graph, err := codec.Marshal(g)
	if err != nil {
		h.t.Fatal(err)
	}
	optsRaw, _ := codec.Marshal(opts)
	fusion, _ := lowering.ParseFusion(opts.Fusion)
	est, err := lowering.EstimateJob(g, dag.Ops, fusion)
	if err != nil {
		h.t.Fatal(err)
	}
	h.raft.req++
	var req RequestID
	copy(req[:], fmt.Sprintf("submit-%08d", h.raft.req))
	c := h.call("submit")
	h.step(&Submit{Call: c, Caller: Caller{Name: client}, RequestID: req, Graph: g, GraphBytes: graph,
		Options: opts, OptionsBytes: optsRaw, Estimate: est})
	rp, ok := h.got[c]
	if !ok || rp.Err != nil {
		return 0
	}
	return rp.Value.(wire.SubmitReply).Task
}

// status asks for a job's status (WaitJob without a timeout).
func (h *harness) status(task dag.TaskID, results bool) (wire.JobStatus, error) {
	c := h.call(fmt.Sprintf("status %d", task))
	ev := &WaitJob{Call: c, Caller: Caller{Admin: true}}
	ev.Task, ev.Results = task, results
	h.step(ev)
	rp := h.got[c]
	st, _ := rp.Value.(wire.JobStatus)
	return st, rp.Err
}

func (h *harness) cancel(task dag.TaskID) Reply {
	c := h.call(fmt.Sprintf("cancel %d", task))
	h.step(&CancelJob{Call: c, Caller: Caller{Admin: true}, Task: task})
	return h.got[c]
}

func (h *harness) release(task dag.TaskID) Reply {
	c := h.call(fmt.Sprintf("release %d", task))
	h.step(&ReleaseJob{Call: c, Caller: Caller{Admin: true}, Task: task})
	return h.got[c]
}

// stage is the scheduler's stage k of a job.
func (h *harness) stage(task dag.TaskID, k int) *stage {
	js := h.l.s.tasks[task]
	if k >= len(js) {
		h.t.Fatalf("job %d has %d stages", task, len(js))
	}
	return js[k]
}

// idx is a subtask's index in its stage.
func (h *harness) idx(id dag.SubtaskID) int64 {
	if j, i, ok := h.l.s.lookup(id); ok {
		_ = j
		return int64(i)
	}
	for _, p := range h.plans[id.Task()] {
		if p.Stage.Stage == id.Stage() {
			return int64(id.Index() - p.Stage.Base)
		}
	}
	return int64(id.Index()) - 1
}

// sid names a subtask as task.index (index in its stage), with its stage
// when not the first: 1.3, 1.s2.0.
func (h *harness) sid(id dag.SubtaskID) string {
	if st := id.Stage(); st > 1 {
		return fmt.Sprintf("%d.s%d.%d", id.Task(), st, h.idx(id))
	}
	return fmt.Sprintf("%d.%d", id.Task(), h.idx(id))
}

// objName names an object as its subtask and output (1.3:0), or a put
// object as put.TASK.INDEX.
func (h *harness) objName(id dag.ObjectID) string {
	if _, isPut := h.raft.puts[id.Subtask().Task()]; isPut {
		return fmt.Sprintf("put.%d.%d", id.Subtask().Task(), id.Subtask().Index())
	}
	return fmt.Sprintf("%s:%d", h.sid(id.Subtask()), id.Output())
}

func preds(p *lowering.Plan, i int32) string {
	ps := p.Stage.Preds.Row(i)
	if len(ps) == 0 {
		return ""
	}
	s := make([]string, len(ps))
	for k, x := range ps {
		s[k] = strconv.Itoa(int(x))
	}
	return "<" + strings.Join(s, ",")
}

func (h *harness) describeTimer(id TimerID) string {
	switch id.Kind {
	case TimerPull:
		return "pull " + h.byR[id.Raylet]
	case TimerWait, TimerClaim:
		return fmt.Sprintf("%s %s", id.Kind, h.labels[id.Call])
	case TimerFailover:
		return "failover"
	case TimerPutGrace:
		return fmt.Sprintf("put-grace %d gen %d", id.Task, id.Gen)
	}
	return fmt.Sprintf("%s %d", id.Kind, id.Task)
}

func describeCommand(c Command) string {
	switch c := c.(type) {
	case SubmitJob:
		return fmt.Sprintf("SubmitJob owner=%s leader=%q", c.Owner, c.Leader)
	case SetJobStatus:
		return fmt.Sprintf("SetJobStatus %d %s", c.Task, c.State)
	case BeginStage:
		return fmt.Sprintf("BeginStage %d n=%d", c.Task, c.N)
	case BeginLowering:
		return fmt.Sprintf("BeginLowering %d on %s", c.Task, c.Leader)
	case EndLowering:
		return fmt.Sprintf("EndLowering %d", c.Task)
	case ReleaseJobCmd:
		return fmt.Sprintf("ReleaseJob %d", c.Task)
	case ReleaseOnEndCmd:
		return fmt.Sprintf("ReleaseOnEnd %d", c.Task)
	case RegisterRayletCmd:
		return fmt.Sprintf("RegisterRaylet %s", c.ID)
	case DeleteJobCmd:
		return fmt.Sprintf("DeleteJob %d", c.Task)
	case DeregisterRayletCmd:
		return fmt.Sprintf("DeregisterRaylet %s", c.ID)
	case OpenPutsCmd:
		return fmt.Sprintf("OpenPuts owner=%s", c.Owner)
	case ClosePuts:
		return fmt.Sprintf("ClosePuts %d", c.Task)
	case SharePut:
		return fmt.Sprintf("SharePut with=%s", c.With)
	}
	return fmt.Sprintf("%T", c)
}

func describeReply(rp Reply) string {
	if rp.Err != nil {
		return fmt.Sprintf("error (%v) %v", dag.KindOf(rp.Err), rp.Err)
	}
	switch v := rp.Value.(type) {
	case wire.SubmitReply:
		return fmt.Sprintf("task %d", v.Task)
	case wire.JobStatus:
		s := fmt.Sprintf("%s %d/%d", v.Status, v.Finished, v.Subtasks)
		if len(v.Results) > 0 {
			var locs []string
			for _, r := range v.Results {
				for _, c := range r.Chunks {
					locs = append(locs, strings.Join(c.Locations, "|"))
				}
			}
			s += " results at " + strings.Join(locs, ",")
		}
		if v.Error != "" {
			s += fmt.Sprintf(" (%v) %s", v.Kind, v.Error)
		}
		return s
	case wire.ListJobs:
		var s []string
		for _, j := range v.Jobs {
			s = append(s, fmt.Sprintf("%d:%s", j.Task, j.Status))
		}
		return "jobs " + strings.Join(s, " ")
	case wire.RegisterReply:
		return "registered"
	case wire.PutSession:
		return fmt.Sprintf("put task %d", v.Task)
	case StageIDs:
		return fmt.Sprintf("stage %d base %d", v.Stage, v.Base)
	case wire.RayletInfo:
		return v.ID + ":" + v.State
	case map[string]wire.RayletInfo:
		var s []string
		for _, id := range sortedKeys(v) {
			s = append(s, id+":"+v[id].State)
		}
		return strings.Join(s, " ")
	case struct{}:
		return "ok"
	}
	return fmt.Sprintf("%v", rp.Value)
}

// cloneSpecs copies specs out of the Leader's buffers.
func cloneSpecs(in []wire.SubtaskSpec) []wire.SubtaskSpec {
	out := make([]wire.SubtaskSpec, len(in))
	for i, sp := range in {
		b, err := codec.Marshal(sp)
		if err != nil {
			panic(err)
		}
		if err := codec.Unmarshal(b, &out[i]); err != nil {
			panic(err)
		}
	}
	return out
}

// fakeRaft applies the Leader's commands as raftmeta's state machine would,
// as far as the Leader can tell: IDs, records, dedupe by request ID.
type fakeRaft struct {
	terms    int
	nextTask dag.TaskID
	req      int
	applied  map[RequestID]CommitResult
	jobs     map[dag.TaskID]*fakeJob
	puts     map[dag.TaskID]*PutRecord
	raylets  map[string]bool
	// fail, when set, refuses the next commands with it.
	fail error
}

type fakeJob struct {
	rec     JobRecord
	graph   []byte
	results []dag.ObjectRun // as SetJobStatus recorded them
}

func newFakeRaft() *fakeRaft {
	return &fakeRaft{nextTask: 1, applied: map[RequestID]CommitResult{}, jobs: map[dag.TaskID]*fakeJob{},
		puts: map[dag.TaskID]*PutRecord{}, raylets: map[string]bool{}}
}

func (f *fakeRaft) apply(c Commit) (CommitResult, error) {
	if f.fail != nil {
		return CommitResult{}, f.fail
	}
	if res, ok := f.applied[c.Req]; ok {
		res.Deduped = true
		return res, nil
	}
	var res CommitResult
	switch cmd := c.Cmd.(type) {
	case SubmitJob:
		t := f.nextTask
		f.nextTask++
		var opts wire.JobOptions
		codec.Unmarshal(cmd.Options, &opts)
		rec := JobRecord{Task: t, Owner: cmd.Owner, State: dag.JobSubmitted, Options: opts, Submitted: normTime(cmd.Time)}
		if cmd.Leader != "" {
			rec.Lowering = []string{cmd.Leader}
		}
		f.jobs[t] = &fakeJob{rec: rec, graph: cmd.Graph}
		res.Task = t
	case SetJobStatus:
		j := f.jobs[cmd.Task]
		switch {
		case j == nil:
			return res, dag.Errorf(dag.KindNotFound, "set job status: job %d is unknown", cmd.Task)
		case j.rec.State.Terminal():
			return res, dag.Errorf(dag.KindInvalidArgument, "set job %d to %v: the job already ended %v", cmd.Task, cmd.State, j.rec.State)
		}
		j.rec.State, j.rec.Error, j.rec.Cause = cmd.State, cmd.Error, cmd.Cause
		j.results = cmd.Results
		if cmd.State.Terminal() {
			j.rec.Finished = normTime(cmd.Time)
		}
		res.Task = cmd.Task
	case BeginStage:
		j := f.jobs[cmd.Task]
		if j == nil || j.rec.State.Terminal() {
			return res, dag.Errorf(dag.KindInvalidArgument, "begin stage: job %d takes no new stages", cmd.Task)
		}
		id := dag.StageID(len(j.rec.Stages) + 1)
		j.rec.Stages = append(j.rec.Stages, StageRecord{ID: id, Base: 1, Count: cmd.N, Metas: cmd.Metas})
		j.rec.Lowering = nil
		res = CommitResult{Task: cmd.Task, Stage: id, Base: 1, Count: cmd.N}
	case BeginLowering:
		j := f.jobs[cmd.Task]
		if j == nil || j.rec.State.Terminal() {
			return res, dag.Errorf(dag.KindInvalidArgument, "begin lowering: job %d ended", cmd.Task)
		}
		j.rec.Lowering = append(j.rec.Lowering, cmd.Leader)
	case EndLowering:
		if j := f.jobs[cmd.Task]; j != nil {
			j.rec.Lowering = nil
		}
	case ReleaseJobCmd:
		if j := f.jobs[cmd.Task]; j != nil {
			j.rec.Released = true
		}
	case ReleaseOnEndCmd:
		j := f.jobs[cmd.Task]
		if j == nil {
			return res, dag.Errorf(dag.KindNotFound, "release job on its end: task %d has no job record", cmd.Task)
		}
		j.rec.ReleaseOnEnd = true
	case RegisterRayletCmd:
		f.raylets[cmd.ID] = true
	case DeleteJobCmd:
		j := f.jobs[cmd.Task]
		switch {
		case j == nil:
			return res, dag.Errorf(dag.KindNotFound, "delete job: task %d is unknown or already deleted", cmd.Task)
		case !j.rec.State.Terminal():
			return res, dag.Errorf(dag.KindInvalidArgument, "delete job %d: the job is %v", cmd.Task, j.rec.State)
		}
		delete(f.jobs, cmd.Task)
	case DeregisterRayletCmd:
		if !f.raylets[cmd.ID] {
			return res, dag.Errorf(dag.KindNotFound, "deregister raylet: raylet %q is not registered", cmd.ID)
		}
		delete(f.raylets, cmd.ID)
	case OpenPutsCmd:
		t := f.nextTask
		f.nextTask++
		f.puts[t] = &PutRecord{Task: t, Owner: cmd.Owner}
		res.Task = t
	case ClosePuts:
		delete(f.puts, cmd.Task)
	case SharePut:
		if p := f.puts[cmd.Object.Subtask().Task()]; p != nil {
			p.Shares = append(p.Shares, Share(cmd))
		}
	}
	f.applied[c.Req] = res
	return res, nil
}

// Helpers for Go tests.

// addJob submits t as alice with retries and returns its first stage's
// plan.
func (h *harness) addJob(task dag.TaskID, t *tensor.Tensor, retries int) *lowering.Plan {
	h.t.Helper()
	g, err := tensor.Graph(t)
	if err != nil {
		h.t.Fatal(err)
	}
	if got := h.submit("alice", task, g, wire.JobOptions{Retries: retries}); got != task {
		h.t.Fatalf("submit: task %d, want %d (reply %+v)", got, task, h.got[h.calls])
	}
	return h.plans[task][0]
}

// take1 pulls up to n subtasks for a raylet at once (no wait).
func (h *harness) take1(name string, n int) []wire.SubtaskSpec { return h.pull(name, n, 0) }

// done reports subtasks done on a raylet with outputs of 8 bytes.
func (h *harness) done(name string, sps ...wire.SubtaskSpec) {
	var cs []wire.Completion
	for _, sp := range sps {
		cs = append(cs, ok(sp))
	}
	h.report(name, cs)
}

// doneSized reports one subtask done with the given output size.
func (h *harness) doneSized(name string, sp wire.SubtaskSpec, size int64) {
	c := ok(sp)
	for i := range c.Sizes {
		c.Sizes[i] = size
	}
	h.report(name, []wire.Completion{c})
}

func (h *harness) fail(name string, sp wire.SubtaskSpec, kind dag.Kind, msg string) {
	h.report(name, []wire.Completion{failed(sp, kind, msg)})
}

// run runs everything to completion, the raylets taking turns.
func (h *harness) run(names ...string) {
	for rounds := 0; rounds < 1000; rounds++ {
		progressed := false
		for _, n := range names {
			if sps := h.take1(n, 4); len(sps) > 0 {
				h.done(n, sps...)
				progressed = true
			}
		}
		if !progressed {
			return
		}
	}
	h.t.Fatal("run did not settle")
}

// info reports a job as the scheduler sees it.
func (h *harness) info(task dag.TaskID) JobInfo {
	info, _ := h.l.s.Job(task)
	return info
}

func seed(n, chunk int64) *tensor.Tensor {
	return tensor.Ones([]int64{n}, tensor.Chunks(chunk)).Add(tensor.Ones([]int64{n}, tensor.Chunks(chunk))).Sum()
}
