package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/timeline"
	"github.com/phobos-project/phobos/runtime/wire"
)

func newTimelineCmd() *cobra.Command {
	cmd, fs := newCommand("timeline JOB", "write a job's timeline as a Chrome trace (Perfetto): one lane per raylet slot", exactArgs(1, "one job number (phobos jobs lists them)"))
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	out := fs.StringP("output", "o", "", "write the trace to this file instead of standard output")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		task, err := parseTask(args[0])
		if err != nil {
			return err
		}
		return writeTimeline(cmd.Context(), &lf, &cf, task, *out)
	}
	return cmd
}

// writeTimeline writes a job's timeline as a Chrome trace (open it in
// Perfetto or chrome://tracing), one lane per raylet slot, to the file out
// or, when out is "", to standard output.
func writeTimeline(ctx context.Context, lf *logFlags, cf *connectFlags, task dag.TaskID, out string) error {
	conn, err := cf.leaderConn(ctx, lf)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	var tl wire.Timeline
	if err := conn.Call(ctx, wire.MethodJobTimeline, wire.JobRef{Task: task}, &tl); err != nil {
		return fmt.Errorf("timeline of job %d: %w", task, err)
	}
	snap := timeline.Snapshot{Task: task, Dropped: tl.Dropped, Events: make([]timeline.Event, len(tl.Events))}
	for i, e := range tl.Events {
		snap.Events[i] = timeline.Event{Time: e.Time, Subtask: e.Subtask, Kind: timeline.Kind(e.Kind), Attempt: e.Attempt, Slot: e.Slot,
			Raylet: e.Raylet, Ops: e.Ops, BytesRead: e.BytesRead, BytesWritten: e.BytesWritten, Fetch: e.Fetch}
	}
	f := os.Stdout
	if out != "" {
		if f, err = os.Create(out); err != nil {
			return err
		}
		defer f.Close()
	}
	w := bufio.NewWriter(f)
	if err := timeline.WriteTrace(w, snap, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("write the trace: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write the trace: %w", err)
	}
	if out != "" {
		return f.Close()
	}
	return nil
}
