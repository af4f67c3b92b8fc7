package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/leader"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// connectFlags are the flags of commands that talk to a running cluster:
// where it is, how long to wait for it and how to prove who this user is.
type connectFlags struct {
	connect string
	timeout time.Duration
	sec     tlsFlags
}

// defaultTimeout is how long a client command waits, in all, for the
// cluster (--timeout).
const defaultTimeout = 30 * time.Second

func (c *connectFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.connect, "connect", defaultConnect(), "addresses of any heads, comma-separated (env "+envAddr+")")
	fs.DurationVar(&c.timeout, "timeout", defaultTimeout, "give up after this long (0: wait as long as it takes)")
	c.sec.register(fs)
}

// envAddr gives --connect its default.
const envAddr = "PHOBOS_ADDR"

func defaultConnect() string {
	if a := os.Getenv(envAddr); a != "" {
		return a
	}
	return "127.0.0.1:7070"
}

// withTimeout bounds ctx by --timeout (0: no bound).
func (c *connectFlags) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// transport returns the transport configuration of a CLI user; in
// plaintext mode it claims the admin role (phobos tools manage the cluster).
func (c *connectFlags) transport(lf *logFlags, nodeID string) (transport.Config, error) {
	log, err := lf.logger()
	if err != nil {
		return transport.Config{}, err
	}
	cfg := transport.Config{NodeID: nodeID, Logger: log}
	if err := c.sec.apply(&cfg, transport.RoleAdmin, log); err != nil {
		return transport.Config{}, err
	}
	return cfg, nil
}

// leaderConn connects to the cluster's leader, waiting for one until ctx
// ends (saying so on a terminal after a while) and failing with the
// addresses it tried.
func (c *connectFlags) leaderConn(ctx context.Context, lf *logFlags) (*leader.Conn, error) {
	cfg, err := c.transport(lf, "cli")
	if err != nil {
		return nil, err
	}
	lc := leader.DefaultConfig()
	lc.Heads, lc.Transport, lc.Logger = strings.Split(c.connect, ","), cfg, cfg.Logger
	if err := lc.Validate(); err != nil {
		return nil, usagef("--connect %q: %v", c.connect, err)
	}
	conn := leader.New(lc)
	stop := waitNotice(os.Stderr, "waiting for a head leader at "+c.connect)
	_, err = conn.Session(ctx)
	stop()
	if err != nil {
		conn.Close()
		return nil, c.unreachable(ctx, err)
	}
	return conn, nil
}

// unreachable is the error of a command that could not reach the cluster:
// it names the addresses and the flags that set them and the deadline.
func (c *connectFlags) unreachable(ctx context.Context, err error) error {
	if ctx.Err() != nil && c.timeout > 0 {
		return fmt.Errorf("no head leader answered at %s within --timeout %v (is the cluster up? --connect or %s names its heads): %w",
			c.connect, c.timeout, envAddr, err)
	}
	return fmt.Errorf("reach a head leader at %s: %w", c.connect, err)
}

// dial connects to the first head in --connect that answers, whatever
// its role.
func (c *connectFlags) dial(ctx context.Context, lf *logFlags, nodeID string) (*transport.Session, error) {
	cfg, err := c.transport(lf, nodeID)
	if err != nil {
		return nil, err
	}
	stop := waitNotice(os.Stderr, "waiting for a head at "+c.connect)
	defer stop()
	s, err := dialAnyHead(ctx, strings.Split(c.connect, ","), cfg, cfg.Logger)
	if err != nil {
		if ctx.Err() != nil && c.timeout > 0 {
			return nil, fmt.Errorf("no head answered at %s within --timeout %v: %w", c.connect, c.timeout, err)
		}
		return nil, err
	}
	return s, nil
}

func parseTask(s string) (dag.TaskID, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, usagef("job %q: want a job number such as 12, as printed by phobos jobs", s)
	}
	return dag.TaskID(n), nil
}

func newCancelCmd() *cobra.Command {
	cmd, fs := newCommand("cancel JOB", "cancel a running job", exactArgs(1, "one job number to cancel"))
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the job's status as JSON (the shape of phobos job --json)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		task, err := parseTask(args[0])
		if err != nil {
			return err
		}
		ctx, cancel := cf.withTimeout(cmd.Context())
		defer cancel()
		conn, err := cf.leaderConn(ctx, &lf)
		if err != nil {
			return err
		}
		defer conn.Close()
		var ws wire.JobStatus
		if err := conn.Call(ctx, wire.MethodCancelJob, wire.JobRef{Task: task}, &ws); err != nil {
			return fmt.Errorf("cancel job %d: %w", task, err)
		}
		// Wait (briefly) for running kernels to stop, so the status printed is final.
		for !ws.Terminal() {
			if err := conn.Call(ctx, wire.MethodWaitJob, wire.WaitJob{Task: task, Timeout: time.Second}, &ws); err != nil {
				return fmt.Errorf("wait for job %d to stop: %w", task, err)
			}
		}
		st := phobos.JobStatusOf(&ws)
		out := cmd.OutOrStdout()
		if *asJSON {
			return json.NewEncoder(out).Encode(st)
		}
		if st.Status == phobos.JobCancelled {
			fmt.Fprintf(out, "job %d cancelled\n", task)
		} else {
			fmt.Fprintf(out, "job %d had already ended: %s (nothing to cancel)\n", task, st.Status)
		}
		return nil
	}
	return cmd
}

// stateFlag is --state: job states to keep, comma-separated.
type stateFlag []dag.JobState

func (s *stateFlag) String() string {
	var n []string
	for _, st := range *s {
		n = append(n, st.String())
	}
	return strings.Join(n, ",")
}
func (s *stateFlag) Type() string { return "STATES" }
func (s *stateFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.ToUpper(strings.TrimSpace(part))
		if part == "" {
			continue
		}
		var st dag.JobState
		if err := st.UnmarshalText([]byte(part)); err != nil || !st.Valid() {
			return fmt.Errorf("%q is not a job state: want SUBMITTED, RUNNING, SUCCEEDED, FAILED or CANCELLED", part)
		}
		*s = append(*s, st)
	}
	return nil
}

func (s stateFlag) keep(st dag.JobState) bool {
	if len(s) == 0 {
		return true
	}
	for _, w := range s {
		if w == st {
			return true
		}
	}
	return false
}

// filterJobs keeps the jobs in the given states, then the newest limit of
// them (0: all), oldest first.
func filterJobs(jobs []phobos.JobStatus, states stateFlag, limit int) []phobos.JobStatus {
	var out []phobos.JobStatus
	for _, j := range jobs {
		if states.keep(j.Status) {
			out = append(out, j)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

func newJobsCmd() *cobra.Command {
	cmd, fs := newCommand("jobs", "list a cluster's jobs", nil)
	cmd.Long = `List the jobs the caller may see (its own; every job for an admin), oldest
first. Failed and cancelled jobs show their error in full; phobos job N
describes one job.`
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per job (the shape of phobos job --json)")
	var states stateFlag
	fs.Var(&states, "state", "list only jobs in these states, comma-separated: SUBMITTED, RUNNING, SUCCEEDED, FAILED, CANCELLED")
	limit := fs.Int("limit", 0, "list only the newest N jobs (0: all)")
	watch := fs.Bool("watch", false, "list again every --interval until interrupted (--timeout bounds each listing)")
	interval := fs.Duration("interval", 2*time.Second, "how often --watch lists")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *limit < 0 {
			return usagef("--limit %d: want 0 (all) or more", *limit)
		}
		if *watch && *interval < 100*time.Millisecond {
			return usagef("--interval %v: want at least 100ms", *interval)
		}
		ctx := cmd.Context()
		cctx, cancel := cf.withTimeout(ctx)
		conn, err := cf.leaderConn(cctx, &lf)
		cancel()
		if err != nil {
			return err
		}
		defer conn.Close()
		out := cmd.OutOrStdout()
		list := func() error {
			lctx, cancel := cf.withTimeout(ctx)
			defer cancel()
			var list wire.ListJobs
			if err := conn.Call(lctx, wire.MethodListJobs, struct{}{}, &list); err != nil {
				return fmt.Errorf("list jobs: %w", cf.unreachable(lctx, err))
			}
			jobs := make([]phobos.JobStatus, len(list.Jobs))
			for i := range list.Jobs {
				jobs[i] = phobos.JobStatusOf(&list.Jobs[i])
			}
			return printJobs(out, filterJobs(jobs, states, *limit), *asJSON)
		}
		if !*watch {
			return list()
		}
		t := time.NewTicker(*interval)
		defer t.Stop()
		for {
			if isTTY(os.Stdout) && !*asJSON {
				fmt.Fprint(out, "\033[H\033[2J") // clear the screen, like watch(1)
			}
			if err := list(); err != nil {
				return err
			}
			if *asJSON {
				fmt.Fprintln(out) // a blank line ends each listing
			}
			select {
			case <-ctx.Done():
				return nil // Ctrl-C ends a watch: not an error
			case <-t.C:
			}
		}
	}
	return cmd
}

// printJobs prints jobs as a table (errors in full, under their job) or
// as JSON lines.
func printJobs(w io.Writer, jobs []phobos.JobStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, j := range jobs {
			if err := enc.Encode(j); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATUS\tSUBTASKS\tSUBMITTED\tTOOK\tOWNER\tNAME")
	var errs []string
	for _, j := range jobs {
		status := j.Status.String()
		if j.Released {
			status += " (released)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", j.Task, status, j.Finished, j.Subtasks,
			j.Submitted.Local().Format(time.DateTime), took(j), orDash(j.Owner), orDash(j.Name))
		if j.Error != "" && j.Status != phobos.JobSucceeded {
			errs = append(errs, fmt.Sprintf("job %d %s: %s", j.Task, strings.ToLower(j.Status.String()), j.Error))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		fmt.Fprintln(w)
	}
	for _, e := range errs {
		if _, err := fmt.Fprintln(w, e); err != nil {
			return err
		}
	}
	return nil
}

// took is how long a job ran, or has been running.
func took(j phobos.JobStatus) string {
	if j.Submitted.IsZero() {
		return "-"
	}
	end := j.Ended
	if end.IsZero() {
		if j.Terminal() {
			return "-"
		}
		end = time.Now()
	}
	return end.Sub(j.Submitted).Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jobReport is what phobos job prints: the job's status (the shape every
// command prints for a job) and, for a job failed by a subtask, which one.
type jobReport struct {
	phobos.JobStatus
	Failure *jobFailure `json:"failure,omitempty"`
}

// jobFailure is the subtask whose last attempt failed a job.
type jobFailure struct {
	Subtask  string `json:"subtask"`
	Ops      string `json:"ops"`
	Raylet   string `json:"raylet"`
	Attempts int    `json:"attempts"`
	Cause    string `json:"cause"`
}

// failureRE reads the facts of the error the leader fails a job with
// (runtime/head/sched: "subtask S (OPS) failed on raylet R after N
// attempt(s)[ (not retried: K)]: CAUSE"). The wire carries the error as
// text; this is the smallest way to show the facts apart.
var failureRE = regexp.MustCompile(`subtask (\S+) \((.*?)\) failed on raylet (\S+) after (\d+) attempts?(?: \(not retried: [^)]*\))?: (.*)$`)

func parseFailure(errText string) *jobFailure {
	m := failureRE.FindStringSubmatch(errText)
	if m == nil {
		return nil
	}
	n, _ := strconv.Atoi(m[4])
	return &jobFailure{Subtask: m[1], Ops: m[2], Raylet: m[3], Attempts: n, Cause: m[5]}
}

func newJobCmd() *cobra.Command {
	cmd, fs := newCommand("job JOB", "describe one job: state, timings, full error, the failed subtask", exactArgs(1, "one job number (phobos jobs lists them)"))
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object (docs/cli.md: the job shape, with failure)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		task, err := parseTask(args[0])
		if err != nil {
			return err
		}
		ctx, cancel := cf.withTimeout(cmd.Context())
		defer cancel()
		conn, err := cf.leaderConn(ctx, &lf)
		if err != nil {
			return err
		}
		defer conn.Close()
		var ws wire.JobStatus
		if err := conn.Call(ctx, wire.MethodWaitJob, wire.WaitJob{Task: task}, &ws); err != nil {
			return fmt.Errorf("job %d: %w", task, err)
		}
		rep := jobReport{JobStatus: phobos.JobStatusOf(&ws)}
		if rep.Status == phobos.JobFailed {
			rep.Failure = parseFailure(rep.Error)
		}
		if *asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
		}
		return printJob(cmd.OutOrStdout(), rep)
	}
	return cmd
}

func printJob(w io.Writer, r jobReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "job\t%d\n", r.Task)
	if r.Name != "" {
		fmt.Fprintf(tw, "name\t%s\n", r.Name)
	}
	fmt.Fprintf(tw, "status\t%s\n", r.Status)
	fmt.Fprintf(tw, "owner\t%s\n", orDash(r.Owner))
	fmt.Fprintf(tw, "subtasks\t%d of %d finished\n", r.Finished, r.Subtasks)
	if !r.Submitted.IsZero() {
		fmt.Fprintf(tw, "submitted\t%s\n", r.Submitted.Local().Format(time.RFC3339Nano))
	}
	if !r.Ended.IsZero() {
		fmt.Fprintf(tw, "ended\t%s\n", r.Ended.Local().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "took\t%s\n", took(r.JobStatus))
	switch {
	case r.Released && r.Terminal():
		fmt.Fprintf(tw, "results\treleased\n")
	case r.Released:
		fmt.Fprintf(tw, "results\treleased when it ends\n")
	case r.Status == phobos.JobSucceeded:
		fmt.Fprintf(tw, "results\tkept\n")
	}
	if f := r.Failure; f != nil {
		fmt.Fprintf(tw, "failed subtask\t%s (%s)\n", f.Subtask, f.Ops)
		fmt.Fprintf(tw, "on raylet\t%s\n", f.Raylet)
		fmt.Fprintf(tw, "attempts\t%d\n", f.Attempts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Error != "" && r.Status != phobos.JobSucceeded {
		_, err := fmt.Fprintf(w, "error: %s\n", r.Error)
		return err
	}
	return nil
}
