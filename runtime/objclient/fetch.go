package objclient

import (
	"context"
	"fmt"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// FetchObject copies object id from the raylet at the other end of s (a
// session dialled to the raylet's address) and checks the sender's
// CRC-32C, presenting tk, the head leader's read ticket. It reads into dst
// if dst has exactly the object's size, else into a new buffer, and
// returns the bytes and the object's meta. It is for drivers and tools;
// raylets fetch into their own store. Errors: the raylet's (kind
// dag.KindNotFound when it does not hold the object), a broken stream or a
// checksum mismatch (kind dag.KindUnavailable, the latter wrapping
// ErrChecksum), ctx's. It is safe to call concurrently, on one session or
// several.
func FetchObject(ctx context.Context, s *transport.Session, id dag.ObjectID, dst []byte, tk *ticket.Ticket) (data, meta []byte, err error) {
	st, err := s.OpenStream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch %s from raylet %s: %w", id, s.RemoteID(), err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	r := &Range{Conn: st, From: s.RemoteID(), ID: id, Deadline: func() {
		d := time.Now().Add(StreamIdle)
		if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
			d = dl
		}
		st.SetDeadline(d)
	}}
	r.Deadline()
	fail := func(err error) ([]byte, []byte, error) {
		switch {
		case ctx.Err() != nil:
			err = dag.Errorf(dag.KindCancelled, "fetch %s from raylet %s: %w", id, s.RemoteID(), ctx.Err())
		case dag.KindOf(err) == dag.KindUnknown:
			// The stream broke (the raylet or the session went away, or
			// stopped answering): another location or attempt may do.
			err = dag.Errorf(dag.KindUnavailable, "fetch %s from raylet %s: the stream broke: %w", id, s.RemoteID(), err)
		}
		return nil, nil, err
	}
	if err := transport.WriteMsg(st, wire.StreamRequest{Kind: wire.StreamGetObject, ID: id, Checksum: true, Ticket: tk}); err != nil {
		return fail(err)
	}
	if err := transport.ReadMsg(st, &r.Header, MaxHeader); err != nil {
		return fail(err)
	}
	if h := r.Header; h.Kind != 0 || h.Error != "" {
		return fail(dag.Errorf(h.Kind, "%s", h.Error))
	}
	if r.Header.Size < 0 {
		return fail(dag.Errorf(dag.KindInvalidArgument, "fetch %s from raylet %s: negative size %d", id, s.RemoteID(), r.Header.Size))
	}
	buf := dst
	if int64(len(buf)) != r.Header.Size {
		buf = make([]byte, r.Header.Size)
	}
	r.N = r.Header.Size
	if err := r.Receive(ctx, buf); err != nil {
		return fail(err)
	}
	return buf, r.Header.Meta, nil
}
