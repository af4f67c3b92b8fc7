package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
)

func TestMapErr(t *testing.T) {
	n := &Node{}
	cases := []struct {
		in      error
		kind    dag.Kind
		unknown bool // says the outcome is unknown and how to retry
	}{
		{raft.ErrLeadershipLost, dag.KindUnavailable, true},
		{raft.ErrEnqueueTimeout, dag.KindUnavailable, true},
		{raft.ErrLeadershipTransferInProgress, dag.KindUnavailable, true},
		{raft.ErrRaftShutdown, dag.KindUnavailable, false},
		{context.DeadlineExceeded, dag.KindDeadlineExceeded, true},
		{context.Canceled, dag.KindCancelled, true},
		{fmt.Errorf("wrapped: %w", raft.ErrLeadershipLost), dag.KindUnavailable, true},
	}
	for _, c := range cases {
		err := n.mapErr(c.in, "AllocTask request x", "retry with the same request ID x")
		if dag.KindOf(err) != c.kind || !errors.Is(err, c.in) && !errors.Is(err, ErrShutdown) {
			t.Errorf("%v → %v (kind %v), want kind %v wrapping the cause", c.in, err, dag.KindOf(err), c.kind)
		}
		if c.unknown && !strings.Contains(err.Error(), "outcome is unknown, retry with the same request ID x") {
			t.Errorf("%v → %q does not tell the caller how to retry", c.in, err)
		}
	}
	if n.mapErr(nil, "x", "y") != nil {
		t.Error("nil mapped to an error")
	}
}

func TestNotLeaderError(t *testing.T) {
	e := &NotLeaderError{LeaderID: "h2", LeaderAddr: "10.0.0.2:7071"}
	var err error = fmt.Errorf("forward: %w", e)
	if !errors.Is(err, dag.ErrNotLeader) || dag.KindOf(err) != dag.KindNotLeader {
		t.Fatal("NotLeaderError does not carry KindNotLeader")
	}
	if !strings.Contains(e.Error(), "h2") || !strings.Contains(e.Error(), "10.0.0.2:7071") {
		t.Fatalf("message %q does not name the leader", e.Error())
	}
	if msg := (&NotLeaderError{}).Error(); !strings.Contains(msg, "no leader") {
		t.Fatalf("message without a leader: %q", msg)
	}
}

func TestPublishKeepsNewest(t *testing.T) {
	ch := make(chan bool, 2)
	for _, v := range []bool{true, false, true, false, true} {
		publish(ch, v)
	}
	got := []bool{<-ch, <-ch}
	if got[0] != false || got[1] != true {
		t.Fatalf("got %v, want the two newest [false true]", got)
	}
}

func TestHCLogAdapter(t *testing.T) {
	rec := newRecordHandler()
	var l hclog.Logger = newHCLog(slog.New(rec), "raft", nil)
	if l.GetLevel() != hclog.Trace || !l.IsTrace() {
		t.Fatal("a handler that takes everything should show trace")
	}
	snap := l.Named("snapshot").With("k", 1)
	if snap.Name() != "raft.snapshot" || len(snap.ImpliedArgs()) != 2 {
		t.Fatalf("name %q, implied %v", snap.Name(), snap.ImpliedArgs())
	}
	snap.Info("hello")
	l.ResetNamed("other").Warn("x")
	l.Log(hclog.Off, "dropped")
	if rec.count("raft.snapshot") != 1 || rec.count("other") != 1 || rec.count("raft") != 0 {
		t.Fatalf("counts: %+v", rec.counts.m)
	}
	quiet := newHCLog(slog.New(slog.DiscardHandler), "raft", nil)
	if quiet.IsError() || quiet.GetLevel() != hclog.Off {
		t.Fatal("a discarding logger should report Off")
	}
	l.StandardLogger(nil).Print("via log")
	if rec.count("raft") != 1 {
		t.Fatal("StandardLogger did not reach the handler")
	}
}
