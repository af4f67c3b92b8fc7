package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/spf13/pflag"
)

// runIn runs `phobos ARGS...` in-process and returns its exit status,
// stdout and stderr.
func runIn(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// The bugs issue 16 lists, each as the user met it.
func TestHelpAndUsageMistakes(t *testing.T) {
	t.Setenv(envAddr, "")
	t.Run("cancel -h is help on stdout, exit 0", func(t *testing.T) {
		code, out, errs := runIn(t, "cancel", "-h")
		if code != 0 || !strings.Contains(out, "phobos cancel JOB") || !strings.Contains(out, "--timeout") || errs != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
		}
	})
	t.Run("help demo is demo's help", func(t *testing.T) {
		code, out, _ := runIn(t, "help", "demo")
		if code != 0 || !strings.Contains(out, "phobos demo") || !strings.Contains(out, "--size") {
			t.Fatalf("exit %d, stdout %q", code, out)
		}
	})
	t.Run("help for a subcommand", func(t *testing.T) {
		code, out, _ := runIn(t, "help", "raft", "remove-peer")
		if code != 0 || !strings.Contains(out, "phobos raft remove-peer") || !strings.Contains(out, "--id") {
			t.Fatalf("exit %d, stdout %q", code, out)
		}
	})
	t.Run("raft foo names raft once", func(t *testing.T) {
		code, _, errs := runIn(t, "raft", "foo")
		if code != 2 || !strings.HasPrefix(errs, `phobos raft: unknown subcommand "foo"`) || strings.Count(errs, "phobos raft:") != 1 {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("chaos -h shows one default for --seed", func(t *testing.T) {
		code, out, _ := runIn(t, "chaos", "-h")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--seed") {
				line = l
			}
		}
		if code != 0 || line == "" || strings.Count(line, "default") != 1 {
			t.Fatalf("exit %d, --seed line %q", code, line)
		}
	})
	t.Run("unknown command", func(t *testing.T) {
		code, _, errs := runIn(t, "stauts")
		if code != 2 || !strings.Contains(errs, `unknown command "stauts"`) || !strings.Contains(errs, "status") {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("a bad flag value names the flag", func(t *testing.T) {
		code, _, errs := runIn(t, "jobs", "--state", "DONE")
		if code != 2 || !strings.Contains(errs, "--state") || !strings.Contains(errs, `"DONE" is not a job state`) {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("job wants one number", func(t *testing.T) {
		code, _, errs := runIn(t, "job")
		if code != 2 || !strings.Contains(errs, "give one job number") {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
	})
}

// Flags after the job number are flags, and with no head listening the
// command fails within its --timeout naming the address it could not
// reach.
func TestFlagsAfterArgumentAndNoHead(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"cancel", "2"}, {"job", "2"}, {"jobs"}, {"status"}, {"raft", "list-peers"},
		{"demo", "--size", "10", "--chunk", "5"},
	} {
		t.Run(cmd[0], func(t *testing.T) {
			start := time.Now()
			args := append(cmd, "--connect", addr, "--timeout", "500ms", "--insecure-plaintext", "--token-file", tok)
			code, _, errs := runIn(t, args...)
			took := time.Since(start)
			if code != 1 || !strings.Contains(errs, addr) {
				t.Fatalf("exit %d, stderr %q; want 1 and the address %s named", code, errs, addr)
			}
			if strings.Contains(errs, "job \"") {
				t.Fatalf("the job number was blamed: %q", errs)
			}
			if took > 20*time.Second {
				t.Fatalf("took %v with --timeout 500ms", took)
			}
		})
	}
}

func TestCompletionAndVersion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errs := runIn(t, "completion", sh)
		if code != 0 || !strings.Contains(out, "phobos") || len(out) < 500 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", sh, code, len(out), errs)
		}
	}
	code, out, _ := runIn(t, "version")
	if code != 0 || out != phobos.BuildVersion().String()+"\n" || !strings.HasPrefix(out, "phobos ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	code, out, _ = runIn(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "phobos ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fs := newTestFlags()
	good := write("good.conf", "# a head\nid = h1\n--listen = \"10.0.0.1:7070\"\n\nslots=4\n")
	if err := fs.fs.Parse([]string{"--slots", "8"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs.fs, good); err != nil {
		t.Fatal(err)
	}
	if *fs.id != "h1" || *fs.listen != "10.0.0.1:7070" || *fs.slots != 8 {
		t.Fatalf("id %q listen %q slots %d; want h1, 10.0.0.1:7070 and 8 (the command line wins)", *fs.id, *fs.listen, *fs.slots)
	}
	for _, c := range []struct{ text, want string }{
		{"idd = h1\n", `bad.conf:1: unknown key "idd"`},
		{"id = h1\nid = h2\n", `bad.conf:2: "id" is set again (first on line 1)`},
		{"just words\n", `bad.conf:1: "just words": want name = value`},
		{"slots = many\n", `bad.conf:1: slots = "many"`},
		{"fault-file = /x\n", `unknown key "fault-file"`}, // hidden flags stay out
	} {
		err := applyConfig(newTestFlags().fs, write("bad.conf", c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: %v; want an error containing %q", c.text, err, c.want)
		}
	}
	if err := applyConfig(newTestFlags().fs, filepath.Join(dir, "missing.conf")); err == nil || !strings.Contains(err.Error(), "missing.conf") {
		t.Errorf("missing config file: %v", err)
	}
}

// A daemon refuses a config file's unknown key before it starts.
func TestDaemonConfigUnknownKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "raylet.conf")
	if err := os.WriteFile(p, []byte("head = 127.0.0.1:1\nstore_size = 1GiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runIn(t, "raylet", "--config", p)
	if code != 2 || !strings.Contains(errs, `unknown key "store_size"`) || !strings.Contains(errs, p) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// testFlags is a small flag set shaped like a daemon's.
type testFlags struct {
	fs         *pflag.FlagSet
	id, listen *string
	slots      *int
}

func newTestFlags() *testFlags {
	_, fs := newCommand("test", "", nil)
	f := &testFlags{fs: fs}
	f.id = fs.String("id", "", "")
	f.listen = fs.String("listen", "", "")
	f.slots = fs.Int("slots", 0, "")
	fs.String("fault-file", "", "")
	fs.MarkHidden("fault-file")
	return f
}

func TestJobsFilterAndPrint(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	long := "subtask 7.3 (add, sum) failed on raylet r2 after 4 attempts: " + strings.Repeat("a very long reason ", 10)
	jobs := []phobos.JobStatus{
		{Task: 1, Status: dag.JobSucceeded, Subtasks: 5, Finished: 5, Submitted: t0, Ended: t0.Add(time.Second), Error: "stale text"},
		{Task: 2, Status: dag.JobFailed, Subtasks: 5, Finished: 3, Submitted: t0, Ended: t0.Add(2 * time.Second), Error: long},
		{Task: 3, Status: dag.JobRunning, Subtasks: 5, Finished: 1, Submitted: t0},
		{Task: 4, Status: dag.JobFailed, Subtasks: 1, Submitted: t0, Ended: t0, Error: "x"},
		{Task: 5, Status: dag.JobSucceeded, Subtasks: 1, Finished: 1, Submitted: t0, Ended: t0, Released: true},
	}
	var st stateFlag
	if err := st.Set("failed, running"); err != nil {
		t.Fatal(err)
	}
	got := filterJobs(jobs, st, 2)
	if len(got) != 2 || got[0].Task != 3 || got[1].Task != 4 {
		t.Fatalf("filter FAILED,RUNNING limit 2: %v", got)
	}
	if len(filterJobs(jobs, nil, 0)) != len(jobs) {
		t.Fatal("no filter should keep every job")
	}
	var b bytes.Buffer
	if err := printJobs(&b, jobs, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "stale text") {
		t.Errorf("a SUCCEEDED job's error text is shown:\n%s", out)
	}
	if !strings.Contains(out, "job 2 failed: "+long) {
		t.Errorf("the failed job's error is cut or missing:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if got, want := strings.Contains(line, "(released)"), f[0] == "5"; got != want {
			t.Errorf("line %q: released %v, want %v (only job 5 was released):\n%s", line, got, want, out)
		}
	}
	f := parseFailure(long)
	if f == nil || f.Subtask != "7.3" || f.Ops != "add, sum" || f.Raylet != "r2" || f.Attempts != 4 || !strings.HasPrefix(f.Cause, "a very long") {
		t.Fatalf("parseFailure: %+v", f)
	}
	if f := parseFailure("subtask 1.0 (fn) failed on raylet r1 after 1 attempt (not retried: user code): boom"); f == nil || f.Attempts != 1 || f.Cause != "boom" {
		t.Fatalf("parseFailure, one attempt: %+v", f)
	}
	if parseFailure("cancelled by admin") != nil {
		t.Fatal("parseFailure found a subtask in a cancel reason")
	}
	b.Reset()
	if err := printJob(&b, jobReport{JobStatus: jobs[1], Failure: parseFailure(long)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAILED\n", "failed subtask", "7.3 (add, sum)", "on raylet", "r2", "attempts", "error: " + long} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("phobos job output lacks %q:\n%s", want, b.String())
		}
	}
	for _, c := range []struct {
		st   phobos.JobStatus
		want string
	}{
		{jobs[0], "kept"},
		{jobs[4], "released"},
		{phobos.JobStatus{Task: 6, Status: dag.JobRunning, Released: true}, "released when it ends"},
	} {
		b.Reset()
		if err := printJob(&b, jobReport{JobStatus: c.st}); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^results +` + c.want + `$`).MatchString(b.String()) {
			t.Errorf("phobos job of job %d: want results %q:\n%s", c.st.Task, c.want, b.String())
		}
	}
}

func TestWaitNotice(t *testing.T) {
	var b syncBuffer
	stop := notice(&b, "waiting for a head leader at h:1", time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), "waiting for a head leader at h:1") {
		if time.Now().After(deadline) {
			t.Fatal("no notice after its delay")
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
	stop()
	stop() // twice is fine

	var quiet syncBuffer
	notice(&quiet, "never", time.Hour)()
	if quiet.String() != "" {
		t.Fatalf("a stopped notice printed %q", quiet.String())
	}
	// Not a terminal: no notice, ever.
	if stop := waitNotice(&quiet, "x"); stop == nil {
		t.Fatal("nil stop")
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(7, phobos.Progress{Status: dag.JobRunning, Finished: 5, Subtasks: 10}, 1234*time.Millisecond, 10)
	if want := "job 7 [#####-----] 5/10 subtasks  RUNNING  1.2s"; got != want {
		t.Fatalf("progressLine = %q, want %q", got, want)
	}
	if got := progressLine(7, phobos.Progress{Status: dag.JobSubmitted}, 0, 4); !strings.Contains(got, "[----] 0/0") {
		t.Fatalf("progressLine before lowering = %q", got)
	}
}
