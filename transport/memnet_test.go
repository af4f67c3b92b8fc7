package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// memPair dials a fresh listener on n and returns both ends, closed at
// cleanup.
func memPair(t *testing.T, n *MemNetwork) (client, server net.Conn) {
	t.Helper()
	ln, err := n.Listen("10.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = n.Host("10.0.0.2").Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func wantTimeout(t *testing.T, what string, err error) {
	t.Helper()
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: %v, want a timeout (os.ErrDeadlineExceeded)", what, err)
	}
}

func TestMemAddresses(t *testing.T) {
	n := NewMemNetwork()
	ln, err := n.Listen("10.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln2, err := n.Listen("10.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if ln.Addr().String() == ln2.Addr().String() {
		t.Fatalf("two listens on port 0 got the same address %s", ln.Addr())
	}
	if _, err := n.Listen(ln.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on a taken address: %v, want EADDRINUSE", err)
	}
	if _, err := n.Dial(context.Background(), "10.0.0.9:7"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to nobody: %v, want ECONNREFUSED", err)
	}
	// A host's view: its dials come from it, and ":port" listens on it.
	h := n.Host("10.0.0.3")
	hl, err := h.Listen(":7070")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	if hl.Addr().String() != "10.0.0.3:7070" || hl.Addr().Network() != "mem" {
		t.Fatalf("host listener at %s/%s", hl.Addr().Network(), hl.Addr())
	}
	c, err := n.Host("10.0.0.4").Dial(context.Background(), "10.0.0.3:7070")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := hl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if src := sourceOf(s.RemoteAddr()); src.String() != "10.0.0.4" {
		t.Errorf("the listener sees the dialer at %s (source %s), want host 10.0.0.4", s.RemoteAddr(), src)
	}
	if s.LocalAddr().String() != "10.0.0.3:7070" || c.RemoteAddr().String() != "10.0.0.3:7070" || c.LocalAddr() != s.RemoteAddr() {
		t.Errorf("addresses: client %s -> %s, server %s <- %s", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	// Closing a listener frees its address.
	hl.Close()
	if _, err := n.Dial(context.Background(), "10.0.0.3:7070"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after the listener closed: %v", err)
	}
	again, err := h.Listen(":7070")
	if err != nil {
		t.Fatalf("listen again on a freed address: %v", err)
	}
	again.Close()
	if _, err := hl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed listener: %v", err)
	}
}

// A dial completes before Accept, as TCP's does from the backlog; closing
// the listener closes the conns it never accepted.
func TestMemBacklog(t *testing.T) {
	n := NewMemNetwork()
	ln, err := n.Listen("10.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Dial(context.Background(), "10.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("early")); err != nil {
		t.Fatalf("write before accept: %v", err)
	}
	ln.Close()
	c.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read on a conn its listener dropped: %v, want EOF", err)
	}
	c.Write([]byte("lost"))
	if _, err := c.Write([]byte("late")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write on a conn its listener dropped: %v, want EPIPE", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Dial(ctx, "10.0.0.1:1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("dial with a cancelled context: %v", err)
	}
}

// Each direction holds its buffer and no more: a writer with nobody
// reading gets that far, then blocks until its deadline.
func TestMemBuffering(t *testing.T) {
	n := NewMemNetwork()
	n.SetBuffer(64 << 10)
	c, s := memPair(t, n)
	if _, err := c.Write(make([]byte, 64<<10)); err != nil {
		t.Fatalf("a write that fits the buffer: %v", err)
	}
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	k, err := c.Write([]byte("one more"))
	wantTimeout(t, "a write into a full buffer", err)
	if k != 0 {
		t.Fatalf("wrote %d bytes into a full buffer", k)
	}
	// Reading makes room; the writer goes on from where it was.
	c.SetWriteDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(bytes.Repeat([]byte{7}, 100<<10))
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(s, 164<<10))
	if err != nil || len(got) != 164<<10 || got[len(got)-1] != 7 {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the blocked write: %v", err)
	}
}

func TestMemDeadlines(t *testing.T) {
	c, s := memPair(t, NewMemNetwork())
	buf := make([]byte, 8)

	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := s.Read(buf)
	wantTimeout(t, "a read past its deadline", err)
	s.SetReadDeadline(time.Now().Add(-time.Second))
	_, err = s.Read(buf)
	wantTimeout(t, "a read with a deadline in the past", err)

	// Moving a deadline later wakes no one early; clearing it lets a
	// blocked read go on; moving it to the past wakes a blocked read.
	s.SetReadDeadline(time.Time{})
	res := make(chan error, 1)
	go func() {
		_, err := s.Read(buf)
		res <- err
	}()
	s.SetReadDeadline(time.Now().Add(time.Hour))
	select {
	case err := <-res:
		t.Fatalf("a read returned early: %v", err)
	default:
	}
	c.Write([]byte("x"))
	if err := <-res; err != nil {
		t.Fatalf("read after a write: %v", err)
	}
	go func() {
		_, err := s.Read(buf)
		res <- err
	}()
	s.SetReadDeadline(time.Unix(1, 0))
	wantTimeout(t, "a read whose deadline moved to the past", <-res)

	// SetDeadline covers both directions; a closed conn refuses deadlines.
	c.SetDeadline(time.Now().Add(-time.Second))
	_, err = c.Write([]byte("y"))
	wantTimeout(t, "write", err)
	_, err = c.Read(buf)
	wantTimeout(t, "read", err)
	c.Close()
	if err := c.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("SetDeadline on a closed conn: %v", err)
	}
}

// Close: the peer reads everything sent, then EOF, and its writes fail;
// the closed end's own calls fail with net.ErrClosed. CloseWrite shuts one
// direction only.
func TestMemClose(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		c, s := memPair(t, NewMemNetwork())
		c.Write([]byte("last words"))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "last words" {
			t.Fatalf("peer read %q, %v; want the bytes sent, then EOF", got, err)
		}
		// As on TCP: the first write is lost, the peer's reset fails the next.
		if _, err := s.Write([]byte("?")); err != nil {
			t.Fatalf("first write to a closed peer: %v, want it lost silently", err)
		}
		if _, err := s.Write([]byte("?")); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("second write to a closed peer: %v, want EPIPE", err)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed conn: %v", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write on a closed conn: %v", err)
		}
	})
	t.Run("close wakes blocked calls", func(t *testing.T) {
		n := NewMemNetwork()
		n.SetBuffer(16)
		c, s := memPair(t, n)
		rerr, werr := make(chan error, 1), make(chan error, 1)
		go func() { _, err := s.Read(make([]byte, 1)); rerr <- err }()
		go func() { _, err := c.Write(make([]byte, 64)); werr <- err }()
		// The reader may take the first 16 bytes; then the writer blocks.
		c.Close()
		if err := <-werr; !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EPIPE) {
			t.Errorf("the blocked write: %v", err)
		}
		if err := <-rerr; err != nil && err != io.EOF {
			t.Errorf("the blocked read: %v", err)
		}
	})
	t.Run("close write", func(t *testing.T) {
		c, s := memPair(t, NewMemNetwork())
		c.Write([]byte("request"))
		c.(interface{ CloseWrite() error }).CloseWrite()
		if _, err := c.Write([]byte("more")); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("write after CloseWrite: %v", err)
		}
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "request" {
			t.Fatalf("peer read %q, %v", got, err)
		}
		s.Write([]byte("answer"))
		s.Close()
		got, err = io.ReadAll(c)
		if err != nil || string(got) != "answer" {
			t.Fatalf("the half-closed end read %q, %v", got, err)
		}
	})
}

// Both directions at once, in writes and reads of random sizes, under the
// race detector: every byte arrives, in order.
func TestMemDuplexStress(t *testing.T) {
	n := NewMemNetwork()
	n.SetBuffer(32 << 10)
	c, s := memPair(t, n)
	const total = 8 << 20
	send := func(w net.Conn, seed uint64) []byte {
		rng := rand.New(rand.NewPCG(seed, 1))
		h := sha256.New()
		buf := make([]byte, 100<<10)
		for sent := 0; sent < total; {
			k := min(1+rng.IntN(len(buf)), total-sent)
			for i := range buf[:k] {
				buf[i] = byte(rng.Uint32())
			}
			h.Write(buf[:k])
			if _, err := w.Write(buf[:k]); err != nil {
				t.Errorf("write: %v", err)
				return nil
			}
			sent += k
		}
		return h.Sum(nil)
	}
	recv := func(r net.Conn, seed uint64) []byte {
		rng := rand.New(rand.NewPCG(seed, 2))
		h := sha256.New()
		buf := make([]byte, 100<<10)
		for got := 0; got < total; {
			k, err := r.Read(buf[:1+rng.IntN(len(buf))])
			if err != nil {
				t.Errorf("read after %d bytes: %v", got, err)
				return nil
			}
			h.Write(buf[:k])
			got += k
		}
		return h.Sum(nil)
	}
	var wg sync.WaitGroup
	var sums [4][]byte
	for _, f := range []func(){
		func() { sums[0] = send(c, 1) }, func() { sums[1] = recv(s, 1) },
		func() { sums[2] = send(s, 2) }, func() { sums[3] = recv(c, 2) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	wg.Wait()
	if !bytes.Equal(sums[0], sums[1]) || !bytes.Equal(sums[2], sums[3]) {
		t.Fatal("bytes arrived changed or out of order")
	}
}

// TestMemBufferReusesChunks: a conn's bytes go through chunks that are
// given back as they are read, so a conn that is written and read without
// end, never drained (a byte always held) and across chunk boundaries,
// neither allocates nor keeps more chunks than it holds.
func TestMemBufferReusesChunks(t *testing.T) {
	b := newMemBuffer(1 << 20)
	if n, err := b.write([]byte{1}); n != 1 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	in := make([]byte, memChunkSize/3+1) // not a divisor: writes straddle chunks
	for i := range in {
		in[i] = byte(i)
	}
	out := make([]byte, len(in))
	cycle := func() {
		if n, err := b.write(in); n != len(in) || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
		if n, err := b.read(out); n != len(out) || err != nil {
			t.Fatalf("read: %d, %v", n, err)
		}
	}
	for range 1000 { // warm the pool
		cycle()
	}
	if a := testing.AllocsPerRun(1000, cycle); a != 0 && !raceEnabled {
		t.Errorf("a write and a read allocated %.1f times", a)
	}
	if b.held != 1 || cap(b.chunks) > 4 || len(b.chunks)-b.first > 2 {
		t.Errorf("holding %d bytes in %d chunks (%d slots)", b.held, len(b.chunks)-b.first, cap(b.chunks))
	}
	// What comes out is what went in, in order: the byte held over from
	// the last cycle, then in.
	want := append([]byte{in[len(in)-1]}, in...)
	b.write(in)
	got := make([]byte, len(want))
	if n, _ := b.read(got); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what was written", n)
	}
}
