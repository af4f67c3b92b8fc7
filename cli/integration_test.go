package cli

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/runtime/cluster"
)

// buildPhobos builds the phobos binary once per test binary run.
func buildPhobos(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and starts processes; skipped with -short")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "phobos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDir = dir
		bin := filepath.Join(dir, "phobos")
		out, err := exec.Command("go", "build", "-race", "-o", bin, "github.com/phobos-project/phobos/cmd/phobos").CombinedOutput()
		if err != nil {
			binErr = &buildError{out: string(out), err: err}
			return
		}
		binPath = bin
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// startCluster starts a cluster of real processes and stops them (by PID)
// and removes their files when the test ends, even if it fails.
func startCluster(t *testing.T, ctx context.Context, heads, raylets int) *cluster.Cluster {
	t.Helper()
	return startClusterWith(t, ctx, heads, raylets, nil)
}

// startClusterWith is startCluster with extra head flags.
func startClusterWith(t *testing.T, ctx context.Context, heads, raylets int, headArgs []string) *cluster.Cluster {
	t.Helper()
	return startClusterBin(t, ctx, buildPhobos(t), heads, raylets, headArgs)
}

// startClusterBin is startClusterWith running the phobos binary bin.
func startClusterBin(t *testing.T, ctx context.Context, bin string, heads, raylets int, headArgs []string) *cluster.Cluster {
	t.Helper()
	dir := t.TempDir()
	c, err := cluster.Start(ctx, cluster.Spec{
		Binary: bin, Dir: dir, Heads: heads, Raylets: raylets, Slots: 2, StoreSize: "128MiB",
		HeadArgs:   append([]string{"--raft-heartbeat", "100ms", "--raft-election", "100ms", "--raft-lease", "50ms", "--log-level", "info"}, headArgs...),
		RayletArgs: []string{"--log-level", "info"},
	})
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
	return c
}

func dumpLogs(t *testing.T, c *cluster.Cluster) {
	for _, p := range append(append([]*cluster.Proc{}, c.Heads...), c.Raylets...) {
		b, _ := os.ReadFile(p.LogPath)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("--- %s (%s) ---\n%s", p.ID, p.LogPath, b)
	}
}

func seedExample(ones bool, n, chunk int64, seed uint64) *tensor.Tensor {
	if ones {
		return tensor.Ones([]int64{n}, tensor.Chunks(chunk)).Add(tensor.Ones([]int64{n}, tensor.Chunks(chunk))).Sum()
	}
	a := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(seed))
	b := tensor.Rand([]int64{n}, tensor.Chunks(chunk), tensor.Seed(seed+1))
	return a.Add(b).Sum()
}

// TestClusterOfProcesses runs the seed example on 3 heads and 1, 2 and 3
// raylets, each a separate OS process on loopback.
func TestClusterOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 3, 1)
	drv, err := phobos.Connect(ctx, c.HeadAddrs(), clientCreds(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()

	const n, chunk = 2_000_000, 50_000
	v, err := drv.Run(ctx, seedExample(true, n, chunk, 0))
	if err != nil {
		t.Fatal(err)
	}
	if v.Float64() != 2*n {
		t.Fatalf("(ones+ones).sum() = %v, want %d", v.Float64(), 2*n)
	}

	var bits []uint64
	for raylets := 1; raylets <= 3; raylets++ {
		for len(c.Raylets) < raylets {
			if _, err := c.AddRaylet(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := drv.Submit(ctx, seedExample(false, n, chunk, 42))
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Values[0].Float64()
		if math.Abs(got-float64(n)) > 0.01*n {
			t.Fatalf("%d raylets: sum of %d uniform pairs = %v, expected near %d", raylets, n, got, n)
		}
		bits = append(bits, math.Float64bits(got))
		t.Logf("%d raylets: %.17g (%d subtasks)", raylets, got, res.Subtasks)
	}
	if bits[0] != bits[1] || bits[1] != bits[2] {
		t.Fatalf("results differ across 1, 2, 3 raylets: %x", bits)
	}
	// Every raylet took part in the last run: each stored something.
	st, err := drv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Raylets) != 3 || st.Leader == "" || len(st.Heads) != 3 {
		t.Fatalf("status: %+v", st)
	}
}

// TestCLIUpDemoStatus drives the CLI as a user would: phobos up --json,
// phobos demo --connect --json, phobos status --json, then Ctrl-C.
func TestCLIUpDemoStatus(t *testing.T) {
	bin := buildPhobos(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up := startUp(t, ctx, bin, "--heads", "3", "--raylets", "2", "--dir", dir, "--store-size", "64MiB", "--store-dir", t.TempDir(), "--slots", "1")
	info := up.info
	if len(info.Heads) != 3 || len(info.Raylets) != 2 || info.Client == nil || info.Admin == nil || info.TokenFile != "" {
		t.Fatalf("phobos up --json: %+v", info)
	}
	for _, r := range info.Raylets {
		if r.Addr == "" || r.PID == 0 {
			t.Fatalf("raylet without addr or pid: %+v", r)
		}
	}

	out, err := exec.CommandContext(ctx, bin, flat("demo", "--connect", info.Heads[1].Addr, info.auth("client"),
		"--size", "1000000", "--chunk", "100000", "--ones", "--json")...).Output()
	if err != nil {
		t.Fatalf("demo --connect: %v", err)
	}
	var demo struct {
		Result   float64
		Elements int64
		Chunks   int64
		Subtasks int
		Seconds  float64
	}
	if err := json.Unmarshal(out, &demo); err != nil {
		t.Fatalf("demo --json output %q: %v", out, err)
	}
	// 20 sources, 10 fused ADD+SUMs, combines 10 -> 3 -> 1.
	if demo.Result != 2e6 || demo.Elements != 1e6 || demo.Chunks != 10 || demo.Subtasks != 34 {
		t.Fatalf("demo: %+v", demo)
	}

	// Status answers from any head, follower included.
	out, err = exec.CommandContext(ctx, bin, flat("status", "--connect", info.Heads[2].Addr, info.auth("admin"), "--json")...).Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st struct {
		Leader string
		Heads  []struct{ ID, Addr, Role string }
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Leader == "" || len(st.Heads) != 3 {
		t.Fatalf("status --json %q: %v", out, err)
	}

	// Every head's web service answers the API: followers proxy it to the
	// leader.
	followerAPI(t, ctx, info)

	// A certificate of another CA is refused with a clear error naming
	// it, and so is a plaintext client; the cluster goes on.
	other := otherCA(t, dir)
	other.CA = info.Client.CA // it trusts the cluster; the cluster does not trust it
	out, err = exec.CommandContext(ctx, bin, flat("status", "--connect", info.Heads[0].Addr, other.Flags())...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "mallory") || !strings.Contains(string(out), "signed by another CA") {
		t.Fatalf("status with another CA's certificate: err %v, output %s", err, out)
	}
	bad := filepath.Join(dir, "bad-token")
	os.WriteFile(bad, []byte(strings.Repeat("x", 32)), 0o600)
	out, err = exec.CommandContext(ctx, bin, "status", "--connect", info.Heads[0].Addr, "--insecure-plaintext", "--token-file", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "TLS") {
		t.Fatalf("plaintext status against a TLS cluster: err %v, output %s", err, out)
	}

	if err := up.stop(os.Interrupt); err != nil {
		t.Fatalf("phobos up did not stop cleanly: %v (stderr: %s)", err, up.stderr.String())
	}
	for _, p := range append(info.Heads, info.Raylets...) {
		if processAlive(p.PID) {
			t.Errorf("%s (pid %d) still running after phobos up stopped", p.ID, p.PID)
		}
	}
}
