package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
)

// Ctrl-C on demo --connect cancels the job it started (and says so, with
// no transport noise); --detach leaves its job running and says how to
// follow it.
func TestInterruptCancelsTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 1, 1)
	bin := buildPhobos(t)
	drv, err := phobos.Connect(ctx, c.HeadAddrs(), clientCreds(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	running := func() []phobos.JobStatus {
		jobs, err := drv.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []phobos.JobStatus
		for _, j := range jobs {
			if !j.Terminal() {
				out = append(out, j)
			}
		}
		return out
	}
	// Enough chunks to run for many seconds on this machine.
	big := []string{"--size", "40000000", "--chunk", "2000"}

	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, flat("demo", "--connect", c.HeadAddrs(), c.AuthFlags("client"), big)...)
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	var job phobos.JobStatus
	poll(t, ctx, 20*time.Millisecond, "demo's job to run", func() bool {
		if r := running(); len(r) == 1 {
			job = r[0]
			return true
		}
		return false
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("demo after Ctrl-C: %v; want exit status 1 (stderr %q)", err, stderr.String())
	}
	if want := fmt.Sprintf("interrupted: cancelled job %d", job.Task); !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "method") {
		t.Fatalf("demo's stderr after Ctrl-C: %q; want %q and no transport error", stderr.String(), want)
	}
	st, err := drv.Job(job.Task).Done(ctx)
	if st.Status != phobos.JobCancelled {
		t.Fatalf("job %d after Ctrl-C: %s (%v); want CANCELLED", job.Task, st.Status, err)
	}

	// --detach: exits at once, the job runs on.
	out, err := exec.CommandContext(ctx, bin, flat("demo", "--connect", c.HeadAddrs(), c.AuthFlags("client"), big, "--detach")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "left running; follow it with: phobos job") {
		t.Fatalf("demo --detach: %v: %s", err, out)
	}
	r := running()
	if len(r) != 1 {
		t.Fatalf("after demo --detach, running jobs %v; want its job", r)
	}
	if !strings.Contains(string(out), fmt.Sprintf("phobos job %d", r[0].Task)) {
		t.Fatalf("demo --detach names another job than %d: %s", r[0].Task, out)
	}
	if err := drv.Job(r[0].Task).Cancel(ctx); err != nil {
		t.Fatal(err)
	}

	// phobos job describes it.
	out, err = exec.CommandContext(ctx, bin, flat("job", fmt.Sprint(job.Task), "--connect", c.HeadAddrs(), c.AuthFlags("client"))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CANCELLED") || !strings.Contains(string(out), "took") {
		t.Fatalf("phobos job %d: %v: %s", job.Task, err, out)
	}
}

// A reader that goes away (phobos chaos | head) ends the command as an
// interrupt does: chaos stops its cluster and removes its directory
// instead of being killed by SIGPIPE at its next log line, which left the
// directory, its tmpfs mounts and the cluster's processes behind.
func TestBrokenPipeEndsTheCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildPhobos(t)
	tmp := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "chaos", "--seed", "1", "--duration", "1m", "--heads", "3", "--raylets", "1", "--faults", "pause-follower")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	w.Close()
	// The first progress line says the cluster is up; then the reader goes.
	line := make([]byte, 4096)
	n, err := r.Read(line)
	if err != nil || !bytes.Contains(line[:n], []byte("cluster up")) {
		t.Fatalf("first output %q, %v; want the cluster-up line", line[:n], err)
	}
	r.Close()
	err = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		t.Fatalf("chaos was killed by %v once its reader went away, want it to stop and clean up (%v)", ws.Signal(), err)
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		// Chaos keeps its directory only when an invariant broke, and its
		// report went to the reader that left: the cluster's logs are what
		// is left to say which.
		t.Errorf("chaos left %s in its temp dir (a violation); its logs end:\n%s", e.Name(), logTails(filepath.Join(tmp, e.Name()), 15))
	}
}

// logTails returns the last n lines of every .log file under dir, and the
// whole of its report.json, each headed by its path.
func logTails(dir string, n int) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		report := d.Name() == "report.json"
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") && !report {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if !report {
			lines = lines[max(0, len(lines)-n):]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", p, strings.Join(lines, "\n"))
		return nil
	})
	return b.String()
}
