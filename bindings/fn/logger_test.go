package fn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/dag"
)

var shout = Register1("fntest.shout", func(ctx context.Context, s string) (string, error) {
	Logger(ctx).Info("shouting", "word", s)
	return strings.ToUpper(s), nil
})

// graphOf submits a tileable graph as it is.
type graphOf struct{ g *dag.TileableGraph }

func (g graphOf) TileableGraph() (*dag.TileableGraph, error) { return g.g, nil }

// syncBuffer is a bytes.Buffer safe for the log follower and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A function's lines reach the driver that asked for them (JobOptions.Logs)
// before Wait returns, each tagged with its subtask and attempt; the job's
// logs read again afterwards (Job.Logs) and, on the plaintext cluster,
// through the head's HTTP API hold the same lines. Under TLS the head
// reads the raylets' lines with its certificate; in plaintext with the
// bearer token.
func TestLoggerLinesReachTheDriver(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		name := "tls"
		if insecure {
			name = "plaintext"
		}
		t.Run(name, func(t *testing.T) { testLoggerLines(t, insecure) })
	}
}

func testLoggerLines(t *testing.T, insecure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2, Slots: 2, StoreSize: 32 << 20, Insecure: insecure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	words := []string{"alpha", "beta", "gamma", "delta"}
	var outs []Ref[string]
	for _, w := range words {
		outs = append(outs, shout.Call(Value(w)))
	}
	g, err := Graph(outs...)
	if err != nil {
		t.Fatal(err)
	}
	var streamed syncBuffer
	j, err := c.Submit(ctx, graphOf{g}, phobos.JobOptions{Name: "shout", Logs: &streamed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got := streamed.String()
	for _, w := range words {
		if !strings.Contains(got, "shouting word="+w) {
			t.Errorf("streamed logs lack the line of %q:\n%s", w, got)
		}
	}
	if n := strings.Count(got, "\n"); n != len(words) {
		t.Errorf("streamed %d lines, want %d:\n%s", n, len(words), got)
	}
	if !strings.Contains(got, "[subtask ") || !strings.Contains(got, " #1] ") {
		t.Errorf("lines are not tagged with their subtask and attempt:\n%s", got)
	}

	var again bytes.Buffer
	if err := j.Logs(ctx, &again); err != nil {
		t.Fatal(err)
	}
	// The same lines; lines of different raylets may come in another
	// order (FollowLogs orders them by time per raylet, as they come).
	if sortedLines(again.String()) != sortedLines(got) {
		t.Errorf("Job.Logs after the job:\n%s\nwant the lines that were streamed:\n%s", again.String(), got)
	}
	if !insecure {
		return // the test's HTTP client does not hold the in-memory CA
	}

	web, ok := c.LocalWeb()
	if !ok {
		t.Fatal("the embedded cluster serves no HTTP")
	}
	tok, err := os.ReadFile(web.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/jobs/%d/logs", web.Head, j.Task), nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Lines []struct {
			Subtask string `json:"subtask"`
			Attempt int    `json:"attempt"`
			Text    string `json:"text"`
		} `json:"lines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET logs: %s, %v", resp.Status, err)
	}
	if len(page.Lines) != len(words) {
		t.Fatalf("the API serves %d lines, want %d: %+v", len(page.Lines), len(words), page.Lines)
	}
	for _, l := range page.Lines {
		if l.Subtask == "" || l.Attempt != 1 || !strings.HasPrefix(l.Text, "shouting word=") {
			t.Errorf("API line %+v: want a subtask, attempt 1 and the function's text", l)
		}
	}
}

// sortedLines is text's lines in sorted order.
func sortedLines(text string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
