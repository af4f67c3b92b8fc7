package raftmeta

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// TestBackupRestoreOnCluster: a backup restored into a running cluster
// replaces the state on every head (followers get it as an installed
// snapshot); a corrupt or inconsistent backup is refused before raft sees
// it, and the cluster goes on.
func TestBackupRestoreOnCluster(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	task, err := l.SubmitJob(ctx, NewRequestID(), []byte{1}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllocStage(ctx, NewRequestID(), task); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if err := l.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	saved := backup.Bytes()
	for range 3 {
		if _, err := l.AllocTask(ctx, NewRequestID()); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range c.followers(l) {
		if err := f.Restore(ctx, bytes.NewReader(saved)); !errors.Is(err, dag.ErrNotLeader) {
			t.Fatalf("restore on a follower: %v, want not leader", err)
		}
	}
	for _, bad := range [][]byte{nil, {0xff}, saved[:len(saved)/2]} {
		if err := l.Restore(ctx, bytes.NewReader(bad)); !errors.Is(err, dag.ErrInvalidArgument) {
			t.Fatalf("restore of %d corrupt bytes: %v, want invalid argument", len(bad), err)
		}
	}
	if err := l.Restore(ctx, bytes.NewReader(saved)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	c.converged(l)
	for _, n := range c.up() {
		if got := n.fsm.NextTask(); got != uint64(task)+1 {
			t.Fatalf("%s: next task %d after restore, want %d", n.id, got, task+1)
		}
		if _, ok := n.Job(task); !ok {
			t.Fatalf("%s lost job %d", n.id, task)
		}
	}
	// The restored sequences go on from the backup's values.
	st, err := l.AllocStage(ctx, NewRequestID(), task)
	if err != nil || st != 2 {
		t.Fatalf("alloc stage after restore = %d, %v; want 2", st, err)
	}
}

// TestMalformedEntriesInTheLog writes entries that no head produces
// straight into the replicated log: every replica answers each with an
// error, none panics, and the sequences carry on.
func TestMalformedEntriesInTheLog(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t)
	before, err := l.AllocTask(ctx, NewRequestID())
	if err != nil {
		t.Fatal(err)
	}
	id, id2 := NewRequestID(), NewRequestID()
	unknown := mustMarshal(t, envelope{Type: 200, RequestID: id[:], Body: mustMarshal(t, map[int]int{})})
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"garbage", "malformed CBOR envelope", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"empty", "malformed CBOR envelope", nil},
		{"unknown type", "unknown command type 200", unknown},
		{"body not a map", "malformed CBOR body", mustMarshal(t, envelope{Type: TypeAllocStage, RequestID: id2[:], Body: mustMarshal(t, 7)})},
	} {
		f := l.raft.Apply(tc.data, 5*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("%s: raft apply: %v", tc.name, err)
		}
		res, ok := f.Response().(Result)
		if !ok || !errors.Is(res.Err(), dag.ErrInvalidArgument) || !strings.Contains(res.ErrMsg, tc.want) {
			t.Fatalf("%s: result %+v, want invalid argument with %q", tc.name, f.Response(), tc.want)
		}
	}
	after, err := l.AllocTask(ctx, NewRequestID())
	if err != nil || after != before+1 {
		t.Fatalf("alloc after malformed entries = %d, %v; want %d", after, err, before+1)
	}
	c.converged(l)
	for _, n := range c.up() {
		if n.raft.State() == raft.Shutdown || n.fsm.NextTask() != uint64(after)+1 {
			t.Fatalf("%s: state %v, next task %d", n.id, n.raft.State(), n.fsm.NextTask())
		}
	}
}

func TestFreshAndValidate(t *testing.T) {
	c := startCluster(t, 1, nil)
	n := c.leader()
	if !n.Fresh() || n.ID() != "h1" || n.Addr() == "" {
		t.Fatalf("new node: fresh %v id %q addr %q", n.Fresh(), n.ID(), n.Addr())
	}
	c.stop("h1")
	if n = c.restart("h1"); n.Fresh() {
		t.Fatal("a restarted node with Raft state reports fresh")
	}
	for _, tc := range []struct {
		cmd  Command
		want string
	}{
		{Command{RequestID: NewRequestID()}, "no body"},
		{Command{Body: AllocTask{}}, "zero request ID"},
		{Command{RequestID: NewRequestID(), Body: AllocStage{}}, "task 0 is not a task ID"},
		{Command{RequestID: NewRequestID(), Body: AllocSubtasks{Task: 1, Stage: 1}}, "N is 0"},
	} {
		if err := tc.cmd.Validate(); !errors.Is(err, dag.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cmd, err, tc.want)
		}
	}
	if err := (Command{RequestID: NewRequestID(), Body: AllocTask{}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRoutineRaftWarningsAreQuiet(t *testing.T) {
	for _, msg := range []string{"failed to get previous log", "appendEntries rejected, sending older logs"} {
		if got := routine(slog.LevelWarn, msg, nil); got != slog.LevelInfo {
			t.Errorf("%q logged at %v, want info", msg, got)
		}
	}
	if got := routine(slog.LevelWarn, "failed to contact", nil); got != slog.LevelWarn {
		t.Errorf("an unreachable peer logged at %v, want warn", got)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := codec.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
