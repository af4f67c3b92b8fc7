package sched

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Config configures a Leader. A zero field takes the default noted.
type Config struct {
	// Head is this head's ID: Raft records it as where a job's lowering is
	// in flight, and raylets are told it when they register.
	Head string
	// Retries is the default number of re-runs of a failed subtask
	// (DefaultRetries); a job may ask for its own, up to MaxRetries.
	Retries int
	// Broadcast (DefaultBroadcast) and StealBytes (DefaultStealBytes) are
	// the placement and stealing policies (see scheduler).
	Broadcast  int
	StealBytes int64
	// NoPipeline stops the Leader from dispatching a subtask to the raylet
	// that makes its inputs before they are stored (see scheduler.pipeline):
	// every subtask then waits at the head for its inputs.
	NoPipeline bool
	// RayletTimeout (5s) is how long a raylet may stay silent before it is
	// lost; HeartbeatInterval (1s) is how often raylets are told to beat.
	RayletTimeout     time.Duration
	HeartbeatInterval time.Duration
	// ResultTTL (1h) is how long a job's results stay after it ends unless
	// its driver releases them; a job may ask for its own.
	ResultTTL time.Duration
	// CancelGrace (5s) is how long a cancelled job waits for kernels that
	// ignore their interrupt before it ends anyway.
	CancelGrace time.Duration
	// PutGrace (30s) is how long a put task outlives its last session.
	PutGrace time.Duration
	// MaxLowerings (2) is how many leaders may begin lowering a job and
	// stop before it is failed instead of lowered again.
	MaxLowerings int
	// JobBudget is the most head memory one job may be charged
	// (lowering.Estimate.PlanBytes), AdmitBudget the most all admitted jobs
	// may be charged together, AdmitQueue (256) how many jobs may wait for
	// room. Zero budgets mean no limit. Tiling is bounded by the JobBudget
	// too (lowering.Limits).
	JobBudget, AdmitBudget int64
	AdmitQueue             int
	// RequestPrefix begins the ID of every command this Leader proposes;
	// pick it at random for each leadership, so that no two leaders'
	// requests collide in Raft's dedupe table.
	RequestPrefix [8]byte
	// SettingNames says how errors name these settings (the head's
	// Config field names) to whoever set them, such as the CLI's flags.
	SettingNames map[string]string
	// JobRetention (DefaultJobRetention) is how long an ended job's record
	// stays in Raft once its results are gone; JobRetentionCount
	// (DefaultJobRetentionCount) the most such records kept. Negative:
	// no limit of that kind. See retention.go.
	JobRetention      time.Duration
	JobRetentionCount int
	// RayletPurgeAfter (DefaultRayletPurgeAfter) is how long a lost or
	// departed raylet stays registered (and listed); negative: forever.
	RayletPurgeAfter time.Duration
	// Logger receives the Leader's logs; nil discards them.
	Logger *slog.Logger
	// OwnMarks counts, per job, the lowering marks this head process has
	// made and outlived. The shell keeps one map for the life of the
	// process and hands it to each of its leaderships (nil: none kept), so
	// that a head that lost its leadership while lowering (a pause, a
	// partition) and leads again does not count its own marks as leaders
	// that a job took down.
	OwnMarks OwnMarks
}

// OwnMarks counts lowering marks by job; see Config.OwnMarks.
type OwnMarks map[dag.TaskID]int

func (c Config) withDefaults() Config {
	if c.Retries <= 0 {
		c.Retries = DefaultRetries
	}
	if c.Broadcast <= 0 {
		c.Broadcast = DefaultBroadcast
	}
	if c.StealBytes <= 0 {
		c.StealBytes = DefaultStealBytes
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&c.RayletTimeout, 5*time.Second)
	dur(&c.HeartbeatInterval, time.Second)
	dur(&c.ResultTTL, time.Hour)
	dur(&c.CancelGrace, 5*time.Second)
	dur(&c.PutGrace, 30*time.Second)
	if c.JobRetention == 0 {
		c.JobRetention = DefaultJobRetention
	}
	if c.RayletPurgeAfter == 0 {
		c.RayletPurgeAfter = DefaultRayletPurgeAfter
	}
	if c.JobRetentionCount == 0 {
		c.JobRetentionCount = DefaultJobRetentionCount
	}
	if c.MaxLowerings <= 0 {
		c.MaxLowerings = 2
	}
	if c.JobBudget <= 0 {
		c.JobBudget = 1 << 62
	}
	if c.AdmitBudget <= 0 {
		c.AdmitBudget = 1 << 62
	}
	c.AdmitBudget = max(c.AdmitBudget, c.JobBudget)
	if c.AdmitQueue <= 0 {
		c.AdmitQueue = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// setting names one of the head's settings as Config.SettingNames say.
func (c *Config) setting(field string) string {
	if n, ok := c.SettingNames[field]; ok {
		return n
	}
	return field
}

// Leader is the whole leader of a phobos cluster as one deterministic
// machine: the scheduler (subtask states, ready queues, object locations,
// lineage) and everything around it that a leader decides — raylets
// joining, beating and being lost, one live raylet per ID, jobs from
// submission through admission, lowering (which it asks the shell to run),
// stage after stage, to their recorded end, cancels and their grace,
// results and their TTL, put objects and their leases, the wait for
// raylets after a failover, and who owns what.
//
// It takes Events in Step, with the time as a value, and returns Effects:
// it does no I/O, starts no goroutines, reads no clock and calls nothing of
// the shell's. A Leader lives for one leadership: the shell makes a new
// one each time its head becomes leader, feeds it Records once Raft has
// caught up, and drops it when the head steps down.
//
// A Leader is not safe for concurrent use: one goroutine owns it (the
// head's event loop).
type Leader struct {
	cfg Config
	log *slog.Logger
	s   *scheduler
	now time.Time
	fx  Effects
	// backlog holds raylets woken with work whose parked pulls wait for
	// a later step (raylets.go, serveWoken).
	backlog wakeBacklog

	loaded  bool // Records arrived
	resumed bool // unfinished jobs were taken up after the failover wait
	records map[dag.TaskID]*JobRecord
	puts    map[dag.TaskID]*PutRecord
	known   map[string]bool // raylet IDs registered in Raft
	jobs    map[dag.TaskID]*job
	adm     *admission

	bySess  map[Session]Raylet
	claims  []*claim // registrations waiting to learn whether an ID's holder lives
	leases  map[dag.TaskID]*lease
	leased  map[Session][]dag.TaskID // the put tasks each driver session holds
	waiters map[Call]*waiter         // WaitJob calls held until their job ends

	commits map[RequestID]*pending
	queued  map[dag.TaskID][]queuedCommit // commits of a task behind the one in flight
	inTask  map[dag.TaskID]bool           // a commit of the task is in flight
	// releasing are jobs this leader freed whose release Raft does not
	// hold yet (or refused): their reported copies are not kept.
	releasing map[dag.TaskID]bool
	reqSeq    uint64

	lastSweep time.Time
	lastPurge time.Time

	purging       map[dag.TaskID]bool  // job records being deleted
	deregistering map[string]bool      // raylets being deregistered
	gone          map[string]time.Time // raylets lost or departed, since when
	draining      map[string]bool      // raylets an operator drains (by ID)
	replyFree     []dag.ObjectID       // pull replies' frees, kept until the next Step
	freeTimer     bool                 // the TimerFrees timer is set
	specBuf       []wire.SubtaskSpec
	completion    wire.Completion // the one being applied (see complete)
}

// New returns the Leader of a new leadership.
func New(cfg Config) *Leader {
	cfg = cfg.withDefaults()
	s := newScheduler()
	s.Retries, s.Broadcast, s.StealBytes = cfg.Retries, cfg.Broadcast, cfg.StealBytes
	s.NoPipeline = cfg.NoPipeline
	l := &Leader{
		cfg: cfg, log: cfg.Logger, s: s,
		records: map[dag.TaskID]*JobRecord{}, puts: map[dag.TaskID]*PutRecord{},
		known: map[string]bool{}, jobs: map[dag.TaskID]*job{},
		adm:    newAdmission(cfg.JobBudget, cfg.AdmitBudget, cfg.AdmitQueue),
		bySess: map[Session]Raylet{}, leases: map[dag.TaskID]*lease{}, leased: map[Session][]dag.TaskID{},
		waiters: map[Call]*waiter{}, commits: map[RequestID]*pending{},
		queued: map[dag.TaskID][]queuedCommit{}, inTask: map[dag.TaskID]bool{}, releasing: map[dag.TaskID]bool{},
	}
	l.purging, l.deregistering, l.gone, l.draining = map[dag.TaskID]bool{}, map[string]bool{}, map[string]time.Time{}, map[string]bool{}
	s.keepUnknown = l.keepUnknown
	return l
}

// Step takes one event that happened at now and returns what to do about
// it. The Effects are valid until the next Step.
func (l *Leader) Step(now time.Time, ev Event) *Effects {
	l.now = now
	l.fx.reset()
	l.s.fx.reset(len(l.s.raylets))
	l.s.resetBuffers()
	l.specBuf = l.specBuf[:0]
	l.replyFree = l.replyFree[:0]
	switch e := ev.(type) {
	case *Pull:
		l.pull(e)
	case *Complete:
		l.complete(e.Session, &e.Done, -1) // room: the raylet's slots
	case *Heartbeat:
		l.heartbeat(e)
	case *Resume: // settle serves the raylets still waiting
	case *Register:
		l.register(e)
	case *Goodbye:
		l.goodbye(e)
	case *SessionClosed:
		l.sessionClosed(e)
	case *Records:
		l.takeRecords(e)
	case *Submit:
		l.submit(e)
	case *WaitJob:
		l.waitJob(e)
	case *CancelJob:
		l.cancelJob(e)
	case *ReleaseJob:
		l.releaseJobCall(e)
	case *ListJobs:
		l.listJobs(e)
	case *OpenPuts:
		l.openPuts(e)
	case *AttachPuts:
		l.attachPuts(e)
	case *PutObject:
		l.putObject(e)
	case *ReleaseObject:
		l.releaseObject(e)
	case *ShareObject:
		l.shareObject(e)
	case *DrainRaylet:
		l.drainRaylet(e)
	case *RayletInfos:
		l.reply(e.Call, l.rayletInfos(), nil)
	case *JobDetailQuery:
		l.jobDetail(e)
	case *CountsQuery:
		l.counts(e)
	case *Committed:
		l.committed(e)
	case *Estimated:
		l.estimated(e)
	case *AllocStage:
		l.allocStage(e)
	case *Lowered:
		l.lowered(e)
	case *Tick:
		l.tick()
	case *TimerFired:
		l.timerFired(e.ID)
	case *StepDown:
		l.stepDown()
	default:
		panic(fmt.Sprintf("sched: unknown event %T", ev))
	}
	l.settle()
	if !l.freeTimer && l.s.HoldsFrees() {
		l.freeTimer = true
		l.setTimer(TimerID{Kind: TimerFrees}, l.now.Add(freePeriod))
	}
	l.fx.Free, l.fx.Interrupt, l.fx.Told = l.s.fx.Free, l.s.fx.Cancel, l.s.fx.Told
	if invariants {
		if err := l.Check(); err != nil {
			panic(fmt.Sprintf("sched: after %T: %v", ev, err))
		}
	}
	return &l.fx
}

// settle carries the scheduler's own effects into the lifecycle: stages
// that ended move their jobs on (which may end more stages), and raylets
// that got work answer their parked pulls.
func (l *Leader) settle() {
	for k := 0; k < len(l.s.fx.Ended); k++ {
		l.stageEnded(l.s.fx.Ended[k])
	}
	l.serveWoken()
}

func (l *Leader) reply(c Call, v any, err error) {
	if c == 0 {
		return
	}
	l.fx.Replies = append(l.fx.Replies, Reply{Call: c, Value: v, Err: err})
}

func (l *Leader) setTimer(id TimerID, at time.Time) {
	l.fx.Timers = append(l.fx.Timers, Timer{ID: id, At: at})
}

func (l *Leader) clearTimer(id TimerID) {
	l.fx.Timers = append(l.fx.Timers, Timer{ID: id, Clear: true})
}

func (l *Leader) timerFired(id TimerID) {
	switch id.Kind {
	case TimerPull:
		l.pullTimedOut(id.Raylet)
	case TimerWait:
		l.waitTimedOut(id.Call)
	case TimerClaim:
		l.reconsiderClaims()
	case TimerFailover:
		l.takeUpJobs()
	case TimerCancelGrace:
		l.s.Abandon(id.Task)
	case TimerResultTTL:
		l.expireResults(id.Task)
	case TimerPutGrace:
		l.expirePuts(id.Task, id.Gen)
	case TimerFrees:
		l.freeTimer = false
		l.s.FlushFrees()
	}
}

// freePeriod is the longest a free is held back for a raylet that does not
// pull meanwhile (see scheduler.freeLater): objects outlive their last reader
// by this much at most, which a raylet's store notices only when it is
// full, and a raylet that runs work pulls more often than this.
const freePeriod = 100 * time.Millisecond

// tick checks raylet liveness and, every minute, frees stashed objects
// nobody can want any more (result TTLs run out for them too).
func (l *Leader) tick() {
	l.checkLiveness()
	if l.resumed && l.now.Sub(l.lastSweep) >= time.Minute {
		l.lastSweep = l.now
		l.s.SweepHeld()
	}
	l.purge()
}

// stepDown closes every raylet's session: they find the new leader. Frees
// held back are dropped, as frees in flight on those sessions would be:
// the raylets report what they hold to the new leader, which frees what
// no job wants (SweepHeld).
func (l *Leader) stepDown() {
	for _, rv := range l.s.raylets {
		if rv.session != nil {
			l.fx.Disconnect = append(l.fx.Disconnect, rv.session)
		}
	}
}

// errRecordsPending is the answer to calls about jobs and put tasks while
// this leader has not read Raft's records yet.
func (l *Leader) errRecordsPending(what string) error {
	return dag.Errorf(dag.KindUnavailable, "head %s has just become leader and is still reading the %s records; retry", l.cfg.Head, what)
}

// tileLimits bounds tiling to what the per-job budget allows, a backstop
// behind the estimate.
func (l *Leader) tileLimits() lowering.Limits {
	chunks := l.cfg.JobBudget / lowering.BytesPerChunk
	return lowering.Limits{Chunks: chunks, Edges: 4 * chunks}
}

// Session returns raylet r's session while it is registered (nil after).
func (l *Leader) Session(r Raylet) Session {
	if int(r) >= len(l.s.raylets) {
		return nil
	}
	return l.s.raylets[r].session
}
