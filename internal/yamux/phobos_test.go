// phobos's tests of its changes: the shared receive buffers (stream.go,
// recvBufs), the send loop writing from the caller's memory, and callers
// writing their own frames on an idle session; see PHOBOS.md. Like the rest of this package, under the Mozilla Public
// License 2.0 (LICENSE).

package yamux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A buffer holds the frame it was taken for without growing: that is what
// makes it reusable. A full 256 KiB window once did not fit the largest
// class, and every such frame took a fresh buffer.
func TestRecvBufHoldsItsFrame(t *testing.T) {
	var r recvBufs
	for _, n := range []uint32{1, 512, 4<<10 - 1, 4 << 10, 4<<10 + 1, 64 << 10, 64<<10 + 1, 256 << 10, 256<<10 + 1, 1 << 20} {
		b := r.get(n)
		c := b.Cap()
		want := int(n) + bytes.MinRead
		for _, class := range recvClasses {
			if int(n) <= class {
				want = class + bytes.MinRead
				break
			}
		}
		if c != want {
			t.Errorf("get(%d): capacity %d, want %d", n, c, want)
		}
		// As readData reads a frame.
		if _, err := io.Copy(b, &io.LimitedReader{R: zeros{}, N: int64(n)}); err != nil {
			t.Fatal(err)
		}
		if b.Len() != int(n) || b.Cap() != c {
			t.Errorf("reading a %d-byte frame: length %d, capacity %d → %d; want the frame in the buffer as it was", n, b.Len(), c, b.Cap())
		}
	}
}

func TestRecvBufsReuseTheLastGivenBack(t *testing.T) {
	var r recvBufs
	b1, b2 := r.get(60<<10), r.get(64<<10)
	b1.WriteString("stale")
	b1.Reset()
	if !r.put(b1) || !r.put(b2) {
		t.Fatal("put refused a buffer of its own class")
	}
	if got := r.get(5 << 10); got != b2 {
		t.Errorf("get after put b1, b2: %p, want b2 %p (the warmest)", got, b2)
	}
	if got := r.get(64 << 10); got != b1 || got.Len() != 0 {
		t.Errorf("second get: %p holding %d bytes, want b1 %p, empty", got, got.Len(), b1)
	}
	if got := r.get(64 << 10); got == b1 || got == b2 {
		t.Error("a buffer handed out twice")
	}
	// A smaller class does not get a larger class's buffer, nor the reverse.
	if !r.put(b2) {
		t.Fatal("put refused b2")
	}
	if got := r.get(100); got == b2 {
		t.Error("a 100-byte frame got a 64 KiB buffer")
	}
	if got := r.get(100 << 10); got == b2 {
		t.Error("a 100 KiB frame got a 64 KiB buffer")
	}
	// The frame a bulk stream gets at yamux's initial window fills it
	// exactly: it reuses the largest class too.
	full := r.get(256 << 10)
	if !r.put(full) {
		t.Fatal("put refused a buffer of the largest class")
	}
	if got := r.get(256 << 10); got != full {
		t.Errorf("a full 256 KiB window's frame got %p, want the buffer given back %p", got, full)
	}
}

func TestRecvBufsGrownBuffers(t *testing.T) {
	var r recvBufs
	largest := recvClasses[len(recvClasses)-1] + bytes.MinRead

	grown := bytes.NewBuffer(make([]byte, 0, largest+100<<10))
	if !r.put(grown) {
		t.Fatal("put refused a buffer that grew less than twice the largest class")
	}
	if got := r.get(256 << 10); got != grown {
		t.Errorf("a 256 KiB frame got %p, want the grown buffer %p (the largest class it holds)", got, grown)
	}

	huge := bytes.NewBuffer(make([]byte, 0, 2*largest+1))
	if r.put(huge) {
		t.Error("put took a buffer of more than twice the largest class; its stream should keep it")
	}
	if got := r.get(256 << 10); got == huge {
		t.Error("a refused buffer was handed out")
	}
}

func TestRecvBufsKeepAtMostRecvKeep(t *testing.T) {
	var r recvBufs
	keep := recvKeep / (recvClasses[0] + bytes.MinRead)
	for range keep + 10 {
		if !r.put(bytes.NewBuffer(make([]byte, 0, recvClasses[0]+bytes.MinRead))) {
			t.Fatal("put refused a buffer of the smallest class")
		}
	}
	if n := len(r[0].bufs); n != keep {
		t.Errorf("the smallest class keeps %d idle buffers, want at most %d (%d bytes)", n, keep, recvKeep)
	}
}

// testSessionPair is a client and a server session over pipes, without
// keepalives, with both sides' stream window set to window.
func testSessionPair(t *testing.T, window uint32) (*Session, *Session) {
	conf := func() *Config {
		c := DefaultConfig()
		c.EnableKeepAlive = false
		c.MaxStreamWindowSize = window
		c.LogOutput = io.Discard
		return c
	}
	a, b := testConnPipe(t)
	return testClientServerConfig(t, a, b, conf(), conf())
}

// testStreamPair opens a stream from client to server.
func testStreamPair(t *testing.T, client, server *Session) (*Stream, *Stream) {
	out, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	// The server learns of the stream from its first frame.
	if _, err := out.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	in, err := server.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if _, err := io.ReadFull(in, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// And the client learns of the window the server granted on accepting
	// it before a byte the server writes after: once that byte is read,
	// the client's first write may take the whole window. (Without it, a
	// write racing the grant went out as a frame of the initial window.)
	if _, err := in.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(out, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return out, in
}

func recvState(s *Stream) (*bytes.Buffer, bool) {
	s.recvLock.Lock()
	defer s.recvLock.Unlock()
	return s.recvBuf, s.recvOwn
}

// A stream that has read everything it got holds no receive buffer: with a
// thousand sessions, a thousand idle buffers were most of a head's heap.
func TestDrainedStreamHoldsNoBuffer(t *testing.T) {
	client, server := testSessionPair(t, 256<<10)
	out, in := testStreamPair(t, client, server)
	for _, n := range []int{10, 10 << 10, 200 << 10} {
		if _, err := out.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(in, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if buf, _ := recvState(in); buf != nil {
			t.Errorf("after reading all of %d bytes the stream holds a %d-byte buffer, want none", n, buf.Cap())
		}
	}
}

// A stream whose frames are larger than every class (a bulk stream with a
// big window) keeps one buffer for good, as upstream yamux does, rather
// than take a new one a frame.
func TestBulkStreamKeepsItsBuffer(t *testing.T) {
	client, server := testSessionPair(t, 8<<20)
	out, in := testStreamPair(t, client, server)
	// One frame (both ends grant the whole window when the stream opens)
	// of 300 KiB: larger than every class, and its buffer less than twice
	// the largest, which the shared buffers would take back; only the
	// stream's keeping it saves a new one for the next frame.
	const n = 300 << 10
	send := func() {
		errc := make(chan error, 1)
		go func() {
			_, err := out.Write(make([]byte, n))
			errc <- err
		}()
		if _, err := io.ReadFull(in, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	send()
	first, own := recvState(in)
	if first == nil || !own {
		t.Fatalf("after a %d-byte write with an 8 MiB window: buffer %v, own %v; want the stream to keep its own", n, first != nil, own)
	}
	send()
	if again, _ := recvState(in); again != first {
		t.Errorf("second transfer: buffer %p, want the stream's own %p again", again, first)
	}
}

// A frame that does not fit after what a stream has still unread moves
// both into a buffer of the class that holds them, and the smaller one
// goes back, rather than the buffer growing into new memory.
func TestBacklogMovesToALargerClass(t *testing.T) {
	client, server := testSessionPair(t, 256<<10)
	out, in := testStreamPair(t, client, server)
	out2, in2 := testStreamPair(t, client, server)
	const n = 3 << 10 // two fit the 64 KiB class, not the 4 KiB one
	for range 2 {
		if _, err := out.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	// The session reads frames in order: once a frame sent after them has
	// arrived on another stream, both of the first stream's are in.
	if _, err := out2.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(in2, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	buf, _ := recvState(in)
	if buf == nil || buf.Len() != 2*n || buf.Cap() != recvClasses[1]+bytes.MinRead {
		t.Fatalf("two unread %d-byte frames: buffer %v; want %d bytes in the %d KiB class (%d)", n, bufInfo(buf), 2*n, recvClasses[1]>>10, recvClasses[1]+bytes.MinRead)
	}
	if _, err := io.ReadFull(in, make([]byte, 2*n)); err != nil {
		t.Fatal(err)
	}
}

func bufInfo(b *bytes.Buffer) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%d bytes, capacity %d", b.Len(), b.Cap())
}

// The send loop writes a body from the caller's memory and holds the
// caller's lock meanwhile, so a write stuck in the conn must not hold a
// caller that gave up for longer than its deadline: the write fails at it,
// the caller returns, and the session closes, as with a dead peer.
func TestStuckBodyWriteEndsTheSession(t *testing.T) {
	local, peer := net.Pipe() // synchronous, and takes deadlines
	t.Cleanup(func() { local.Close(); peer.Close() })
	conf := DefaultConfig()
	conf.EnableKeepAlive = false
	conf.ConnectionWriteTimeout = 100 * time.Millisecond
	// The peer never acknowledges the stream; yamux would close the session
	// for that after StreamOpenTimeout, which would free the write too.
	conf.StreamOpenTimeout = 0
	conf.LogOutput = io.Discard
	client, err := Client(local, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	// The peer reads the stream's opening and the data frame's header,
	// then stops: the body's write blocks in the conn.
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, 2*headerSize))
		read <- err
	}()
	stream, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64<<10)
	wrote := make(chan error, 1)
	go func() {
		_, err := stream.Write(body)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("a write no one reads succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a body write stuck in the conn held its caller for 10 s; want it let go at the write's deadline (200ms here)")
	}
	if err := <-read; err != nil {
		t.Fatalf("peer reading the headers: %v", err)
	}
	select {
	case <-client.CloseChan():
	case <-time.After(10 * time.Second):
		t.Fatal("the session is still open 10 s after its body write got stuck; want it closed at the write's deadline")
	}
}

// Streams that share receive buffers still each read exactly the bytes
// their peer wrote: writes of every size around the classes (a byte to
// more than the largest), read back in reads of other sizes, so that
// backlogs build up, move between classes, grow past them and drain, on
// several streams at once. Every other stream's reader starts only after
// its writer's first six frames, which then wait unread (they fit the
// window), so that those streams' backlogs surely move between classes.
func TestSharedBuffersKeepEveryStreamsBytes(t *testing.T) {
	client, server := testSessionPair(t, 1<<20)
	const streams = 6
	sizes := []int{1, 100, 4<<10 - 1, 4 << 10, 4<<10 + 1, 60 << 10, 64 << 10, 64<<10 + 1, 200 << 10, 256 << 10, 256<<10 + 1, 300 << 10}
	reads := []int{1, 7, 512, 4 << 10, 33 << 10, 128 << 10}
	// The bytes stream i sends: position p holds byte(p*31 + i*7 + p>>8).
	pattern := func(i, p int) byte { return byte(p*31 + i*7 + p>>8) }
	total := 0
	for _, n := range sizes {
		total += n
	}
	errc := make(chan error, 2*streams)
	for i := range streams {
		out, in := testStreamPair(t, client, server)
		backlog := make(chan struct{})
		started := sync.OnceFunc(func() { close(backlog) })
		go func() {
			defer started() // also when a write fails, so the reader does not wait for good
			p := 0
			for k := range sizes {
				if k == 6 {
					started()
				}
				n := sizes[(k+i)%len(sizes)]
				b := make([]byte, n)
				for j := range b {
					b[j] = pattern(i, p+j)
				}
				if _, err := out.Write(b); err != nil {
					errc <- fmt.Errorf("stream %d, write of %d bytes: %w", i, n, err)
					return
				}
				p += n
			}
			errc <- nil
		}()
		go func() {
			if i%2 == 0 {
				<-backlog
			}
			p := 0
			for k := 0; p < total; k++ {
				n := reads[(k+i)%len(reads)]
				if n > total-p {
					n = total - p // yamux's own min takes uint32s
				}
				b := make([]byte, n)
				if _, err := io.ReadFull(in, b); err != nil {
					errc <- fmt.Errorf("stream %d, read at %d: %w", i, p, err)
					return
				}
				for j, c := range b {
					if want := pattern(i, p+j); c != want {
						errc <- fmt.Errorf("stream %d, byte %d: %d, want %d", i, p+j, c, want)
						return
					}
				}
				p += len(b)
			}
			errc <- nil
		}()
	}
	for range 2 * streams {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// recordingConn is a conn with write deadlines (so that callers may write
// their frames directly) that records the type of every frame header
// written to it.
type recordingConn struct {
	io.ReadWriteCloser
	mu    sync.Mutex
	types []uint8
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if len(p) == headerSize && p[0] == protoVersion {
		c.mu.Lock()
		c.types = append(c.types, p[1])
		c.mu.Unlock()
	}
	return c.ReadWriteCloser.Write(p)
}

func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// A caller writes its frame itself only while no frame waits for the send
// loop: a frame queued before it (here a window update the receive loop
// would send, sendNoWait) goes out first. Checking only that no one held
// the write lock let a direct write overtake a frame the send loop had
// not yet taken.
func TestDirectWriteOvertakesNoQueuedFrame(t *testing.T) {
	c1, c2 := testConnPipe(t)
	rec := &recordingConn{ReadWriteCloser: c1}
	cfg := testConf()
	client, err := Client(rec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := Server(c2, testConf())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	go func() { // drain what the client sends
		st, err := server.AcceptStream()
		if err != nil {
			return
		}
		io.Copy(io.Discard, st)
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec.mu.Lock()
	rec.types = nil // the stream's opening
	rec.mu.Unlock()
	const rounds = 2000
	hdr := header(make([]byte, headerSize))
	for range rounds {
		hdr.encode(typeWindowUpdate, 0, st.id, 0) // changes nothing at the server
		if err := client.sendNoWait(append(header(nil), hdr...)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	// Every frame queued before a Write is written before it: the data
	// frames never get ahead of the window updates.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	updates, data := 0, 0
	for _, typ := range rec.types {
		switch typ {
		case typeWindowUpdate:
			updates++
		case typeData:
			data++
			if data > updates {
				t.Fatalf("data frame %d written before the window update queued ahead of it (%d written)", data, updates)
			}
		}
	}
	if data != rounds {
		t.Fatalf("%d data frames recorded, want %d", data, rounds)
	}
}

// sinkConn takes every write and has nothing to read until it is closed.
type sinkConn struct {
	closed chan struct{}
	once   sync.Once
}

func (c *sinkConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, io.EOF
}
func (c *sinkConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *sinkConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *sinkConn) SetWriteDeadline(time.Time) error { return nil }

// A caller on an idle session writes its frame itself: no hand-off to
// the send loop, and nothing allocated for it (the send loop's way takes
// a sendReady a frame).
func TestIdleSessionWritesDirectly(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	client, err := Client(&sinkConn{closed: make(chan struct{})}, testConf())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	st, err := client.OpenStream() // data may follow the SYN before its ACK
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 64)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("a write on an idle session allocated %v times; want none", n)
	}
}

// heldConn takes every write, and its reads wait for release whether or
// not it is closed: a session over it shuts down (Close) but cannot
// finish closing until the test releases the conn, since Close waits for
// the receive loop.
type heldConn struct {
	release chan struct{}
}

func (c *heldConn) Read([]byte) (int, error) {
	<-c.release
	return 0, io.EOF
}
func (c *heldConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *heldConn) Close() error                     { return nil }
func (c *heldConn) SetWriteDeadline(time.Time) error { return nil }

// TestShutdownEndsWaitingReadsAndWrites: a read waiting for data and a
// write waiting for window return ErrSessionShutdown once their session
// shuts down, without waiting for Close to finish (which closes their
// streams). They used to go back to waiting on the shutdown channel,
// already closed, and spin until the streams were closed: with a
// thousand sessions closing at once, the spinning kept the receive loops
// Close waits for from ending for tens of seconds.
func TestShutdownEndsWaitingReadsAndWrites(t *testing.T) {
	conn := &heldConn{release: make(chan struct{})}
	client, err := Client(conn, testConf())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	defer func() {
		close(conn.release)
		<-closed
	}()
	reader, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	writer, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		what string
		err  error
	}
	results := make(chan result, 2)
	go func() {
		_, err := reader.Read(make([]byte, 16))
		results <- result{"read", err}
	}()
	go func() {
		// More than the initial window, which the peer never grows.
		_, err := writer.Write(make([]byte, initialStreamWindow+1))
		results <- result{"write", err}
	}()
	go func() {
		client.Close()
		close(closed)
	}()
	<-client.CloseChan()
	for range 2 {
		select {
		case r := <-results:
			if !errors.Is(r.err, ErrSessionShutdown) {
				t.Errorf("%s on a shut-down session: %v, want %v", r.what, r.err, ErrSessionShutdown)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a read or write waited on after its session shut down (until its stream is closed, which Close does only once the receive loop ends)")
		}
	}
	select {
	case <-closed:
		t.Fatal("Close finished while the receive loop could not end: the test tests nothing")
	default:
	}
}

// TestShutdownStillDeliversWhatCame: bytes received before the session
// shut down are read before the read reports the shutdown.
func TestShutdownStillDeliversWhatCame(t *testing.T) {
	client, server := testSessionPair(t, 256<<10)
	out, in := testStreamPair(t, client, server)
	if _, err := out.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := io.ReadFull(in, got[:1]); err != nil {
		t.Fatal(err)
	}
	server.Close()
	rest, err := io.ReadAll(in)
	if string(got[:1])+string(rest) != "last words" {
		t.Fatalf("read %q after the shutdown, want %q", string(got[:1])+string(rest), "last words")
	}
	if err != nil && !errors.Is(err, ErrSessionShutdown) {
		t.Fatalf("after the bytes: %v", err)
	}
}
