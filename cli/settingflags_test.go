package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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
