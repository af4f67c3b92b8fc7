package transport

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// MemNetwork is an in-memory Network: the twin of TCP on which heads,
// raylets and drivers of one test process reach each other without
// sockets, so that a whole cluster runs in one process and faultnet can
// partition, delay and drop its links.
//
// Addresses are "host:port" strings in the network's own namespace; a dial
// reaches the listener on exactly that address. Listen with port 0 picks
// a free port. Hosts are names, not interfaces: any host may be listened
// on, and Host gives the view of one host, whose dials come from that host
// (use IP literals, as the listener counts handshakes per source IP).
//
// Conns behave like TCP's where phobos relies on it: a dial completes
// without waiting for Accept (up to a backlog); each direction buffers up
// to a limit (SetBuffer), beyond which a writer blocks; deadlines work and
// fail with os.ErrDeadlineExceeded (a net.Error whose Timeout is true);
// Close makes the peer read what was sent and then io.EOF, while its
// first write after the close is lost and the later ones fail with EPIPE;
// CloseWrite half-closes. Unlike TCP, a conn closed with
// unread input never resets its peer's unread bytes away, and there is no
// delay or loss (faultnet adds those).
//
// A dial to an address nobody listens on fails with ECONNREFUSED, and a
// listen on a taken address with EADDRINUSE, as on TCP. Closing a listener
// frees its address and closes the conns it has not accepted.
//
// All methods are safe for concurrent use.
type MemNetwork struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	lastPort  int // the last port Listen picked
	lastLocal int // the last local port a dial used
	buffer    int
}

// DefaultMemBuffer is how many bytes one direction of a MemNetwork conn
// holds before a writer blocks: about what loopback TCP's autotuned
// buffers hold.
const DefaultMemBuffer = 1 << 20

// memBacklog is how many dialed conns a listener holds before Accept
// takes them; a dial beyond it waits, as a SYN to a full backlog is
// retried.
const memBacklog = 4096

// Port ranges: Listen picks from the first, dials take local ports from
// the second, so the two never meet.
const (
	memListenFirst, memListenLast = 20000, 32767
	memLocalFirst, memLocalLast   = 32768, 65535
)

// NewMemNetwork returns an empty in-memory network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{listeners: map[string]*memListener{}, buffer: DefaultMemBuffer}
}

// SetBuffer sets how many bytes one direction of a conn holds, for conns
// dialed afterwards (at least 1; DefaultMemBuffer by default).
func (n *MemNetwork) SetBuffer(bytes int) {
	n.mu.Lock()
	n.buffer = max(bytes, 1)
	n.mu.Unlock()
}

// Host returns the network as seen from host: its dials come from host
// (the listener sees host:port as the remote address), and a Listen on an
// address without a host ("":port) listens on host.
func (n *MemNetwork) Host(host string) Network { return memHost{n: n, host: host} }

// Listen implements Network, as Host("127.0.0.1") does.
func (n *MemNetwork) Listen(addr string) (net.Listener, error) { return n.listen("127.0.0.1", addr) }

// Dial implements Network, from host 127.0.0.1.
func (n *MemNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return n.dial(ctx, "127.0.0.1", addr)
}

type memHost struct {
	n    *MemNetwork
	host string
}

func (h memHost) Listen(addr string) (net.Listener, error) { return h.n.listen(h.host, addr) }
func (h memHost) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return h.n.dial(ctx, h.host, addr)
}

// memAddr is an address on a MemNetwork.
type memAddr struct {
	host string
	port int
}

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return net.JoinHostPort(a.host, strconv.Itoa(a.port)) }

func memOpError(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: "mem", Addr: addr, Err: err}
}

func (n *MemNetwork) listen(self, addr string) (net.Listener, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, memOpError("listen", nil, err)
	}
	if host == "" {
		host = self
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, memOpError("listen", nil, &net.AddrError{Err: "invalid port", Addr: addr})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	a := memAddr{host: host, port: int(port)}
	if a.port == 0 {
		a.port = -1
		for range memListenLast - memListenFirst + 1 {
			n.lastPort++
			if n.lastPort < memListenFirst || n.lastPort > memListenLast {
				n.lastPort = memListenFirst
			}
			if n.listeners[memAddr{host, n.lastPort}.String()] == nil {
				a.port = n.lastPort
				break
			}
		}
		if a.port < 0 {
			return nil, memOpError("listen", nil, syscall.EADDRINUSE)
		}
	}
	key := a.String()
	if n.listeners[key] != nil {
		return nil, memOpError("listen", a, syscall.EADDRINUSE)
	}
	l := &memListener{n: n, addr: a, queue: make(chan *memConn, memBacklog), closed: make(chan struct{})}
	n.listeners[key] = l
	return l, nil
}

func (n *MemNetwork) dial(ctx context.Context, self, addr string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, memOpError("dial", nil, err)
	}
	n.mu.Lock()
	l := n.listeners[addr]
	n.lastLocal++
	if n.lastLocal < memLocalFirst || n.lastLocal > memLocalLast {
		n.lastLocal = memLocalFirst
	}
	local := memAddr{host: self, port: n.lastLocal}
	buffer := n.buffer
	n.mu.Unlock()
	if l == nil {
		return nil, memOpError("dial", nil, syscall.ECONNREFUSED)
	}
	client, server := memPipe(local, l.addr, buffer)
	select {
	case l.queue <- server:
	case <-l.closed:
		return nil, memOpError("dial", l.addr, syscall.ECONNREFUSED)
	case <-ctx.Done():
		return nil, memOpError("dial", l.addr, ctx.Err())
	}
	select {
	case <-l.closed: // closed as we queued: Close may have missed it
		server.Close()
		return nil, memOpError("dial", l.addr, syscall.ECONNREFUSED)
	default:
	}
	return client, nil
}

// memListener is a listener on a MemNetwork.
type memListener struct {
	n      *MemNetwork
	addr   memAddr
	queue  chan *memConn
	closed chan struct{}
	once   sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, memOpError("accept", l.addr, net.ErrClosed)
	default:
	}
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.closed:
		return nil, memOpError("accept", l.addr, net.ErrClosed)
	}
}

// Close frees the address and closes the conns not yet accepted.
func (l *memListener) Close() error {
	err := memOpError("close", l.addr, net.ErrClosed)
	l.once.Do(func() {
		err = nil
		close(l.closed)
		l.n.mu.Lock()
		if l.n.listeners[l.addr.String()] == l {
			delete(l.n.listeners, l.addr.String())
		}
		l.n.mu.Unlock()
		for {
			select {
			case c := <-l.queue:
				c.Close()
			default:
				return
			}
		}
	})
	return err
}

func (l *memListener) Addr() net.Addr { return l.addr }

// memPipe returns the two ends of a new conn from a to b.
func memPipe(a, b memAddr, buffer int) (*memConn, *memConn) {
	ab, ba := newMemBuffer(buffer), newMemBuffer(buffer)
	return newMemConn(ba, ab, a, b), newMemConn(ab, ba, b, a)
}

// memBuffer is one direction of a conn: a queue of fixed-size chunks
// holding up to limit bytes, written by one end and read by the other.
//
// The chunks come from one pool for the whole process and go back to it as
// soon as they are read, as a kernel's socket buffers come from and go back
// to its slab: bytes in flight are written into memory another conn's
// reader just gave back, still in the processor's caches, whatever the
// number of conns. (A ring a conn, grown to the most it ever held, spread
// the same traffic over a thousand conns' own rings: with a thousand
// simulated raylets most writes and reads missed the caches.)
type memBuffer struct {
	mu     sync.Mutex
	chunks []*memChunk // the held bytes: chunks[first].data[off:], then whole chunks, the last to its n
	first  int
	off    int // bytes of chunks[first] already read
	held   int
	limit  int
	eof    bool // the writer closed: reads drain, then io.EOF
	gone   bool // the reader closed: nothing is held, writes are lost
	reset  bool // a write was lost: the next ones fail (TCP's RST came back)

	readable chan struct{} // signalled when bytes or EOF arrive
	writable chan struct{} // signalled when room appears or the reader goes
}

// memChunkSize is how many bytes a memBuffer's chunk holds: big enough
// that a frame of a few kilobytes takes one, small enough that an idle
// conn's partly read chunk costs little; with its count, a chunk is 16 KiB,
// one of the allocator's size classes.
const memChunkSize = 16<<10 - 8

// memChunk is a chunk of a memBuffer: data[:n] written.
type memChunk struct {
	data [memChunkSize]byte
	n    int
}

var memChunks = sync.Pool{New: func() any { return new(memChunk) }}

func newMemBuffer(limit int) *memBuffer {
	return &memBuffer{limit: limit, readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// read takes up to len(p) held bytes; 0 and no error means none yet.
func (b *memBuffer) read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == 0 {
		if b.eof {
			return 0, io.EOF
		}
		return 0, nil
	}
	n := 0
	for n < len(p) && b.held > 0 {
		c := b.chunks[b.first]
		m := copy(p[n:], c.data[b.off:c.n])
		n += m
		b.held -= m
		b.off += m
		if b.off == c.n && (c.n == memChunkSize || b.held == 0) { // read out, and no longer written to
			b.chunks[b.first] = nil
			b.first++
			b.off = 0
			c.n = 0
			memChunks.Put(c)
		}
	}
	if b.first == len(b.chunks) {
		b.chunks, b.first = b.chunks[:0], 0
	}
	signal(b.writable)
	return n, nil
}

// write adds as much of p as fits; 0 and no error means no room yet.
func (b *memBuffer) write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.eof:
		return 0, syscall.EPIPE // this end shut down writing
	case b.reset:
		return 0, syscall.EPIPE
	case b.gone:
		// As on TCP, the first write after the peer closed seems to
		// succeed; the peer's reset fails the ones after it.
		b.reset = true
		return len(p), nil
	}
	n := min(len(p), b.limit-b.held)
	if n == 0 {
		return 0, nil
	}
	for done := 0; done < n; {
		var c *memChunk
		if k := len(b.chunks); k > b.first && b.chunks[k-1].n < memChunkSize {
			c = b.chunks[k-1]
		} else {
			c = memChunks.Get().(*memChunk)
			if b.first > 0 && len(b.chunks) == cap(b.chunks) { // slide the held chunks down rather than grow
				k := copy(b.chunks, b.chunks[b.first:])
				clear(b.chunks[k:])
				b.chunks, b.first = b.chunks[:k], 0
			}
			b.chunks = append(b.chunks, c)
		}
		m := copy(c.data[c.n:], p[done:n])
		c.n += m
		done += m
	}
	b.held += n
	signal(b.readable)
	return n, nil
}

func (b *memBuffer) closeWrite() {
	b.mu.Lock()
	b.eof = true
	b.mu.Unlock()
	signal(b.readable)
}

func (b *memBuffer) closeRead() {
	b.mu.Lock()
	b.gone = true
	for _, c := range b.chunks[b.first:] {
		c.n = 0
		memChunks.Put(c)
	}
	b.chunks, b.first, b.off, b.held = nil, 0, 0, 0
	b.mu.Unlock()
	signal(b.writable)
}

// memConn is one end of a MemNetwork conn. Reads are serialised, and so
// are writes, as on a TCP conn.
type memConn struct {
	in, out       *memBuffer
	local, remote memAddr

	rmu, wmu sync.Mutex
	rdl, wdl memDeadline
	done     chan struct{}
	once     sync.Once
}

func newMemConn(in, out *memBuffer, local, remote memAddr) *memConn {
	c := &memConn{in: in, out: out, local: local, remote: remote, done: make(chan struct{})}
	c.rdl.cancel = make(chan struct{})
	c.wdl.cancel = make(chan struct{})
	return c
}

func (c *memConn) opError(op string, err error) error { return memOpError(op, c.remote, err) }

func (c *memConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		switch {
		case isClosedChan(c.done):
			return 0, c.opError("read", net.ErrClosed)
		case isClosedChan(c.rdl.wait()):
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		case len(p) == 0:
			return 0, nil
		}
		n, err := c.in.read(p)
		if n > 0 || err != nil {
			return n, err // io.EOF unwrapped, as net.Conn reports it
		}
		select {
		case <-c.in.readable:
		case <-c.rdl.wait():
		case <-c.done:
		}
	}
}

func (c *memConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for {
		switch {
		case isClosedChan(c.done):
			return total, c.opError("write", net.ErrClosed)
		case isClosedChan(c.wdl.wait()):
			return total, c.opError("write", os.ErrDeadlineExceeded)
		}
		n, err := c.out.write(p[total:])
		total += n
		switch {
		case err != nil:
			return total, c.opError("write", err)
		case total == len(p):
			return total, nil
		case n > 0:
			continue
		}
		select {
		case <-c.out.writable:
		case <-c.wdl.wait():
		case <-c.done:
		}
	}
}

// Close closes both directions: the peer reads what was sent, then EOF,
// and its writes fail.
func (c *memConn) Close() error {
	err := c.opError("close", net.ErrClosed)
	c.once.Do(func() {
		err = nil
		close(c.done)
		c.out.closeWrite()
		c.in.closeRead()
	})
	return err
}

// CloseWrite shuts down writing: the peer reads what was sent, then EOF;
// this end may still read.
func (c *memConn) CloseWrite() error {
	if isClosedChan(c.done) {
		return c.opError("close", net.ErrClosed)
	}
	c.out.closeWrite()
	return nil
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error {
	if isClosedChan(c.done) {
		return c.opError("set deadline", net.ErrClosed)
	}
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	if isClosedChan(c.done) {
		return c.opError("set deadline", net.ErrClosed)
	}
	c.rdl.set(t)
	return nil
}

func (c *memConn) SetWriteDeadline(t time.Time) error {
	if isClosedChan(c.done) {
		return c.opError("set deadline", net.ErrClosed)
	}
	c.wdl.set(t)
	return nil
}

// memDeadline is a settable deadline: wait returns a channel closed once
// it has passed (as net.Pipe's deadlines work).
type memDeadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes
}

func (d *memDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait for it to close cancel
	}
	d.timer = nil
	closed := isClosedChan(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

func (d *memDeadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

func isClosedChan(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
