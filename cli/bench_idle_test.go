package cli

import (
	"os"
	"testing"
)

// TestCPUSecondsCountsThisProcess reads this process's CPU time from
// /proc before and after burning some: it must grow by about what was burnt.
func TestCPUSecondsCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	before, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	burn(t, before, cpuSeconds)
	if _, err := cpuSeconds(1 << 30); err == nil {
		t.Error("cpuSeconds of a process that does not exist gave no error")
	}
}

// TestSchedCPUSecondsCountsThisProcess: the scheduler's count of this
// process's CPU grows by what the process burns, and the tick count of
// /proc/PID/stat, which samples the same time, grows too.
func TestSchedCPUSecondsCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	before, err := schedCPUSeconds(os.Getpid())
	if err != nil {
		t.Skipf("no schedstat on this kernel: %v", err)
	}
	ticks, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	burn(t, before, schedCPUSeconds)
	after, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= ticks {
		t.Errorf("/proc/self/stat's CPU stayed at %.2fs while schedstat counted 0.2s more", ticks)
	}
	if _, err := schedCPUSeconds(1 << 30); err == nil {
		t.Error("schedCPUSeconds of a process that does not exist gave no error")
	}
}

// TestCtxSwitchesCountsThisProcess sums this process's threads' context
// switches: a Go test binary has several threads that have all slept at
// least once, and the count only grows.
func TestCtxSwitchesCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	first, err := ctxSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 {
		t.Fatalf("context switches of this process: %d, want more than 0", first)
	}
	// A goroutine blocked on a channel the test fills parks; waking it
	// may switch threads, never un-switch them.
	done := make(chan int)
	go func() { done <- <-done }()
	done <- 1
	<-done
	second, err := ctxSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if second < first {
		t.Errorf("context switches went down: %d, then %d", first, second)
	}
	if _, err := ctxSwitches(1 << 30); err == nil {
		t.Error("ctxSwitches of a process that does not exist gave no error")
	}
}

// TestLoopbackRTT completes the in-process round trips and reports a rate.
func TestLoopbackRTT(t *testing.T) {
	rate, err := loopbackRTT()
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Fatalf("round trips per second: %v", rate)
	}
}

// burn uses CPU until clock, read for this process, says 0.2 s went by
// since before (CPU time, not wall time: a loaded machine only makes this
// slower).
func burn(t *testing.T, before float64, clock func(pid int) (float64, error)) {
	t.Helper()
	x := 0
	for {
		for i := range 1 << 20 {
			x += i
		}
		now, err := clock(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 0.2 {
			break
		}
	}
	if x == 42 {
		t.Log(x) // keep the loop
	}
}

// TestIdleResultPerSwitch: 1 % of a core over 20 s with 250 switches a
// second is 40 µs a switch; a process that never switched has no figure.
func TestIdleResultPerSwitch(t *testing.T) {
	r := newIdleResult("h1", "leader", 7, 20, 0.2, 5000)
	if r.CPUPercent != 1 || r.Switches != 250 || r.CPUPerSwitch != 40 {
		t.Errorf("0.2 s of CPU and 5,000 switches over 20 s: got %.3g %%, %.3g/s, %.3g µs a switch; want 1 %%, 250/s, 40 µs", r.CPUPercent, r.Switches, r.CPUPerSwitch)
	}
	if r := newIdleResult("r1", "raylet", 8, 20, 0.01, 0); r.CPUPerSwitch != 0 {
		t.Errorf("no switches: %v µs a switch, want 0", r.CPUPerSwitch)
	}
}
