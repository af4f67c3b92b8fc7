package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// phobos up on its own directory brings the same cluster back: the same
// head address and IDs, and the Raft data (a job run before the restart
// is still listed). While it runs, a second up on the directory refuses at
// once, and an up that contradicts the record refuses saying why.
func TestUpRestartsOnItsDir(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "c")
	up := startUp(t, ctx, bin, "--heads", "1", "--raylets", "1", "--dir", dir, "--store-size", "16MiB", "--store-dir", t.TempDir(), "--slots", "1")
	first := up.info
	if _, err := runPhobos(ctx, bin, flat("demo", "--connect", first.Heads[0].Addr, first.auth("admin"), "--size", "1000", "--chunk", "100")...); err != nil {
		t.Fatalf("demo before the restart: %v", err)
	}

	start := time.Now()
	out, err := runPhobos(ctx, bin, "up", "--dir", dir)
	if err == nil || !strings.Contains(out, "already up") || time.Since(start) > 20*time.Second {
		t.Fatalf("second up on a running dir: %v after %v: %s; want a refusal at once saying it is already up", err, time.Since(start), out)
	}
	if err := up.stop(os.Interrupt); err != nil {
		t.Fatalf("phobos up exited: %v (stderr %s)", err, up.stderr)
	}

	out, err = runPhobos(ctx, bin, "up", "--dir", dir, "--heads", "3")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(out, "holds a cluster of 1 heads") {
		t.Fatalf("up --heads 3 on a 1-head dir: %v: %s; want exit 2 saying why", err, out)
	}

	again := startUp(t, ctx, bin, "--dir", dir).info
	if again.Heads[0].Addr != first.Heads[0].Addr || again.Heads[0].ID != first.Heads[0].ID || len(again.Raylets) != 1 || again.Raylets[0].ID != first.Raylets[0].ID {
		t.Fatalf("restarted cluster %+v; want the heads and raylets of %+v", again, first)
	}
	out, err = runPhobos(ctx, bin, flat("jobs", "--connect", again.Heads[0].Addr, again.auth("admin"), "--json")...)
	if err != nil {
		t.Fatalf("jobs after the restart: %v: %s", err, out)
	}
	var j struct {
		Job    int
		Status string
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &j); err != nil || j.Job != 1 || j.Status != "SUCCEEDED" {
		t.Fatalf("jobs after the restart: %q (%v); want job 1 SUCCEEDED from before", out, err)
	}
	// DIR/env still points at it.
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil || !strings.Contains(string(env), first.Heads[0].Addr) {
		t.Fatalf("DIR/env: %q, %v", env, err)
	}
}

// Without --dir, up's temp dir (token and certificates included) is
// removed when Ctrl-C stops the cluster cleanly.
func TestUpRemovesItsTempDir(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up := startUp(t, ctx, bin, "--heads", "1", "--raylets", "1", "--store-size", "16MiB", "--insecure-plaintext")
	dir := filepath.Dir(up.info.Env)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := os.Stat(up.info.TokenFile); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(up.info.Env)
	if err != nil || !strings.Contains(string(env), "PHOBOS_INSECURE_PLAINTEXT=1") {
		t.Fatalf("DIR/env of a plaintext cluster: %q, %v", env, err)
	}
	if err := up.stop(os.Interrupt); err != nil {
		t.Fatalf("phobos up exited: %v (stderr %s)", err, up.stderr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp dir %s after a clean stop: %v; want it removed", dir, err)
	}
}

// --binary must name an executable; the error names the flag.
func TestUpBinaryChecked(t *testing.T) {
	code, _, errs := runIn(t, "up", "--binary", filepath.Join(t.TempDir(), "nope"))
	if code != 2 || !strings.Contains(errs, "--binary") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}
