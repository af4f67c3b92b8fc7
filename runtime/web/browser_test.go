package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/runtime/web/internal/cdp"
	"github.com/phobos-project/phobos/runtime/web/webtest"
)

// logWriter passes Chromium's output to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Logf("chromium: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// browser starts headless Chromium for the test, or skips the test when
// there is none; it is stopped (by its process group) and its profile
// removed when the test ends.
func browser(t *testing.T) *cdp.Browser {
	t.Helper()
	bin, err := cdp.Find()
	if err != nil {
		t.Skipf("skipping the dashboard's browser test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile := t.TempDir()
	b, err := cdp.Launch(ctx, bin, profile, logWriter{t}, "--ignore-certificate-errors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		os.RemoveAll(profile)
	})
	return b
}

// screenshot saves the page as a PNG under the test's temp dir (and in
// $PHOBOS_TEST_ARTIFACTS, if set, which outlives the test) and logs where.
func screenshot(t *testing.T, ctx context.Context, p *cdp.Page, dir, name string) {
	t.Helper()
	png, err := p.Screenshot(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(png))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	if keep := os.Getenv("PHOBOS_TEST_ARTIFACTS"); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err == nil {
			os.WriteFile(filepath.Join(keep, name), png, 0o644)
			t.Logf("screenshot kept: %s", filepath.Join(keep, name))
		}
	}
}

// TestDashboardInChromium loads the dashboard of a server backed by the
// pretend cluster in a real headless Chromium, signs in with ?token=,
// submits the seed graph through the page, and sees the job appear, make
// progress and succeed in the DOM; then opens the job's page (graph, task
// stream, results, logs) and a job of 200,000 subtasks, checking the page
// stays small. Screenshots are saved as test artifacts.
func TestDashboardInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the browser test in -short mode")
	}
	b := browser(t)
	h := webtest.NewHead()
	s := start(t, web.Config{Head: h})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	artifacts := t.TempDir()

	p, err := b.NewPage(ctx, s.URL()+"/ui/?token="+testToken)
	if err != nil {
		t.Fatal(err)
	}
	must := func(what, expr string) {
		t.Helper()
		if err := p.WaitFor(ctx, what, expr); err != nil {
			screenshot(t, context.Background(), p, artifacts, "failure.png")
			t.Fatal(err)
		}
	}
	eval := func(expr string, out any) {
		t.Helper()
		if err := p.Eval(ctx, expr, out); err != nil {
			t.Fatal(err)
		}
	}
	must("the token exchanged for a cookie and dropped from the URL", `location.pathname === "/ui/" && !location.search.includes("token")`)
	must("the dashboard to load and sign in", `document.getElementById("whoami").textContent.includes("http-token")`)
	must("live updates", `document.getElementById("live").classList.contains("on")`)
	must("the cluster overview", `document.querySelectorAll("#raylets-table tbody tr").length === 2`)

	// Submit the seed graph through the page's form.
	graph, _ := json.Marshal(seedGraph)
	eval(fmt.Sprintf(`(() => {
		document.getElementById("submit-box").open = true;
		document.getElementById("submit-graph").value = %s;
		document.getElementById("submit-name").value = "seed from chromium";
		document.getElementById("submit-button").click();
		return true; })()`, graph), nil)
	must("the submitted job's link", `document.getElementById("submitted-job") !== null`)
	must("the job in the table, running", `document.querySelector('#jobs-table tr[data-job][data-state="RUNNING"]') !== null`)
	var id dag.TaskID
	eval(`Number(document.querySelector("#jobs-table tr[data-job]").dataset.job)`, &id)
	if id == 0 || h.Calls("Submit") != 1 {
		t.Fatalf("job %d in the page; the head saw %d submits", id, h.Calls("Submit"))
	}
	var row string
	eval(`document.querySelector("#jobs-table tr[data-job]").textContent`, &row)
	if !strings.Contains(row, "seed from chromium") || !strings.Contains(row, "http-token") {
		t.Fatalf("job row %q lacks its name or owner", row)
	}

	// Progress shows as the job runs, then success.
	h.Step(id, 10)
	must("progress to show 10 of 31", fmt.Sprintf(`document.querySelector('#jobs-table tr[data-job="%d"] .bar').dataset.fraction === "0.3226"`, id))
	screenshot(t, ctx, p, artifacts, "dashboard-running.png")
	h.Step(id, 21)
	must("the job to succeed", fmt.Sprintf(`document.querySelector('#jobs-table tr[data-job="%d"]').dataset.state === "SUCCEEDED"`, id))
	must("its bar to be full", fmt.Sprintf(`document.querySelector('#jobs-table tr[data-job="%d"] .bar').dataset.fraction === "1.0000"`, id))
	screenshot(t, ctx, p, artifacts, "dashboard.png")

	// The job's page.
	eval(fmt.Sprintf(`location.hash = "#/jobs/%d"`, id), nil)
	must("the job page", `document.getElementById("job-state").textContent === "SUCCEEDED"`)
	must("the graph: four op groups", `document.querySelectorAll("#graph-svg g[data-group]").length === 4`)
	must("the task stream: 31 attempts on 8 slots", `document.getElementById("task-stream").dataset.spans === "31" && document.getElementById("task-stream").dataset.lanes === "8"`)
	must("the results", `document.querySelector("#job-results table") !== null`)
	must("the logs", `document.getElementById("job-logs").textContent.includes("tensor.sum: finished 1")`)
	must("the log stream to end with the job", `document.getElementById("log-status").textContent.includes("ended")`)
	screenshot(t, ctx, p, artifacts, "job.png")

	// Its release: the page and the list say so, and the button is spent.
	must("its results kept", `document.getElementById("job-facts").textContent.includes("Resultskept")`)
	eval(`document.getElementById("job-release").click()`, nil)
	must("the page to say released", `document.getElementById("job-release").disabled && document.getElementById("job-facts").textContent.includes("Resultsreleased")`)
	if h.Calls("Release") != 1 {
		t.Fatalf("the head saw %d releases; want 1", h.Calls("Release"))
	}
	eval(`location.hash = ""`, nil)
	must("the list to say released", fmt.Sprintf(`(document.querySelector('#jobs-table tr[data-job="%d"] .released') || {}).textContent === " released"`, id))

	// A job of 200,000 subtasks, half done: the page draws its op groups
	// and a window of its task stream, not 200,000 of anything.
	big := h.AddJob("http-token", "two hundred thousand", 100000, 60000, 40000)
	h.Step(big, 100000)
	eval(fmt.Sprintf(`location.hash = "#/jobs/%d"`, big), nil)
	must("the big job's page", `document.getElementById("job-progress-text").textContent.startsWith("100000 of 200000")`)
	must("its three groups", `document.querySelectorAll("#graph-svg g[data-group]").length === 3`)
	must("its task stream window", `Number(document.getElementById("task-stream").dataset.spans) > 0`)
	var nodes int
	eval(`document.getElementsByTagName("*").length`, &nodes)
	if nodes > 3000 {
		t.Fatalf("the page of a 200,000-subtask job has %d elements", nodes)
	}
	screenshot(t, ctx, p, artifacts, "big-job.png")

	// A failed job shows its error.
	failed := h.AddJob("http-token", "doomed", 5)
	h.Fail(failed, dag.KindUserCode, "division by zero")
	eval(fmt.Sprintf(`location.hash = "#/jobs/%d"`, failed), nil)
	must("the failed job's error", `document.getElementById("job-error").textContent.includes("division by zero")`)

	for _, ev := range b.Events("Runtime.exceptionThrown") {
		t.Errorf("the dashboard threw: %s", ev.Params)
	}
}
