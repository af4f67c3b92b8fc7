package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/bench"
)

// TestCLIJobsAndCancel lists jobs and cancels one with the CLI.
func TestCLIJobsAndCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 1, 1)
	bin := buildPhobos(t)
	drv, err := phobos.Connect(ctx, c.HeadAddrs(), clientCreds(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	done, err := drv.Submit(ctx, bench.SleepSum(4, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Done(ctx); err != nil {
		t.Fatal(err)
	}
	long, err := drv.Submit(ctx, bench.SleepSum(1000, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}

	out, err := exec.CommandContext(ctx, bin, flat("jobs", "--connect", c.HeadAddrs(), c.AuthFlags("admin"), "--json")...).Output()
	if err != nil {
		t.Fatalf("phobos jobs: %v", err)
	}
	status := map[uint32]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var j struct {
			Job    uint32
			Status string
		}
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("jobs --json line %q: %v", line, err)
		}
		status[j.Job] = j.Status
	}
	if status[uint32(done.Task)] != "SUCCEEDED" || status[uint32(long.Task)] != "RUNNING" {
		t.Fatalf("jobs: %v", status)
	}

	taskArg := func(j *phobos.Job) string { return fmt.Sprint(j.Task) }
	out, err = exec.CommandContext(ctx, bin, flat("cancel", "--connect", c.HeadAddrs(), c.AuthFlags("admin"), taskArg(long))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cancelled") {
		t.Fatalf("phobos cancel: %v: %s", err, out)
	}
	if _, err := long.Done(ctx); !strings.Contains(errString(err), "cancelled") {
		t.Fatalf("job after phobos cancel: %v", err)
	}
	// Cancelling a finished job is a clear no-op.
	out, err = exec.CommandContext(ctx, bin, flat("cancel", "--connect", c.HeadAddrs(), c.AuthFlags("admin"), taskArg(done))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "already ended: SUCCEEDED") {
		t.Fatalf("cancel of a finished job: %v: %s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, flat("cancel", "--connect", c.HeadAddrs(), c.AuthFlags("admin"), "nope")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "want a job number") {
		t.Fatalf("cancel nope: %v: %s", err, out)
	}
}

// TestCLIBench runs phobos bench at a small scale on an embedded cluster.
func TestCLIBench(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	heap := filepath.Join(t.TempDir(), "heap")
	out, err := exec.CommandContext(ctx, bin, "bench", "--scale", "0.01", "--json", "--memprofile", heap).Output()
	if err != nil {
		t.Fatalf("phobos bench: %v", err)
	}
	// --memprofile: a gzipped profile of the heap once the bench ended.
	if b, err := os.ReadFile(heap); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("bench --memprofile wrote %d bytes (%v); want a gzipped heap profile", len(b), err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Name    string
			N       int64
			Seconds float64
			PerSec  float64 `json:"per_sec"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bench --json line %q: %v", line, err)
		}
		if r.N <= 0 || r.Seconds <= 0 || r.PerSec <= 0 {
			t.Fatalf("bench line %+v", r)
		}
		names[r.Name] = true
	}
	for _, n := range []string{"independent", "chain", "seed"} {
		if !names[n] {
			t.Fatalf("bench did not run %s: %s", n, out)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A bad flag value gets one clear line naming it, and exit status 1; the
// command's name is said once.
func TestHeadRefusesTooManyRetries(t *testing.T) {
	bin := buildPhobos(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "head", "--id", "h1", "--data-dir", filepath.Join(dir, "h1"), "--insecure-plaintext", "--token-file", tok, "--retries", "1000")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v; want status 1 (output %q)", err, out)
	}
	if want := "phobos head: --retries 1000 is more than 100"; !strings.HasPrefix(string(out), want) {
		t.Fatalf("output %q; want it to start %q", out, want)
	}
}
