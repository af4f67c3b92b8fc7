package cli

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/cluster"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
)

// loopbackRaft are the Raft flags tuned for loopback (docs/operations.md).
var loopbackRaft = []string{"--raft-heartbeat", "100ms", "--raft-election", "100ms", "--raft-lease", "50ms"}

// headCall makes one call at the head at addr.
func headCall(ctx context.Context, addr string, cfg transport.Config, m transport.Method, req, resp any) error {
	s, err := transport.Dial(ctx, addr, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Serve(nil)
	return s.Call(ctx, m, req, resp)
}

// waitStatus polls the cluster status at addr until ok accepts it.
func waitStatus(t testing.TB, ctx context.Context, addr string, token transport.Config, what string, ok func(wire.ClusterStatus) bool) wire.ClusterStatus {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var st wire.ClusterStatus
	var err error
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st = wire.ClusterStatus{}
		err = headCall(cctx, addr, token, wire.MethodClusterStatus, wire.ClusterStatusRequest{Timeout: 500 * time.Millisecond}, &st)
		cancel()
		if err == nil && ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last status %+v, err %v)", what, ctx.Err(), st, err)
		case <-tick.C:
		}
	}
}

// settled reports whether the status shows n voters, one leader, everyone
// answering and every head's log applied up to the leader's commit index.
func settled(n int) func(wire.ClusterStatus) bool {
	return func(st wire.ClusterStatus) bool {
		if len(st.Heads) != n || st.Leader == "" {
			return false
		}
		var commit uint64
		for _, h := range st.Heads {
			if h.ID == st.Leader {
				commit = h.CommitIndex
			}
		}
		for _, h := range st.Heads {
			if (h.Role != "leader" && h.Role != "follower") || h.AppliedIndex < commit {
				return false
			}
		}
		return true
	}
}

func roleOf(st wire.ClusterStatus, role string) (wire.HeadInfo, bool) {
	for _, h := range st.Heads {
		if h.Role == role {
			return h, true
		}
	}
	return wire.HeadInfo{}, false
}

func allocTask(ctx context.Context, addr string, token transport.Config) (dag.TaskID, error) {
	var a wire.Allocated
	err := headCall(ctx, addr, token, wire.MethodAllocTask, wire.AllocTask{RequestID: raftmeta.NewRequestID(), Wait: 10 * time.Second}, &a)
	return a.Task, err
}

// startHeadProc starts a head process outside the cluster's own list and
// kills it (by PID) when the test ends.
func startHeadProc(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), "head.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"head"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %v ---\n%s", cmd.Args, b)
		}
	})
	return cmd
}

// TestHeadMembership drives membership with real processes: a second start
// from the same --peers, `phobos status --json` at a follower, a head that
// joins with --join, `phobos raft remove-peer`, and a head whose data dir
// was wiped rejoining under its old ID.
func TestHeadMembership(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := cluster.Start(ctx, cluster.Spec{Binary: bin, Dir: dir, Heads: 3, Raylets: 0,
		HeadArgs: append(slices.Clone(loopbackRaft), "--log-level", "info")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	tok := adminConfig(t, c)
	first, err := allocTask(ctx, c.Heads[0].Addr, tok)
	if err != nil {
		t.Fatal(err)
	}

	// A second start with the same --peers is not an error: stop every
	// head, start them again, and the sequence goes on.
	for _, h := range c.Heads {
		if !h.Stop(10 * time.Second) {
			t.Fatalf("head %s did not stop cleanly", h.ID)
		}
	}
	for _, h := range c.Heads {
		if err := c.Restart(h); err != nil {
			t.Fatal(err)
		}
	}
	st := waitStatus(t, ctx, c.Heads[1].Addr, tok, "3 heads after a restart", settled(3))
	next, err := allocTask(ctx, c.Heads[2].Addr, tok)
	if err != nil || next != first+1 {
		t.Fatalf("alloc after restart = %d, %v; want %d", next, err, first+1)
	}

	// status --json at a follower: exactly the documented shape.
	f, _ := roleOf(st, "follower")
	out, err := exec.CommandContext(ctx, bin, flat("status", "--connect", f.Addr, c.AuthFlags("admin"), "--json")...).Output()
	if err != nil {
		t.Fatalf("status --json at follower %s: %v", f.ID, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("status --json %q: %v", out, err)
	}
	keys := slices.Sorted(maps.Keys(doc))
	if strings.Join(keys, ",") != "heads,leader,raylets,term" {
		t.Fatalf("status --json keys = %v, want heads, leader, raylets, term", keys)
	}
	var js phobos.ClusterStatus
	if err := json.Unmarshal(out, &js); err != nil {
		t.Fatal(err)
	}
	var heads []map[string]any
	json.Unmarshal(doc["heads"], &heads)
	if js.Leader == "" || js.Term == 0 || len(js.Heads) != 3 || js.Raylets == nil || len(heads) != 3 {
		t.Fatalf("status --json = %s", out)
	}
	for _, h := range heads {
		for _, k := range []string{"id", "addr", "role", "commit_index"} {
			if _, ok := h[k]; !ok {
				t.Fatalf("status --json head %v lacks %q", h, k)
			}
		}
	}

	// A fourth head joins through a follower.
	h4addr := freeAddr(t)
	h4dir := filepath.Join(dir, "h4")
	h4args := flat("--id", "h4", "--listen", h4addr, "--data-dir", h4dir, "--join", f.Addr,
		memberAuth(t, c, pki.RoleHead, "h4"), "--log-level", "info", loopbackRaft)
	h4 := startHeadProc(t, bin, h4args...)
	waitStatus(t, ctx, c.Heads[0].Addr, tok, "h4 to join", settled(4))

	// phobos raft remove-peer through a follower; a wrong ID is refused.
	out, err = exec.CommandContext(ctx, bin, flat("raft", "remove-peer", "--connect", f.Addr, c.AuthFlags("admin"), "--id", "h4")...).CombinedOutput()
	if err != nil {
		t.Fatalf("raft remove-peer h4: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, flat("raft", "remove-peer", "--connect", f.Addr, c.AuthFlags("admin"), "--id", "nope")...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), `"nope" is not a voter`) {
		t.Fatalf("raft remove-peer of an unknown head: %v\n%s", err, out)
	}
	waitStatus(t, ctx, c.Heads[0].Addr, tok, "h4 to leave", settled(3))
	// The removed head stops serving by itself and says why.
	poll(t, ctx, 50*time.Millisecond, "the removed head h4 to exit", func() bool { return !processAlive(h4.Process.Pid) })
	if lines := logLines(t, h4.Stdout.(*os.File).Name(), "removed from the Raft voters", "stops serving"); len(lines) != 1 {
		t.Fatalf("removed head's log says %q; want one line saying it was removed and stops", lines)
	}

	// On a loaded machine the 100ms Raft timers may be between leaders for
	// a moment: wait for one, then h4 must be gone from the list.
	poll(t, ctx, 100*time.Millisecond, "raft list-peers to show a leader", func() bool {
		out, err = exec.CommandContext(ctx, bin, flat("raft", "list-peers", "--connect", c.Heads[0].Addr, c.AuthFlags("admin"))...).CombinedOutput()
		return err == nil && strings.Contains(string(out), "leader")
	})
	if strings.Contains(string(out), "h4") {
		t.Fatalf("raft list-peers after h4 left:\n%s", out)
	}

	// A voter dies with its data: kill -9, wipe, start with --join under
	// the same ID. The leader drops the stale entry and adds it back.
	var victim *cluster.Proc
	for _, h := range c.Heads {
		if h.ID == f.ID {
			victim = h
		}
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(victim.DataDir); err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, h := range c.Heads {
		if h != victim {
			others = append(others, h.Addr)
		}
	}
	startHeadProc(t, bin, flat("--id", victim.ID, "--listen", victim.Addr, "--data-dir", victim.DataDir,
		"--join", strings.Join(others, ","), c.AuthFlags(victim.ID), "--log-level", "info", loopbackRaft)...)
	st = waitStatus(t, ctx, others[0], tok, victim.ID+" to rejoin and catch up", settled(3))
	last, err := allocTask(ctx, victim.Addr, tok)
	if err != nil || last <= next {
		t.Fatalf("alloc at the rejoined head = %d, %v; want more than %d", last, err, next)
	}
	t.Logf("after rejoin: leader %s, term %d, heads %+v", st.Leader, st.Term, st.Heads)

	// A join the cluster refuses for good ends the process with the reason:
	// a head certificate of another CA.
	mallory := otherCA(t, dir)
	mallory.CA = c.Identity("admin").CA
	ca, err := pki.LoadCA(filepath.Join(dir, "other-ca.pem"), filepath.Join(dir, "other-ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	h9, err := ca.Issue(pki.Request{Role: pki.RoleHead, Name: "h9"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h9.ReplaceFiles(mallory.Cert, mallory.Key); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, bin, flat("head", "--id", "h9", "--listen", freeAddr(t), "--data-dir", filepath.Join(dir, "h9"),
		"--join", others[0], mallory.Flags())...).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "signed by another CA") {
		t.Fatalf("head --join with another CA's certificate: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, flat("head", "--id", "h9", "--data-dir", filepath.Join(dir, "h9"),
		"--peers", "h9=127.0.0.1:1", "--join", others[0], c.AuthFlags("admin"))...).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "give one of them") {
		t.Fatalf("head with --peers and --join: %v\n%s", err, out)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// BenchmarkFailover measures, with real processes, the time from kill -9
// of the leader to the first successful allocation on the new leader, asked
// of a surviving head that forwards it: with the loopback Raft flags, with
// the LAN defaults, with the defaults before the leader's heartbeats were
// spaced out (lease and commit timeout 250ms, so heartbeats every 50ms) and
// with a 1s heartbeat timeout (the idle-cost trades in docs/performance.md).
// Each runs max(b.N, 10) trials and reports the median and max.
//
// go test -run XXX -bench Failover -benchtime 1x ./cli
func BenchmarkFailover(b *testing.B) {
	bin := buildPlainPhobos(b)
	b.Run("loopback-flags", func(b *testing.B) { benchFailover(b, bin, loopbackRaft) })
	b.Run("lan-defaults", func(b *testing.B) { benchFailover(b, bin, nil) })
	b.Run("lease-250ms", func(b *testing.B) {
		benchFailover(b, bin, []string{"--raft-lease", "250ms", "--raft-commit-timeout", "250ms"})
	})
	b.Run("heartbeat-1s", func(b *testing.B) {
		benchFailover(b, bin, []string{"--raft-heartbeat", "1s", "--raft-election", "1s", "--raft-lease", "500ms"})
	})
}

func benchFailover(b *testing.B, bin string, raftFlags []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Spec{Binary: bin, Dir: b.TempDir(), Heads: 3, Raylets: 0,
		HeadArgs: append(slices.Clone(raftFlags), "--log-level", "warn")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Stop() })
	tok := adminConfig(b, c)
	trials := max(b.N, 10)
	var samples []time.Duration
	b.ResetTimer()
	for i := range trials {
		st := waitStatus(b, ctx, c.Heads[i%3].Addr, tok, "a settled cluster", settled(3))
		var dead, asked *cluster.Proc
		for _, h := range c.Heads {
			if h.ID == st.Leader {
				dead = h
			} else if asked == nil {
				asked = h
			}
		}
		// One session to the surviving head, opened before the kill.
		s, err := transport.Dial(ctx, asked.Addr, tok)
		if err != nil {
			b.Fatal(err)
		}
		s.Serve(nil)
		t0 := time.Now()
		if err := dead.Kill(); err != nil {
			b.Fatal(err)
		}
		var a wire.Allocated
		if err := s.Call(ctx, wire.MethodAllocTask, wire.AllocTask{RequestID: raftmeta.NewRequestID(), Wait: 30 * time.Second}, &a); err != nil {
			b.Fatalf("trial %d: alloc after killing %s: %v", i, dead.ID, err)
		}
		d := time.Since(t0)
		s.Close()
		samples = append(samples, d)
		if err := c.Restart(dead); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	med := samples[len(samples)/2]
	if len(samples)%2 == 0 {
		med = (samples[len(samples)/2-1] + samples[len(samples)/2]) / 2
	}
	b.ReportMetric(float64(med.Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(samples[0].Microseconds())/1000, "min-ms")
	b.Logf("failover over %d trials: %v", len(samples), samples)
}

// buildPlainPhobos builds the binary without the race detector, for
// timings, into a directory removed when the benchmark ends.
func buildPlainPhobos(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "phobos")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/phobos-project/phobos/cmd/phobos").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// adminConfig is a transport configuration for calls as c's admin.
func adminConfig(t testing.TB, c *cluster.Cluster) transport.Config {
	t.Helper()
	cfg, err := c.Transport("admin", transport.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// memberAuth issues a certificate for a new member of c (a head joining
// later) and returns the flags that present it.
func memberAuth(t testing.TB, c *cluster.Cluster, role pki.Role, name string) []string {
	t.Helper()
	if err := c.IssueFor(role, name); err != nil {
		t.Fatal(err)
	}
	return c.AuthFlags(name)
}
