package objclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// ErrNotLocal is wrapped by LocalReader.Read when the raylet's arena is
// not reachable from this process (the raylet runs on another node, or the
// file is not readable here), or the object is spilled and the raylet has
// no room to bring it back: fetch a copy over the stream instead.
var ErrNotLocal = errors.New("objclient: the raylet's object store is not on this node")

// LocalReader reads sealed objects held by raylets on this node without
// copying them: it asks the raylet where an object lies (a locate stream,
// which pins the object), maps the raylet's arena read-only once per arena,
// and hands out a view straight into it. A driver on the same node as a
// raylet uses it instead of fetching a copy.
//
// LocalReader is safe for concurrent use. Close unmaps every arena, so
// release every LocalObject first.
type LocalReader struct {
	hostOnce sync.Once
	hostIPs  []netip.Addr // this network namespace's addresses, read once

	mu      sync.Mutex
	readers map[string]*objectstore.Reader // by arena path
	retired []*objectstore.Reader          // replaced by a newer arena at the same path; views may still use them
	closed  bool
}

// NewLocalReader returns a LocalReader with no arena mapped yet.
func NewLocalReader() *LocalReader {
	return &LocalReader{readers: map[string]*objectstore.Reader{}}
}

// LocalObject is a sealed object lent by a raylet on this node.
//
// Data is a read-only view into the raylet's arena (writing it faults);
// Meta is the object's meta. Both are valid until Release (and the
// LocalReader's Close). The raylet keeps the object pinned until Release,
// or until this process's session to it ends, so a reader that crashes
// leaks nothing. Release is safe to call more than once and from any
// goroutine.
type LocalObject struct {
	ID   dag.ObjectID
	Data []byte
	Meta []byte

	lease net.Conn
	once  sync.Once
}

// Release ends the lease: the raylet unpins the object, which may then be
// spilled or freed. The views must not be used afterwards.
func (o *LocalObject) Release() error {
	var err error
	o.once.Do(func() { err = o.lease.Close() })
	return err
}

// MayBeLocal reports whether the raylet at addr (host:port) may run on this
// host: its address is a loopback one or one of this network namespace's,
// or it is a name, which is not resolved. A raylet elsewhere cannot lend an
// object this process could map, so callers skip Read for it: asking
// would cost a round trip and pin the object for nothing, and the raylet
// would count a locate that never happened. The interface addresses are
// read once.
func (lr *LocalReader) MayBeLocal(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return true // a name: Read tells
	}
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	lr.hostOnce.Do(func() {
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				lr.hostIPs = append(lr.hostIPs, p.Addr().Unmap())
			}
		}
	})
	if lr.hostIPs == nil {
		return true // unknown: Read tells
	}
	return slices.Contains(lr.hostIPs, ip)
}

// Read locates id on the raylet at the other end of s (a session dialled
// to the raylet's address) and returns a zero-copy view of it. tk is the
// head leader's read ticket for id (see runtime/ticket). ctx bounds
// the request, not the lease. Errors: ErrNotLocal (wrapped) when the arena
// is not on this node or the object cannot come back into it; the raylet's error (kind dag.KindNotFound when it
// does not hold the object); transport errors.
func (lr *LocalReader) Read(ctx context.Context, s *transport.Session, id dag.ObjectID, tk *ticket.Ticket) (*LocalObject, error) {
	st, err := s.OpenStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("locate %s on raylet %s: %w", id, s.RemoteID(), err)
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	if dl, ok := ctx.Deadline(); ok {
		st.SetDeadline(dl)
	}
	loc, err := locate(st, id, tk)
	if !stop() && err == nil {
		err = ctx.Err() // the stream was closed under us
	}
	if err != nil {
		st.Close()
		if dag.KindOf(err) == dag.KindResourceExhausted {
			// Spilled, and no room in the raylet's memory to lend it:
			// a fetch streams it from disk.
			return nil, fmt.Errorf("locate %s on raylet %s: %w: %w", id, s.RemoteID(), ErrNotLocal, err)
		}
		return nil, fmt.Errorf("locate %s on raylet %s: %w", id, s.RemoteID(), err)
	}
	st.SetDeadline(time.Time{})
	view, err := lr.view(loc)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("read %s from raylet %s: %w", id, s.RemoteID(), err)
	}
	return &LocalObject{ID: id, Data: view, Meta: loc.Meta, lease: st}, nil
}

// locate sends the request and reads the answer.
func locate(st net.Conn, id dag.ObjectID, tk *ticket.Ticket) (wire.ObjectLocation, error) {
	var loc wire.ObjectLocation
	broke := func(err error) error {
		if dag.KindOf(err) == dag.KindUnknown {
			return dag.Errorf(dag.KindUnavailable, "the stream broke: %w", err)
		}
		return err
	}
	if err := transport.WriteMsg(st, wire.StreamRequest{Kind: wire.StreamLocateObject, ID: id, Ticket: tk}); err != nil {
		return loc, broke(err)
	}
	if err := transport.ReadMsg(st, &loc, MaxHeader); err != nil {
		return loc, broke(err)
	}
	if loc.Kind != 0 || loc.Error != "" {
		return loc, dag.Errorf(loc.Kind, "%s", loc.Error)
	}
	if len(loc.ArenaID) != 16 || loc.Arena == "" || loc.Size < 0 {
		return loc, dag.Errorf(dag.KindInvalidArgument, "malformed location: arena %q, id of %d bytes, size %d", loc.Arena, len(loc.ArenaID), loc.Size)
	}
	return loc, nil
}

// view maps (or reuses) the arena named by loc and slices the object.
func (lr *LocalReader) view(loc wire.ObjectLocation) ([]byte, error) {
	var want [16]byte
	copy(want[:], loc.ArenaID)
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.closed {
		return nil, dag.Errorf(dag.KindUnavailable, "local reader closed")
	}
	r := lr.readers[loc.Arena]
	if r == nil || r.ID() != want {
		nr, err := objectstore.OpenReader(loc.Arena)
		if err != nil {
			if errors.Is(err, dag.ErrNotFound) || errors.Is(err, objectstore.ErrNotArena) {
				return nil, fmt.Errorf("%w: %w", ErrNotLocal, err)
			}
			return nil, err
		}
		if nr.ID() != want {
			nr.Close()
			return nil, fmt.Errorf("%w: %s here is another arena than the raylet's", ErrNotLocal, loc.Arena)
		}
		if r != nil {
			lr.retired = append(lr.retired, r)
		}
		lr.readers[loc.Arena] = nr
		r = nr
	}
	return r.View(loc.Offset, loc.Size)
}

// Close unmaps every arena mapped so far. Release every LocalObject first:
// their views become invalid.
func (lr *LocalReader) Close() error {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.closed = true
	var errs []error
	for p, r := range lr.readers {
		errs = append(errs, r.Close())
		delete(lr.readers, p)
	}
	for _, r := range lr.retired {
		errs = append(errs, r.Close())
	}
	lr.retired = nil
	return errors.Join(errs...)
}
