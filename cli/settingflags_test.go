package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A raylet whose store cannot start says which flag to change: the store's
// error names its Config field, and the CLI maps the field to its flag.
func TestRayletErrorNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, bytes.Repeat([]byte("a"), 64), 0o600); err != nil {
		t.Fatal(err)
	}
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"raylet", "--insecure-plaintext", "--token-file", token, "--head", "127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--store-dir", dir, "--store-size", "4MiB", "--spill-dir", notADir, "--state-dir", dir}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--spill-dir") || !strings.Contains(stderr.String(), notADir) {
		t.Fatalf("exit %d, stderr %q; want 1 and an error naming --spill-dir and %s", code, stderr.String(), notADir)
	}
}

// A head whose Raft settings do not fit says which flags to change: Raft's
// errors name its Config fields (and hashicorp/raft's its own), and the CLI
// maps them to the flags. The head fails before it starts Raft.
func TestHeadRaftErrorNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, bytes.Repeat([]byte("a"), 64), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--raft-heartbeat-every", "1s"}, "--raft-heartbeat-every 1s: set it from 50ms to 250ms (a tenth to half of --raft-heartbeat 500ms, and at most half of --raft-lease 500ms)"},
		{[]string{"--raft-heartbeat", "1s", "--raft-lease", "2s"}, "--raft-lease 2s is more than --raft-heartbeat 1s: set --raft-lease at most --raft-heartbeat"},
		{[]string{"--raft-heartbeat", "1s", "--raft-election", "1s", "--raft-lease", "100ms"}, "--raft-lease 100ms is under a fifth of --raft-heartbeat 1s: the leader beats its followers every tenth of that at the least, and a lease must span two beats; set --raft-lease to at least 200ms"},
		{[]string{"--raft-election", "100ms"}, "--raft-election 100ms is less than --raft-heartbeat 500ms: set --raft-election at least --raft-heartbeat"},
		{[]string{"--raft-commit-timeout", "100us"}, "--raft-commit-timeout 100µs is below 1ms, the least raft accepts: set --raft-commit-timeout to at least 1ms"},
		{[]string{"--peers", "h1=127.0.0.1:1"}, `--peers gives head "h1" address "127.0.0.1:1" but it is reached at`},
	} {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"head", "--id", "h1", "--data-dir", filepath.Join(dir, "h1"), "--listen", "127.0.0.1:0",
				"--insecure-plaintext", "--token-file", token}, c.flags...)
			code := run(ctx, args, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), c.want)
			}
			if m := raftGoName.FindString(stderr.String()); m != "" {
				t.Fatalf("stderr %q names the setting %q as Go does", stderr.String(), m)
			}
		})
	}
}

// raftGoName is a Raft setting as raftmeta.Config or raft.Config names it.
var raftGoName = regexp.MustCompile(`\b(Config\.\w+|HeartbeatTimeout|ElectionTimeout|LeaderLeaseTimeout|CommitTimeout|HeartbeatInterval|SnapshotInterval|MaxAppendEntries|Addr|Bootstrap)\b|(?i)heartbeat timeout`)
