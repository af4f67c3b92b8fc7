package sched

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// State is a subtask's state, as in the seeds.
type State uint8

const (
	Unscheduled State = iota // waiting for inputs
	Ready                    // inputs available; queued on a raylet
	Running                  // dispatched to a raylet
	Finished                 // outputs stored
	Freed                    // outputs deleted: every consumer finished
	Fatal                    // failed after its retries
	Cancelling               // cancel sent to the raylet running it
	Cancelled                // cancelled
)

var stateNames = [...]string{"UNSCHEDULED", "READY", "RUNNING", "FINISHED", "FREED", "FATAL", "CANCELLING", "CANCELLED"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Defaults for the scheduler's policies.
const (
	DefaultRetries = 3
	// A fetched input read by more than this many subtasks is a broadcast
	// input: it counts zero in placement, since every reader's raylet will
	// hold a copy anyway.
	DefaultBroadcast = 8
	// An idle raylet steals queued work whose inputs total at most this.
	DefaultStealBytes = 64 << 20
)

// Raylet is a raylet's handle in the scheduler: stable for the raylet's
// ID (a raylet that registers again under its ID gets its old handle back).
type Raylet int32

// NoRaylet is the handle of no raylet.
const NoRaylet Raylet = -1

// scheduler is the Leader's core: the stages of jobs and their subtask
// states, raylets and their ready queues, object locations and lineage.
// The Leader calls it with what happened (a raylet came or went, a pull, a
// completion, a cancel); it gathers what follows in fx (free these objects
// on that raylet, interrupt those subtasks, that raylet got work, this
// stage ended), which the Leader turns into effects.
type scheduler struct {
	Retries    int
	Broadcast  int
	StealBytes int64

	raylets []*raylet
	byID    map[string]Raylet
	jobs    map[StageKey]*stage
	order   []*stage                // the stages in jobs, in the order they were added
	tasks   map[dag.TaskID][]*stage // a task's stages, in order
	seq     uint64
	// slots is the stage table queue entries name their stage by (nil
	// where a released stage was); freeSlots lists those, to reuse.
	slots     []*stage
	freeSlots []int32
	// held are objects raylets reported holding for stages not (yet)
	// known: after a head failover, raylets register before jobs resume.
	held map[StageKey][]heldAt
	// puts are objects drivers put on raylets, which graphs read through
	// ops that are dag.ExternalReaders.
	puts map[dag.ObjectID]*putObj

	// keepUnknown says whether objects of a task this scheduler does not
	// know may still be wanted (a job not resumed yet, results not yet
	// released, a driver's put objects): they are kept in the held stash;
	// otherwise they are freed. Nil keeps everything.
	keepUnknown func(dag.TaskID) bool

	// fx gathers the effects of one event: the Leader resets it at the
	// start of each Step.
	fx schedEffects

	// Dispatched specs are carved from these buffers, reused by each Pull:
	// no allocation per subtask in steady state.
	opBuf  []wire.OpSpec
	refBuf []int32
	inBuf  []wire.InputSpec
	locBuf []string

	// idx orders the raylets for placement and stealing (index.go);
	// holders is placement's scratch list of raylets holding inputs.
	idx     rayletIndex
	holders []holding
	// reporting is the raylet whose completions are being applied
	// (NoRaylet between reports), and reportRoom how many subtasks it is
	// about to take: placement favours it (see place).
	reporting  Raylet
	reportRoom int

	// unplaced says a subtask may be READY with no raylet (none was
	// alive): Requeue looks only then.
	unplaced bool

	// NoPipeline turns off dispatching a subtask ahead of its inputs (see
	// pipeline): every subtask then waits at the head until its inputs
	// are stored.
	NoPipeline bool
	// ahead is pipeline's scratch stack.
	ahead []int32
	// inputAt indexes the inputs of the spec being built (see findInput).
	inputAt dag.FirstIndex[inputKey]
	// replyLeft is how many more bytes of specs the pull being answered
	// may take, and specMax the most one spec may take in it (see
	// pullMore).
	replyLeft, specMax int

	// deferred lists the raylets with frees held back (raylet.later),
	// each once; an entry may be stale (its frees already went).
	deferred []Raylet
	// freeNow sends frees at once instead of holding them back (a job's
	// release: its caller is answered once they are handed on).
	freeNow bool
}

// holding is the bytes of a subtask's inputs one raylet holds.
type holding struct {
	r Raylet
	b int64
}

// schedEffects are what follows from one event in the scheduler. The
// slices are reused by the next event.
type schedEffects struct {
	Free   [][]dag.ObjectID // by Raylet
	Cancel [][]dag.SubtaskID
	Wake   []Raylet   // raylets that got work
	Ended  []StageKey // stages that ended (see Job for the task's state)

	// Told lists the raylets with a Free or Cancel, once each: reading
	// (and resetting) only those keeps an event O(what it did), not
	// O(raylets).
	Told []Raylet

	gen uint64 // counts resets: a raylet is in Wake iff its woke == gen, in Told iff its told == gen
}

// StageKey names one lowered stage of a task. A job with data-dependent
// ops runs as several stages, one after the other; each is scheduled as
// its own unit, and later stages read objects earlier ones kept.
type StageKey struct {
	Task  dag.TaskID
	Stage dag.StageID
}

// keepCap is the most capacity an emptied per-raylet list keeps: a
// thousand raylets each keeping what their largest event needed would
// hold a big job's worth of memory after it ended.
const keepCap = 4096

// shrink empties s, keeping its memory unless it grew past keep.
func shrink[T any](s []T, keep int) []T {
	if cap(s) > keep {
		return nil
	}
	return s[:0]
}

// grow gives Free and Cancel a slot for each of n raylets.
func (e *schedEffects) grow(n int) {
	for len(e.Free) < n {
		e.Free = append(e.Free, nil)
		e.Cancel = append(e.Cancel, nil)
	}
}

func (e *schedEffects) reset(n int) {
	e.grow(n)
	for _, r := range e.Told {
		e.Free[r] = shrink(e.Free[r], keepCap)
		e.Cancel[r] = shrink(e.Cancel[r], keepCap)
	}
	e.Told = e.Told[:0]
	e.Wake = e.Wake[:0]
	e.Ended = e.Ended[:0]
	e.gen++
}

type raylet struct {
	id, addr string
	http     string // its web service's base URL, as it registered
	slots    int
	alive    bool
	running  int
	queue    readyQueue
	store    wire.StoreStats

	// What the Leader knows of the raylet's process.
	session      Session   // its session while alive
	lastBeat     time.Time // its last heartbeat (or registration)
	since        time.Time // when it registered
	certNotAfter time.Time // when the certificate it uses now expires
	leaving      bool      // it said goodbye: its loss is a departure
	pipelines    bool      // it takes subtasks ahead of their inputs (wire.RegisterRaylet.Pipeline)
	maxReply     int       // the most bytes a pull reply to it may take (its max frame; 0: DefaultMaxReply)
	draining     bool      // an operator drains it: no new work (drain.go)
	parked       parkedPull
	// frontier lists subtasks running on the raylet whose readers may be
	// dispatched ahead to it (see pipeline), where a pull's credits ran
	// out before they were.
	frontier []entry

	woke uint64 // the schedEffects generation that last woke it
	told uint64 // the schedEffects generation that last gave it a Free or Cancel

	// later are frees held back for the raylet (see freeLater); deferred
	// says it is in scheduler.deferred. freesInReply says its last pull
	// asked for frees in the reply: only then are they held back.
	later        []dag.ObjectID
	deferred     bool
	freesInReply bool
}

// parkedPull is a pull held at the Leader until work appears or its wait
// ends.
type parkedPull struct {
	call    Call // 0: none
	credits int
	frees   bool // the raylet takes frees in the reply (wire.Pull.FreesInReply)
}

type stage struct {
	task       dag.TaskID
	key        StageKey
	slot       int32 // in the scheduler's stage table (entry.slot)
	retries    int
	noPipeline bool // the job asked for no pipelining
	plan       *lowering.Plan
	sg         *dag.SubtaskGraph
	state      []State
	attempts   []uint8
	waiting    []int32  // predecessors whose outputs are not available
	pending    []int32  // successors not finished (their readers)
	where      []Raylet // raylet queued on, running on, or holding the outputs
	qseq       []uint64
	copies     map[int32][]Raylet // subtask -> other raylets holding its outputs
	failedOn   map[int32][]Raylet // subtask -> raylets an attempt of it failed on
	excused    map[int32]uint8    // subtask -> failed attempts not counted against its retries
	rebuilt    map[int32]bool     // subtasks this leader ran again to rebuild lost or freed outputs
	size       []int64            // per chunk: stored bytes of exported chunks
	result     []bool             // per chunk: a result of the job
	done       int                // subtasks finished or freed
	active     int                // subtasks running or cancelling
	status     dag.JobState
	err        error
	ended      bool // Ended was reported
	released   bool
}

// newScheduler returns an empty scheduler with default policies.
func newScheduler() *scheduler {
	s := &scheduler{
		Retries: DefaultRetries, Broadcast: DefaultBroadcast, StealBytes: DefaultStealBytes,
		byID: map[string]Raylet{}, jobs: map[StageKey]*stage{},
		tasks: map[dag.TaskID][]*stage{}, held: map[StageKey][]heldAt{},
		puts: map[dag.ObjectID]*putObj{}, reporting: NoRaylet,
	}
	s.initIndex()
	s.fx.gen = 1 // raylets start with woke 0: not woken
	return s
}

func (s *scheduler) begin() *schedEffects { return &s.fx }

// AddRaylet registers a raylet, or marks a known one alive again, and
// returns its index.
func (s *scheduler) AddRaylet(id, addr string, slots int) Raylet {
	if r, ok := s.byID[id]; ok {
		rv := s.raylets[r]
		rv.addr, rv.slots, rv.alive = addr, slots, true
		s.touch(r)
		return r
	}
	s.raylets = append(s.raylets, &raylet{id: id, addr: addr, slots: slots, alive: true})
	r := Raylet(len(s.raylets) - 1)
	s.byID[id] = r
	s.fx.grow(len(s.raylets))
	s.touch(r)
	return r
}

// RayletByID returns the handle of a raylet by ID.
func (s *scheduler) RayletByID(id string) (Raylet, bool) {
	r, ok := s.byID[id]
	return r, ok
}

// AliveSlots lists the alive raylets and their slots, for initial
// assignment: lowering's raylet k is index[k].
func (s *scheduler) AliveSlots() (index []Raylet, slots []int) {
	for i, r := range s.raylets {
		if r.placeable() {
			index = append(index, Raylet(i))
			slots = append(slots, r.slots)
		}
	}
	return index, slots
}

// jobPolicy is what a job chose of the scheduler's policies.
type jobPolicy struct {
	retries    int  // re-runs of a failed subtask; 0: the scheduler's
	noPipeline bool // dispatch nothing ahead of its inputs (see pipeline)
}

// AddJob starts scheduling a lowered job. rayletOf maps the plan's raylet
// indexes (from AliveSlots, which lists each raylet once) to scheduler
// raylets.
func (s *scheduler) AddJob(task dag.TaskID, plan *lowering.Plan, pol jobPolicy, rayletOf []Raylet) *schedEffects {
	fx := s.begin()
	key := StageKey{task, plan.Stage.Stage}
	if _, ok := s.jobs[key]; ok {
		return fx
	}
	sg := plan.Stage
	n := sg.Len()
	retries := pol.retries
	if retries <= 0 {
		retries = s.Retries
	}
	j := &stage{
		task: task, key: key, retries: retries, noPipeline: pol.noPipeline, plan: plan, sg: sg, status: dag.JobRunning,
		state: make([]State, n), attempts: make([]uint8, n),
		waiting: make([]int32, n), pending: make([]int32, n),
		where: make([]Raylet, n), qseq: make([]uint64, n),
		copies: map[int32][]Raylet{}, failedOn: map[int32][]Raylet{},
		size:   make([]int64, sg.Chunks.Len()),
		result: make([]bool, sg.Chunks.Len()),
	}
	// Results of the job, and objects later stages read, are kept: found
	// through their owner's outputs (those of this stage only).
	keep := func(id dag.ObjectID) {
		if id.Subtask().Task() != task || id.Subtask().Stage() != sg.Stage {
			return
		}
		st := int32(id.Subtask().Index() - sg.Base)
		j.result[sg.OutputsOf(st)[id.Output()]] = true
	}
	for _, r := range plan.Results {
		for _, id := range r.Objects {
			keep(id)
		}
	}
	for _, id := range plan.Keep {
		keep(id)
	}
	j.slot = s.takeSlot(j)
	s.jobs[key] = j
	s.order = append(s.order, j)
	s.tasks[task] = append(s.tasks[task], j)
	for i := int32(0); i < int32(n); i++ {
		j.waiting[i] = int32(len(sg.Preds.Row(i)))
		j.pending[i] = int32(len(sg.Succs.Row(i)))
		j.where[i] = NoRaylet
	}
	if n == 0 {
		s.finish(j, dag.JobSucceeded, nil)
		return fx
	}
	if held := s.held[key]; len(held) > 0 {
		delete(s.held, key)
		s.adoptHeld(j, held)
		if j.done == n {
			s.finish(j, dag.JobSucceeded, nil)
			return fx
		}
	}
	if !s.queueAssigned(j, rayletOf) {
		for i := int32(0); i < int32(n); i++ {
			if j.waiting[i] != 0 || j.state[i] != Unscheduled {
				continue
			}
			s.makeReady(j, i, s.assigned(j, i, rayletOf))
		}
	}
	return fx
}

// assigned is the raylet the plan assigned subtask i of j to, NoRaylet
// when it has none or that raylet cannot take work.
func (s *scheduler) assigned(j *stage, i int32, rayletOf []Raylet) Raylet {
	if a := j.sg.Subtasks[i].Raylet; a >= 0 && int(a) < len(rayletOf) && s.raylets[rayletOf[a]].placeable() {
		return rayletOf[a]
	}
	return NoRaylet
}

// queueAssigned queues a new job's READY subtasks on the raylets the plan
// assigned them, as makeReady one by one would, and reports whether it
// did; it does nothing when one of them needs placing (placement reads
// the queues' lengths as they grow, so those go one by one). A million
// subtasks made READY one by one each sifted through a heap that only grew
// (equal priorities pop newest first, so every push rose to the root) and
// each queue grew by doubling into fresh memory: half a second of a
// fresh head's first big job. Here each raylet's queue grows once, its
// entries are written with their sequence numbers in the same order and
// taken in at once (readyQueue.adopt); its raylet's places in the heaps
// of raylets are fixed and it is woken in the order its first subtask
// would have. Entries are totally ordered (priority, then sequence), so
// the queue pops exactly as before. The plan's raylet indexes name
// distinct raylets (AliveSlots), so no two of them write into one
// queue's room.
func (s *scheduler) queueAssigned(j *stage, rayletOf []Raylet) bool {
	n := int32(j.sg.Len())
	var order []int32                     // the plan's raylet indexes, by their first READY subtask
	added := make([]int32, len(rayletOf)) // READY subtasks, by the plan's raylet index
	for i := int32(0); i < n; i++ {
		if j.waiting[i] != 0 || j.state[i] != Unscheduled {
			continue
		}
		if s.assigned(j, i, rayletOf) < 0 {
			return false
		}
		a := j.sg.Subtasks[i].Raylet
		if added[a] == 0 {
			order = append(order, a)
		}
		added[a]++
	}
	// The entries go past each queue's length first: a queue's length is
	// its raylet's key in the heaps of raylets, which are fixed one
	// raylet at a time (several keys changed at once cannot be). next[a]
	// is where plan index a's entries go.
	next := make([][]entry, len(rayletOf))
	for _, a := range order {
		next[a] = s.raylets[rayletOf[a]].queue.room(int(added[a]))
	}
	for i := int32(0); i < n; i++ {
		if j.waiting[i] != 0 || j.state[i] != Unscheduled {
			continue
		}
		a := j.sg.Subtasks[i].Raylet
		j.state[i] = Ready
		j.where[i] = rayletOf[a]
		s.seq++
		j.qseq[i] = s.seq
		next[a][0] = entry{slot: j.slot, i: i, seq: s.seq, prio: j.sg.Subtasks[i].Priority}
		next[a] = next[a][1:]
	}
	for _, a := range order {
		r := rayletOf[a]
		s.raylets[r].queue.adopt(int(added[a]))
		s.touch(r)
		s.wake(r)
	}
	return true
}

// makeReady queues subtask i of j on raylet r, or on the best raylet for
// its inputs when r < 0.
func (s *scheduler) makeReady(j *stage, i int32, r Raylet) {
	if r < 0 || !s.raylets[r].placeable() {
		r = s.place(j, i, NoRaylet)
	}
	j.state[i] = Ready
	j.where[i] = r
	if r < 0 {
		s.unplaced = true
		return // no raylet alive: it waits for one (see AddRaylet/requeue)
	}
	s.seq++
	j.qseq[i] = s.seq
	rv := s.raylets[r]
	rv.queue.push(entry{slot: j.slot, i: i, seq: s.seq, prio: j.sg.Subtasks[i].Priority})
	s.touch(r)
	s.wake(r)
}

// requeue puts a subtask that stopped running (or lost its queue) back:
// READY on raylet r (or the best raylet when r < 0), or UNSCHEDULED when
// an input was lost meanwhile and is being rebuilt.
func (s *scheduler) requeue(j *stage, i int32, r Raylet) {
	if j.waiting[i] > 0 {
		j.state[i] = Unscheduled
		j.where[i] = NoRaylet
		return
	}
	s.makeReady(j, i, r)
}

// tell notes that r gets a Free or Cancel in this event.
func (s *scheduler) tell(r Raylet) {
	if rv := s.raylets[r]; rv.told != s.fx.gen {
		rv.told = s.fx.gen
		s.fx.Told = append(s.fx.Told, r)
	}
}

func (s *scheduler) wake(r Raylet) {
	rv := s.raylets[r]
	if rv.woke == s.fx.gen {
		return
	}
	rv.woke = s.fx.gen
	s.fx.Wake = append(s.fx.Wake, r)
}

// place picks the alive raylet holding the most bytes of i's inputs
// (broadcast inputs count zero), ties to more free slots, then the shorter
// queue, then the lower handle — or, while a raylet's report is applied,
// that raylet, if it holds within nearBytes of the most and has room.
// avoid (if >= 0) is passed over when another raylet is alive.
//
// It costs O(inputs) plus an index look-up, whatever the number of
// raylets: only raylets holding inputs can beat the freest raylet. A
// retry, which has raylets to pass over, scans them all (placeScan).
func (s *scheduler) place(j *stage, i int32, avoid Raylet) Raylet {
	if avoid >= 0 || len(j.failedOn[i]) > 0 {
		return s.placeScan(j, i, avoid)
	}
	hs := s.holders[:0]
	add := func(w Raylet, b int64) {
		for k := range hs {
			if hs[k].r == w {
				hs[k].b += b
				return
			}
		}
		hs = append(hs, holding{w, b})
	}
	for _, p := range j.sg.Preds.Row(i) {
		if len(j.sg.Succs.Row(p)) > s.Broadcast {
			continue
		}
		var b int64
		for _, c := range j.sg.OutputsOf(p) {
			b += j.size[c]
		}
		if w := j.where[p]; w >= 0 {
			add(w, b)
		}
		for _, w := range j.copies[p] {
			add(w, b)
		}
	}
	s.holders = hs
	best, most := NoRaylet, int64(0)
	mine := int64(-1) // what the reporting raylet holds
	for _, h := range hs {
		if h.b <= 0 || !s.raylets[h.r].placeable() {
			continue
		}
		if h.r == s.reporting {
			mine = h.b
		}
		if best < 0 || h.b > most || (h.b == most && s.freer(h.r, best)) {
			best, most = h.r, h.b
		}
	}
	if best >= 0 && best != s.reporting && mine >= 0 && most-mine <= nearBytes &&
		s.raylets[s.reporting].queue.Len() < s.reportRoom {
		// The raylet whose report made i ready holds about as much of
		// its inputs as the best holder and is about to take more work
		// than it has queued (its pull's credits, or its slots): i goes
		// in that take, where elsewhere it would wake another raylet's
		// pull for what may be one subtask (a tree of partial sums
		// across a thousand raylets: thousands of replies of a few).
		// Its room bounds what one report draws to it (a shuffle's
		// last mapper would otherwise take every reducer).
		return s.reporting
	}
	if best >= 0 {
		return best
	}
	return s.freest()
}

// nearBytes is how many bytes more of a subtask's inputs another raylet may
// hold and still lose it to the raylet whose report made it ready: about
// what a round trip of the wire carries.
const nearBytes = 64 << 10

// placeScan is place by a scan of every raylet, for retries.
func (s *scheduler) placeScan(j *stage, i int32, avoid Raylet) Raylet {
	var bytes [64]int64
	var held []int64
	if len(s.raylets) <= len(bytes) {
		held = bytes[:len(s.raylets)]
	} else {
		held = make([]int64, len(s.raylets))
	}
	for _, p := range j.sg.Preds.Row(i) {
		if len(j.sg.Succs.Row(p)) > s.Broadcast {
			continue
		}
		var b int64
		for _, c := range j.sg.OutputsOf(p) {
			b += j.size[c]
		}
		if w := j.where[p]; w >= 0 {
			held[w] += b
		}
		for _, w := range j.copies[p] {
			held[w] += b
		}
	}
	// A raylet where an attempt of i failed is passed over while another is
	// alive: a raylet that fails fast (a full disk, a missing function)
	// would otherwise draw every retry back to itself.
	failed := j.failedOn[i]
	shun := func(r Raylet) bool { return r == avoid || slices.Contains(failed, r) }
	others := false
	for r, rv := range s.raylets {
		if rv.placeable() && !shun(Raylet(r)) {
			others = true
			break
		}
	}
	best, alive := NoRaylet, s.aliveCount()
	for r, rv := range s.raylets {
		if !rv.placeable() || (others && shun(Raylet(r))) || (!others && Raylet(r) == avoid && alive > 1) {
			continue
		}
		if best < 0 || s.better(Raylet(r), best, held) {
			best = Raylet(r)
		}
	}
	return best
}

func (s *scheduler) better(a, b Raylet, held []int64) bool {
	if held[a] != held[b] {
		return held[a] > held[b]
	}
	return s.freer(a, b)
}

func (s *scheduler) aliveCount() int {
	n := 0
	for _, r := range s.raylets {
		if r.alive {
			n++
		}
	}
	return n
}

// Pull dispatches up to credits subtasks to raylet r, highest priority
// first, appending their specs to out. An idle raylet steals from the
// longest queue. The specs share memory the scheduler reuses: they are
// valid until the next call to Pull (encode them before that).
func (s *scheduler) Pull(r Raylet, credits int, out []wire.SubtaskSpec) []wire.SubtaskSpec {
	out, _ = s.pullMore(r, credits, out)
	return out
}

// pullMore is Pull, and says whether the credits ran out with subtasks
// still queued for r: a pull it sends next is answered at once.
//
// A reply stays under the raylet's max frame whatever the credits: specs
// are added while they take less than half of it (by wire.SizeBound,
// the reply's own fields aside), and one spec may take at most a
// quarter, so that the last one added still fits with the frees, which
// take at most a quarter (takeFrees). A job with a spec larger than that
// fails (tooLarge). A raylet thus asking for more than a frame holds gets
// a reply that says More, and pulls again.
func (s *scheduler) pullMore(r Raylet, credits int, out []wire.SubtaskSpec) ([]wire.SubtaskSpec, bool) {
	rv := s.raylets[r]
	if !rv.alive || rv.draining {
		return out, false
	}
	defer s.touch(r) // its queue and running count changed: reorder it once
	maxReply := rv.replyLimit()
	s.replyLeft, s.specMax = maxReply/2-wire.PullReplyBound, maxReply/4
	for credits > 0 && s.replyLeft > 0 {
		e, ok := s.pop(r)
		if !ok {
			if credits, out = s.pipelineFrontier(r, credits, out); credits == 0 || s.replyLeft <= 0 {
				break
			}
			s.touch(r) // the victim is chosen among the others in order
			e, ok = s.steal(r)
			if !ok {
				break
			}
		}
		j := s.stageAt(e.slot)
		if out, ok = s.dispatch(j, e.i, r, out); !ok {
			continue
		}
		credits--
		credits, out = s.pipeline(j, e.i, r, credits, out)
	}
	full := credits == 0 || s.replyLeft <= 0
	return out, full && (rv.queue.Len() > 0 || len(rv.frontier) > 0)
}

// DefaultMaxReply is the max frame of a raylet that registered none
// (transport.DefaultMaxFrameSize).
const DefaultMaxReply = 16 << 20

// replyLimit is the most bytes a pull reply to the raylet may take.
func (rv *raylet) replyLimit() int {
	if rv.maxReply <= 0 {
		return DefaultMaxReply
	}
	return rv.maxReply
}

// dispatch runs subtask i of j on r: RUNNING there, its spec appended to
// out. A spec larger than a reply to r may carry is not sent: its job
// fails (tooLarge), and dispatch reports false.
func (s *scheduler) dispatch(j *stage, i int32, r Raylet, out []wire.SubtaskSpec) ([]wire.SubtaskSpec, bool) {
	sp := s.spec(j, i)
	n := sp.SizeBound()
	if n > s.specMax {
		s.tooLarge(j, i, r, n)
		return out, false
	}
	s.replyLeft -= n
	j.state[i] = Running
	j.where[i] = r
	j.active++
	s.raylets[r].running++
	return append(out, sp), true
}

// tooLarge fails job j, whose subtask i has a spec of n bytes, more than
// a pull reply to raylet r may carry. Every raylet would refuse it alike
// (they share a max frame as a rule), so it is not tried elsewhere.
func (s *scheduler) tooLarge(j *stage, i int32, r Raylet, n int) {
	j.state[i] = Fatal
	if j.status != dag.JobRunning {
		return
	}
	rv := s.raylets[r]
	s.cancelAll(j, dag.JobFailed, dag.Errorf(dag.KindResourceExhausted,
		"subtask %s (%s) reads %d inputs and takes up to %d bytes to describe, more than a quarter of the %d bytes a pull reply to raylet %s may take: "+
			"raise the max frame of the raylets and the heads (MaxFrameSize) or give the op fewer inputs",
		j.sg.ID(i), s.opNames(j, i), len(j.sg.Preds.Row(i)), n, rv.replyLimit(), rv.id))
}

// pipeline dispatches to r, after subtask i went there, the readers of i
// that can start as soon as r stores what they read: every input of theirs
// not yet stored is being made on r itself. The raylet holds such a
// subtask until its local inputs are stored (their InputSpec says
// Pending), and drops it if one of them fails, so a chain of dependent
// subtasks on one raylet runs without a round trip to the head per hop;
// the head learns of each completion as it comes. A reader with many
// inputs still missing is not looked at (it costs a walk of its inputs,
// and a wide gather rarely has them all on one raylet). Readers it has no
// credits left for are remembered on r's frontier, for r's next pull.
//
// Returns the credits left and out.
func (s *scheduler) pipeline(j *stage, i int32, r Raylet, credits int, out []wire.SubtaskSpec) (int, []wire.SubtaskSpec) {
	if s.NoPipeline || j.noPipeline || j.status != dag.JobRunning || !s.raylets[r].pipelines {
		return credits, out
	}
	st := append(s.ahead[:0], i)
	for len(st) > 0 {
		p := st[len(st)-1]
		st = st[:len(st)-1]
		for _, u := range j.sg.Succs.Row(p) {
			if !s.mayPipeline(j, u, r) {
				continue
			}
			if credits == 0 || s.replyLeft <= 0 {
				rv := s.raylets[r]
				rv.frontier = append(rv.frontier, entry{slot: j.slot, i: p})
				break
			}
			var ok bool
			if out, ok = s.dispatch(j, u, r, out); !ok {
				s.ahead = st[:0]
				return credits, out // its job failed: nothing more of it goes ahead
			}
			credits--
			st = append(st, u)
		}
	}
	s.ahead = st[:0]
	return credits, out
}

// maxPipelineWait is the most inputs a subtask may still wait for to be
// dispatched ahead of them (see pipeline).
const maxPipelineWait = 4

// mayPipeline reports whether subtask u of j may be dispatched to r ahead
// of its inputs: it waits for some, at most maxPipelineWait, and each is
// either stored on an alive raylet or running on r; it never failed on r.
func (s *scheduler) mayPipeline(j *stage, u int32, r Raylet) bool {
	if j.state[u] != Unscheduled || j.waiting[u] == 0 || j.waiting[u] > maxPipelineWait {
		return false
	}
	for _, p := range j.sg.Preds.Row(u) {
		if j.state[p] == Running && j.where[p] == r {
			continue
		}
		if !s.available(j, p) {
			return false
		}
	}
	return !slices.Contains(j.failedOn[u], r)
}

// pipelineFrontier goes on with the pipelines a pull's credits cut short
// on r (see pipeline). A frontier subtask that is no longer running on r
// has nothing left to pipeline there: its readers became READY when it
// finished, or wait for it elsewhere.
func (s *scheduler) pipelineFrontier(r Raylet, credits int, out []wire.SubtaskSpec) (int, []wire.SubtaskSpec) {
	rv := s.raylets[r]
	k := 0
	for ; k < len(rv.frontier) && credits > 0 && s.replyLeft > 0; k++ {
		e := rv.frontier[k]
		if j := s.stageAt(e.slot); j.state[e.i] == Running && j.where[e.i] == r {
			credits, out = s.pipeline(j, e.i, r, credits, out)
		}
	}
	n := copy(rv.frontier, rv.frontier[k:]) // pipeline may have added to it
	clear(rv.frontier[n:])
	rv.frontier = rv.frontier[:n]
	return credits, out
}

// pruneFrontier drops the entries of r's frontier that no longer run on
// r, so that a finished subtask's stage is not kept alive by it.
func (s *scheduler) pruneFrontier(r Raylet) {
	rv := s.raylets[r]
	f := rv.frontier[:0]
	for _, e := range rv.frontier {
		if j := s.stageAt(e.slot); j.state[e.i] == Running && j.where[e.i] == r {
			f = append(f, e)
		}
	}
	clear(rv.frontier[len(f):])
	rv.frontier = f
}

// resetBuffers lets the next specs reuse the memory of earlier ones.
func (s *scheduler) resetBuffers() {
	s.opBuf, s.refBuf, s.inBuf, s.locBuf = s.opBuf[:0], s.refBuf[:0], s.inBuf[:0], s.locBuf[:0]
}

// dropBuffers lets go of what the spec buffers point at: the last specs'
// args, shapes and indexes alias their job's chunk graph, which they
// would keep alive, whole, after the job is released.
func (s *scheduler) dropBuffers() {
	clear(s.opBuf[:cap(s.opBuf)])
	clear(s.inBuf[:cap(s.inBuf)])
	clear(s.locBuf[:cap(s.locBuf)])
	s.resetBuffers()
}

// pop takes the best valid entry of r's queue.
func (s *scheduler) pop(r Raylet) (entry, bool) {
	q := &s.raylets[r].queue
	for q.Len() > 0 {
		e := q.pop()
		if s.valid(e, r) {
			return e, true
		}
	}
	q.shrink(256) // a drained queue lets go of what a big job made it grow to
	return entry{}, false
}

// steal takes the best entry of the longest other queue whose inputs are
// cheap to move, if that raylet has more queued than it can start.
func (s *scheduler) steal(thief Raylet) (entry, bool) {
	victim := s.victim(thief)
	if victim < 0 {
		return entry{}, false
	}
	q := &s.raylets[victim].queue
	var skipped [8]entry
	n := 0
	defer func() {
		for _, e := range skipped[:n] {
			q.push(e)
		}
		s.touch(victim)
	}()
	for q.Len() > 0 && n < len(skipped) {
		e := q.pop()
		if !s.valid(e, victim) {
			continue
		}
		j := s.stageAt(e.slot)
		if slices.Contains(j.failedOn[e.i], thief) {
			skipped[n] = e // it failed on the thief: leave it where it was sent
			n++
			continue
		}
		if s.inputBytes(j, e.i) <= s.StealBytes {
			return e, true
		}
		skipped[n] = e // too heavy to move: leave it and stop looking
		n++
		return entry{}, false
	}
	return entry{}, false
}

func (s *scheduler) inputBytes(j *stage, i int32) int64 {
	var b int64
	for _, p := range j.sg.Preds.Row(i) {
		for _, c := range j.sg.OutputsOf(p) {
			b += j.size[c]
		}
	}
	return b
}

// spec builds the wire form of subtask i in the scheduler's buffers.
func (s *scheduler) spec(j *stage, i int32) wire.SubtaskSpec {
	sg := j.sg
	cg := sg.Chunks
	chunks := sg.ChunksOf(i)
	o0 := len(s.opBuf)
	s.opBuf = grow(s.opBuf, len(chunks))
	ops := s.opBuf[o0 : o0+len(chunks) : o0+len(chunks)]
	in0 := len(s.inBuf)
	s.resetInputIndex()
	for k, c := range chunks {
		op := &ops[k]
		n := &cg.Nodes[c]
		op.Op, op.Args, op.DType = n.Op, cg.NodeArgs(c), n.DType
		op.Index, op.Shape = cg.Index(c), cg.Shape(c)
		ins := cg.Inputs(c)
		part := int32(0) // a shuffle reducer reads one part of each input
		o, _ := dag.Ops.Lookup(n.Op)
		if pr, ok := o.(dag.PartitionReader); ok {
			part = int32(pr.ReadsPartition(op.Args, op.Index)) + 1
		}
		r0 := len(s.refBuf)
		for _, in := range ins {
			if sg.Owner[in] == i {
				s.refBuf = append(s.refBuf, int32(indexOf(chunks, in)))
				continue
			}
			id, _ := j.plan.ObjectOf(in) // an earlier stage's object if in is a fetch node
			k := s.findInput(in0, id, part)
			if k < 0 {
				pj, pi, pc := j, sg.Owner[in], in
				if pi < 0 { // made by an earlier stage
					var ok bool
					if pj, pi, ok = s.lookup(id.Subtask()); ok {
						pc = pj.sg.OutputsOf(pi)[id.Output()]
					}
				}
				size := int64(0)
				l0 := len(s.locBuf)
				pending := false
				if pj != nil {
					size = pj.size[pc]
					if pending = pj.state[pi] != Finished; pending {
						// Dispatched ahead of it (see pipeline): made on this
						// raylet, its size known from its shape alone. The
						// raylet waits for it there, so no location is sent:
						// it was the raylet's own address, about a tenth of
						// the bytes of a reply of such subtasks.
						size = pj.sg.Chunks.Meta(pc).Bytes()
					}
					if part > 0 {
						size /= int64(max(1, len(pj.sg.Succs.Row(pi)))) // one reducer's share
					}
					if !pending {
						s.locBuf = s.appendLocations(s.locBuf, pj, pi)
					}
				}
				s.inBuf = append(s.inBuf, wire.InputSpec{Object: id, Size: size, Part: part, Pending: pending, Locations: s.locBuf[l0:len(s.locBuf):len(s.locBuf)]})
				k = len(s.inBuf) - 1 - in0
			}
			s.refBuf = append(s.refBuf, wire.ExternalInput(k))
		}
		if er, ok := o.(dag.ExternalReader); ok {
			for _, id := range er.ExternalInputs(op.Args) {
				s.refBuf = append(s.refBuf, wire.ExternalInput(len(s.inBuf)-in0))
				l0 := len(s.locBuf)
				size := int64(0)
				if p, ok := s.putAt(id); ok {
					size = p.size
					s.locBuf = s.appendAlive(s.locBuf, p.r, p.copies)
				}
				s.inBuf = append(s.inBuf, wire.InputSpec{Object: id, Size: size, Locations: s.locBuf[l0:len(s.locBuf):len(s.locBuf)]})
			}
		}
		op.Inputs = s.refBuf[r0:len(s.refBuf):len(s.refBuf)]
	}
	sp := wire.SubtaskSpec{ID: sg.ID(i), Attempt: int(j.attempts[i]), Ops: ops}
	if len(s.inBuf) > in0 {
		sp.Inputs = s.inBuf[in0:len(s.inBuf):len(s.inBuf)]
	}
	outs := sg.OutputsOf(i)
	r0 := len(s.refBuf)
	for _, c := range outs {
		s.refBuf = append(s.refBuf, int32(indexOf(chunks, c)))
		sp.OutputBytes += cg.Meta(c).Bytes()
	}
	sp.Outputs = s.refBuf[r0:len(s.refBuf):len(s.refBuf)]
	return sp
}

// scanInputs is how many inputs of a spec findInput scans; past that it
// looks them up in an index.
const scanInputs = 32

// inputKey names an input of a spec: an object, or one part of it.
type inputKey struct {
	id   dag.ObjectID
	part int32
}

// findInput returns the index, among the inputs of the spec being built
// (s.inBuf from in0), of part of object id (0: all of it), or -1: a
// subtask lists an object it reads twice once. A spec of a few inputs is
// scanned; past scanInputs they are indexed as they are looked for, so
// that a subtask reading thousands of inputs, as a gather of a whole step
// does, costs time linear in them, not quadratic.
func (s *scheduler) findInput(in0 int, id dag.ObjectID, part int32) int {
	n := len(s.inBuf) - in0
	if n <= scanInputs {
		for y := in0; y < len(s.inBuf); y++ {
			if s.inBuf[y].Object == id && s.inBuf[y].Part == part {
				return y - in0
			}
		}
		return -1
	}
	return s.inputAt.Find(n, func(y int) inputKey {
		in := &s.inBuf[in0+y]
		return inputKey{in.Object, in.Part}
	}, inputKey{id, part})
}

// resetInputIndex empties findInput's index for the next spec; one grown
// by a very wide subtask is let go.
func (s *scheduler) resetInputIndex() { s.inputAt.Reset(4 * keepCap) }

// grow extends s by n zero elements, reallocating (rarely) when needed.
func grow[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		s = s[:len(s)+n]
		clear(s[len(s)-n:])
		return s
	}
	return append(s, make([]T, n)...)
}

func indexOf(s []int32, v int32) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// locations lists the addresses of alive raylets holding p's outputs.
func (s *scheduler) locations(j *stage, p int32) []string { return s.appendLocations(nil, j, p) }

// appendLocations appends the addresses of alive raylets holding p's
// outputs to out.
func (s *scheduler) appendLocations(out []string, j *stage, p int32) []string {
	return s.appendAlive(out, j.where[p], j.copies[p])
}

// appendAlive appends the addresses of the alive raylets among w (if
// >= 0) and copies, in that order.
func (s *scheduler) appendAlive(out []string, w Raylet, copies []Raylet) []string {
	if w >= 0 && s.raylets[w].alive {
		out = append(out, s.raylets[w].addr)
	}
	for _, w := range copies {
		if s.raylets[w].alive {
			out = append(out, s.raylets[w].addr)
		}
	}
	return out
}

// Complete applies a raylet's report on one subtask attempt.
func (s *scheduler) Complete(r Raylet, c *wire.Completion) *schedEffects {
	fx := s.begin()
	// Inputs fetched for this attempt are copies on r, whether it worked or
	// not: they are freed with their originals.
	s.noteCopies(r, c.Fetched)
	j, i, ok := s.lookup(c.ID)
	if !ok {
		// A job that ended, was released, or that this leader has not
		// resumed yet (work a previous leader dispatched): its outputs are
		// held like any reported object, kept or freed by keepUnknown.
		if !c.Failed() {
			for k, size := range c.Sizes {
				s.unknownHeld(heldAt{r: r, id: dag.NewObjectID(c.ID, uint32(k)), size: size})
			}
		}
		return fx
	}
	if (j.state[i] == Unscheduled || j.state[i] == Ready) && !c.Failed() && s.raylets[r].alive && !j.rebuilt[i] {
		// Work a previous leader dispatched: the outputs exist on r, so keep
		// them rather than run the subtask again. Not for a subtask being
		// rebuilt: a completion of it now is one sent again (a raylet
		// resends the completions of a pull or report it took for failed,
		// which the head may have had), and the outputs it names were
		// freed or lost, which is why it is rebuilt.
		if j.state[i] == Ready {
			j.where[i] = NoRaylet // its queue entry is now stale
		}
		s.markFinished(j, i, r, c.Sizes)
		return fx
	}
	if j.where[i] != r || j.attempts[i] != uint8(c.Attempt) {
		s.discard(j, i, r, c) // stale: from an attempt we gave up on
		return fx
	}
	switch j.state[i] {
	case Running:
	case Cancelling:
		j.state[i] = Cancelled
		s.stopped(j, i, r)
		s.discard(j, i, r, c)
		s.maybeEndCancelled(j)
		return fx
	default:
		s.discard(j, i, r, c)
		return fx
	}
	s.stopped(j, i, r)
	if c.Failed() {
		s.failed(j, i, r, c)
	} else {
		s.markFinished(j, i, r, c.Sizes)
	}
	if len(s.raylets[r].frontier) > 0 {
		s.pruneFrontier(r)
	}
	return fx
}

// discard frees the outputs a successful but unwanted attempt left on r
// (it finished after a cancel, or after the subtask was given to another
// raylet), unless they are the copies the job uses, or the subtask runs on
// r again: a raylet holds one object per ID, and the live attempt there
// keeps the outputs it finds made (as settleHeld leaves them), so freeing
// them would leave it reporting outputs r no longer has.
func (s *scheduler) discard(j *stage, i int32, r Raylet, c *wire.Completion) {
	if c.Failed() || !s.raylets[r].alive || len(c.Sizes) == 0 {
		return
	}
	if j.where[i] == r && (j.state[i] == Finished || j.state[i] == Running || j.state[i] == Cancelling) {
		return
	}
	if slices.Contains(j.copies[i], r) {
		return
	}
	ids := make([]dag.ObjectID, len(c.Sizes))
	for k := range ids {
		ids[k] = dag.NewObjectID(c.ID, uint32(k))
	}
	s.freeOn(r, ids)
}

// markFinished records that subtask i's outputs (of the given sizes) are
// stored on raylet r, wakes its readers and frees what is no longer read.
func (s *scheduler) markFinished(j *stage, i int32, r Raylet, sizes []int64) {
	outs := j.sg.OutputsOf(i)
	for k, size := range sizes {
		if k < len(outs) {
			j.size[outs[k]] = size
		}
	}
	j.state[i] = Finished
	j.where[i] = r
	j.done++
	for _, u := range j.sg.Succs.Row(i) {
		if j.state[u] == Unscheduled || j.state[u] == Ready || j.state[u] == Running {
			j.waiting[u]--
			if j.waiting[u] == 0 && j.state[u] == Unscheduled {
				s.makeReady(j, u, -1)
			}
		}
	}
	for _, p := range j.sg.Preds.Row(i) {
		j.pending[p]--
		if j.pending[p] == 0 && j.state[p] == Finished {
			s.free(j, p)
		}
	}
	if j.pending[i] == 0 {
		s.free(j, i) // frees only what is not a result
	}
	if j.done == len(j.state) && j.status == dag.JobRunning {
		s.finish(j, dag.JobSucceeded, nil)
	}
}

// stopped accounts for a subtask that no longer runs on r.
func (s *scheduler) stopped(j *stage, i int32, r Raylet) {
	j.active--
	s.raylets[r].running--
	s.touch(r)
}

// failed handles a failed attempt: retry, preferring another raylet, or
// give up and fail the job with the op's own error.
func (s *scheduler) failed(j *stage, i int32, r Raylet, c *wire.Completion) {
	if c.Kind == dag.KindCancelled || c.Kind == dag.KindInterrupted {
		if j.status != dag.JobRunning {
			j.state[i] = Cancelled
			s.maybeEndCancelled(j)
			return
		}
	}
	j.attempts[i]++
	s.withdraw(j, i)
	if c.Kind == dag.KindUnavailable && j.waiting[i] > 0 && j.excused[i] < maxExcused && j.status == dag.JobRunning {
		// An input was lost while the attempt ran (its raylet died) and is
		// being rebuilt: the attempt could not have worked, so it does not
		// count against the subtask's retries. It runs again once the
		// input is back.
		if j.excused == nil {
			j.excused = make(map[int32]uint8)
		}
		j.excused[i]++
		s.requeue(j, i, NoRaylet)
		return
	}
	if !slices.Contains(j.failedOn[i], r) {
		j.failedOn[i] = append(j.failedOn[i], r)
	}
	again := mayPass(c.Kind)
	if again && int(j.attempts[i]-j.excused[i]) <= j.retries && j.status == dag.JobRunning {
		s.requeue(j, i, s.place(j, i, r))
		return
	}
	j.state[i] = Fatal
	if j.status == dag.JobRunning {
		s.cancelAll(j, dag.JobFailed, s.failure(j, i, r, c, again))
	}
}

// withdraw takes back the readers of i dispatched ahead of it (see
// pipeline), now that i failed: they wait for i again, and so do, in
// turn, readers dispatched ahead of them. Their raylet drops them itself
// when it sees i fail, reporting them unavailable; a Cancel covers the
// case where it has not (a reply lost with its raylet's session). The
// attempt they had is given up (a report of it is stale) without counting
// against their retries.
func (s *scheduler) withdraw(j *stage, i int32) {
	st := append(s.ahead[:0], i)
	for len(st) > 0 {
		p := st[len(st)-1]
		st = st[:len(st)-1]
		for _, u := range j.sg.Succs.Row(p) {
			if j.state[u] != Running || j.waiting[u] == 0 {
				continue
			}
			r := j.where[u]
			s.stopped(j, u, r)
			s.tell(r)
			s.fx.Cancel[r] = append(s.fx.Cancel[r], j.sg.ID(u))
			j.state[u] = Unscheduled
			j.where[u] = NoRaylet
			if j.excused[u] < maxExcused {
				if j.excused == nil {
					j.excused = make(map[int32]uint8)
				}
				j.attempts[u]++
				j.excused[u]++
			}
			st = append(st, u)
		}
	}
	s.ahead = st[:0]
}

// mayPass reports whether another attempt may get past a failure of
// kind k, as the raylet classified it: a lost peer, I/O, a full store, a
// deadline, an interrupt or a bug in phobos may pass; bad input, a missing
// function, a refusal or an error from user code will not (user code that
// wants a retry says so with a retried kind: fn.Retryable).
func mayPass(k dag.Kind) bool {
	switch k {
	case dag.KindInvalidArgument, dag.KindNotFound, dag.KindPermissionDenied, dag.KindUserCode, dag.KindFatal:
		return false
	}
	return true
}

// failure is the error a job fails with when attempt c of subtask i, on
// raylet r, was its last. It says each fact once: the subtask and its
// ops, the raylet, the attempts, why there is no other, then the raylet's
// account of the cause, whose kind errors.Is still finds.
func (s *scheduler) failure(j *stage, i int32, r Raylet, c *wire.Completion, retried bool) error {
	attempts := "1 attempt"
	if n := j.attempts[i]; n != 1 {
		attempts = fmt.Sprintf("%d attempts", n)
	}
	why := ""
	if !retried {
		why = fmt.Sprintf(" (not retried: %v)", c.Kind)
	}
	return dag.Errorf(dag.KindFatal, "subtask %s (%s) failed on raylet %s after %s%s: %w",
		c.ID, s.opNames(j, i), s.raylets[r].id, attempts, why, &dag.Error{Kind: c.Kind, Msg: c.Error})
}

// MaxRetries is the most re-runs a job may ask for. Attempts are counted
// in a byte: MaxRetries + 1 + maxExcused must stay below 256.
const MaxRetries = 100

// maxExcused bounds the failed attempts of one subtask that are not
// counted because an input was lost meanwhile, so that a cluster losing
// raylets over and over still ends the job.
const maxExcused = 8

func (s *scheduler) opNames(j *stage, i int32) string {
	out := ""
	for k, c := range j.sg.ChunksOf(i) {
		if k > 0 {
			out += "+"
		}
		out += dag.Ops.Name(j.sg.Chunks.Nodes[c].Op)
	}
	return out
}

// free deletes subtask p's outputs that are not job results from every
// raylet holding them.
func (s *scheduler) free(j *stage, p int32) {
	var ids []dag.ObjectID
	for k, c := range j.sg.OutputsOf(p) {
		if j.result[c] && !j.released {
			continue
		}
		ids = append(ids, dag.NewObjectID(j.sg.ID(p), uint32(k)))
	}
	if len(ids) == 0 {
		return
	}
	s.freeLater(j.where[p], ids)
	for _, w := range j.copies[p] {
		s.freeLater(w, ids)
	}
	if len(ids) == len(j.sg.OutputsOf(p)) {
		j.state[p] = Freed
		delete(j.copies, p)
	}
}

// freeOn frees ids on raylet r at once: the frees of this event go to r
// with its effects.
func (s *scheduler) freeOn(r Raylet, ids []dag.ObjectID) {
	if r < 0 || !s.raylets[r].alive {
		return
	}
	s.tell(r)
	s.fx.Free[r] = append(s.fx.Free[r], ids...)
}

// freeLater frees on raylet r the outputs of a subtask that every reader
// has finished (or a copy of them fetched after that). These frees, one
// or more for every subtask a job runs, are held back and go together: in
// r's next pull reply (wire.Pull.FreesInReply), as a message of their own
// once freeBatch of them wait, or when the Leader's free timer flushes
// them (FlushFrees), freePeriod at most after they were made. Sent at
// once, each event's frees were a message to every raylet they touched:
// at 1,000 raylets, a message for every 30 subtasks of the seed example.
// Ray's raylets batch their frees the same way (free_objects_batch_size,
// free_objects_period_milliseconds).
//
// Holding a free back lets the object live a little longer, and that is
// safe only while r cannot get the object again before the free reaches
// it: a free that came after r had the object again (fetched for a
// reader, or made by a rerun of its producer) would delete what the head
// counts there. A finished subtask's freed outputs come back only when
// it is rebuilt, and rebuild sends every held free first; a rerun
// dispatched to r in the same event goes in a pull reply, which carries
// r's frees ahead of its subtasks. Other frees (a stale attempt's
// outputs, objects reported after a failover, puts) go at once (freeOn),
// as a raylet that does not take frees in its replies gets all of them.
func (s *scheduler) freeLater(r Raylet, ids []dag.ObjectID) {
	if r < 0 || !s.raylets[r].alive {
		return
	}
	rv := s.raylets[r]
	if s.freeNow || !rv.freesInReply {
		s.freeOn(r, ids)
		return
	}
	if !rv.deferred {
		rv.deferred = true
		s.deferred = append(s.deferred, r)
	}
	rv.later = append(rv.later, ids...)
	if len(rv.later) >= freeBatch {
		s.sendLater(r)
	}
}

// takesFrees records whether r's pulls take frees in their replies. A
// raylet that stops taking them gets those held for it at once.
func (s *scheduler) takesFrees(r Raylet, inReply bool) {
	rv := s.raylets[r]
	rv.freesInReply = inReply
	if !inReply {
		s.sendLater(r)
	}
}

// freeBatch is how many held-back frees of one raylet make a message.
const freeBatch = 256

// sendLater moves r's held-back frees to this event's effects.
func (s *scheduler) sendLater(r Raylet) {
	rv := s.raylets[r]
	if len(rv.later) == 0 {
		return
	}
	s.tell(r)
	s.fx.Free[r] = append(s.fx.Free[r], rv.later...)
	rv.later = shrink(rv.later, 2*freeBatch)
}

// takeFrees appends what r is to free, this event's and held back, to buf,
// for a pull reply, and forgets them: at most a quarter of r's max frame
// of them (see pullMore). The rest go in this event's FreeObjects
// messages, which reach r before the reply.
func (s *scheduler) takeFrees(r Raylet, buf []dag.ObjectID) []dag.ObjectID {
	rv := s.raylets[r]
	limit := rv.replyLimit() / 4 / wire.FreeBound
	now := s.fx.Free[r]
	k := min(len(now), limit)
	buf = append(buf, now[:k]...)
	s.fx.Free[r] = append(now[:0], now[k:]...)
	k = min(len(rv.later), limit-k)
	buf = append(buf, rv.later[:k]...)
	s.fx.Free[r] = append(s.fx.Free[r], rv.later[k:]...)
	rv.later = shrink(rv.later, 2*freeBatch)
	if len(s.fx.Free[r]) > 0 {
		s.tell(r)
	}
	return buf
}

// FlushFrees sends every held-back free.
func (s *scheduler) FlushFrees() {
	for _, r := range s.deferred {
		s.raylets[r].deferred = false
		s.sendLater(r)
	}
	s.deferred = s.deferred[:0]
}

// HoldsFrees reports whether frees may be held back.
func (s *scheduler) HoldsFrees() bool { return len(s.deferred) > 0 }

// lookup finds the job and index of a subtask ID.
func (s *scheduler) lookup(id dag.SubtaskID) (*stage, int32, bool) {
	j, ok := s.jobs[StageKey{id.Task(), id.Stage()}]
	if !ok {
		return nil, 0, false
	}
	ix := id.Index()
	if ix < j.sg.Base || ix-j.sg.Base >= uint64(len(j.state)) {
		return nil, 0, false
	}
	return j, int32(ix - j.sg.Base), true
}

func (s *scheduler) finish(j *stage, st dag.JobState, err error) {
	j.status, j.err = st, err
	if !j.ended {
		j.ended = true
		s.fx.Ended = append(s.fx.Ended, j.key)
	}
}

// Cancel cancels a running job: queued and waiting subtasks are dropped,
// running ones are interrupted (schedEffects.Cancel). The job ends CANCELLED when
// every running subtask has stopped. Cancelling an ended job does nothing
// and reports false.
func (s *scheduler) Cancel(task dag.TaskID) (*schedEffects, bool) {
	fx := s.begin()
	ok := false
	for _, j := range s.tasks[task] {
		if j.status == dag.JobRunning {
			s.cancelAll(j, dag.JobCancelled, dag.Errorf(dag.KindCancelled, "job %d was cancelled", task))
			ok = true
		}
	}
	return fx, ok
}

// cancelAll stops every unfinished subtask of j and ends the job with st
// once nothing runs.
func (s *scheduler) cancelAll(j *stage, st dag.JobState, err error) {
	j.status, j.err = st, err
	for i := range j.state {
		switch j.state[i] {
		case Unscheduled, Ready:
			j.state[i] = Cancelled
		case Running:
			j.state[i] = Cancelling
			if r := j.where[i]; r >= 0 {
				s.tell(r)
				s.fx.Cancel[r] = append(s.fx.Cancel[r], j.sg.ID(int32(i)))
			}
		}
	}
	s.maybeEndCancelled(j)
}

// maybeEndCancelled reports a cancelled or failed job as ended once no
// subtask of it runs.
func (s *scheduler) maybeEndCancelled(j *stage) {
	if j.active == 0 && j.status != dag.JobRunning && j.status != dag.JobSucceeded && !j.ended {
		j.ended = true
		s.fx.Ended = append(s.fx.Ended, j.key)
		s.releaseAll(j)
	}
}

// FailTask fails a job whose next stage could not be lowered; its last
// stage had ended.
func (s *scheduler) FailTask(task dag.TaskID, err error) *schedEffects {
	return s.EndTask(task, dag.JobFailed, err)
}

// EndTask ends a job between stages (its last stage had ended, its next
// is not scheduled) as st: failed or cancelled.
func (s *scheduler) EndTask(task dag.TaskID, st dag.JobState, err error) *schedEffects {
	fx := s.begin()
	js := s.tasks[task]
	if len(js) == 0 {
		return fx
	}
	j := js[len(js)-1]
	j.status, j.err = st, err
	s.fx.Ended = append(s.fx.Ended, j.key)
	s.releaseAll(j)
	return fx
}

// Abandon gives up on subtasks still CANCELLING (their kernels ignored the
// interrupt): they count as stopped and the job ends.
func (s *scheduler) Abandon(task dag.TaskID) *schedEffects {
	fx := s.begin()
	for _, j := range s.tasks[task] {
		for i, st := range j.state {
			if st == Cancelling {
				j.state[i] = Cancelled
				s.stopped(j, int32(i), j.where[i])
			}
		}
		s.maybeEndCancelled(j)
	}
	return fx
}

// releaseAll frees every object the job still holds. Each raylet's free
// list is first grown to what the job's release adds to it: appended to
// one by one, a million IDs grew their lists by doubling, 0.2 s of copying
// and twice the memory. These frees, and those held back before, go at
// once: a release is answered once its frees are handed to the raylets'
// sessions (runtime/head's loop).
func (s *scheduler) releaseAll(j *stage) {
	j.released = true
	s.FlushFrees()
	s.freeNow = true
	defer func() { s.freeNow = false }()
	adds := make([]int, len(s.fx.Free))
	count := func(r Raylet, n int) {
		if r >= 0 && int(r) < len(adds) {
			adds[r] += n
		}
	}
	for i := range j.state {
		if j.state[i] == Finished {
			count(j.where[i], len(j.sg.OutputsOf(int32(i))))
		}
	}
	for p, ws := range j.copies {
		if j.state[p] == Finished {
			for _, w := range ws {
				count(w, len(j.sg.OutputsOf(p)))
			}
		}
	}
	for r, n := range adds {
		if n > 0 {
			s.fx.Free[r] = slices.Grow(s.fx.Free[r], n)
		}
	}
	for i := range j.state {
		if j.state[i] == Finished {
			s.free(j, int32(i))
		}
	}
}

// Release frees a finished job's results and forgets the job. A job still
// running, or cancelled or failed with subtasks still stopping, is not
// released (see Stopping): forgotten then, the subtasks' late reports
// would find no job, and what they made would be kept for it.
func (s *scheduler) Release(task dag.TaskID) (*schedEffects, bool) {
	fx := s.begin()
	js := s.tasks[task]
	if len(js) == 0 || s.Stopping(task) {
		return fx, false
	}
	for _, j := range js {
		s.releaseAll(j)
		delete(s.jobs, j.key)
		s.dropSlot(j)
	}
	s.order = slices.DeleteFunc(s.order, func(j *stage) bool { return j.task == task })
	delete(s.tasks, task)
	s.dropBuffers()
	return fx, true
}

// takeSlot puts j in the stage table and returns its slot.
func (s *scheduler) takeSlot(j *stage) int32 {
	if n := len(s.freeSlots); n > 0 {
		k := s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
		s.slots[k] = j
		return k
	}
	s.slots = append(s.slots, j)
	return int32(len(s.slots) - 1)
}

// dropSlot takes a released stage out of the stage table. Its queue
// entries go stale by themselves (valid), but frontier entries carry no
// sequence number, so those naming it go now, before a later stage takes
// its slot.
func (s *scheduler) dropSlot(j *stage) {
	for _, rv := range s.raylets {
		if len(rv.frontier) > 0 {
			rv.frontier = slices.DeleteFunc(rv.frontier, func(e entry) bool { return e.slot == j.slot })
		}
	}
	s.slots[j.slot] = nil
	s.freeSlots = append(s.freeSlots, j.slot)
}

// Stopping reports whether a stage of the task still runs, or still has
// subtasks running or being cancelled (a cancelled or failed job ends once
// they stop).
func (s *scheduler) Stopping(task dag.TaskID) bool {
	for _, j := range s.tasks[task] {
		if j.status == dag.JobRunning || j.active > 0 {
			return true
		}
	}
	return false
}

// LoseRaylet handles a raylet that died or was cut off: its queued and
// running subtasks go elsewhere, and objects that lived only there and are
// still needed are rebuilt by running their producers again (recursively,
// through lineage).
func (s *scheduler) LoseRaylet(r Raylet) *schedEffects {
	fx := s.begin()
	rv := s.raylets[r]
	if !rv.alive {
		return fx
	}
	rv.alive = false
	rv.running = 0
	rv.later = nil // its objects are gone
	rv.queue.reset()
	clear(rv.frontier)
	rv.frontier = rv.frontier[:0]
	s.touch(r)
	for id, p := range s.puts {
		p.copies = remove(p.copies, r)
		if p.r == r {
			if len(p.copies) > 0 { // a copy survives: it becomes the object
				p.r, p.copies = p.copies[0], p.copies[1:]
				continue
			}
			delete(s.puts, id) // a driver's data cannot be rebuilt: readers will fail saying so
		}
	}
	for _, j := range s.order {
		for i := int32(0); i < int32(len(j.state)); i++ {
			if cs := j.copies[i]; len(cs) > 0 {
				j.copies[i] = remove(cs, r)
			}
		}
		for i := int32(0); i < int32(len(j.state)); i++ {
			if j.where[i] != r {
				continue
			}
			switch j.state[i] {
			case Ready:
				s.requeue(j, i, -1)
			case Running:
				j.active--
				s.requeue(j, i, -1)
			case Cancelling:
				j.active--
				j.state[i] = Cancelled
			case Finished:
				if cs := j.copies[i]; len(cs) > 0 {
					j.where[i] = cs[0]
					j.copies[i] = cs[1:]
					continue
				}
				j.where[i] = NoRaylet
				if s.needed(j, i) {
					s.rebuild(j, i)
				}
			}
		}
		s.maybeEndCancelled(j)
	}
	return fx
}

func remove(s []Raylet, v Raylet) []Raylet {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// needed reports whether i's outputs are still wanted: a reader has not
// finished, or a result has not been released.
func (s *scheduler) needed(j *stage, i int32) bool {
	if j.status != dag.JobRunning && j.status != dag.JobSucceeded {
		return false
	}
	if j.pending[i] > 0 {
		return true
	}
	if j.released {
		return false
	}
	for _, c := range j.sg.OutputsOf(i) {
		if j.result[c] {
			return true
		}
	}
	return false
}

// rebuild makes a finished subtask whose outputs were lost run again,
// first rebuilding any input that is gone too.
//
// Frees held back go first, at once: one of them may be of an object
// rebuilt here (a freed input), and held, it could reach a raylet after
// that raylet had the object again (a rebuilt copy fetched for a reader)
// and delete it while the head counts it there.
func (s *scheduler) rebuild(j *stage, i int32) {
	s.FlushFrees()
	if j.rebuilt == nil {
		j.rebuilt = make(map[int32]bool)
	}
	j.rebuilt[i] = true
	// A new attempt number, so that a completion of the run that made
	// the lost outputs, sent again, cannot pass for the rebuild's (it
	// would if the rebuild ran on the same raylet). Like an attempt whose
	// input was lost, it does not count against the subtask's retries
	// (up to maxExcused such attempts).
	j.attempts[i]++
	if j.excused[i] < maxExcused {
		if j.excused == nil {
			j.excused = make(map[int32]uint8)
		}
		j.excused[i]++
	}
	if j.status == dag.JobSucceeded {
		j.status = dag.JobRunning // a result was lost; the job runs again until it is rebuilt
	}
	j.done--
	j.state[i] = Unscheduled
	j.where[i] = NoRaylet
	// Readers that counted i as available must wait again.
	for _, u := range j.sg.Succs.Row(i) {
		switch j.state[u] {
		case Unscheduled, Running:
			j.waiting[u]++
		case Ready:
			j.waiting[u]++
			j.state[u] = Unscheduled // its queue entry is now stale
		}
	}
	j.waiting[i] = 0
	for _, p := range j.sg.Preds.Row(i) {
		j.pending[p]++
		switch {
		case s.available(j, p):
		case j.state[p] == Freed || j.state[p] == Finished:
			s.rebuild(j, p) // makes its readers, i among them, wait for it
		default:
			j.waiting[i]++ // already being rebuilt
		}
	}
	if j.waiting[i] == 0 {
		s.makeReady(j, i, -1)
	}
}

// available reports whether p's outputs exist on an alive raylet.
func (s *scheduler) available(j *stage, p int32) bool {
	if j.state[p] != Finished {
		return false
	}
	if w := j.where[p]; w >= 0 && s.raylets[w].alive {
		return true
	}
	for _, w := range j.copies[p] {
		if s.raylets[w].alive {
			return true
		}
	}
	return false
}

// putObj is an object a driver put on raylet r; copies are the raylets
// that fetched it to run subtasks.
type putObj struct {
	r      Raylet
	size   int64
	copies []Raylet
}

// AddPut records an object a driver put on raylet r.
func (s *scheduler) AddPut(id dag.ObjectID, r Raylet, size int64) {
	s.puts[id] = &putObj{r: r, size: size}
}

// ReleasePut forgets a put object and frees it on its raylet and every
// copy. It reports whether the object was known.
func (s *scheduler) ReleasePut(id dag.ObjectID) (*schedEffects, bool) {
	fx := s.begin()
	p, ok := s.putAt(id)
	if !ok {
		return fx, false
	}
	delete(s.puts, id)
	key := StageKey{id.Subtask().Task(), id.Subtask().Stage()}
	if hs := s.held[key]; len(hs) > 0 {
		out := hs[:0]
		for _, h := range hs {
			if h.id != id {
				out = append(out, h)
			}
		}
		s.held[key] = out
	}
	ids := []dag.ObjectID{id}
	s.freeOn(p.r, ids)
	for _, c := range p.copies {
		s.freeOn(c, ids)
	}
	return fx, true
}

// ReleasePutTask frees every object of a put task: those registered with
// this leader and those raylets reported holding.
func (s *scheduler) ReleasePutTask(task dag.TaskID) *schedEffects {
	fx := s.begin()
	for id, p := range s.puts {
		if id.Subtask().Task() != task {
			continue
		}
		delete(s.puts, id)
		ids := []dag.ObjectID{id}
		s.freeOn(p.r, ids)
		for _, c := range p.copies {
			s.freeOn(c, ids)
		}
	}
	for key, hs := range s.held {
		if key.Task != task {
			continue
		}
		for _, h := range hs {
			s.freeOn(h.r, []dag.ObjectID{h.id})
		}
		delete(s.held, key)
	}
	return fx
}

// putAt finds a put object: registered with this leader, or reported held
// by a raylet (after a failover, drivers do not register again).
func (s *scheduler) putAt(id dag.ObjectID) (*putObj, bool) {
	if p, ok := s.puts[id]; ok {
		return p, true
	}
	for _, h := range s.held[StageKey{id.Subtask().Task(), id.Subtask().Stage()}] {
		if h.id == id {
			p := &putObj{r: h.r, size: h.size}
			s.puts[id] = p
			return p, true
		}
	}
	return nil, false
}

// heldAt is an object a raylet reported holding.
type heldAt struct {
	r    Raylet
	id   dag.ObjectID
	size int64
}

// AddHeld takes a raylet's report of the objects in its store (at
// registration). Subtasks of known jobs that have not started and whose
// outputs all exist there count as finished; reports for jobs not yet known
// are kept for AddJob (a new leader hears from raylets before it resumes
// jobs).
func (s *scheduler) AddHeld(r Raylet, held []wire.HeldObject) *schedEffects {
	fx := s.begin()
	byJob := map[StageKey][]heldAt{}
	for _, h := range held {
		k := StageKey{h.ID.Subtask().Task(), h.ID.Subtask().Stage()}
		byJob[k] = append(byJob[k], heldAt{r: r, id: h.ID, size: h.Size})
	}
	keys := make([]StageKey, 0, len(byJob))
	for k := range byJob {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b StageKey) int {
		if a.Task != b.Task {
			return cmp.Compare(a.Task, b.Task)
		}
		return cmp.Compare(a.Stage, b.Stage)
	})
	for _, key := range keys {
		hs := byJob[key]
		j, ok := s.jobs[key]
		if !ok {
			for _, h := range hs {
				s.unknownHeld(h)
			}
			continue
		}
		if j.status != dag.JobRunning {
			s.settleHeld(j, hs, nil)
			continue
		}
		s.adoptHeld(j, hs)
		for i := int32(0); i < int32(len(j.state)); i++ {
			if j.state[i] == Unscheduled && j.waiting[i] == 0 {
				s.makeReady(j, i, -1)
			}
		}
		if j.done == len(j.state) {
			s.finish(j, dag.JobSucceeded, nil)
		}
	}
	return fx
}

// unknownHeld deals with an object on raylet h.r of a task this
// scheduler does not know: a put object's copy is tracked; otherwise the
// object is kept in the stash (for a job that may be resumed, or results
// that may be asked for) or freed, as keepUnknown says.
func (s *scheduler) unknownHeld(h heldAt) {
	if p, ok := s.puts[h.id]; ok {
		if p.r != h.r && !slices.Contains(p.copies, h.r) {
			p.copies = append(p.copies, h.r)
		}
		return
	}
	task := h.id.Subtask().Task()
	if s.keepUnknown == nil || s.keepUnknown(task) {
		key := StageKey{task, h.id.Subtask().Stage()}
		for _, x := range s.held[key] {
			if x.r == h.r && x.id == h.id {
				return
			}
		}
		s.held[key] = append(s.held[key], h)
		return
	}
	s.freeOn(h.r, []dag.ObjectID{h.id})
}

// SweepHeld frees stashed objects that keepUnknown no longer keeps (the
// head calls it once it has resumed jobs after a failover, and then now
// and then, as result TTLs run out).
func (s *scheduler) SweepHeld() *schedEffects {
	fx := s.begin()
	for key, hs := range s.held {
		if s.keepUnknown != nil && !s.keepUnknown(key.Task) {
			for _, h := range hs {
				s.freeOn(h.r, []dag.ObjectID{h.id})
			}
			delete(s.held, key)
		}
	}
	return fx
}

// FreeHeldTask frees every stashed object of a task (its results were
// released, but this leader never scheduled it).
func (s *scheduler) FreeHeldTask(task dag.TaskID) *schedEffects {
	fx := s.begin()
	for key, hs := range s.held {
		if key.Task != task {
			continue
		}
		for _, h := range hs {
			if _, isPut := s.puts[h.id]; !isPut {
				s.freeOn(h.r, []dag.ObjectID{h.id})
			}
		}
		delete(s.held, key)
	}
	return fx
}

// noteCopies records objects raylet r fetched to run a subtask as copies,
// freed with their originals; a copy of an object already freed is freed
// at once, and one of an unknown task is held as such.
func (s *scheduler) noteCopies(r Raylet, fetched []dag.ObjectID) {
	for _, id := range fetched {
		pj, pi, ok := s.lookup(id.Subtask())
		switch {
		case !ok:
			s.unknownHeld(heldAt{r: r, id: id})
		case pj.where[pi] == r || slices.Contains(pj.copies[pi], r):
		case pj.state[pi] == Freed || pj.released:
			s.freeLater(r, []dag.ObjectID{id})
		default:
			pj.copies[pi] = append(pj.copies[pi], r)
		}
	}
}

// settleHeld makes sure no object of j that a raylet reported is
// forgotten where it lies: a copy of a finished subtask's outputs joins its
// copies (freed with them); one of a subtask running on that raylet stays
// (the attempt reuses it); anything else (a subtask queued, running
// elsewhere, skipped or freed, or an incomplete set of outputs) is freed.
//
// adopted (nil for none) holds the subtasks adoptHeld marked finished from
// these objects: one it then freed has had its outputs freed where they
// lie already, and freeing them again named an object twice.
func (s *scheduler) settleHeld(j *stage, held []heldAt, adopted map[int32]bool) {
	for _, h := range held {
		jj, i, ok := s.lookup(h.id.Subtask())
		if !ok || jj != j {
			continue
		}
		switch {
		case j.where[i] == h.r && (j.state[i] == Finished || j.state[i] == Running):
		case j.where[i] == h.r && j.state[i] == Freed && adopted[i]:
		case slices.Contains(j.copies[i], h.r):
		case j.state[i] == Finished && !j.released:
			j.copies[i] = append(j.copies[i], h.r)
		default:
			s.freeOn(h.r, []dag.ObjectID{h.id})
		}
	}
}

// adoptHeld marks as finished every not-yet-started subtask of j whose
// outputs are all held by one raylet, then skips subtasks nothing needs any
// more: not a result, and every reader finished or skipped.
func (s *scheduler) adoptHeld(j *stage, held []heldAt) {
	var adopted map[int32]bool
	defer func() { s.settleHeld(j, held, adopted) }() // what is not adopted is tracked or freed
	type got struct {
		r     Raylet
		n     int
		sizes []int64
	}
	per := map[int32]*got{}
	for _, h := range held {
		jj, i, ok := s.lookup(h.id.Subtask())
		if !ok || jj != j || (j.state[i] != Unscheduled && j.state[i] != Ready) {
			continue
		}
		outs := j.sg.OutputsOf(i)
		k := int(h.id.Output())
		if k >= len(outs) {
			continue
		}
		g := per[i]
		if g == nil {
			g = &got{r: h.r, sizes: make([]int64, len(outs))}
			per[i] = g
		}
		if g.r != h.r {
			continue // copies on another raylet; one holder suffices
		}
		if g.sizes[k] == 0 {
			g.n++
		}
		g.sizes[k] = max(h.size, 1)
	}
	for i := int32(0); i < int32(len(j.state)); i++ { // topological order
		g := per[i]
		if g == nil || g.n != len(j.sg.OutputsOf(i)) || !s.raylets[g.r].alive {
			continue
		}
		if j.state[i] == Ready {
			j.where[i] = NoRaylet // stale queue entry
		}
		s.markFinished(j, i, g.r, g.sizes)
		if adopted == nil {
			adopted = map[int32]bool{}
		}
		adopted[i] = true
	}
	if adopted == nil {
		return
	}
	// Skip what nobody needs: reverse topological order.
	run := make([]bool, len(j.state))
	for i := int32(len(j.state)) - 1; i >= 0; i-- {
		st := j.state[i]
		if st == Finished || st == Freed || st == Running {
			continue
		}
		need := false
		for _, c := range j.sg.OutputsOf(i) {
			need = need || j.result[c]
		}
		for _, u := range j.sg.Succs.Row(i) {
			need = need || run[u] || j.state[u] == Running
		}
		run[i] = need
		if !need {
			j.state[i] = Freed
			j.done++
			for _, p := range j.sg.Preds.Row(i) {
				j.pending[p]--
				if j.pending[p] == 0 && j.state[p] == Finished {
					s.free(j, p)
				}
			}
		}
	}
}

// Requeue places READY subtasks that had no alive raylet when they became
// ready; call it after AddRaylet.
//
// Only an event that left a subtask unplaced makes it look: a raylet
// registering (a thousand of them, or one reconnecting, during a job of
// millions of subtasks) costs nothing otherwise.
func (s *scheduler) Requeue() *schedEffects {
	fx := s.begin()
	if !s.unplaced {
		return fx
	}
	s.unplaced = false // makeReady sets it again for any still unplaced
	for _, j := range s.order {
		for i := int32(0); i < int32(len(j.state)); i++ {
			if j.state[i] == Ready && j.where[i] < 0 {
				s.makeReady(j, i, -1)
			}
		}
	}
	return fx
}

// JobInfo is a snapshot of a job (all its stages so far) for status
// queries.
type JobInfo struct {
	Status   dag.JobState
	Err      error
	Subtasks int
	Done     int
	Stages   int
	// Final reports whether the last stage scheduled is the job's last;
	// when it is not, a SUCCEEDED stage leaves the job RUNNING.
	Final   bool
	Results []wire.ResultRef
}

// Job reports on a job, without locating its results (see Results).
func (s *scheduler) Job(task dag.TaskID) (JobInfo, bool) { return s.job(task, false) }

// JobResults reports on a job and, if it succeeded, locates its results.
func (s *scheduler) JobResults(task dag.TaskID) (JobInfo, bool) { return s.job(task, true) }

// ResultRuns lists the object IDs of a job's results (of its last stage
// lowered), in output and grid order, as runs (a job's results in
// lowering's order make a few runs, not an ID each).
func (s *scheduler) ResultRuns(task dag.TaskID) []dag.ObjectRun {
	js := s.tasks[task]
	if len(js) == 0 {
		return nil
	}
	var runs []dag.ObjectRun
	for _, r := range js[len(js)-1].plan.Results {
		runs = dag.AppendObjectRuns(runs, r.Objects...)
	}
	return runs
}

func (s *scheduler) job(task dag.TaskID, results bool) (JobInfo, bool) {
	js := s.tasks[task]
	if len(js) == 0 {
		return JobInfo{}, false
	}
	last := js[len(js)-1]
	info := JobInfo{Status: last.status, Err: last.err, Stages: len(js), Final: last.plan.Final}
	for _, j := range js {
		info.Subtasks += len(j.state)
		info.Done += j.done
		if j.status == dag.JobFailed || j.status == dag.JobCancelled {
			info.Status, info.Err = j.status, j.err
		}
	}
	if info.Status == dag.JobSucceeded && !info.Final {
		info.Status = dag.JobRunning // more stages to come
	}
	if info.Status == dag.JobSucceeded && results {
		for _, r := range last.plan.Results {
			ref := wire.ResultRef{Meta: r.Meta, NSplits: r.NSplits, Chunks: make([]wire.ObjectRef, len(r.Objects))}
			for k, id := range r.Objects {
				pj, p, ok := s.lookup(id.Subtask())
				if !ok {
					continue
				}
				c := pj.sg.OutputsOf(p)[id.Output()]
				ref.Chunks[k] = wire.ObjectRef{ID: id, Size: pj.size[c], Meta: pj.sg.Chunks.Meta(c), Locations: s.locations(pj, p)}
			}
			info.Results = append(info.Results, ref)
		}
	}
	return info, true
}

// Sizes returns the stored sizes of objects of a task's stages (0 for
// unknown ones), for lowering the next stage.
func (s *scheduler) Sizes(ids []dag.ObjectID) []int64 {
	out := make([]int64, len(ids))
	for k, id := range ids {
		if j, p, ok := s.lookup(id.Subtask()); ok {
			outs := j.sg.OutputsOf(p)
			if int(id.Output()) < len(outs) {
				out[k] = j.size[outs[id.Output()]]
			}
		}
	}
	return out
}

// entry is a queued READY subtask: subtask i of the stage in slot of
// the scheduler's stage table. The fields are ordered so that it takes 32
// bytes, not 40: a job queues one entry per subtask. It holds no pointer,
// so the collector does not read the queues: with a pointer to its stage
// in every entry, each collection during a big job read every entry
// queued (a million subtasks queued, 32 MB, in each collection).
type entry struct {
	seq  uint64
	prio dag.Priority
	slot int32
	i    int32
}

// stageAt returns the stage in slot k of the stage table: nil once the
// stage is released (a stale entry's slot may hold a later stage, which
// the entry's sequence number tells apart: see valid).
func (s *scheduler) stageAt(k int32) *stage { return s.slots[k] }

// valid reports whether the entry still stands: it may have been moved,
// cancelled or run since it was queued, or its stage released. Sequence
// numbers are never reused, so an entry whose stage's slot went to a
// later stage matches none of that stage's subtasks.
func (s *scheduler) valid(e entry, r Raylet) bool {
	j := s.slots[e.slot]
	return j != nil && int(e.i) < len(j.state) && j.state[e.i] == Ready && j.where[e.i] == r && j.qseq[e.i] == e.seq
}

// PutKnown reports whether a put object is known: registered with this
// scheduler, or reported held by a raylet.
func (s *scheduler) PutKnown(id dag.ObjectID) bool {
	_, ok := s.putAt(id)
	return ok
}
