package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

func newLogsCmd() *cobra.Command {
	cmd, fs := newCommand("logs JOB", "print (or follow, -f) the lines a job's subtasks logged", exactArgs(1, "one job number (phobos jobs lists them)"))
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	subtask := fs.String("subtask", "", "only this subtask's lines (its ID as phobos prints it)")
	follow := fs.BoolP("follow", "f", false, "follow: print lines as they come until the job ends")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		task, err := parseTask(args[0])
		if err != nil {
			return err
		}
		var sub dag.SubtaskID
		if *subtask != "" {
			if sub, err = dag.ParseSubtaskID(*subtask); err != nil {
				return usagef("--subtask %q: %v", *subtask, err)
			}
		}
		return printLogs(cmd.Context(), &lf, &cf, task, sub, *follow)
	}
	return cmd
}

// printLogs prints the lines a job's subtasks logged (fn.Logger), oldest
// first; following, it prints them as they come until the job ends.
func printLogs(ctx context.Context, lf *logFlags, cf *connectFlags, task dag.TaskID, sub dag.SubtaskID, follow bool) error {
	conn, err := cf.leaderConn(ctx, lf)
	if err != nil {
		return err
	}
	defer conn.Close()
	cursor := ""
	for {
		var page wire.LogPage
		req := wire.JobLogs{Task: task, Subtask: sub, Cursor: cursor}
		if follow {
			req.Wait = 2 * time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, cf.timeout)
		err := conn.Call(cctx, wire.MethodJobLogs, req, &page)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while following
			}
			return fmt.Errorf("logs of job %d: %w", task, err)
		}
		for _, l := range page.Lines {
			fmt.Println(phobos.LogLine{Time: l.Time, Subtask: l.Subtask, Attempt: int(l.Attempt), Level: slog.Level(l.Level), Text: l.Text})
		}
		for _, r := range page.Unreachable {
			fmt.Printf("# raylet %s did not answer; its lines are missing\n", r)
		}
		cursor = page.Cursor
		if len(page.Lines) > 0 {
			continue
		}
		if !follow {
			return nil
		}
		var st wire.JobStatus
		cctx, cancel = context.WithTimeout(ctx, cf.timeout)
		err = conn.Call(cctx, wire.MethodWaitJob, wire.WaitJob{Task: task}, &st)
		cancel()
		if err != nil {
			return err
		}
		if st.Terminal() {
			follow = false // one more read takes the last lines
		}
	}
}
