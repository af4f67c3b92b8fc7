package transport

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync/atomic"
)

// coalesceConn sits between yamux and the TCP conn. yamux's send loop
// writes each data frame as two writes, the 12-byte header and then the
// body, which costs two syscalls and two packets per frame. coalesceConn
// holds a data header back and sends it with its body in one writev.
//
// Only yamux's send loop writes to it (yamux serializes all writes there),
// so it needs no lock. The header layout is yamux's documented v0 format.
//
// It also counts the bytes read, for the session's keepalive: any byte
// from the peer shows it alive.
type coalesceConn struct {
	net.Conn
	read    atomic.Uint64 // bytes read so far
	held    [yamuxHeaderSize]byte
	holding bool
	bufs    [2][]byte
	nb      net.Buffers

	// copying is set over TLS, which has no writev: the header and the
	// start of the body are copied into one write (one TLS record).
	copying bool
	buf     []byte
}

func newCoalesceConn(c net.Conn) *coalesceConn {
	_, isTLS := c.(*tls.Conn)
	return &coalesceConn{Conn: c, copying: isTLS}
}

// maxRecord is the most plaintext one TLS record carries.
const maxRecord = 16 << 10

const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

func (c *coalesceConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Add(uint64(n))
	}
	return n, err
}

func (c *coalesceConn) Write(p []byte) (int, error) {
	if !c.holding {
		if len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
			copy(c.held[:], p)
			c.holding = true
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	c.holding = false
	if c.copying {
		return c.writeCopied(p)
	}
	c.bufs[0], c.bufs[1] = c.held[:], p
	c.nb = c.bufs[:]
	n, err := c.nb.WriteTo(c.Conn)
	c.bufs[1] = nil // do not keep the body alive
	n -= yamuxHeaderSize
	if n < 0 {
		n = 0
	}
	return int(n), err
}

// writeCopied sends the held header with p: the header and as much of p
// as fills one TLS record in one write, then the rest.
func (c *coalesceConn) writeCopied(p []byte) (int, error) {
	first := min(len(p), maxRecord-yamuxHeaderSize)
	c.buf = append(append(c.buf[:0], c.held[:]...), p[:first]...)
	n, err := c.Conn.Write(c.buf)
	n = max(n-yamuxHeaderSize, 0)
	if err != nil || first == len(p) {
		return n, err
	}
	m, err := c.Conn.Write(p[first:])
	return n + m, err
}
