package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return fmt.Sprintf("go build: %v\n%s", e.err, e.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// upProc is a `phobos up --json` child process and the cluster it printed.
type upProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	info   upInfo
	done   bool
}

// upInfo is what `phobos up --json` prints.
type upInfo struct {
	Heads     []upMember
	Raylets   []upMember
	TokenFile string `json:"token_file"`
}

type upMember struct {
	ID, Addr string
	PID      int
}

// startUp runs `phobos up --json` with args and reads the cluster it
// printed. The process is killed (with its children, which die with it)
// when the test ends unless stop already stopped it.
func startUp(t *testing.T, ctx context.Context, bin string, args ...string) *upProc {
	t.Helper()
	p := &upProc{stderr: new(bytes.Buffer)}
	p.cmd = exec.CommandContext(ctx, bin, append([]string{"up", "--json"}, args...)...)
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.done {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	if err := json.NewDecoder(stdout).Decode(&p.info); err != nil {
		t.Fatalf("read phobos up --json: %v (stderr: %s)", err, p.stderr.String())
	}
	return p
}

// stop signals phobos up and waits for it to exit.
func (p *upProc) stop(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	err := p.cmd.Wait()
	p.done = true
	return err
}
