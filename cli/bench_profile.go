package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/spf13/pflag"
)

// profileFlags write a CPU profile or an execution trace of this process
// while bench runs: with the embedded cluster, of heads and raylets
// together (how docs/performance.md's breakdown was found).
type profileFlags struct{ cpu, trace string }

func registerProfileFlags(fs *pflag.FlagSet) *profileFlags {
	f := &profileFlags{}
	fs.StringVar(&f.cpu, "cpuprofile", "", "write a CPU profile of this process to this file (with --sim-raylets, of each job while it runs, to FILE.JOB)")
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
