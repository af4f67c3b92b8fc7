package head

import (
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// What the web service shows of the leader's work, taken from the events
// and effects that pass through the loop: timelines (dispatches from pull
// replies, starts and ends from the timings raylets put in their
// completions) and metrics (counted per batch; the gauges refreshed on
// the loop's tick). All of it runs on the loop, only when the head serves
// HTTP, and reuses one buffer of events: nothing here allocates per
// subtask in steady state.

// observer is the loop's own state for timelines and metrics.
type observer struct {
	events     []timeline.Event // reused batch
	completion wire.Completion  // the one being recorded
	last       time.Time        // the gauges' last refresh
	ops        map[opsKey]string
}

// opsKey names a subtask's fused ops by its first and last op and their
// count: enough to label an attempt ("tensor.add+…+tensor.sum").
type opsKey struct {
	first, last dag.OpID
	n           int
}

// opsName returns the interned label of a subtask's ops; only a new
// combination allocates.
func (o *observer) opsName(ops []wire.OpSpec) string {
	if len(ops) == 0 {
		return ""
	}
	k := opsKey{ops[0].Op, ops[len(ops)-1].Op, len(ops)}
	if name, ok := o.ops[k]; ok {
		return name
	}
	if o.ops == nil || len(o.ops) > 4096 {
		o.ops = map[opsKey]string{}
	}
	name := dag.Ops.Name(k.first)
	switch {
	case k.n == 2:
		name += "+" + dag.Ops.Name(k.last)
	case k.n > 2:
		name += "+…+" + dag.Ops.Name(k.last)
	}
	o.ops[k] = name
	return name
}

// gaugeEvery is how often the loop refreshes the subtask and job gauges
// (a walk over the leader's subtask states).
const gaugeEvery = time.Second

// observeEvent records the completions an event carries, before the
// machine steps it (the batch is reused after).
func (s *Server) observeEvent(ev sched.Event) {
	if s.rec == nil {
		return
	}
	var done *wire.Completions
	var sess sched.Session
	switch e := ev.(type) {
	case *sched.Complete:
		done, sess = &e.Done, e.Session
	case *sched.Pull:
		if e.PullIn != nil {
			done, sess = &e.Done, e.Session
		}
	default:
		return
	}
	if done == nil || done.Len() == 0 {
		return
	}
	raylet := ""
	if ts, ok := sess.(*transport.Session); ok {
		raylet = ts.RemoteID()
	}
	var outcome [3]int
	o := &s.obs
	c := &s.obs.completion
	for k := range done.Len() {
		done.At(k, c)
		end := timeline.Finished
		switch {
		case c.Kind == dag.KindCancelled || c.Kind == dag.KindInterrupted:
			end = timeline.Cancelled
			outcome[metrics.OutcomeCancelled]++
		case c.Failed():
			end = timeline.Failed
			outcome[metrics.OutcomeFailed]++
		default:
			outcome[metrics.OutcomeFinished]++
		}
		if c.Started == 0 {
			continue // never ran: nothing to draw
		}
		var written int64
		for _, n := range c.Sizes {
			written += n
		}
		att := uint16(c.Attempt + 1)
		o.events = append(o.events,
			timeline.Event{Time: c.Started, Subtask: c.ID, Kind: timeline.Started, Attempt: att, Slot: c.Slot, Raylet: raylet},
			timeline.Event{Time: c.Started + int64(c.TookUS)*1e3, Subtask: c.ID, Kind: end, Attempt: att, Slot: c.Slot, Raylet: raylet,
				BytesWritten: written, Fetch: time.Duration(c.FetchUS) * time.Microsecond})
	}
	*c = wire.Completion{} // holds the batch's memory
	s.flushTimeline()
	if s.met != nil {
		for k, n := range outcome {
			if n > 0 {
				s.met.Completed(metrics.Outcome(k), n)
			}
		}
	}
}

// observeEffects records the dispatches of one step and the jobs that
// ended, and refreshes the gauges when due.
func (s *Server) observeEffects(fx *sched.Effects) {
	if s.rec == nil {
		return
	}
	o := &s.obs
	now := time.Now()
	dispatched := 0
	for i := range fx.Pulls {
		p := &fx.Pulls[i]
		if len(p.Subtasks) == 0 {
			continue
		}
		dispatched += len(p.Subtasks)
		raylet := ""
		if ts, ok := s.lead.m.Session(p.Raylet).(*transport.Session); ok {
			raylet = ts.RemoteID()
		}
		for k := range p.Subtasks {
			sp := &p.Subtasks[k]
			var read int64 // the bytes of its inputs, as the leader knows them
			for i := range sp.Inputs {
				read += sp.Inputs[i].Size
			}
			o.events = append(o.events, timeline.Event{Time: now.UnixNano(), Subtask: sp.ID, Kind: timeline.Dispatched,
				Attempt: uint16(sp.Attempt + 1), Slot: timeline.NoSlot, Raylet: raylet, Ops: o.opsName(sp.Ops), BytesRead: read})
		}
	}
	s.flushTimeline()
	if s.met == nil {
		return
	}
	if dispatched > 0 {
		s.met.Dispatched(dispatched)
	}
	for _, c := range fx.Commits {
		if _, ok := c.Cmd.(sched.SubmitJob); ok {
			s.met.Submitted()
		}
	}
	for _, e := range fx.Ended {
		st, ok := jobStateOf(e.State)
		if !ok {
			continue
		}
		var d time.Duration
		if at, ok := s.lead.m.Submitted(e.Task); ok {
			d = now.Sub(at)
		}
		s.met.Ended(st, d)
	}
	if now.Sub(o.last) >= gaugeEvery {
		o.last = now
		s.refreshGauges()
	}
}

// flushTimeline records the batch, by job, and empties it.
func (s *Server) flushTimeline() {
	o := &s.obs
	es := o.events
	for len(es) > 0 {
		task := es[0].Subtask.Task()
		n := 1
		for n < len(es) && es[n].Subtask.Task() == task {
			n++
		}
		s.rec.RecordBatch(task, es[:n])
		es = es[n:]
	}
	clear(o.events)
	o.events = o.events[:0]
}

// refreshGauges sets the subtask, job, queue and raylet gauges from the
// machine. Called on the loop only.
func (s *Server) refreshGauges() {
	c := s.lead.m.Counts()
	var sub [metrics.NumSubtaskStates]int64
	copy(sub[:], c.Subtasks[:])
	s.met.SetSubtasks(&sub)
	for js, n := range c.Jobs {
		if st, ok := jobStateOf(js); ok {
			s.met.SetJobs(st, n)
		}
	}
	alive, lost := 0, 0
	for id, r := range s.lead.m.RayletInfos() {
		if r.State == "alive" {
			alive++
		} else {
			lost++
		}
		s.met.QueueOf(id).Set(float64(r.Queued))
	}
	s.met.SetRaylets(alive, lost)
}

// jobStateOf maps a job state to the metrics' names.
func jobStateOf(js dag.JobState) (metrics.JobState, bool) {
	switch js {
	case dag.JobSubmitted:
		return metrics.JobWaiting, true
	case dag.JobRunning:
		return metrics.JobRunning, true
	case dag.JobSucceeded:
		return metrics.JobSucceeded, true
	case dag.JobFailed:
		return metrics.JobFailed, true
	case dag.JobCancelled:
		return metrics.JobCancelled, true
	}
	return 0, false
}
