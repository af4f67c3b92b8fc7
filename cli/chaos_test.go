package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos/chaos"
)

// runChaosCmd runs `phobos chaos` (the -race binary, whose cluster is
// -race binaries too) and decodes its JSON report. The cluster's
// directory is kept, and its path logged, when the test fails.
func runChaosCmd(t *testing.T, timeout time.Duration, args ...string) (*chaos.Report, error) {
	t.Helper()
	bin := buildPhobos(t)
	dir, err := os.MkdirTemp("", "phobos-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster data and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"chaos", "--json", "--keep", "--dir", dir, "--log-level", "warn"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("phobos chaos %s: %v in %v", strings.Join(args, " "), runErr, time.Since(start).Round(time.Millisecond))
	if s := stderr.String(); s != "" {
		t.Logf("stderr:\n%s", s)
	}
	var rep chaos.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("phobos chaos --json printed no report (%v): %s", err, stdout.String())
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("report:\n%s", text.String())
	return &rep, runErr
}

// checkRun asserts what every chaos run in CI must show: every planned
// fault struck (none skipped) and recovered, and no invariant broke.
func checkRun(t *testing.T, rep *chaos.Report, runErr error, kinds ...string) {
	t.Helper()
	if len(rep.Faults) != len(kinds) {
		t.Fatalf("%d faults in the report, want %d (%v)", len(rep.Faults), len(kinds), kinds)
	}
	for i, f := range rep.Faults {
		if f.Kind != kinds[i] {
			t.Errorf("fault %d is %s, want %s", i, f.Kind, kinds[i])
		}
		if f.Skipped != "" {
			t.Errorf("fault %s was skipped: %s", f.Kind, f.Skipped)
		}
		if f.Recovery < 0 || f.Target == "" || f.At == "" {
			t.Errorf("fault %+v: no target, point or recovery", f)
		}
	}
	if rep.Jobs.Submitted == 0 || rep.Jobs.Succeeded == 0 {
		t.Errorf("jobs %+v: the workload did not run", rep.Jobs)
	}
	if rep.IDs.Result != "linearizable" || rep.IDs.Acked == 0 {
		t.Errorf("ID check %+v", rep.IDs)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation [%s] %s\n%s", v.Invariant, v.Detail, v.Log)
	}
	if runErr != nil && len(rep.Violations) == 0 {
		t.Errorf("phobos chaos failed without a violation: %v", runErr)
	}
	if runErr == nil && len(rep.Violations) > 0 {
		t.Error("phobos chaos exited 0 despite violations")
	}
}

// TestChaosSmoke is the fixed-seed CI schedule: a kill -9 of the head
// leader, of a raylet, and a partition of the leader from the other heads,
// each in the middle of a job, on 3 heads and 3 raylets, under -race. Every
// job must succeed with the right answer (--strict), no ID may be handed
// out twice, no store space may leak, and every process must exit cleanly.
func TestChaosSmoke(t *testing.T) {
	rep, err := runChaosCmd(t, 3*time.Minute, "--schedule", "smoke", "--seed", "1", "--strict")
	checkRun(t, rep, err, chaos.KillLeader, chaos.KillRaylet, chaos.PartitionLeader)
	if rep.Jobs.Failed != 0 || rep.Jobs.Succeeded != rep.Jobs.Submitted {
		t.Errorf("jobs %+v: under the smoke schedule every job must succeed", rep.Jobs)
	}
}

// TestChaosStoreFaults fills every store with held results, then fills
// one raylet's spill directory and makes another's read-only (tmpfs
// mounts: root only). Jobs may fail here, but only with a clear error.
func TestChaosStoreFaults(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("spill faults mount a tmpfs per raylet: run as root")
	}
	rep, err := runChaosCmd(t, 3*time.Minute, "--schedule", "2:fill-stores/2s,3:spill-full/2s#0,4:spill-readonly/2s#1", "--seed", "2")
	checkRun(t, rep, err, chaos.FillStores, chaos.SpillFull, chaos.SpillReadOnly)
}

// Interrupting chaos while a fault holds stops the run without a false
// violation: the cluster could not be seen serving again only because
// the run ended. It had reported "the cluster did not serve again within
// 1m0s", kept its directory and exited as a failed run. Now the report
// says interrupted, with no violation, the directory goes and the exit
// status is 1, as for any interrupted command.
func TestChaosInterruptedDuringAFault(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	// One head, killed for a minute: the cluster cannot serve until it is
	// back, so the interrupt lands before any recovery is measured.
	cmd := exec.CommandContext(ctx, bin, "chaos", "--json", "--seed", "1", "--heads", "1", "--raylets", "1",
		"--schedule", "1:kill-leader/1m")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var log bytes.Buffer
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "fault injected") {
			break
		}
	}
	if !strings.Contains(log.String(), "fault injected") {
		t.Fatalf("chaos ended before its fault: %s", log.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("chaos interrupted: %v, want exit status 1\n%s%s", err, log.String(), rest)
	}
	var rep chaos.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("no report (%v): %s", err, stdout.String())
	}
	if !rep.Interrupted || len(rep.Violations) != 0 {
		t.Fatalf("report: interrupted %v, violations %+v; want interrupted and none", rep.Interrupted, rep.Violations)
	}
	if !strings.Contains(string(rest), "interrupted before the end") {
		t.Errorf("stderr does not say the run was interrupted: %s", rest)
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		t.Errorf("chaos left %s in its temp dir", e.Name())
	}
}
