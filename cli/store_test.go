package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStoreFlagsSpill runs jobs whose inputs are several times larger than
// the stores, through `phobos up` (child raylets) and the embedded
// `phobos demo`, with --store-size and --spill-dir: the jobs complete, the
// raylets spill into their own directories under --spill-dir, report it
// to the head (`phobos status`), and remove their directories on exit.
func TestStoreFlagsSpill(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spill := t.TempDir()
	up := startUp(t, ctx, bin, "--heads", "1", "--raylets", "1", "--dir", t.TempDir(),
		"--store-size", "4MiB", "--store-dir", t.TempDir(), "--spill-dir", spill, "--slots", "2")
	info := up.info
	dirs, _ := filepath.Glob(filepath.Join(spill, "phobos-*.spill"))
	if len(dirs) != 1 {
		t.Fatalf("spill dirs of the one raylet under --spill-dir: %v", dirs)
	}

	// 2 × 16 MB of inputs through one 4 MiB store.
	out, err := exec.CommandContext(ctx, bin, flat("demo", "--connect", info.Heads[0].Addr, info.auth("client"),
		"--size", "2000000", "--chunk", "100000", "--ones", "--json")...).Output()
	if err != nil {
		t.Fatalf("demo --connect: %v (up stderr: %s)", err, up.stderr.String())
	}
	var demo struct{ Result float64 }
	if err := json.Unmarshal(out, &demo); err != nil || demo.Result != 4e6 {
		t.Fatalf("demo: %s (%v); want result 4e6", out, err)
	}

	// The head shows the spills (heartbeats come every second).
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, bin, flat("status", "--connect", info.Heads[0].Addr, info.auth("admin"), "--json")...).Output()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var st struct {
			Raylets []struct {
				Store struct {
					Capacity int64 `json:"capacity"`
					Spills   int64 `json:"spills"`
					Restores int64 `json:"restores"`
				} `json:"store"`
			} `json:"raylets"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("status --json %s: %v", out, err)
		}
		if len(st.Raylets) == 1 && st.Raylets[0].Store.Spills > 0 && st.Raylets[0].Store.Restores > 0 {
			if st.Raylets[0].Store.Capacity != 4<<20 {
				t.Errorf("capacity %d, want 4MiB", st.Raylets[0].Store.Capacity)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed spills and restores: %s", out)
		}
		time.Sleep(100 * time.Millisecond) // polling the head, not synchronising on time
	}
	out, err = exec.CommandContext(ctx, bin, flat("status", "--connect", info.Heads[0].Addr, info.auth("admin"))...).Output()
	if err != nil || !strings.Contains(string(out), "SPILLED") {
		t.Errorf("status table without a SPILLED column (%v):\n%s", err, out)
	}

	if err := up.stop(syscall.SIGTERM); err != nil {
		t.Logf("phobos up exited: %v", err)
	}
	if ents, _ := os.ReadDir(spill); len(ents) != 0 {
		t.Errorf("raylet left %d entries in --spill-dir after stopping", len(ents))
	}

	// The embedded cluster of `phobos demo` takes the same flags.
	spill2 := t.TempDir()
	out, err = exec.CommandContext(ctx, bin, "demo", "--raylets", "2", "--slots", "1", "--store-size", "4MiB", "--spill-dir", spill2,
		"--size", "2000000", "--chunk", "100000", "--ones", "--json").Output()
	if err != nil {
		t.Fatalf("embedded demo: %v", err)
	}
	if err := json.Unmarshal(out, &demo); err != nil || demo.Result != 4e6 {
		t.Fatalf("embedded demo: %s (%v); want result 4e6", out, err)
	}
	if ents, _ := os.ReadDir(spill2); len(ents) != 0 {
		t.Errorf("embedded demo left %d entries in --spill-dir", len(ents))
	}
}
