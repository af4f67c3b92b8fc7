package phobos

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/backoff"
	"github.com/phobos-project/phobos/internal/ctxutil"
	"github.com/phobos-project/phobos/runtime/leader"
	"github.com/phobos-project/phobos/runtime/objclient"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// Error sentinels; match them with errors.Is.
var (
	ErrCancelled        = dag.ErrCancelled
	ErrNotFound         = dag.ErrNotFound
	ErrPermissionDenied = dag.ErrPermissionDenied
	ErrInvalidGraph     = dag.ErrInvalidArgument
	ErrFatal            = dag.ErrFatal
	ErrUnavailable      = dag.ErrUnavailable
	// ErrResourceExhausted: a job over the head's budgets, a full admission
	// queue, a busy server, a full store or disk.
	ErrResourceExhausted = dag.ErrResourceExhausted
	// ErrUserCode: a subtask's Go function or kernel returned an error (it
	// is not retried unless wrapped with fn.Retryable).
	ErrUserCode = dag.ErrUserCode
)

// JobState is where a job stands (dag.JobState): SUBMITTED, RUNNING, then
// SUCCEEDED, FAILED or CANCELLED. As text it is its upper-case name.
type JobState = dag.JobState

// The job states.
const (
	JobUnknown   = dag.JobUnknown
	JobSubmitted = dag.JobSubmitted
	JobRunning   = dag.JobRunning
	JobSucceeded = dag.JobSucceeded
	JobFailed    = dag.JobFailed
	JobCancelled = dag.JobCancelled
)

// Graph is anything that can be run: a tensor, or a graph built by hand.
type Graph interface {
	TileableGraph() (*dag.TileableGraph, error)
}

// Options are a client's defaults for the jobs it submits.
type Options struct {
	// Retries is how often a failed subtask runs again before the job
	// fails; 0 means the cluster's default (3).
	Retries int
	// ResultTTL is how long results stay on the cluster after the job ends
	// unless released; 0 means the cluster's default.
	ResultTTL time.Duration
	// Fusion is "chain" (default), "none" or "coloring".
	Fusion string
	// ChunkSize is the session's default chunk size: arrays built without
	// one (for example tensor.Rand without tensor.Chunks) are cut into
	// chunks of this many elements per dimension. 0 leaves them whole.
	ChunkSize int64
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// ZeroCopy makes single-chunk results that a raylet on this node holds
	// come back as read-only views into its object store instead of copies
	// (see Value.ZeroCopy and Value.Release). Results on other nodes, and
	// results of several chunks, are still copied.
	ZeroCopy bool
	// Transport, if set, is the base transport configuration.
	Transport transport.Config
	// ConnectTimeout bounds how long Connect waits for a head leader to
	// answer: 0 means DefaultConnectTimeout, a negative value waits until
	// Connect's context ends. It bounds Connect only, not later calls.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is how long Connect waits for a head leader
// unless Options.ConnectTimeout says otherwise.
const DefaultConnectTimeout = 30 * time.Second

// Client is a connection to a cluster. It is safe for concurrent use.
type Client struct {
	opts  Options
	tcfg  transport.Config
	head  *leader.Conn
	log   *slog.Logger
	local *localCluster

	mu      sync.Mutex
	peers   map[string]*transport.Session
	lr      *objclient.LocalReader
	putTask dag.TaskID     // the put task this client stores objects under (put.go)
	putTk   *ticket.Ticket // the leader's ticket to write and read them
	putSeq  atomic.Uint64
	puts    []*Object
}

// Connect connects to the cluster whose heads include addr (a
// comma-separated list is fine), proving who it is with cred (see
// Credentials). It returns once it has reached the head leader; it fails
// when ctx ends or after Options.ConnectTimeout (DefaultConnectTimeout),
// with an error naming the addresses it tried.
func Connect(ctx context.Context, addr string, cred Credentials, opts ...Options) (*Client, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	var heads []string
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			heads = append(heads, a)
		}
	}
	if len(heads) == 0 {
		return nil, errors.New("phobos: no head address given")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tcfg := o.Transport
	if tcfg.NodeID == "" {
		tcfg.NodeID = "driver"
	}
	if err := cred.apply(&tcfg, transport.RoleClient); err != nil {
		return nil, err
	}
	tcfg.Logger = log
	c := &Client{opts: o, tcfg: tcfg, log: log, peers: map[string]*transport.Session{}}
	c.head = leader.New(leader.Config{Heads: heads, Transport: tcfg, Logger: log, OnConnect: c.attachPuts})
	wait := o.ConnectTimeout
	if wait == 0 {
		wait = DefaultConnectTimeout
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if wait > 0 {
		cctx, cancel = context.WithTimeout(ctx, wait)
	}
	_, err := c.head.Session(cctx)
	cancel()
	if err != nil {
		c.head.Close()
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, dag.Errorf(dag.KindDeadlineExceeded, "phobos: no head leader answered at %s within %v (is the cluster up, and are these its heads?): %w", addr, wait, err)
		}
		return nil, fmt.Errorf("phobos: connect to %s: %w", addr, err)
	}
	return c, nil
}

// Close closes the client's connections and, for a Local client, stops the
// embedded cluster and removes its files.
func (c *Client) Close() error {
	c.mu.Lock()
	puts := c.puts
	c.puts = nil
	c.mu.Unlock()
	if len(puts) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, o := range puts {
			if err := o.Release(ctx); err != nil {
				c.log.Debug("release put object at close", "id", o.ID, "err", err)
			}
		}
		cancel()
	}
	err := c.head.Close()
	c.mu.Lock()
	for a, s := range c.peers {
		s.Close()
		delete(c.peers, a)
	}
	lr := c.lr
	c.lr = nil
	c.mu.Unlock()
	if lr != nil {
		lr.Close()
	}
	if c.local != nil {
		if lerr := c.local.close(); err == nil {
			err = lerr
		}
	}
	return err
}

// Value is one result: its dtype and shape, and its bytes (row-major,
// little-endian). A result of opaque bytes (dtype Bytes: function results,
// key/value maps) split across several chunks keeps the chunks apart.
type Value struct {
	Meta dag.Meta
	Data []byte
	// Parts holds each chunk of a multi-chunk Bytes result, in grid order;
	// Data is then nil.
	Parts [][]byte

	release func() error // ends a zero-copy view
}

// ZeroCopy reports whether Data is a read-only view into the object store
// of a raylet on this node (see Options.ZeroCopy) rather than a copy.
// Writing to it faults; it is valid until Release.
func (v *Value) ZeroCopy() bool { return v.release != nil }

// Release ends a zero-copy view, letting the raylet free the object; Data
// must not be used afterwards. For a copied value it does nothing.
func (v *Value) Release() error {
	if v.release == nil {
		return nil
	}
	r := v.release
	v.release, v.Data = nil, nil
	return r()
}

// Chunks returns the value's chunks: Parts, or Data as the only one.
func (v *Value) Chunks() [][]byte {
	if v.Parts != nil {
		return v.Parts
	}
	return [][]byte{v.Data}
}

// Shape returns the value's shape.
func (v *Value) Shape() []int64 { return v.Meta.Shape }

// Float64s returns a float64 value's elements.
func (v *Value) Float64s() []float64 {
	if v.Meta.DType != dag.Float64 {
		return nil
	}
	return dag.BytesAsFloat64s(v.Data)
}

// Int64s returns an int64 value's elements.
func (v *Value) Int64s() []int64 {
	if v.Meta.DType != dag.Int64 {
		return nil
	}
	return dag.BytesAsInt64s(v.Data)
}

// Float64 returns a scalar float64 value (the first element otherwise).
func (v *Value) Float64() float64 {
	f := v.Float64s()
	if len(f) == 0 {
		return 0
	}
	return f[0]
}

// Job is a submitted job.
type Job struct {
	c    *Client
	Task dag.TaskID

	// Set when JobOptions.Logs streams the job's log lines.
	logsDone chan struct{}
	stopLogs context.CancelFunc
}

// Result is a finished job's outputs.
type Result struct {
	Task     dag.TaskID
	Subtasks int
	Values   []*Value
}

// Run submits g, waits for it, fetches its first output and releases the
// job's results on the cluster.
func (c *Client) Run(ctx context.Context, g Graph) (*Value, error) {
	j, err := c.Submit(ctx, g)
	if err != nil {
		return nil, err
	}
	res, err := j.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return res.Values[0], nil
}

// JobOptions override the client's defaults for one job.
type JobOptions struct {
	Name      string        // shown by phobos jobs
	Retries   int           // 0: the client's default
	ResultTTL time.Duration // 0: the client's default
	Fusion    string        // "": the client's default
	// NoPipeline keeps each subtask at the head until its inputs are
	// stored. By default the head may send a subtask to the raylet making
	// its inputs ahead of them, so that dependent subtasks on one raylet
	// run without a round trip to the head between them.
	NoPipeline bool
	// Logs, when set, receives the job's log lines (fn.Logger) as they
	// come, as Job.Logs writes them; Wait and Done return once the last
	// are written. The raylets must serve HTTP (phobos up and Local do).
	Logs io.Writer
}

// Submit submits g and returns at once with its job.
func (c *Client) Submit(ctx context.Context, g Graph, opts ...JobOptions) (*Job, error) {
	if g == nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "phobos: submit: nil graph")
	}
	tg, err := g.TileableGraph()
	if err != nil {
		return nil, fmt.Errorf("phobos: submit: %w", err)
	}
	if c.opts.ChunkSize > 0 {
		tg = withChunkSize(tg, c.opts.ChunkSize)
	}
	jo := wire.JobOptions{Retries: c.opts.Retries, ResultTTL: c.opts.ResultTTL, Fusion: c.opts.Fusion}
	var logs io.Writer
	for _, o := range opts {
		if o.Logs != nil {
			logs = o.Logs
		}
		if o.Name != "" {
			jo.Name = o.Name
		}
		if o.Retries != 0 {
			jo.Retries = o.Retries
		}
		if o.ResultTTL != 0 {
			jo.ResultTTL = o.ResultTTL
		}
		if o.Fusion != "" {
			jo.Fusion = o.Fusion
		}
		jo.NoPipeline = jo.NoPipeline || o.NoPipeline
	}
	req := wire.SubmitJob{Graph: *tg, Options: jo}
	rand.Read(req.RequestID[:])
	var rep wire.SubmitReply
	if err := c.head.Call(ctx, wire.MethodSubmitJob, req, &rep); err != nil {
		return nil, fmt.Errorf("phobos: submit: %w", err)
	}
	j := &Job{c: c, Task: rep.Task}
	if logs != nil {
		j.followLogs(logs)
	}
	return j, nil
}

// withChunkSize returns g with the session's chunk size on every node whose
// chunk size the user did not choose.
func withChunkSize(g *dag.TileableGraph, c int64) *dag.TileableGraph {
	out := *g
	out.Nodes = slices.Clone(g.Nodes)
	for i := range out.Nodes {
		n := &out.Nodes[i]
		if !n.ChunkDefault || len(n.Shape) == 0 {
			continue
		}
		n.ChunkSize = make([]int64, len(n.Shape))
		for d := range n.ChunkSize {
			n.ChunkSize[d] = c
		}
		n.ChunkDefault = false
	}
	return &out
}

// Progress is one report on a running job.
type Progress struct {
	Status   JobState // SUBMITTED, RUNNING, SUCCEEDED, FAILED, CANCELLED (UNKNOWN when the head could not be asked)
	Finished int      // subtasks finished so far (of every stage lowered so far)
	Subtasks int      // subtasks lowered so far
	Err      error    // set on the last report of a failed or cancelled job
}

// Progress reports the job's progress about every interval (at least 50ms)
// until it ends; the last report carries the final status. The channel is
// closed after it, or when ctx ends.
func (j *Job) Progress(ctx context.Context, interval time.Duration) <-chan Progress {
	interval = max(interval, 50*time.Millisecond)
	ch := make(chan Progress, 1)
	go func() {
		defer close(ch)
		last := Progress{Finished: -1}
		for {
			var w wire.JobStatus
			err := j.c.head.Call(ctx, wire.MethodWaitJob, wire.WaitJob{Task: j.Task, Timeout: interval}, &w)
			if err != nil {
				if ctx.Err() == nil {
					select {
					case ch <- Progress{Status: JobUnknown, Err: err}:
					case <-ctx.Done():
					}
				}
				return
			}
			st := JobStatusOf(&w)
			p := Progress{Status: st.Status, Finished: st.Finished, Subtasks: st.Subtasks, Err: st.Err()}
			if p.Status != last.Status || p.Finished != last.Finished || p.Subtasks != last.Subtasks || st.Terminal() {
				select {
				case ch <- p:
				case <-ctx.Done():
					return
				}
				last = p
			}
			if st.Terminal() {
				return
			}
			if st.Finished == last.Finished {
				// WaitJob returns at once for a job another head resumes:
				// do not spin.
				if ctxutil.Sleep(ctx, interval/4) != nil {
					return
				}
			}
		}
	}()
	return ch
}

// Jobs lists the cluster's jobs that the client may see (its own; every
// job for an admin), oldest first.
func (c *Client) Jobs(ctx context.Context) ([]JobStatus, error) {
	var list wire.ListJobs
	if err := c.head.Call(ctx, wire.MethodListJobs, struct{}{}, &list); err != nil {
		return nil, err
	}
	out := make([]JobStatus, len(list.Jobs))
	for i := range list.Jobs {
		out[i] = JobStatusOf(&list.Jobs[i])
	}
	return out, nil
}

// Job returns a handle on a job submitted earlier (by any client).
func (c *Client) Job(task dag.TaskID) *Job { return &Job{c: c, Task: task} }

// Status reports the job without waiting.
func (j *Job) Status(ctx context.Context) (JobStatus, error) {
	var st wire.JobStatus
	if err := j.c.head.Call(ctx, wire.MethodWaitJob, wire.WaitJob{Task: j.Task}, &st); err != nil {
		return JobStatus{}, err
	}
	return JobStatusOf(&st), nil
}

// Done waits for the job to end without fetching its outputs, and returns
// its final status; a failed or cancelled job returns its error too (the
// status's Err).
func (j *Job) Done(ctx context.Context) (JobStatus, error) {
	st, err := j.done(ctx, false)
	if err != nil && st == nil {
		return JobStatus{}, err
	}
	return JobStatusOf(st), err
}

// done waits for the job to end; with results, a succeeded job's answer
// locates its results. It returns the wire status (nil if the wait
// failed) and, for a job that did not succeed, its error.
func (j *Job) done(ctx context.Context, results bool) (*wire.JobStatus, error) {
	for {
		var st wire.JobStatus
		if err := j.c.head.Call(ctx, wire.MethodWaitJob, wire.WaitJob{Task: j.Task, Timeout: 10 * time.Second, Results: results}, &st); err != nil {
			return nil, fmt.Errorf("phobos: wait for job %d: %w", j.Task, err)
		}
		if !st.Terminal() {
			continue
		}
		j.logsWritten(ctx)
		return &st, JobStatusOf(&st).Err()
	}
}

// Wait waits for the job to end, fetches its outputs and releases them on
// the cluster. A failed or cancelled job returns its error, whose kind
// matches ErrFatal or ErrCancelled.
func (j *Job) Wait(ctx context.Context) (*Result, error) {
	retry := backoff.Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}.Start()
	for {
		st, err := j.done(ctx, true)
		if err != nil {
			return nil, err
		}
		vals, err := j.c.fetchAll(ctx, st.Results, st.Ticket)
		if err != nil {
			if errors.Is(err, dag.ErrNotFound) || errors.Is(err, dag.ErrUnavailable) {
				// A holder died after the job ended; the head rebuilds lost
				// results, so wait again.
				j.c.log.Debug("result fetch failed; waiting for the job again", "task", j.Task, "err", err)
				if serr := retry.Wait(ctx); serr != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if err := j.Release(ctx); err != nil {
			j.c.log.Debug("release results", "task", j.Task, "err", err)
		}
		return &Result{Task: j.Task, Subtasks: st.Subtasks, Values: vals}, nil
	}
}

// Cancel cancels the job. Cancelling a job that has ended does nothing.
func (j *Job) Cancel(ctx context.Context) error {
	var st wire.JobStatus
	return j.c.head.Call(ctx, wire.MethodCancelJob, wire.JobRef{Task: j.Task}, &st)
}

// Release frees the job's results on the cluster. A job that has not
// ended yet (still running, or cancelled with subtasks still stopping) is
// released when it ends, by whichever head leads then; Release returns
// once the request is recorded and does not wait for the end.
func (j *Job) Release(ctx context.Context) error {
	return j.c.head.Call(ctx, wire.MethodReleaseJob, wire.JobRef{Task: j.Task}, nil)
}

// Status returns the cluster's heads and raylets as the leader sees them.
func (c *Client) Status(ctx context.Context) (ClusterStatus, error) {
	var st wire.ClusterStatus
	if err := c.head.Call(ctx, wire.MethodClusterStatus, struct{}{}, &st); err != nil {
		return ClusterStatus{}, err
	}
	return ClusterStatusOf(&st), nil
}

// fetchAll reads every result from the raylets holding it and assembles
// each output from its chunks.
func (c *Client) fetchAll(ctx context.Context, refs []wire.ResultRef, tk *ticket.Ticket) ([]*Value, error) {
	vals := make([]*Value, len(refs))
	for i := range refs {
		v, err := c.fetchResult(ctx, &refs[i], tk)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

func (c *Client) fetchResult(ctx context.Context, ref *wire.ResultRef, tk *ticket.Ticket) (*Value, error) {
	meta := ref.Meta
	width := int64(meta.DType.Size())
	if len(ref.Chunks) == 1 {
		data, m, release, err := c.fetchView(ctx, &ref.Chunks[0], nil, c.opts.ZeroCopy, tk)
		if err != nil {
			return nil, err
		}
		return &Value{Meta: m, Data: data, release: release}, nil
	}
	if width == 0 || meta.DType == dag.Bytes {
		// Opaque chunks: no layout to assemble them into.
		v := &Value{Meta: meta, Parts: make([][]byte, len(ref.Chunks))}
		for k := range ref.Chunks {
			data, _, err := c.fetchObject(ctx, &ref.Chunks[k], nil, tk)
			if err != nil {
				return nil, err
			}
			v.Parts[k] = data
		}
		return v, nil
	}
	total := meta.Elements() * width
	out := make([]byte, total)
	l := newLayout(meta.Shape, ref.NSplits, width)
	sem := make(chan struct{}, 8)
	errc := make(chan error, len(ref.Chunks))
	var wg sync.WaitGroup
	for k := range ref.Chunks {
		wg.Add(1)
		sem <- struct{}{}
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			var buf []byte
			if l.contiguous(k) {
				off, n := l.span(k)
				buf = out[off : off+n]
			}
			data, _, err := c.fetchObject(ctx, &ref.Chunks[k], buf, tk)
			if err != nil {
				errc <- err
				return
			}
			if buf == nil {
				l.scatter(k, data, out)
			}
		}(k)
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return &Value{Meta: meta, Data: out}, nil
}

// fetchObject reads one object, trying each location: a zero-copy view
// when asked for and the raylet shares this node (release then ends the
// view), else a checksummed copy into dst (if it has the right size) or a
// new buffer.
func (c *Client) fetchObject(ctx context.Context, ref *wire.ObjectRef, dst []byte, tk *ticket.Ticket) ([]byte, dag.Meta, error) {
	data, meta, _, err := c.fetchView(ctx, ref, dst, false, tk)
	return data, meta, err
}

func (c *Client) fetchView(ctx context.Context, ref *wire.ObjectRef, dst []byte, view bool, tk *ticket.Ticket) ([]byte, dag.Meta, func() error, error) {
	var errs []error
	for _, addr := range ref.Locations {
		s, err := c.peer(ctx, addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("from raylet %s: %w", addr, err))
			continue
		}
		if view && c.localReader().MayBeLocal(addr) {
			obj, err := c.localReader().Read(ctx, s, ref.ID, tk)
			if err == nil {
				meta, err := dag.DecodeMeta(obj.Meta)
				if err != nil {
					obj.Release()
					return nil, dag.Meta{}, nil, err
				}
				return obj.Data, meta, obj.Release, nil
			}
			if !errors.Is(err, objclient.ErrNotLocal) {
				errs = append(errs, fmt.Errorf("from raylet %s: %w", addr, err))
				continue
			}
		}
		data, rawMeta, err := objclient.FetchObject(ctx, s, ref.ID, dst, tk)
		if err == nil {
			meta, err := dag.DecodeMeta(rawMeta)
			if err != nil {
				return nil, dag.Meta{}, nil, err
			}
			return data, meta, nil, nil
		}
		errs = append(errs, fmt.Errorf("from raylet %s: %w", addr, err))
	}
	if len(errs) == 0 {
		return nil, dag.Meta{}, nil, dag.Errorf(dag.KindUnavailable, "phobos: result %s has no live location", ref.ID)
	}
	return nil, dag.Meta{}, nil, fmt.Errorf("phobos: fetch result %s: %w", ref.ID, errors.Join(errs...))
}

// localReader maps raylets' arenas on this node, created on first use.
func (c *Client) localReader() *objclient.LocalReader {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lr == nil {
		c.lr = objclient.NewLocalReader()
	}
	return c.lr
}

func (c *Client) peer(ctx context.Context, addr string) (*transport.Session, error) {
	c.mu.Lock()
	if s, ok := c.peers[addr]; ok && s.Err() == nil {
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	s, err := transport.Dial(ctx, addr, c.tcfg)
	if err != nil {
		return nil, err
	}
	s.Serve(nil) // a driver serves nothing
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.peers[addr]; ok && old.Err() == nil {
		s.Close()
		return old, nil
	}
	c.peers[addr] = s
	return s, nil
}
