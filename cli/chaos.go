package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/phobos-project/phobos/chaos"
	"github.com/phobos-project/phobos/transport/faultnet"
	"github.com/spf13/cobra"
)

func newChaosCmd() *cobra.Command {
	cmd, fs := newCommand("chaos", "start a cluster, run workloads under injected faults, check the invariants", nil)
	var lf logFlags
	fs.StringVar(&lf.level, "log-level", "info", "progress log level on stderr: debug, info, warn or error")
	fs.StringVar(&lf.format, "log-format", "text", "log format: text or json")
	seed := fs.Uint64("seed", 0, "seed of the workload and the faults (default: from the clock; the report prints it)")
	schedule := fs.String("schedule", chaos.ScheduleRandom, "random (faults drawn from the seed), smoke (the CI schedule), or items STEP[@PCT]:KIND[/HOLD][#PICK],...")
	faults := fs.String("faults", "", "fault kinds a random schedule draws from, comma-separated (default: all that can run here); see --list")
	list := fs.Bool("list", false, "list the fault kinds and exit")
	steps := fs.Int("steps", 0, "workload steps to submit (default: until --duration for random schedules, the last fault's step + 2 otherwise)")
	duration := fs.Duration("duration", time.Minute, "how long a random schedule keeps submitting (jobs in flight then finish)")
	heads := fs.Int("heads", 3, "heads: 1, 3 or 5")
	raylets := fs.Int("raylets", 3, "raylets")
	slots := fs.Int("slots", 2, "slots per raylet")
	storeSize := int64(32 << 20)
	fs.Var(byteSize{&storeSize}, "store-size", "object store per raylet")
	drivers := fs.Int("drivers", 3, "driver connections submitting jobs")
	inFlight := fs.Int("in-flight", 0, "most jobs in flight at once (default 2 × drivers)")
	jobTimeout := fs.Duration("job-timeout", 2*time.Minute, "an acknowledged job not ended after this is hanging (a violation)")
	strict := fs.Bool("strict", false, "count a job that fails, even clearly, as a violation (for schedules the cluster should ride out)")
	dir := fs.String("dir", "", "directory for the cluster's data, logs and fault files (default: a temp dir, removed after a run without violations)")
	keep := fs.Bool("keep", false, "keep the directory even when every invariant held")
	binary := fs.String("binary", "", "phobos executable the cluster runs (default: this one)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	headFlags := fs.String("head-flags", "", "more flags for every head, separated by spaces, after the harness's loopback Raft timings (--raft-heartbeat 200ms --raft-election 200ms --raft-lease 100ms): \"--raft-heartbeat 500ms --raft-election 500ms --raft-lease 500ms\" shows what jobs see at a failover with the LAN defaults")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if !fs.Changed("seed") {
			*seed = uint64(time.Now().UnixNano() % 1_000_000)
		}
		if *list {
			for _, k := range chaos.Kinds {
				root := ""
				if k.Root {
					root = " (root)"
				}
				fmt.Printf("%-20s hold %-5v %s%s\n", k.Name, k.Hold, k.Doc, root)
			}
			return nil
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		cfg := chaos.Config{
			Binary: *binary, Dir: *dir, Keep: *keep, Seed: *seed, Schedule: *schedule, Steps: *steps, Duration: *duration,
			Heads: *heads, Raylets: *raylets, Slots: *slots, StoreSize: storeSize, Drivers: *drivers, InFlight: *inFlight,
			JobTimeout: *jobTimeout, Strict: *strict, Logger: log, HeadArgs: strings.Fields(*headFlags),
		}
		if *faults != "" {
			for _, k := range strings.Split(*faults, ",") {
				if k = strings.TrimSpace(k); k != "" {
					cfg.Faults = append(cfg.Faults, k)
				}
			}
		}
		if *schedule != chaos.ScheduleRandom {
			if _, err := chaos.ParseSchedule(*schedule, *seed); err != nil {
				return usageError{err.Error()}
			}
		}
		rep, err := chaos.Run(ctx, cfg)
		if err != nil {
			return err
		}
		if *asJSON {
			err = rep.WriteJSON(os.Stdout)
		} else {
			err = rep.WriteText(os.Stdout)
		}
		if err != nil {
			return err
		}
		if !rep.OK() {
			return fmt.Errorf("%d invariant violation(s); reproduce with: %s", len(rep.Violations), rep.Command)
		}
		if rep.Interrupted {
			// Every invariant held for what ran, but the run is not
			// whole: exit 1, as any interrupted command does.
			return errors.New("interrupted before the end; the report covers what ran")
		}
		return nil
	}
	return cmd
}

// watchFaults puts the fault file's rules in force for this process's
// outgoing conns (and follows the file until ctx ends), returning the dial
// function for transport.Config.Dial; nil when path is "" (no faults, and
// nothing in the way of the normal dialer).
func watchFaults(ctx context.Context, path string, log *slog.Logger) (func(context.Context, string, string) (net.Conn, error), error) {
	if path == "" {
		return nil, nil
	}
	in := faultnet.New(log)
	if err := in.Watch(ctx, path, 0); err != nil {
		return nil, err
	}
	return in.Dial, nil
}
