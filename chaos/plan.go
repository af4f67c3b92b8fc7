package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault kinds.
const (
	KillLeader        = "kill-leader"        // kill -9 the head leader; restart it after the hold
	KillFollower      = "kill-follower"      // kill -9 a head follower; restart it after the hold
	KillRaylet        = "kill-raylet"        // kill -9 a raylet; restart it after the hold
	PauseLeader       = "pause-leader"       // SIGSTOP the leader; SIGCONT after the hold
	PauseFollower     = "pause-follower"     // SIGSTOP a follower; SIGCONT after the hold
	PauseRaylet       = "pause-raylet"       // SIGSTOP a raylet; SIGCONT after the hold
	PartitionLeader   = "partition-leader"   // cut the leader off from the other heads (its raylets still reach it)
	PartitionFollower = "partition-follower" // cut a follower off from the other heads
	IsolateRaylet     = "isolate-raylet"     // cut a raylet off from every head and raylet
	BlackholeLeader   = "blackhole-leader"   // drop every packet to and from the leader (no resets: only timeouts tell)
	BlackholeRaylet   = "blackhole-raylet"   // drop every packet to and from a raylet
	SlowNetwork       = "slow-network"       // every link: added latency, jitter and loss
	FillStores        = "fill-stores"        // hold results larger than all the stores, so every store is full and spills
	SpillFull         = "spill-full"         // a raylet's spill dir full while the stores are full (needs root: tmpfs)
	SpillReadOnly     = "spill-readonly"     // a raylet's spill dir read-only while the stores are full (needs root: tmpfs)
)

// KindInfo describes a fault kind.
type KindInfo struct {
	Name string
	// Hold is how long the fault lasts by default before it is undone.
	Hold time.Duration
	// MinHeads is the fewest heads it makes sense with.
	MinHeads int
	// Root says it mounts a tmpfs, which needs root.
	Root bool
	Doc  string
}

// Kinds lists every fault kind.
var Kinds = []KindInfo{
	{KillLeader, time.Second, 1, false, "kill -9 the head leader; restart it after the hold"},
	{KillFollower, time.Second, 3, false, "kill -9 a head follower; restart it after the hold"},
	{KillRaylet, time.Second, 1, false, "kill -9 a raylet; restart it after the hold"},
	{PauseLeader, 2 * time.Second, 3, false, "SIGSTOP the head leader; SIGCONT after the hold"},
	{PauseFollower, 2 * time.Second, 3, false, "SIGSTOP a head follower; SIGCONT after the hold"},
	{PauseRaylet, 3 * time.Second, 1, false, "SIGSTOP a raylet (longer than the raylet timeout); SIGCONT after the hold"},
	{PartitionLeader, 3 * time.Second, 3, false, "cut the leader off from the other heads; its raylets still reach it"},
	{PartitionFollower, 3 * time.Second, 3, false, "cut a follower off from the other heads"},
	{IsolateRaylet, 3 * time.Second, 1, false, "cut a raylet off from every head and raylet"},
	{BlackholeLeader, 4 * time.Second, 3, false, "drop every packet to and from the leader; only timeouts reveal it"},
	{BlackholeRaylet, 4 * time.Second, 1, false, "drop every packet to and from a raylet; only timeouts reveal it"},
	{SlowNetwork, 4 * time.Second, 1, false, "every link: +30ms latency, 20ms jitter, 2% loss (200ms each)"},
	{FillStores, 4 * time.Second, 1, false, "hold unreleased results 1.5 times the size of all stores together"},
	{SpillFull, 4 * time.Second, 1, true, "fill a raylet's spill dir (a tmpfs) while the stores are full"},
	{SpillReadOnly, 4 * time.Second, 1, true, "remount a raylet's spill dir (a tmpfs) read-only while the stores are full"},
}

func kindInfo(name string) (KindInfo, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return KindInfo{}, false
}

func kindNames() string {
	var ns []string
	for _, k := range Kinds {
		ns = append(ns, k.Name)
	}
	return strings.Join(ns, ", ")
}

// Fault is one planned fault: its kind, the point of the workload where
// it strikes, and how long it lasts.
type Fault struct {
	Kind string
	// Step: the fault strikes once step Step of the workload is submitted;
	// with Pct > 0, once the step's first job has finished Pct percent of
	// its subtasks (or has ended, whichever is first).
	Step, Pct int
	// Hold is how long the fault lasts before it is undone.
	Hold time.Duration
	// Pick chooses the target among the candidates (raylets by name, or
	// the followers), modulo their number.
	Pick int
}

// Point describes where the fault strikes.
func (f Fault) Point() string {
	if f.Pct > 0 {
		return fmt.Sprintf("step %d at %d%%", f.Step, f.Pct)
	}
	return fmt.Sprintf("step %d submitted", f.Step)
}

// String is the fault as a schedule item (see ParseSchedule).
func (f Fault) String() string {
	s := strconv.Itoa(f.Step)
	if f.Pct > 0 {
		s += "@" + strconv.Itoa(f.Pct)
	}
	return fmt.Sprintf("%s:%s/%v#%d", s, f.Kind, f.Hold, f.Pick)
}

// Named schedules.
const (
	// ScheduleSmoke is the CI schedule: a leader kill, a raylet kill and a
	// partition of the leader, each in the middle of a job.
	ScheduleSmoke = "2@30:kill-leader/1s,4@30:kill-raylet/1s,6@30:partition-leader/2s"
	// ScheduleRandom draws faults from the seed.
	ScheduleRandom = "random"
)

// ParseSchedule reads a schedule: comma-separated items
// STEP[@PCT]:KIND[/HOLD][#PICK], e.g. "3:kill-leader,5@40:isolate-raylet/2s#1".
// HOLD defaults to the kind's; PICK (the target among the candidates) to
// a draw from seed. Items must be in order of their points.
func ParseSchedule(spec string, seed uint64) ([]Fault, error) {
	if spec == "smoke" {
		spec = ScheduleSmoke
	}
	var out []Fault
	rng := rand.New(rand.NewPCG(seed, 0xfa017))
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("chaos: schedule item %d %q: %s; want STEP[@PCT]:KIND[/HOLD][#PICK], e.g. 3@40:kill-leader/2s", i+1, item, why)
		}
		point, rest, ok := strings.Cut(item, ":")
		if !ok {
			return nil, bad("no ':' between the point and the kind")
		}
		f := Fault{Pick: rng.IntN(1 << 16)}
		stepS, pctS, hasPct := strings.Cut(point, "@")
		var err error
		if f.Step, err = strconv.Atoi(stepS); err != nil || f.Step < 1 {
			return nil, bad("the step must be a number from 1")
		}
		if hasPct {
			if f.Pct, err = strconv.Atoi(pctS); err != nil || f.Pct < 1 || f.Pct > 99 {
				return nil, bad("the percentage must be from 1 to 99")
			}
		}
		if r, pick, ok := strings.Cut(rest, "#"); ok {
			if f.Pick, err = strconv.Atoi(pick); err != nil || f.Pick < 0 {
				return nil, bad("the pick must be a number from 0")
			}
			rest = r
		}
		kind, hold, hasHold := strings.Cut(rest, "/")
		info, ok := kindInfo(kind)
		if !ok {
			return nil, bad(fmt.Sprintf("unknown kind %q (kinds: %s)", kind, kindNames()))
		}
		f.Kind, f.Hold = kind, info.Hold
		if hasHold {
			if f.Hold, err = time.ParseDuration(hold); err != nil || f.Hold < 0 {
				return nil, bad("the hold must be a duration such as 2s")
			}
		}
		if n := len(out); n > 0 && (f.Step < out[n-1].Step || f.Step == out[n-1].Step && f.Pct < out[n-1].Pct) {
			return nil, bad("it comes before the item ahead of it; list items in order")
		}
		out = append(out, f)
	}
	return out, nil
}

// plan is the deterministic part of a run: the workload's steps and the
// faults, both drawn from the seed. A random plan is endless and drawn
// lazily; the same seed always gives the same prefix.
type plan struct {
	seed    uint64
	drivers int
	random  bool
	kinds   []string // for random plans
	// mu guards faults and frng: a random plan draws its faults as they
	// are first asked for, by the step loop (needsLongJob) and the fault
	// loop at once. The draws come in one order whoever asks, so the plan
	// stays the seed's.
	mu     sync.Mutex
	faults []Fault
	frng   *rand.Rand
}

func newPlan(seed uint64, schedule string, kinds []string, drivers int) (*plan, error) {
	p := &plan{seed: seed, drivers: drivers}
	if schedule == "" || schedule == ScheduleRandom {
		if len(kinds) == 0 {
			return nil, fmt.Errorf("chaos: a random schedule needs at least one fault kind")
		}
		p.random, p.kinds = true, kinds
		p.frng = rand.New(rand.NewPCG(seed, 0xfa0175))
		return p, nil
	}
	fs, err := ParseSchedule(schedule, seed)
	if err != nil {
		return nil, err
	}
	p.faults = fs
	return p, nil
}

// fault returns the i-th fault, or false if the schedule has no more.
func (p *plan) fault(i int) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.random && len(p.faults) <= i {
		prev := 0
		if n := len(p.faults); n > 0 {
			prev = p.faults[n-1].Step
		}
		r := p.frng
		kind := p.kinds[r.IntN(len(p.kinds))]
		info, _ := kindInfo(kind)
		f := Fault{Kind: kind, Step: prev + 2 + r.IntN(3), Pick: r.IntN(1 << 16)}
		if r.IntN(3) > 0 {
			f.Pct = 20 + r.IntN(50)
		}
		f.Hold = time.Duration(float64(info.Hold) * (0.75 + 0.5*r.Float64())).Round(100 * time.Millisecond)
		p.faults = append(p.faults, f)
	}
	if i >= len(p.faults) {
		return Fault{}, false
	}
	return p.faults[i], true
}

// needsLongJob reports whether a fault strikes during step s's first job,
// which then must run long enough to be caught in the middle.
func (p *plan) needsLongJob(s int) bool {
	for i := 0; ; i++ {
		f, ok := p.fault(i)
		if !ok || f.Step > s {
			return false
		}
		if f.Step == s && f.Pct > 0 {
			return true
		}
	}
}

// step returns workload step s (from 1): one job, or a burst of one job
// per driver submitted at once.
func (p *plan) step(s int) []jobSpec {
	rng := rand.New(rand.NewPCG(p.seed, 0x57e9_0000+uint64(s)))
	n := 1
	if p.drivers > 1 && rng.IntN(4) == 0 {
		n = p.drivers
	}
	var jobs []jobSpec
	for range n {
		jobs = append(jobs, randomJob(rng))
	}
	if p.needsLongJob(s) {
		jobs[0] = sleepJob(int64(160+rng.IntN(80)), time.Duration(15+rng.IntN(10))*time.Millisecond)
	}
	return jobs
}
