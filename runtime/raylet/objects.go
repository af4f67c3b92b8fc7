package raylet

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/internal/backoff"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/objclient"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// The stream limits both ends share (see package objclient).
const (
	maxHeader  = objclient.MaxHeader
	streamIdle = objclient.StreamIdle
	chunkSize  = objclient.ReceiveChunk
)

const (
	// fetchRounds bounds how often a fetch goes through all locations when
	// transfers break or arrive corrupted.
	fetchRounds = 3
	// peerDialTimeout bounds one dial to a peer, so a peer whose packets
	// vanish (its machine gone without a reset) fails a fetch in seconds
	// rather than after the system's connect timeout of about two minutes.
	peerDialTimeout = 3 * time.Second
	// bulkWindow is the yamux receive window of sessions a raylet dials to
	// fetch objects.
	bulkWindow = 16 << 20
	// Objects of at least splitMin bytes are fetched as parallelRanges
	// ranges at once, each on its own connection, so that receiving (and
	// checksumming) uses more than one core and more than one TCP window.
	splitMin       = 32 << 20
	parallelRanges = 2
	// A range of at least bulkConnMin bytes travels on a connection of its
	// own (transport.PurposeBulk) instead of a yamux stream: yamux copies
	// every byte through per-stream buffers that grow with the object,
	// and its window stalls the sender. Below it, a session stream costs
	// less than a dial (and, under TLS, a handshake).
	bulkConnMin = 4 << 20
	// crcChunk is the piece of an object sendObject checksums and then
	// writes: small enough to stay in cache between the two.
	crcChunk = 256 << 10
)

// castagnoli is CRC-32C, computed in hardware on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// peerHandler serves peers and drivers that connect to the raylet.
type peerHandler struct{ r *Raylet }

func (h peerHandler) HandleCall(ctx context.Context, s *transport.Session, m transport.Method, b transport.Body) (any, error) {
	return nil, dag.Errorf(dag.KindInvalidArgument, "raylet %s serves no call %d", h.r.id, m)
}

func (h peerHandler) HandleMessage(s *transport.Session, m transport.Method, b transport.Body) {}

func (h peerHandler) HandleStream(s *transport.Session, st net.Conn) { h.r.serveStream(s.Peer(), st) }

// transferStats counts what a raylet sends and receives on bulk streams.
type transferStats struct {
	in, bytesIn, out, bytesOut, errs, locates atomic.Int64
}

// storeStats is what the heartbeat reports about the store and transfers.
func (r *Raylet) storeStats() wire.StoreStats {
	st := r.store.Stats()
	x := &r.peers.stats
	return wire.StoreStats{
		Capacity: st.Capacity, Used: st.Used, Objects: st.Objects, Pinned: st.Pinned,
		Spilled: st.Spilled, SpilledBytes: st.SpilledBytes, SpillBytes: st.SpillFileBytes,
		Spills: st.Spills, Restores: st.Restores,
		TransfersIn: x.in.Load(), BytesIn: x.bytesIn.Load(),
		TransfersOut: x.out.Load(), BytesOut: x.bytesOut.Load(),
		TransferErrs: x.errs.Load(), Locates: x.locates.Load(),
	}
}

// serveStream answers one bulk request from peer. It runs on the session's
// stream goroutine; the raylet's Close ends it (closing the stream) and
// waits for it before unmapping the store, since it reads arena views.
func (r *Raylet) serveStream(peer transport.Peer, st net.Conn) {
	defer st.Close()
	if !r.peers.startServing() {
		return
	}
	defer r.peers.serving.Done()
	stop := context.AfterFunc(r.ctx, func() { st.Close() })
	defer stop()

	st.SetDeadline(time.Now().Add(streamIdle))
	var req wire.StreamRequest
	if err := transport.ReadMsg(st, &req, maxHeader); err != nil {
		r.log.Debug("bad stream request", "err", err)
		return
	}
	switch req.Kind {
	case wire.StreamGetObject:
		if err := r.authorize(peer, &req, ticket.Read); err != nil {
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		r.sendObject(st, &req)
	case wire.StreamLocateObject:
		if err := r.authorize(peer, &req, ticket.Read); err != nil {
			transport.WriteMsg(st, wire.ObjectLocation{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		r.lendObject(st, &req)
	case wire.StreamPutObject:
		if err := r.authorize(peer, &req, ticket.Write); err != nil {
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		r.receivePut(st, &req)
	default:
		transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindInvalidArgument,
			Error: fmt.Sprintf("raylet %s: unknown stream request kind %d; is the peer running the same phobos release?", r.id, req.Kind)})
	}
}

// authorize decides whether peer may have what req asks. Raylets read any
// object (they fetch each other's inputs) and write none remotely; drivers
// need a ticket from the head leader for the object's task, issued to them.
// Heads read any object too (they relay results to the web service's
// clients, whose ownership the head checked): a head holds the key that
// signs tickets, so a ticket would prove nothing more.
func (r *Raylet) authorize(peer transport.Peer, req *wire.StreamRequest, need ticket.Rights) error {
	if (peer.Role == transport.RoleRaylet || peer.Role == transport.RoleHead) && need == ticket.Read {
		return nil
	}
	if !peer.Role.IsClient() {
		return dag.Errorf(dag.KindPermissionDenied, "raylet %s: %s of object %s: peer %q has role %s; only clients and admins (with a ticket) may",
			r.id, need, req.ID, peer.Name, peer.Role)
	}
	var key []byte
	if k := r.secret.Load(); k != nil {
		key = *k
	}
	if err := req.Ticket.Check(key, req.ID, need, peer.Name, time.Now()); err != nil {
		return fmt.Errorf("raylet %s: %w", r.id, err)
	}
	return nil
}

// pinForStream pins a requested object, restoring it if it was spilled
// and waiting a bounded time for space to do so.
func (r *Raylet) pinForStream(id dag.ObjectID) (objectstore.Object, dag.Kind, error) {
	ctx, cancel := context.WithTimeout(r.ctx, streamIdle)
	defer cancel()
	obj, err := r.store.GetCtx(ctx, id)
	if err == nil {
		return obj, 0, nil
	}
	err = fmt.Errorf("raylet %s: object %s: %w", r.id, id, err)
	switch {
	case errors.Is(err, objectstore.ErrNotFound):
		return obj, dag.KindNotFound, err
	case errors.Is(err, objectstore.ErrFull), errors.Is(err, objectstore.ErrNotSealed):
		return obj, dag.KindUnavailable, err // busy now; ask again later
	}
	k := dag.KindOf(err)
	if k == dag.KindUnknown {
		k = dag.KindUnavailable
	}
	return obj, k, err
}

// sendObject answers StreamGetObject: header, bytes, and a CRC-32C
// trailer if asked for.
func (r *Raylet) sendObject(st net.Conn, req *wire.StreamRequest) {
	sent := time.Now()
	obj, kind, err := r.pinForStream(req.ID)
	if err != nil {
		if r.sendSpilled(st, req, err) {
			return
		}
		transport.WriteMsg(st, wire.ObjectHeader{Kind: kind, Error: err.Error()})
		return
	}
	defer r.store.Release(req.ID)
	off, n, ok := req.Range(int64(len(obj.Data)))
	size, meta := int64(len(obj.Data)), obj.Meta
	if req.Part > 0 {
		s, e, err := dag.PartitionRange(obj.Data, size, int(req.Part-1))
		if err != nil {
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindInvalidArgument, Error: fmt.Sprintf("raylet %s: object %s: %v", r.id, req.ID, err)})
			return
		}
		off, n, ok = s, e-s, true
		size, meta = n, dag.EncodeMeta(dag.Meta{DType: dag.Bytes, Shape: []int64{n}})
	}
	if !ok {
		transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindInvalidArgument,
			Error: fmt.Sprintf("raylet %s: object %s has %d bytes; range [%d,+%d) is outside it", r.id, req.ID, len(obj.Data), req.Offset, req.Length)})
		return
	}
	data := obj.Data[off : off+n]
	st.SetDeadline(time.Now().Add(streamIdle))
	if err := transport.WriteMsg(st, wire.ObjectHeader{Size: size, Meta: meta}); err != nil {
		return
	}
	// The CRC is taken inline, a cache-sized piece just before it is
	// written, so the write's copy reads it from cache.
	crcOn := req.Checksum && !req.SkipCRC
	var crc uint32
	for rest := data; len(rest) > 0; {
		k := min(len(rest), crcChunk)
		if crcOn {
			crc = crc32.Update(crc, castagnoli, rest[:k])
		}
		st.SetDeadline(time.Now().Add(streamIdle))
		if _, err := st.Write(rest[:k]); err != nil {
			r.log.Debug("send object", "id", req.ID, "err", err)
			return
		}
		rest = rest[k:]
	}
	if req.Checksum {
		if err := transport.WriteMsg(st, wire.ObjectTrailer{CRC32C: crc}); err != nil {
			return
		}
	}
	if off == 0 {
		r.peers.stats.out.Add(1) // one per object, however many ranges
	}
	r.peers.stats.bytesOut.Add(n)
	if m := r.peers.met; m != nil {
		m.Transferred(metrics.Out, n, time.Since(sent))
	}
}

// lendObject answers StreamLocateObject: it pins the object, says where it
// lies in the arena, and keeps the pin until the reader closes the stream
// or writes to it, its session ends, or the raylet closes.
func (r *Raylet) lendObject(st net.Conn, req *wire.StreamRequest) {
	obj, kind, err := r.pinForStream(req.ID)
	if err != nil {
		if cannotRestore(err) {
			// Spilled, and no room to lend it in memory: the reader
			// fetches it instead (sendSpilled serves it from disk).
			kind = dag.KindResourceExhausted
		}
		transport.WriteMsg(st, wire.ObjectLocation{Kind: kind, Error: err.Error()})
		return
	}
	defer r.store.Release(req.ID)
	af := r.store.ArenaFile()
	loc := wire.ObjectLocation{Size: int64(len(obj.Data)), Meta: obj.Meta, Arena: af.Path, ArenaID: af.ID[:], Offset: obj.Offset}
	st.SetDeadline(time.Now().Add(streamIdle))
	if err := transport.WriteMsg(st, loc); err != nil {
		return
	}
	r.peers.stats.locates.Add(1)
	st.SetDeadline(time.Time{}) // the lease lasts as long as the reader wants
	var b [1]byte
	_, _ = st.Read(b[:])
}

// localOrFetch returns a pinned view of an input, fetching it from a peer
// into the local store first if needed. fetched reports a fetch, and took
// how long it took (for the timeline): the clock is read only for a
// fetch, not for every input (a gather of a thousand local inputs read it
// a thousand times). A spilled input is restored, waiting for space as
// long as ctx allows.
func (r *Raylet) localOrFetch(ctx context.Context, in *wire.InputSpec) (obj objectstore.Object, fetched bool, took time.Duration, err error) {
	obj, err = r.store.GetCtx(ctx, in.Object)
	if err == nil {
		return obj, false, 0, nil
	}
	if !errors.Is(err, objectstore.ErrNotFound) {
		return objectstore.Object{}, false, 0, err
	}
	t0 := time.Now()
	if err := r.peers.fetch(ctx, r.store, in); err != nil {
		return objectstore.Object{}, false, 0, err
	}
	obj, err = r.store.GetCtx(ctx, in.Object)
	if err != nil {
		return objectstore.Object{}, false, 0, fmt.Errorf("fetched but gone: %w", err)
	}
	return obj, true, time.Since(t0), nil
}

// peers caches sessions to other raylets, shares concurrent fetches of the
// same object, counts transfers, and tracks the streams this raylet is
// serving. Safe for concurrent use.
type peers struct {
	cfg transport.Config
	log *slog.Logger

	stats   transferStats
	serving sync.WaitGroup // serveStream calls in progress
	// met, set before any transfer when the raylet serves HTTP, gets each
	// fetch's size and time.
	met *metrics.Raylet

	mu       sync.Mutex
	sessions map[string]*transport.Session
	// bulk holds the bulk conns open to each address, closed when that
	// raylet is declared lost or this one closes; noBulk the addresses
	// whose raylet refused bulk conns (an older release), reached over
	// session streams instead.
	bulk   map[string]map[net.Conn]struct{}
	noBulk map[string]bool
	// bulkDials counts bulk conns dialed.
	bulkDials atomic.Int64
	inflight  map[dag.ObjectID]*fetchCall
	// losses counts, per address, the times the head declared the raylet
	// there lost. A transfer that sees it change gives that location up.
	losses map[string]uint64
	closed bool
}

type fetchCall struct {
	done    chan struct{}
	err     error
	waiters int // callers waiting for this transfer besides the one doing it
}

func newPeers(cfg transport.Config, log *slog.Logger) *peers {
	// A wider window than the control default keeps a bulk transfer
	// from waiting for window updates; it is this side's receive window.
	if cfg.StreamWindow < bulkWindow {
		cfg.StreamWindow = bulkWindow
	}
	return &peers{cfg: cfg, log: log, sessions: map[string]*transport.Session{},
		bulk: map[string]map[net.Conn]struct{}{}, noBulk: map[string]bool{}, inflight: map[dag.ObjectID]*fetchCall{}, losses: map[string]uint64{}}
}

// startServing registers a stream being served, unless closing.
func (p *peers) startServing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.serving.Add(1)
	return true
}

// close closes peer sessions and waits for streams being served to end
// (the raylet's context is cancelled first, which closes them), so the
// store can be closed safely afterwards.
func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	ss := p.sessions
	p.sessions = map[string]*transport.Session{}
	bulk := p.bulk
	p.bulk = map[string]map[net.Conn]struct{}{}
	p.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
	for _, cs := range bulk {
		for c := range cs {
			c.Close()
		}
	}
	p.serving.Wait()
}

// lost closes the sessions to the raylet at addr, which the head declared
// lost: transfers from it fail now instead of when their streams time out,
// and give that location up (see fetchAny). New transfers may dial addr
// again: a raylet restarted there is a new one.
func (p *peers) lost(addr string) {
	p.mu.Lock()
	p.losses[addr]++
	var ss []*transport.Session
	for key, s := range p.sessions {
		if key == addr || strings.HasPrefix(key, addr+"#") {
			ss = append(ss, s)
			delete(p.sessions, key)
		}
	}
	bulk := p.bulk[addr]
	delete(p.bulk, addr)
	p.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
	for c := range bulk {
		c.Close()
	}
}

// lossCount returns how often the raylet at addr was declared lost.
func (p *peers) lossCount(addr string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.losses[addr]
}

// session returns a cached session to the raylet at addr; slot picks one
// of several, so that the ranges of a large object travel on separate TCP
// connections (and yamux receive loops).
func (p *peers) session(ctx context.Context, addr string, slot int) (*transport.Session, error) {
	key := addr
	if slot > 0 {
		key = fmt.Sprintf("%s#%d", addr, slot)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet is closing")
	}
	if s, ok := p.sessions[key]; ok {
		select {
		case <-s.Done():
			delete(p.sessions, key)
		default:
			p.mu.Unlock()
			return s, nil
		}
	}
	losses := p.losses[addr]
	p.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	s, err := transport.Dial(dctx, addr, p.cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	s.Serve(nil) // we only read from peers on sessions we dial
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.sessions[key]; ok && old.Err() == nil {
		s.Close()
		return old, nil
	}
	if p.closed {
		s.Close()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet is closing")
	}
	if p.losses[addr] != losses {
		s.Close()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet at %s was declared lost while this raylet dialed it", addr)
	}
	p.sessions[key] = s
	return s, nil
}

// fetch copies an object from one of its locations into store. Concurrent
// fetches of one object share one transfer; a caller whose transfer was
// started by another caller that gave up (its context ended) starts its
// own.
func (p *peers) fetch(ctx context.Context, store *objectstore.Store, in *wire.InputSpec) error {
	for {
		p.mu.Lock()
		if c, ok := p.inflight[in.Object]; ok {
			c.waiters++
			p.mu.Unlock()
			select {
			case <-c.done:
				if (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) && ctx.Err() == nil {
					continue
				}
				return c.err
			case <-ctx.Done():
				return dag.Errorf(dag.KindCancelled, "waiting for the fetch of %s: %w", in.Object, ctx.Err())
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
}

// fetchAny tries each location in turn, and all of them again (up to
// fetchRounds times, with a short backoff) while failures look transient:
// a broken stream, a bad checksum, a busy or unreachable peer. A peer that
// does not have the object is not asked again, nor is one the head
// declared lost during the transfer; when every location was lost the
// error is unavailable (the head rebuilds the object and runs the reader
// again), otherwise not found.
func (p *peers) fetchAny(ctx context.Context, store *objectstore.Store, in *wire.InputSpec) error {
	if len(in.Locations) == 0 {
		return dag.Errorf(dag.KindNotFound, "object %s has no known location", in.Object)
	}
	var errs []error
	var gone uint64 // bit i: location i was declared lost (the first 64)
	// Rounds wait 20ms, then 80ms: a peer's brief hiccup, not an outage
	// (the head rebuilds what is truly gone).
	b := backoff.Policy{Base: 20 * time.Millisecond, Factor: 4, Max: 320 * time.Millisecond}.Start()
	for round := 1; round <= fetchRounds; round++ {
		transient := false
		for i, addr := range in.Locations {
			if i < 64 && gone&(1<<i) != 0 {
				continue
			}
			losses := p.lossCount(addr)
			t0 := time.Now()
			err := p.fetchFrom(ctx, store, addr, in.Object, in.Size)
			if err == nil || errors.Is(err, objectstore.ErrExists) {
				if err == nil && p.met != nil {
					p.met.Transferred(metrics.In, in.Size, time.Since(t0))
				}
				return nil
			}
			p.stats.errs.Add(1)
			if p.met != nil {
				p.met.TransferFailed()
			}
			if p.lossCount(addr) != losses && ctx.Err() == nil {
				errs = append(errs, fmt.Errorf("from %s (round %d): the head declared that raylet lost: %w", addr, round, err))
				if i < 64 {
					gone |= 1 << i
				}
				continue
			}
			errs = append(errs, fmt.Errorf("from %s (round %d): %w", addr, round, err))
			p.log.Debug("fetch failed", "object", in.Object, "from", addr, "round", round, "err", err)
			if ctx.Err() != nil {
				return dag.Errorf(dag.KindCancelled, "fetch %s: %w", in.Object, errors.Join(errs...))
			}
			switch k := dag.KindOf(err); {
			case errors.Is(err, objectstore.ErrTooLarge), errors.Is(err, objectstore.ErrClosed), k == dag.KindInvalidArgument, k == dag.KindPermissionDenied:
				return fmt.Errorf("fetch %s: %w", in.Object, errors.Join(errs...)) // no other peer or attempt can fix these
			case k != dag.KindNotFound:
				transient = true
			}
		}
		if !transient {
			if gone != 0 {
				return dag.Errorf(dag.KindUnavailable, "fetch %s: its raylets were lost: %w", in.Object, errors.Join(errs...))
			}
			return dag.Errorf(dag.KindNotFound, "fetch %s: no location has it: %w", in.Object, errors.Join(errs...))
		}
		if round < fetchRounds {
			if b.Wait(ctx) != nil {
				return dag.Errorf(dag.KindCancelled, "fetch %s: %w", in.Object, ctx.Err())
			}
		}
	}
	return dag.Errorf(dag.KindUnavailable, "fetch %s: gave up after %d rounds over %d locations: %w", in.Object, fetchRounds, len(in.Locations), errors.Join(errs...))
}

// fetchFrom streams an object from the raylet at addr straight into the
// store's arena (no intermediate buffer), checking the CRC-32C of every
// range before it seals it. An object of at least splitMin bytes (by the
// size the head reported) is fetched as parallelRanges ranges on as many
// connections at once. A failure aborts the half-written object.
func (p *peers) fetchFrom(ctx context.Context, store *objectstore.Store, addr string, id dag.ObjectID, size int64) error {
	parts := 1
	if size >= splitMin {
		parts = parallelRanges
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // closes every stream (see openRange)
	ranges := make([]*objclient.Range, parts)
	for i := range ranges {
		off, n := size*int64(i)/int64(parts), size*int64(i+1)/int64(parts)-size*int64(i)/int64(parts)
		if parts == 1 {
			off, n = 0, 0 // the whole object, whatever its size
		}
		rs, err := p.openRange(ctx, addr, i, id, off, n, max(n, size) >= bulkConnMin)
		if err != nil {
			return err
		}
		ranges[i] = rs
	}
	if parts > 1 {
		for _, rs := range ranges {
			if rs.Header.Kind != 0 || rs.Header.Error != "" || rs.Header.Size != size {
				// The object is not the size the head said (or a range
				// failed); ask for it whole, which also reports why.
				cancel()
				return p.fetchFrom(parent, store, addr, id, 0)
			}
		}
	}
	h := ranges[0].Header
	if h.Kind != 0 || h.Error != "" {
		return dag.Errorf(h.Kind, "%s", h.Error)
	}
	if h.Size < 0 {
		return dag.Errorf(dag.KindInvalidArgument, "object %s from %s: negative size %d", id, addr, h.Size)
	}
	if parts == 1 {
		ranges[0].N = h.Size
	}
	buf, err := store.CreateCtx(ctx, id, h.Size, h.Meta)
	if err != nil {
		return err
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i, rs := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = rs.Receive(ctx, buf[rs.Off:rs.Off+rs.N]); errs[i] != nil {
				cancel() // the others cannot succeed now; stop them
			}
		}()
	}
	wg.Wait() // nothing touches buf after this
	var failed []error
	for _, err := range errs {
		if err != nil && err != objclient.ErrStopped {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 || parent.Err() != nil {
		store.Abort(id)
		if parent.Err() != nil {
			return dag.Errorf(dag.KindCancelled, "object %s from %s: %w", id, addr, parent.Err())
		}
		return errors.Join(failed...)
	}
	if err := store.Seal(id); err != nil {
		return err
	}
	p.stats.in.Add(1)
	p.stats.bytesIn.Add(int64(len(buf)))
	return nil
}

// openRange opens a stream on session slot i (or, with bulk, a bulk conn),
// asks for n bytes at off (n 0: the whole object) and reads the header.
// The stream is closed when ctx ends.
func (p *peers) openRange(ctx context.Context, addr string, slot int, id dag.ObjectID, off, n int64, bulk bool) (*objclient.Range, error) {
	// Under TLS, AES-GCM already checks every byte: a CRC on both ends
	// would only cost CPU.
	return p.openStream(ctx, addr, slot, wire.StreamRequest{Kind: wire.StreamGetObject, ID: id, Checksum: true, SkipCRC: !p.cfg.Insecure, Offset: off, Length: n}, bulk)
}

// openStream opens a stream on session slot i, or with bulk a connection
// of its own (see bulkConnMin), sends req and reads the header. The stream
// is closed when ctx ends.
func (p *peers) openStream(ctx context.Context, addr string, slot int, req wire.StreamRequest, bulk bool) (*objclient.Range, error) {
	id, off, n := req.ID, req.Offset, req.Length
	var st net.Conn
	if bulk {
		c, err := p.dialBulk(ctx, addr)
		if err != nil {
			return nil, err
		}
		st = c // nil: the peer takes no bulk conns; use a session stream
	}
	if st == nil {
		s, err := p.session(ctx, addr, slot)
		if err != nil {
			return nil, err
		}
		if st, err = s.OpenStream(ctx); err != nil {
			return nil, err
		}
	}
	context.AfterFunc(ctx, func() { st.Close() })
	rs := &objclient.Range{Conn: st, From: addr, ID: id, Off: off, N: n, SkipCRC: req.SkipCRC}
	rs.Deadline = func() {
		d := time.Now().Add(streamIdle)
		if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
			d = dl
		}
		st.SetDeadline(d)
	}
	rs.Deadline()
	if err := transport.WriteMsg(st, req); err != nil {
		return nil, err
	}
	if err := transport.ReadMsg(st, &rs.Header, maxHeader); err != nil {
		return nil, err
	}
	return rs, nil
}

// dialBulk opens a bulk conn to the raylet at addr and tracks it until it
// is closed (lost closes it). It returns nil, nil when that raylet takes
// no bulk conns, which it remembers.
func (p *peers) dialBulk(ctx context.Context, addr string) (net.Conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet is closing")
	}
	if p.noBulk[addr] {
		p.mu.Unlock()
		return nil, nil
	}
	losses := p.losses[addr]
	p.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	c, err := transport.DialRaw(dctx, addr, transport.PurposeBulk, p.cfg)
	cancel()
	if errors.Is(err, transport.ErrPurposeNotServed) {
		p.mu.Lock()
		p.noBulk[addr] = true
		p.mu.Unlock()
		p.log.Debug("peer takes no bulk conns; fetching over its session", "addr", addr, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p.bulkDials.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.losses[addr] != losses {
		c.Close()
		return nil, dag.Errorf(dag.KindUnavailable, "raylet at %s was declared lost (or this one is closing) while this raylet dialed it", addr)
	}
	cs := p.bulk[addr]
	if cs == nil {
		cs = map[net.Conn]struct{}{}
		p.bulk[addr] = cs
	}
	tc := &trackedConn{Conn: c}
	cs[tc] = struct{}{}
	tc.untrack = func() {
		p.mu.Lock()
		delete(p.bulk[addr], tc)
		if len(p.bulk[addr]) == 0 {
			delete(p.bulk, addr)
		}
		p.mu.Unlock()
	}
	return tc, nil
}

// trackedConn is a bulk conn that leaves peers.bulk when closed.
type trackedConn struct {
	net.Conn
	once    sync.Once
	untrack func()
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.untrack)
	return err
}
