package wire

import (
	"errors"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/transport"
)

// transport cannot import dag, so its error codes are checked here.
func TestTransportCodesMatchDagKinds(t *testing.T) {
	pairs := []struct {
		code uint16
		kind dag.Kind
	}{
		{transport.CodeUnknown, dag.KindUnknown},
		{transport.CodeInvalidArgument, dag.KindInvalidArgument},
		{transport.CodePermissionDenied, dag.KindPermissionDenied},
		{transport.CodeCancelled, dag.KindCancelled},
		{transport.CodeNotLeader, dag.KindNotLeader},
		{transport.CodeUnavailable, dag.KindUnavailable},
		{transport.CodeResourceExhausted, dag.KindResourceExhausted},
		{transport.CodeDeadlineExceeded, dag.KindDeadlineExceeded},
		{transport.CodeInternal, dag.KindInternal},
	}
	for _, p := range pairs {
		if p.code != uint16(p.kind) {
			t.Errorf("transport code %d != dag kind %v (%d)", p.code, p.kind, uint16(p.kind))
		}
		err := &transport.RemoteError{Code: p.code, Message: "x"}
		if p.kind != dag.KindUnknown && !errors.Is(err, p.kind) {
			t.Errorf("RemoteError code %d does not match %v", p.code, p.kind)
		}
	}
}

func TestExternalInputRefs(t *testing.T) {
	for k := 0; k < 5; k++ {
		got, ext := IsExternal(ExternalInput(k))
		if !ext || got != k {
			t.Fatalf("ExternalInput(%d) -> %d, %v", k, got, ext)
		}
	}
	if k, ext := IsExternal(3); ext || k != 3 {
		t.Fatalf("IsExternal(3) = %d, %v", k, ext)
	}
}
