package chaos

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Config configures a run. Zero values mean the defaults given. Run reads
// it and keeps no reference to it.
type Config struct {
	// Binary is the phobos executable the cluster runs; default
	// os.Executable() (so `phobos chaos` runs its own binary).
	Binary string
	// Dir is where the cluster's data, logs and fault files go; default a
	// new temporary directory, removed after a run without violations
	// unless Keep is set.
	Dir  string
	Keep bool

	// Seed fixes the workload and the faults.
	Seed uint64
	// Schedule is ScheduleRandom (the default), "smoke", or a list of
	// faults (see ParseSchedule).
	Schedule string
	// Faults are the kinds a random schedule draws from; default every kind
	// that can run here (the tmpfs ones only as root, the head ones that
	// need a majority only with 3 or more heads).
	Faults []string
	// Steps is how many workload steps to submit. 0 means until Duration
	// has passed (random schedules), or up to the last fault's step plus 2
	// (other schedules).
	Steps int
	// Duration bounds the workload of a random schedule with Steps 0;
	// default 1m. It is not a timeout: jobs in flight still finish.
	Duration time.Duration

	// Heads (1, 3 or 5; default 3), Raylets (default 3) and Slots per
	// raylet (default 2).
	Heads, Raylets, Slots int
	// StoreSize is each raylet's store in bytes; default 32 MiB.
	StoreSize int64
	// Drivers is how many separate client connections submit jobs; default 3.
	Drivers int
	// InFlight caps the jobs running at once; default 2 × Drivers.
	InFlight int
	// JobTimeout is how long an acknowledged job may take before it counts
	// as hanging; default 2m.
	JobTimeout time.Duration
	// RayletTimeout is the heads' --raylet-timeout; default 2s.
	RayletTimeout time.Duration
	// Strict makes a job that fails, even with a clear error, a violation:
	// for schedules whose faults the cluster should ride out completely.
	Strict bool
	// HeadArgs and RayletArgs are extra flags for every head or raylet.
	HeadArgs, RayletArgs []string
	// Logger hears the run's progress; nil discards.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.Heads == 0 {
		c.Heads = 3
	}
	if c.Heads != 1 && c.Heads != 3 && c.Heads != 5 {
		return fmt.Errorf("chaos: %d heads; run 1, 3 or 5", c.Heads)
	}
	if c.Raylets == 0 {
		c.Raylets = 3
	}
	if c.Raylets < 1 {
		return fmt.Errorf("chaos: %d raylets; want at least 1", c.Raylets)
	}
	if c.Slots <= 0 {
		c.Slots = 2
	}
	if c.StoreSize <= 0 {
		c.StoreSize = 32 << 20
	}
	if c.Drivers <= 0 {
		c.Drivers = 3
	}
	if c.InFlight <= 0 {
		c.InFlight = 2 * c.Drivers
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = 2 * time.Minute
	}
	if c.RayletTimeout <= 0 {
		c.RayletTimeout = 2 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = time.Minute
	}
	if c.Steps < 0 {
		return fmt.Errorf("chaos: %d steps; want 0 (until --duration) or more", c.Steps)
	}
	if c.Schedule == "" {
		c.Schedule = ScheduleRandom
	}
	if len(c.Faults) == 0 {
		for _, k := range Kinds {
			if k.MinHeads <= c.Heads && (!k.Root || os.Geteuid() == 0) && (c.Raylets > 1 || !strings.Contains(k.Name, "raylet")) {
				c.Faults = append(c.Faults, k.Name)
			}
		}
	}
	for _, f := range c.Faults {
		if _, ok := kindInfo(f); !ok {
			return fmt.Errorf("chaos: unknown fault kind %q; kinds: %s", f, kindNames())
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// command is the `phobos chaos` command line that repeats a run of steps
// steps.
func (c *Config) command(steps int) string {
	s := fmt.Sprintf("phobos chaos --seed %d --schedule %s --steps %d --heads %d --raylets %d --slots %d --store-size %dMiB --drivers %d --in-flight %d",
		c.Seed, shellQuote(c.Schedule), steps, c.Heads, c.Raylets, c.Slots, c.StoreSize>>20, c.Drivers, c.InFlight)
	if c.Schedule == ScheduleRandom {
		s += " --faults " + strings.Join(c.Faults, ",")
	}
	if c.Strict {
		s += " --strict"
	}
	if len(c.HeadArgs) > 0 {
		s += " --head-flags " + shellQuote(strings.Join(c.HeadArgs, " "))
	}
	return s
}

func shellQuote(s string) string {
	if strings.ContainsAny(s, " '\"$\\#*?") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}
