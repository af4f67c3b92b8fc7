package cli

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"

	"github.com/spf13/pflag"
)

// profileFlags write a CPU profile or an execution trace of this process
// while bench runs: with the embedded cluster, of heads and raylets
// together (how docs/performance.md's breakdown was found).
type profileFlags struct{ cpu, mem, trace string }

// registerProfileFlags adds the flags to fs; sim says whether fs also has
// --sim-raylets, which writes a profile a job.
func registerProfileFlags(fs *pflag.FlagSet, sim bool) *profileFlags {
	f := &profileFlags{}
	cpu, mem := "", ""
	if sim {
		cpu, mem = " (with --sim-raylets, of each job while it runs, to FILE.JOB)", " (with --sim-raylets, after each job's measured runs, to FILE.JOB)"
	}
	fs.StringVar(&f.cpu, "cpuprofile", "", "write a CPU profile of this process to this file"+cpu)
	fs.StringVar(&f.mem, "memprofile", "", "write a heap profile of this process (what is live after a collection) to this file when bench ends"+mem)
	fs.StringVar(&f.trace, "trace", "", "write an execution trace of this process to this file (go tool trace)")
	return f
}

func (f *profileFlags) start() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if f.cpu != "" {
		w, err := os.Create(f.cpu)
		if err != nil {
			return stop, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(w); err != nil {
			w.Close()
			return stop, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); w.Close() })
	}
	if f.mem != "" {
		stops = append(stops, func() {
			if err := writeHeapProfile(f.mem); err != nil {
				fmt.Fprintf(os.Stderr, "phobos bench: --memprofile: %v\n", err)
			}
		})
	}
	if f.trace != "" {
		w, err := os.Create(f.trace)
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("--trace: %w", err)
		}
		if err := trace.Start(w); err != nil {
			w.Close()
			stop()
			return func() {}, fmt.Errorf("--trace: %w", err)
		}
		stops = append(stops, func() { trace.Stop(); w.Close() })
	}
	return stop, nil
}

// writeHeapProfile writes a profile of the live heap to path, after a
// collection so that it shows what is live now.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
