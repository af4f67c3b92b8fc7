package raylet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// maxHeader caps the first message on a bulk stream.
const maxHeader = 64 << 10

// peerHandler serves peers and drivers that connect to the raylet.
type peerHandler struct{ r *Raylet }

func (h peerHandler) HandleCall(ctx context.Context, s *transport.Session, m transport.Method, b transport.Body) (any, error) {
	return nil, dag.Errorf(dag.KindInvalidArgument, "raylet %s serves no call %d", h.r.id, m)
}

func (h peerHandler) HandleMessage(s *transport.Session, m transport.Method, b transport.Body) {}

func (h peerHandler) HandleStream(s *transport.Session, st net.Conn) { h.r.serveStream(st) }

// serveStream answers one bulk request: an object's header, then its bytes.
func (r *Raylet) serveStream(st net.Conn) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(30 * time.Second))
	var req wire.StreamRequest
	if err := transport.ReadMsg(st, &req, maxHeader); err != nil {
		r.log.Debug("bad stream request", "err", err)
		return
	}
	if req.Kind != wire.StreamGetObject {
		transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindInvalidArgument, Error: fmt.Sprintf("raylet %s: unknown stream request kind %d", r.id, req.Kind)})
		return
	}
	obj, err := r.store.Get(req.ID)
	if err != nil {
		transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindNotFound, Error: fmt.Sprintf("raylet %s: object %s: %v", r.id, req.ID, err)})
		return
	}
	defer r.store.Release(req.ID)
	if err := transport.WriteMsg(st, wire.ObjectHeader{Size: int64(len(obj.Data)), Meta: obj.Meta}); err != nil {
		return
	}
	// Large objects take longer than the request deadline.
	st.SetDeadline(time.Now().Add(30*time.Second + time.Duration(len(obj.Data)>>20)*100*time.Millisecond))
	if _, err := st.Write(obj.Data); err != nil {
		r.log.Debug("send object", "id", req.ID, "err", err)
	}
}

// localOrFetch returns a pinned view of an input, fetching it from a peer
// into the local store first if needed. fetched reports a fetch.
func (r *Raylet) localOrFetch(ctx context.Context, in *wire.InputSpec) (objectstore.Object, bool, error) {
	if obj, err := r.store.Get(in.Object); err == nil {
		return obj, false, nil
	}
	if err := r.peers.fetch(ctx, r.store, in); err != nil {
		return objectstore.Object{}, false, err
	}
	obj, err := r.store.Get(in.Object)
	if err != nil {
		return objectstore.Object{}, false, fmt.Errorf("fetched but gone: %w", err)
	}
	return obj, true, nil
}

// peers caches sessions to other raylets and shares concurrent fetches of
// the same object.
type peers struct {
	cfg transport.Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*transport.Session
	inflight map[dag.ObjectID]*fetchCall
	closed   bool
}

type fetchCall struct {
	done chan struct{}
	err  error
}

func newPeers(cfg transport.Config, log *slog.Logger) *peers {
	return &peers{cfg: cfg, log: log, sessions: map[string]*transport.Session{}, inflight: map[dag.ObjectID]*fetchCall{}}
}

func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	ss := p.sessions
	p.sessions = map[string]*transport.Session{}
	p.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
}

func (p *peers) session(ctx context.Context, addr string) (*transport.Session, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet is closing")
	}
	if s, ok := p.sessions[addr]; ok {
		select {
		case <-s.Done():
			delete(p.sessions, addr)
		default:
			p.mu.Unlock()
			return s, nil
		}
	}
	p.mu.Unlock()
	s, err := transport.Dial(ctx, addr, p.cfg)
	if err != nil {
		return nil, err
	}
	s.Serve(peerHandler{})
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.sessions[addr]; ok && old.Err() == nil {
		s.Close()
		return old, nil
	}
	if p.closed {
		s.Close()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet is closing")
	}
	p.sessions[addr] = s
	return s, nil
}

// fetch copies an object from one of its locations into store. Concurrent
// fetches of one object share the transfer.
func (p *peers) fetch(ctx context.Context, store *objectstore.Store, in *wire.InputSpec) error {
	p.mu.Lock()
	if c, ok := p.inflight[in.Object]; ok {
		p.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &fetchCall{done: make(chan struct{})}
	p.inflight[in.Object] = c
	p.mu.Unlock()

	c.err = p.fetchAny(ctx, store, in)

	p.mu.Lock()
	delete(p.inflight, in.Object)
	p.mu.Unlock()
	close(c.done)
	return c.err
}

func (p *peers) fetchAny(ctx context.Context, store *objectstore.Store, in *wire.InputSpec) error {
	if len(in.Locations) == 0 {
		return dag.Errorf(dag.KindNotFound, "object %s has no known location", in.Object)
	}
	var errs []error
	for _, addr := range in.Locations {
		err := p.fetchFrom(ctx, store, addr, in.Object)
		if err == nil || errors.Is(err, objectstore.ErrExists) {
			return nil
		}
		errs = append(errs, fmt.Errorf("from %s: %w", addr, err))
	}
	return errors.Join(errs...)
}

// fetchFrom streams an object from the raylet at addr straight into the
// store's arena.
func (p *peers) fetchFrom(ctx context.Context, store *objectstore.Store, addr string, id dag.ObjectID) error {
	s, err := p.session(ctx, addr)
	if err != nil {
		return err
	}
	st, err := s.OpenStream(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		st.SetDeadline(dl)
	}
	if err := transport.WriteMsg(st, wire.StreamRequest{Kind: wire.StreamGetObject, ID: id}); err != nil {
		return err
	}
	var h wire.ObjectHeader
	if err := transport.ReadMsg(st, &h, maxHeader); err != nil {
		return err
	}
	if h.Kind != 0 || h.Error != "" {
		return dag.Errorf(h.Kind, "%s", h.Error)
	}
	buf, err := store.Create(id, h.Size, h.Meta)
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(st, buf); err != nil {
		store.Abort(id)
		return dag.Errorf(dag.KindUnavailable, "object %s from %s broke off: %w", id, addr, err)
	}
	return store.Seal(id)
}
