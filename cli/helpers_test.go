package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/runtime/cluster"
	"github.com/phobos-project/phobos/transport/pki"
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
	if os.Getenv(driverEnv) != "" {
		// Re-executed by a test as a driver process (puts_test.go).
		os.Exit(runTestDriver())
	}
	code := m.Run()
	for _, d := range []string{binDir, testopsBin.dir, noRaceBin.dir} {
		if d != "" {
			os.RemoveAll(d)
		}
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
	// HTTPTokenFile is the web services' bearer token (DIR/http-token).
	HTTPTokenFile string            `json:"http_token_file"`
	Client        *cluster.Identity `json:"client"`
	Admin         *cluster.Identity `json:"admin"`
	Env           string            `json:"env"`
}

type upMember struct {
	ID, Addr string
	PID      int
	HTTP     string // its web service's base URL
}

// startUp runs `phobos up --json` with args and reads the cluster it
// printed. Unless stop already stopped it, the process is interrupted when
// the test ends (it stops its children, which remove their files), and
// killed if it has not exited 15s later; it gets SIGTERM should the test
// binary die first.
func startUp(t *testing.T, ctx context.Context, bin string, args ...string) *upProc {
	t.Helper()
	p := &upProc{stderr: new(bytes.Buffer)}
	p.cmd = exec.CommandContext(ctx, bin, append([]string{"up", "--json"}, args...)...)
	// ctx ending (a test's deferred cancel runs before its cleanups)
	// interrupts phobos up too, rather than kill it: killed, it could not
	// stop its raylets, which died with it and left their spill
	// directories in the temp dir.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(os.Interrupt) }
	p.cmd.WaitDelay = 15 * time.Second
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.done {
			return
		}
		p.cmd.Process.Signal(os.Interrupt)
		kill := time.AfterFunc(15*time.Second, func() { p.cmd.Process.Kill() })
		p.cmd.Wait()
		kill.Stop()
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

// flat flattens strings and string slices into one argument list.
func flat(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("flat: %T", p))
		}
	}
	return out
}

// clientCreds are the credentials of c's client user.
func clientCreds(t testing.TB, c *cluster.Cluster) phobos.Credentials {
	t.Helper()
	if c.Spec.Insecure {
		return phobos.Credentials{Token: c.Token}
	}
	id := c.Identity("client")
	cr, err := phobos.TLSFiles(id.CA, id.Cert, id.Key)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// auth returns the flags that present user's credentials ("client" or
// "admin") of the cluster phobos up printed.
func (u upInfo) auth(user string) []string {
	if u.TokenFile != "" {
		return []string{"--insecure-plaintext", "--token-file", u.TokenFile}
	}
	if u.Client == nil || u.Admin == nil {
		panic("phobos up printed no credentials")
	}
	switch user {
	case "client":
		return u.Client.Flags()
	case "admin":
		return u.Admin.Flags()
	}
	dir := filepath.Dir(u.Client.CA) // a member: ID.pem beside the CA
	return cluster.Identity{CA: u.Client.CA, Cert: filepath.Join(dir, user+".pem"), Key: filepath.Join(dir, user+"-key.pem")}.Flags()
}

// otherCA makes a CA that is not the cluster's and a client certificate
// "mallory" it signed, under dir.
func otherCA(t testing.TB, dir string) cluster.Identity {
	t.Helper()
	ca, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(pki.Request{Role: pki.RoleClient, Name: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	id := cluster.Identity{CA: filepath.Join(dir, "other-ca.pem"), Cert: filepath.Join(dir, "mallory.pem"), Key: filepath.Join(dir, "mallory-key.pem")}
	if err := ca.WriteFiles(id.CA, filepath.Join(dir, "other-ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFiles(id.Cert, id.Key); err != nil {
		t.Fatal(err)
	}
	return id
}
