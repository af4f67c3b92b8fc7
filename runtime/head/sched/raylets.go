package sched

import (
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Raylets: registration under one live raylet per ID, heartbeats and
// liveness, pulls (held until work appears) and completions, losses, and a
// new leader's wait for the raylets it knows from Raft.
//
// An ID belongs to one live raylet at a time. A claim on an ID whose holder
// is alive is decided at once when the holder's session is gone or the
// claim comes from the holder's address (the holder itself on a new
// session, or its successor there: two live processes cannot listen on one
// address); otherwise the claim waits for the holder's next heartbeat
// (alive: refused) or for RayletTimeout to pass since its last one (lost,
// as the liveness check would find: admitted). The leader decides because
// it alone holds the holder's session and heartbeats on one clock.

// maxPullWait bounds how long a pull is held.
const maxPullWait = 30 * time.Second

// claim is a registration waiting on a live holder of its ID.
type claim struct {
	ev     *Register // a copy: the event is the shell's
	at     time.Time
	holder Raylet // NoRaylet until it first waits
}

func (l *Leader) register(ev *Register) {
	if ev.ID == "" || ev.Addr == "" || ev.Slots <= 0 {
		l.reply(ev.Call, nil, dag.Errorf(dag.KindInvalidArgument, "register raylet: id %q, addr %q and slots %d must all be set", ev.ID, ev.Addr, ev.Slots))
		return
	}
	cp := *ev
	l.decideClaim(&claim{ev: &cp, at: l.now, holder: NoRaylet})
}

// decideClaim admits, refuses or holds a claim on an ID.
func (l *Leader) decideClaim(c *claim) {
	r, ok := l.s.RayletByID(c.ev.ID)
	if !ok {
		l.admit(c, NoRaylet)
		return
	}
	rv := l.s.raylets[r]
	switch {
	case !rv.alive || rv.session == nil || rv.session == c.ev.Session:
		l.admit(c, NoRaylet)
	case rv.addr == c.ev.Addr:
		// The holder's own process on a new session (a heartbeat it sent on
		// the old one may still arrive), or its successor on its address.
		l.admit(c, r)
	case rv.lastBeat.After(c.at):
		l.log.Warn("refused a raylet whose id another live raylet holds", "raylet", c.ev.ID, "addr", c.ev.Addr, "holder", rv.addr)
		l.reply(c.ev.Call, nil, l.heldError(rv))
	case l.now.Sub(rv.lastBeat) >= l.cfg.RayletTimeout:
		l.log.Warn("raylet id claimed by a new process; the raylet holding it sent no heartbeat for the raylet timeout and is taken as lost",
			"raylet", c.ev.ID, "addr", c.ev.Addr, "holder", rv.addr, "last_heartbeat", rv.lastBeat)
		l.admit(c, r)
	default:
		if c.holder == NoRaylet {
			l.log.Info("raylet id claimed while held; waiting for the holder's next heartbeat (alive: refuse) or the raylet timeout (lost: admit)",
				"raylet", c.ev.ID, "addr", c.ev.Addr, "holder", rv.addr, "wait_at_most", l.cfg.RayletTimeout-l.now.Sub(rv.lastBeat))
		}
		l.claims = append(l.claims, c)
		c.holder = r
		l.setTimer(TimerID{Kind: TimerClaim, Call: c.ev.Call}, rv.lastBeat.Add(l.cfg.RayletTimeout))
	}
}

// heldError refuses a claim on an ID that rv, alive, holds.
func (l *Leader) heldError(rv *raylet) error {
	return dag.Errorf(dag.KindInvalidArgument,
		"raylet id %q is held by a live raylet at %s since %s (last heartbeat %v ago); choose another raylet id, or stop that raylet",
		rv.id, rv.addr, rv.since.Format("2006-01-02 15:04:05 MST"), l.now.Sub(rv.lastBeat).Round(time.Millisecond))
}

// reconsiderClaims decides waiting claims again: their holders beat,
// were lost, or timed out.
func (l *Leader) reconsiderClaims() {
	waiting := l.claims
	l.claims = nil
	for _, c := range waiting {
		held := len(l.claims)
		l.decideClaim(c)
		if len(l.claims) == held {
			l.clearTimer(TimerID{Kind: TimerClaim, Call: c.ev.Call}) // decided
		}
	}
}

// admit records the claimant in Raft, then takes it in. replacing is the
// holder the claim was judged to replace (NoRaylet: none).
func (l *Leader) admit(c *claim, replacing Raylet) {
	ev := c.ev
	cmd := RegisterRayletCmd{ID: ev.ID, Addr: ev.Addr, Slots: ev.Slots, StoreCapacity: ev.StoreCapacity, Time: l.now}
	var replacingSess Session
	if replacing != NoRaylet {
		replacingSess = l.s.raylets[replacing].session
	}
	l.commit(0, l.newRequest(), cmd, func(_ CommitResult, err error) {
		if err != nil {
			l.reply(ev.Call, nil, err)
			return
		}
		l.join(ev, replacingSess)
	})
}

// join takes in a raylet whose registration Raft holds. Another claimant
// may have been admitted while this one was being recorded: then this one
// is refused.
func (l *Leader) join(ev *Register, replacing Session) {
	if r, ok := l.s.RayletByID(ev.ID); ok {
		rv := l.s.raylets[r]
		if rv.alive && rv.session != nil && rv.session != ev.Session {
			if rv.session != replacing {
				l.reply(ev.Call, nil, l.heldError(rv))
				return
			}
			// The holder is gone: account for its loss now, so its work runs
			// again, before the new process takes the name.
			old := rv.session
			l.drop(r, nil)
			l.fx.Disconnect = append(l.fx.Disconnect, old)
		}
	}
	r := l.s.AddRaylet(ev.ID, ev.Addr, ev.Slots)
	rv := l.s.raylets[r]
	rv.http, rv.pipelines, rv.maxReply = ev.HTTP, ev.Pipeline, ev.MaxReply
	rv.session, rv.lastBeat, rv.since, rv.certNotAfter, rv.leaving = ev.Session, l.now, l.now, ev.CertNotAfter, false
	rv.parked = parkedPull{}
	rv.draining = l.draining[ev.ID]
	l.s.touch(r)
	delete(l.gone, ev.ID)
	l.bySess[ev.Session] = r
	l.known[ev.ID] = true
	l.s.AddHeld(r, ev.Held)
	l.s.Requeue()
	l.fx.Watch = append(l.fx.Watch, ev.Session)
	l.log.Info("raylet registered", "raylet", ev.ID, "addr", ev.Addr, "slots", ev.Slots)
	l.reply(ev.Call, wire.RegisterReply{HeadID: l.cfg.Head, HeartbeatInterval: l.cfg.HeartbeatInterval}, nil)
	l.reconsiderClaims()
	l.maybeEndFailoverWait()
}

func (l *Leader) heartbeat(ev *Heartbeat) {
	r, ok := l.bySess[ev.Session]
	if !ok {
		return
	}
	rv := l.s.raylets[r]
	rv.lastBeat = l.now
	if !ev.CertNotAfter.IsZero() {
		rv.certNotAfter = ev.CertNotAfter
	}
	rv.store = ev.Store
	for _, c := range l.claims {
		if c.holder == r {
			l.reconsiderClaims()
			return
		}
	}
}

func (l *Leader) goodbye(ev *Goodbye) {
	if r, ok := l.bySess[ev.Session]; ok {
		l.s.raylets[r].leaving = true
	}
	l.reply(ev.Call, struct{}{}, nil)
}

func (l *Leader) sessionClosed(ev *SessionClosed) {
	if r, ok := l.bySess[ev.Session]; ok {
		l.drop(r, ev.Err)
	}
	l.detachSession(ev.Session)
}

// checkLiveness takes raylets silent for RayletTimeout as lost and closes
// their sessions.
func (l *Leader) checkLiveness() {
	for r, rv := range l.s.raylets {
		if rv.alive && rv.session != nil && l.now.Sub(rv.lastBeat) > l.cfg.RayletTimeout {
			if rv.leaving {
				// It said goodbye: falling silent before its session
				// closes is how a raylet stops, not a fault.
				l.log.Info("raylet that said goodbye is silent", "raylet", rv.id, "last", rv.lastBeat)
			} else {
				l.log.Warn("raylet missed heartbeats", "raylet", rv.id, "last", rv.lastBeat)
			}
			sess := rv.session
			l.drop(Raylet(r), dag.Errorf(dag.KindUnavailable, "no heartbeat for %v", l.cfg.RayletTimeout))
			l.fx.Disconnect = append(l.fx.Disconnect, sess)
		}
	}
}

// drop forgets raylet r's process: the scheduler loses it (its work runs
// elsewhere) and, unless it said goodbye, the other raylets are told, so
// that their transfers from it stop now. A claim waiting on it is decided.
func (l *Leader) drop(r Raylet, why error) {
	rv := l.s.raylets[r]
	if rv.session == nil {
		return
	}
	delete(l.bySess, rv.session)
	rv.session = nil
	if rv.parked.call != 0 {
		l.reply(rv.parked.call, nil, dag.Errorf(dag.KindUnavailable, "raylet %s is no longer registered with this leader", rv.id))
		l.unpark(r)
		l.clearTimer(TimerID{Kind: TimerPull, Raylet: r})
	}
	if rv.leaving {
		l.log.Info("raylet left", "raylet", rv.id)
	} else {
		l.log.Warn("raylet lost", "raylet", rv.id, "err", why)
	}
	l.s.LoseRaylet(r)
	l.markGone(rv.id)
	if !rv.leaving {
		for o, ov := range l.s.raylets {
			if ov.alive && ov.session != nil && Raylet(o) != r {
				l.fx.PeerLost = append(l.fx.PeerLost, PeerLost{To: Raylet(o), ID: rv.id, Addr: rv.addr})
			}
		}
	}
	for _, c := range l.claims {
		if c.holder == r {
			l.reconsiderClaims()
			break
		}
	}
}

// pull applies the completions riding on a pull, then hands the raylet
// work, or holds the pull until work appears or its wait ends.
func (l *Leader) pull(ev *Pull) {
	r, ok := l.bySess[ev.Session]
	if !ok {
		l.reply(ev.Call, nil, errNotRegistered)
		return
	}
	rv := l.s.raylets[r]
	l.s.takesFrees(r, ev.FreesInReply)
	l.complete(ev.Session, &ev.Done, ev.Credits)
	if rv.parked.call != 0 { // a pull it gave up on: superseded
		l.fx.Pulls = append(l.fx.Pulls, PullReply{Call: rv.parked.call, Raylet: r})
		l.unpark(r)
	}
	start := len(l.specBuf)
	var more bool
	l.specBuf, more = l.s.pullMore(r, ev.Credits, l.specBuf)
	wait := min(max(ev.Wait, 0), maxPullWait)
	if len(l.specBuf) > start || wait == 0 {
		rep := PullReply{Call: ev.Call, Raylet: r, Subtasks: l.specBuf[start:len(l.specBuf):len(l.specBuf)], More: more}
		if ev.FreesInReply {
			rep.Free = l.takeFrees(r)
		}
		l.fx.Pulls = append(l.fx.Pulls, rep)
		return
	}
	rv.parked = parkedPull{call: ev.Call, credits: ev.Credits, frees: ev.FreesInReply}
	l.s.touch(r) // its waiting credits decide what may be stolen from it
	l.setTimer(TimerID{Kind: TimerPull, Raylet: r}, l.now.Add(wait))
}

// unpark forgets r's parked pull (answered, superseded or dropped).
func (l *Leader) unpark(r Raylet) {
	l.s.raylets[r].parked = parkedPull{}
	l.s.touch(r)
}

// errNotRegistered answers a raylet call from a session that registered no
// raylet with this leader.
var errNotRegistered = dag.Errorf(dag.KindInvalidArgument, "pulled before registering; register first")

// maxWaveSpecs bounds the subtasks one step hands out to parked pulls.
// When a job's stage arrives, every raylet's parked pull wakes at once: at
// 1,000 raylets with 1,024 credits each, a million specs were built in one
// step (its buffers grown to hundreds of megabytes, then encoded in one
// go) while the loop answered nothing else and the other core waited for
// the replies. Served a slice per step, the replies of one slice are
// written and decoded while the loop builds the next, and the buffers stay
// the size of a slice. The budget is checked between raylets: a raylet's
// pull is answered whole.
const maxWaveSpecs = 16 << 10

// wakeBacklog is the raylets woken with work that a step left for the
// next (in order, each once).
type wakeBacklog struct {
	list []Raylet
	in   []bool // by Raylet
}

func (b *wakeBacklog) add(r Raylet) {
	if int(r) >= len(b.in) {
		b.in = append(b.in, make([]bool, int(r)+1-len(b.in))...)
	}
	if !b.in[r] {
		b.in[r] = true
		b.list = append(b.list, r)
	}
}

// serveWoken answers the parked pulls of raylets that got work, those a
// step left waiting first, until the step handed out maxWaveSpecs; the
// rest wait for Resume.
func (l *Leader) serveWoken() {
	b := &l.backlog
	k := 0
	for ; k < len(b.list) && len(l.specBuf) < maxWaveSpecs; k++ {
		r := b.list[k]
		b.in[r] = false
		l.serveParked(r)
	}
	b.list = b.list[:copy(b.list, b.list[k:])]
	for k := 0; k < len(l.s.fx.Wake); k++ { // serving may wake more
		if r := l.s.fx.Wake[k]; len(l.specBuf) < maxWaveSpecs {
			l.serveParked(r)
		} else {
			b.add(r)
		}
	}
	l.fx.Resume = len(b.list) > 0
}

// serveParked answers r's parked pull if r got work.
func (l *Leader) serveParked(r Raylet) {
	rv := l.s.raylets[r]
	if rv.parked.call == 0 {
		return
	}
	start := len(l.specBuf)
	var more bool
	l.specBuf, more = l.s.pullMore(r, rv.parked.credits, l.specBuf)
	if len(l.specBuf) == start {
		return
	}
	rep := PullReply{Call: rv.parked.call, Raylet: r, Subtasks: l.specBuf[start:len(l.specBuf):len(l.specBuf)], More: more}
	if rv.parked.frees {
		rep.Free = l.takeFrees(r)
	}
	l.fx.Pulls = append(l.fx.Pulls, rep)
	l.unpark(r)
	l.clearTimer(TimerID{Kind: TimerPull, Raylet: r})
}

// pullTimedOut answers r's parked pull with nothing.
func (l *Leader) pullTimedOut(r Raylet) {
	if int(r) >= len(l.s.raylets) {
		return
	}
	rv := l.s.raylets[r]
	if rv.parked.call != 0 {
		rep := PullReply{Call: rv.parked.call, Raylet: r}
		if rv.parked.frees {
			rep.Free = l.takeFrees(r)
		}
		l.fx.Pulls = append(l.fx.Pulls, rep)
		l.unpark(r)
	}
}

// takeFrees takes what r is to free for a pull reply, carved from
// replyFree like specs from specBuf.
func (l *Leader) takeFrees(r Raylet) []dag.ObjectID {
	start := len(l.replyFree)
	l.replyFree = l.s.takeFrees(r, l.replyFree)
	if len(l.replyFree) == start {
		return nil
	}
	return l.replyFree[start:len(l.replyFree):len(l.replyFree)]
}

// complete applies a raylet's completions. Like a pull (which calls it),
// a completion batch shows the raylet alive as a heartbeat does: under
// load a heartbeat may wait behind the raylet's own pulls and reports, and
// a raylet that keeps pulling must not be taken for lost meanwhile.
//
// room is how many subtasks the raylet takes next: a pull's credits, or,
// when negative, its slots (a report by message). Subtasks the
// completions make ready favour the raylet up to that many queued (see
// scheduler.place).
func (l *Leader) complete(sess Session, done *wire.Completions, room int) {
	r, ok := l.bySess[sess]
	if !ok {
		return
	}
	rv := l.s.raylets[r]
	rv.lastBeat = l.now
	if room < 0 {
		room = rv.slots
	}
	c := &l.completion
	l.s.reporting, l.s.reportRoom = r, room
	for k := range done.Len() {
		done.At(k, c)
		l.s.Complete(r, c)
	}
	l.s.reporting = NoRaylet
	*c = wire.Completion{} // holds the batch's memory
}

// rayletInfos is how this leader sees each raylet it knows.
func (l *Leader) rayletInfos() map[string]wire.RayletInfo {
	out := map[string]wire.RayletInfo{}
	for _, rv := range l.s.raylets {
		if l.known[rv.id] { // not purged
			out[rv.id] = l.rayletInfo(rv)
		}
	}
	return out
}

// aliveRaylets counts the raylets registered with this leader.
func (l *Leader) aliveRaylets() int { return len(l.bySess) }

// maybeEndFailoverWait takes up unfinished jobs once every raylet Raft
// knows is back.
func (l *Leader) maybeEndFailoverWait() {
	if l.loaded && !l.resumed && l.aliveRaylets() >= len(l.known) {
		l.clearTimer(TimerID{Kind: TimerFailover})
		l.takeUpJobs()
	}
}
