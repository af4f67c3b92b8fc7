package cli

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCLITaskBench runs a tiny Task Bench sweep on an embedded cluster and
// checks its JSON lines: each point's arithmetic, and a METG line for each
// pattern. A fixed --peak-flops keeps it short (no peak measurements).
func TestCLITaskBench(t *testing.T) {
	bin := buildPhobos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "bench", "taskbench", "--patterns", "stencil_1d,tree",
		"--width", "3", "--steps", "10", "--cores", "2", "--start", "100us", "--reps", "1",
		"--peak-flops", "1e9", "--json").Output()
	if err != nil {
		t.Fatalf("phobos bench taskbench: %v", err)
	}
	points := map[string]int{}
	metgs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Name, Pattern, Cluster string
			Width, Steps, Tasks    int64
			Iterations             int64
			Seconds                float64
			Granularity            float64 `json:"granularity_seconds"`
			FLOPs                  float64
			Efficiency             float64
			METG                   float64 `json:"metg_us"`
			Error                  string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Cluster != "embedded" || r.Width != 3 || r.Steps != 10 {
			t.Fatalf("line %q: wrong cluster, width or steps", line)
		}
		switch r.Name {
		case "taskbench":
			wantTasks := int64(30)
			if r.Pattern == "tree" {
				wantTasks = 1 + 2 + 3*8
			}
			if r.Tasks != wantTasks || r.Seconds <= 0 ||
				math.Abs(r.Granularity-r.Seconds*2/float64(r.Tasks)) > 1e-9 ||
				r.FLOPs != float64(r.Tasks*r.Iterations*128) ||
				math.Abs(r.Efficiency-r.FLOPs/r.Seconds/1e9) > 1e-9 {
				t.Fatalf("point %q does not add up", line)
			}
			points[r.Pattern]++
		case "taskbench.metg":
			if (r.METG <= 0) == (r.Error == "") {
				t.Fatalf("METG line %q has neither a METG nor an error", line)
			}
			metgs[r.Pattern] = true
		default:
			t.Fatalf("line %q: unknown name", line)
		}
	}
	for _, p := range []string{"stencil_1d", "tree"} {
		if points[p] < 2 || !metgs[p] {
			t.Fatalf("%s: %d points, METG line %v: %s", p, points[p], metgs[p], out)
		}
	}
}

func TestCLITaskBenchRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--patterns", "stencil"},
		{"--width", "-1"},
		{"--threshold", "2"},
		{"--cores", "0"},
		{"--output", "4"},
		{"--passes", "0"},
	} {
		cmd := newTaskBenchCmd()
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(context.Background())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}
