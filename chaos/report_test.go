package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestKeptDirectoryHoldsTheReport: a kept directory holds the report as
// report.json, readable by its owner only, so that it says why it was
// kept when the printed report went nowhere.
func TestKeptDirectoryHoldsTheReport(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{Seed: 7, Dir: dir, Violations: []Violation{{Invariant: "job", Detail: "task 5 lost"}}}
	if err := writeReportFile(rep); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "report.json")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("report.json has mode %v, want 0600", m)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("report.json: %v\n%s", err, data)
	}
	if got.Seed != 7 || len(got.Violations) != 1 || got.Violations[0].Detail != "task 5 lost" {
		t.Errorf("report.json holds %+v, want the report written", got)
	}
}
