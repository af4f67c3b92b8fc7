package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpGet asks url with the bearer token tok ("" for none) and returns the
// status and body.
func httpGet(t *testing.T, ctx context.Context, hc *http.Client, url, tok string) (int, []byte) {
	t.Helper()
	return httpDo(t, ctx, hc, "GET", url, tok, nil)
}

func httpDo(t *testing.T, ctx context.Context, hc *http.Client, method, url, tok string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, b
}

// TestUpServesHTTP: phobos up gives every process a web service on a
// loopback port, HTTPS with the cluster's CA, and writes the bearer token
// to DIR/http-token (0600). With the token the API, /metrics and pprof
// answer; without it, 401 with a JSON error. A job submitted through the
// API runs; phobos timeline writes its trace (one lane per raylet slot)
// and phobos status lists the web services.
func TestUpServesHTTP(t *testing.T) {
	bin := buildPhobos(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up := startUp(t, ctx, bin, "--heads", "1", "--raylets", "2", "--dir", dir, "--store-size", "64MiB", "--store-dir", t.TempDir(), "--slots", "2")
	info := up.info
	if info.HTTPTokenFile == "" || len(info.Heads) != 1 || info.Heads[0].HTTP == "" {
		t.Fatalf("phobos up --json gave no web service: %+v", info)
	}
	for _, r := range info.Raylets {
		if !strings.HasPrefix(r.HTTP, "https://127.0.0.1:") {
			t.Fatalf("raylet %s: web service %q, want HTTPS on loopback", r.ID, r.HTTP)
		}
	}
	fi, err := os.Stat(info.HTTPTokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want 0600", info.HTTPTokenFile, err, fi.Mode())
	}
	raw, err := os.ReadFile(info.HTTPTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))
	caPEM, err := os.ReadFile(info.Client.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the cluster's CA file holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	head := info.Heads[0].HTTP

	code, body := httpGet(t, ctx, hc, head+"/api/v1/status", tok)
	if code != 200 {
		t.Fatalf("GET /api/v1/status with the token: %d %s", code, body)
	}
	var st struct {
		Leader  string
		Raylets []struct{ ID, HTTP string }
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Leader == "" || len(st.Raylets) != 2 {
		t.Fatalf("status: %s (%v)", body, err)
	}
	for _, r := range st.Raylets {
		if r.HTTP == "" {
			t.Errorf("status lists raylet %s without its web service: %s", r.ID, body)
		}
	}
	for _, path := range []string{"/api/v1/status", "/debug/pprof/", "/metrics"} {
		code, body = httpGet(t, ctx, hc, head+path, "")
		var e struct {
			Error struct{ Kind, Message string }
		}
		if code != 401 || json.Unmarshal(body, &e) != nil || e.Error.Kind != "permission denied" || !strings.Contains(e.Error.Message, "http-token") {
			t.Errorf("GET %s without a token: %d %s; want 401 JSON naming the token file", path, code, body)
		}
	}
	if code, body = httpGet(t, ctx, hc, head+"/debug/pprof/", tok); code != 200 || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/ with the token: %d", code)
	}
	if code, body = httpGet(t, ctx, hc, info.Raylets[0].HTTP+"/metrics", tok); code != 200 || !strings.Contains(string(body), "phobos_store_capacity_bytes 6.7108864e+07") {
		t.Errorf("raylet /metrics: %d, want its store's capacity:\n%.2000s", code, body)
	}

	graph, err := os.Open("testdata/graphs/seed.json")
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	code, body = httpDo(t, ctx, hc, "POST", head+"/api/v1/jobs", tok, graph)
	var job struct {
		ID    int
		State string
	}
	if code != 201 && code != 200 || json.Unmarshal(body, &job) != nil || job.ID == 0 {
		t.Fatalf("POST /api/v1/jobs: %d %s", code, body)
	}
	poll(t, ctx, 20*time.Millisecond, "the job to succeed", func() bool {
		_, body = httpGet(t, ctx, hc, fmt.Sprintf("%s/api/v1/jobs/%d", head, job.ID), tok)
		return json.Unmarshal(body, &job) == nil && job.State == "SUCCEEDED"
	})
	code, body = httpGet(t, ctx, hc, fmt.Sprintf("%s/api/v1/jobs/%d/results/0", head, job.ID), tok)
	if code != 200 || !strings.Contains(string(body), `"data":999.88835118505`) {
		t.Errorf("result: %d %s", code, body)
	}

	out, err := exec.CommandContext(ctx, bin, flat("timeline", "--connect", info.Heads[0].Addr, info.auth("admin"), fmt.Sprint(job.ID))...).Output()
	if err != nil {
		t.Fatalf("phobos timeline: %v", err)
	}
	lanes, spans := traceLanes(t, out)
	if len(lanes) == 0 || len(lanes) > 4 || spans != 34 {
		t.Errorf("trace has %d lanes and %d spans; want 1 to 4 lanes (2 raylets × 2 slots) and the job's 34 subtasks", len(lanes), spans)
	}
	// The short flags the docs give: -o writes the trace to a file; -f
	// follows a job's logs until it ends (it has: they print, and the
	// command returns).
	trace := filepath.Join(t.TempDir(), "trace.json")
	if out, err := exec.CommandContext(ctx, bin, flat("timeline", "-o", trace, "--connect", info.Heads[0].Addr, info.auth("admin"), fmt.Sprint(job.ID))...).CombinedOutput(); err != nil {
		t.Fatalf("phobos timeline -o: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(trace); err != nil {
		t.Fatalf("phobos timeline -o wrote no file: %v", err)
	} else if _, spans := traceLanes(t, b); spans != 34 {
		t.Errorf("the trace phobos timeline -o wrote has %d spans; want 34", spans)
	}
	if out, err := exec.CommandContext(ctx, bin, flat("logs", "-f", "--connect", info.Heads[0].Addr, info.auth("admin"), fmt.Sprint(job.ID))...).CombinedOutput(); err != nil {
		t.Fatalf("phobos logs -f of an ended job: %v\n%s", err, out)
	}

	out, err = exec.CommandContext(ctx, bin, flat("status", "--connect", info.Heads[0].Addr, info.auth("admin"))...).Output()
	if err != nil || !strings.Contains(string(out), head) || !strings.Contains(string(out), info.Raylets[1].HTTP) {
		t.Errorf("phobos status does not list the web services (%v):\n%s", err, out)
	}
	if n := strings.Count(string(out), info.Raylets[1].HTTP); n != 1 {
		t.Errorf("phobos status lists raylet %s's web service %d times; want once:\n%s", info.Raylets[1].ID, n, out)
	}
	// Released, the job says so in its summary.
	if code, body = httpDo(t, ctx, hc, "POST", fmt.Sprintf("%s/api/v1/jobs/%d/release", head, job.ID), tok, nil); code/100 != 2 {
		t.Fatalf("POST release: %d %s", code, body)
	}
	code, body = httpGet(t, ctx, hc, fmt.Sprintf("%s/api/v1/jobs?state=SUCCEEDED", head), tok)
	if code != 200 || !strings.Contains(string(body), `"released":true`) {
		t.Errorf("GET /api/v1/jobs after the release: %d %s; want the job released", code, body)
	}
}

// traceLanes checks a Chrome trace: valid JSON whose complete events
// ("X", but the "fetch" slices nested in them) sit on named lanes ("slot N" threads of "raylet R" processes),
// none overlapping another on its lane. It returns the lanes and the
// number of spans.
func traceLanes(t *testing.T, trace []byte) (map[[2]int]string, int) {
	t.Helper()
	var tr struct {
		TraceEvents []struct {
			Name string
			Cat  string
			Ph   string
			Ts   float64
			Dur  float64
			Pid  int
			Tid  int
			Args map[string]any
		}
	}
	if err := json.Unmarshal(trace, &tr); err != nil {
		t.Fatalf("the trace is not JSON: %v\n%.500s", err, trace)
	}
	names := map[[2]int]string{}
	procs := map[int]string{}
	type span struct{ start, end float64 }
	byLane := map[[2]int][]span{}
	n := 0
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			names[[2]int{e.Pid, e.Tid}], _ = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "process_name":
			procs[e.Pid], _ = e.Args["name"].(string)
		case e.Ph == "X" && e.Cat == "fetch":
			// Nested in its attempt's slice: the part spent fetching.
		case e.Ph == "X":
			n++
			k := [2]int{e.Pid, e.Tid}
			byLane[k] = append(byLane[k], span{e.Ts, e.Ts + e.Dur})
		}
	}
	lanes := map[[2]int]string{}
	for k, ss := range byLane {
		name, ok := names[k]
		if !ok || !strings.HasPrefix(name, "slot ") || !strings.HasPrefix(procs[k[0]], "raylet ") {
			t.Errorf("lane %v (%q of %q) is not a raylet's slot", k, name, procs[k[0]])
		}
		lanes[k] = procs[k[0]] + "/" + name
		for i := 1; i < len(ss); i++ {
			if ss[i].start < ss[i-1].end-1 { // microseconds; 1µs of rounding
				t.Errorf("lane %s: a span starts at %.0fµs before the one before ends (%.0fµs): two attempts in one slot at once", lanes[k], ss[i].start, ss[i-1].end)
			}
		}
	}
	return lanes, n
}

// followerAPI checks that every head of a cluster phobos up started serves
// the job list, the followers by proxying it to the leader.
func followerAPI(t *testing.T, ctx context.Context, info upInfo) {
	t.Helper()
	raw, err := os.ReadFile(info.HTTPTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(info.Client.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for _, h := range info.Heads {
		code, body := httpGet(t, ctx, hc, h.HTTP+"/api/v1/jobs?state=SUCCEEDED", strings.TrimSpace(string(raw)))
		var page struct{ Jobs []struct{ ID int } }
		if code != 200 || json.Unmarshal(body, &page) != nil || len(page.Jobs) != 1 {
			t.Errorf("head %s: GET /api/v1/jobs: %d %s; want the demo's job", h.ID, code, body)
		}
	}
}
