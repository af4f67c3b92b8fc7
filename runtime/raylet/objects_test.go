package raylet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/objclient"
	"github.com/phobos-project/phobos/runtime/ticket"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
)

const waitLimit = 20 * time.Second

var testToken = []byte("raylet objects test token, 32+ bytes")

// deadAddr is a loopback address nothing listens on: the raylets of these
// tests have no head, since they only serve and fetch objects.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startRaylet starts a raylet with a capacity-byte store in temp dirs.
func startRaylet(t testing.TB, name string, capacity int64) *Raylet {
	t.Helper()
	r, err := Start(context.Background(), Config{
		ID: name, Heads: []string{deadAddr(t)}, Token: testToken, Slots: 1,
		Store:     objectstore.Config{Dir: shmDir(t), Capacity: capacity, SpillDir: t.TempDir()},
		Transport: transport.Config{Insecure: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.secret.Store(&testSecret)
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close raylet %s: %v", name, err)
		}
	})
	return r
}

// shmDir is a fresh directory in /dev/shm (where arenas live in
// production), or in the temp dir if there is no /dev/shm.
func shmDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "phobos-raylet-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func testObject(i uint64) dag.ObjectID {
	return dag.NewObjectID(dag.PackSubtaskID(7, 1, i+1), 0)
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func putObject(t testing.TB, s *objectstore.Store, id dag.ObjectID, data, meta []byte) {
	t.Helper()
	view, err := s.Create(id, int64(len(data)), meta)
	if err != nil {
		t.Fatal(err)
	}
	copy(view, data)
	if err := s.Seal(id); err != nil {
		t.Fatal(err)
	}
}

func storedBytes(t testing.TB, s *objectstore.Store, id dag.ObjectID) []byte {
	t.Helper()
	o, err := s.Get(id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	defer s.Release(id)
	return bytes.Clone(o.Data)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func TestFetchFromPeerIntoArena(t *testing.T) {
	a := startRaylet(t, "a", 16<<20)
	b := startRaylet(t, "b", 16<<20)
	id := testObject(1)
	data := randomBytes(3<<20+17, 1) // not a whole number of chunks
	putObject(t, a.Store(), id, data, []byte("meta"))

	in := &wire.InputSpec{Object: id, Size: int64(len(data)), Locations: []string{a.Addr()}}
	obj, fetched, took, err := b.localOrFetch(testCtx(t), in)
	if err != nil {
		t.Fatal(err)
	}
	if !fetched || took <= 0 || !bytes.Equal(obj.Data, data) || string(obj.Meta) != "meta" {
		t.Fatalf("fetched=%v in %v, bytes equal=%v, meta %q", fetched, took, bytes.Equal(obj.Data, data), obj.Meta)
	}
	b.Store().Release(id)
	sa, sb := a.storeStats(), b.storeStats()
	if sa.TransfersOut != 1 || sa.BytesOut != int64(len(data)) || sb.TransfersIn != 1 || sb.BytesIn != int64(len(data)) || sb.TransferErrs != 0 {
		t.Errorf("transfer counters: sender %+v, receiver %+v", sa, sb)
	}
	// A driver's checked copy, into its own buffer or a new one.
	s, err := transport.Dial(testCtx(t), a.Addr(), driverConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.Serve(nil)
	dst := make([]byte, len(data))
	got, meta, err := objclient.FetchObject(testCtx(t), s, id, dst, driverTicket(id, ticket.Read))
	if err != nil || &got[0] != &dst[0] || !bytes.Equal(got, data) || string(meta) != "meta" {
		t.Fatalf("objclient.FetchObject into dst: err %v, same buffer %v, equal %v, meta %q", err, &got[0] == &dst[0], bytes.Equal(got, data), meta)
	}
	if got, _, err := objclient.FetchObject(testCtx(t), s, id, nil, driverTicket(id, ticket.Read)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("objclient.FetchObject into a new buffer: %v", err)
	}
	if _, _, err := objclient.FetchObject(testCtx(t), s, testObject(99), nil, driverTicket(testObject(99), ticket.Read)); !errors.Is(err, dag.ErrNotFound) {
		t.Fatalf("objclient.FetchObject of a missing object: %v", err)
	}

	// Now local: no second transfer.
	if _, fetched, took, err := b.localOrFetch(testCtx(t), in); err != nil || fetched || took != 0 {
		t.Fatalf("second read: fetched=%v in %v, err=%v", fetched, took, err)
	}
	b.Store().Release(id)
}

// TestFetchInRanges fetches an object large enough to come in parallel
// ranges, and one whose size the head got wrong (the ranges do not fit,
// so it is fetched whole).
func TestFetchInRanges(t *testing.T) {
	a := startRaylet(t, "a", 64<<20)
	b := startRaylet(t, "b", 64<<20)
	big, small := testObject(1), testObject(2)
	bigData, smallData := randomBytes(splitMin+3<<20+5, 2), randomBytes(1<<20, 3)
	putObject(t, a.Store(), big, bigData, nil)
	putObject(t, a.Store(), small, smallData, nil)
	for _, tc := range []struct {
		id       dag.ObjectID
		data     []byte
		reported int64
	}{
		{big, bigData, int64(len(bigData))},
		{small, smallData, splitMin * 2},
	} {
		in := &wire.InputSpec{Object: tc.id, Size: tc.reported, Locations: []string{a.Addr()}}
		if err := b.peers.fetch(testCtx(t), b.Store(), in); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(storedBytes(t, b.Store(), tc.id), tc.data) {
			t.Fatalf("object %s differs", tc.id)
		}
	}
	sa, sb := a.storeStats(), b.storeStats()
	if sb.TransfersIn != 2 || sb.BytesIn != int64(len(bigData)+len(smallData)) || sa.TransfersOut != 2 {
		t.Errorf("counters: sender %+v, receiver %+v", sa, sb)
	}
	// Each range went on a bulk conn of its own (two for each object: the
	// small one's ranges found it smaller than reported), and the small
	// one, fetched whole at its real size, on a session stream. Every
	// bulk conn is closed, and forgotten, once its range is in.
	b.peers.mu.Lock()
	sessions, open := len(b.peers.sessions), len(b.peers.bulk)
	b.peers.mu.Unlock()
	if dials := b.peers.bulkDials.Load(); sessions != 1 || dials != 2*parallelRanges || open != 0 {
		t.Errorf("%d sessions and %d bulk dials to the peer (%d addresses with bulk conns open), want 1 and %d (one per range), none open",
			sessions, dials, open, 2*parallelRanges)
	}
}

func TestFetchOfSpilledObjectRestoresIt(t *testing.T) {
	a := startRaylet(t, "a", 1<<20)
	b := startRaylet(t, "b", 4<<20)
	for i := range uint64(3) {
		putObject(t, a.Store(), testObject(i), randomBytes(512<<10, i), nil)
	}
	if st := a.Store().Stats(); st.Spilled == 0 {
		t.Fatalf("setup did not spill: %+v", st)
	}
	for i := range uint64(3) {
		in := &wire.InputSpec{Object: testObject(i), Size: 512 << 10, Locations: []string{a.Addr()}}
		if err := b.peers.fetch(testCtx(t), b.Store(), in); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(storedBytes(t, b.Store(), testObject(i)), randomBytes(512<<10, i)) {
			t.Fatalf("object %d differs after spill, restore and transfer", i)
		}
	}
	if st := a.storeStats(); st.Restores == 0 || st.Spills == 0 {
		t.Errorf("sender stats %+v: want spills and restores", st)
	}
}

// fakePeer speaks the bulk protocol with scripted faults.
type fakePeer struct {
	addr     string
	data     []byte
	requests atomic.Int32
	// mode says what answer n (from 1) does: "good", "corrupt" (flip a
	// byte, send the true CRC), "break" (close halfway), "missing".
	mode func(n int32) string
	// hold, if set, delays every answer until it is closed.
	hold chan struct{}
}

func startFakePeer(t *testing.T, data []byte, mode func(int32) string) *fakePeer {
	t.Helper()
	f := &fakePeer{data: data, mode: mode}
	f.addr = testutil.Serve(t, transport.Config{Insecure: true, Token: testToken, NodeID: "fake"}, f)
	return f
}

func (f *fakePeer) HandleCall(context.Context, *transport.Session, transport.Method, transport.Body) (any, error) {
	return nil, errors.New("no calls")
}
func (f *fakePeer) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (f *fakePeer) HandleStream(_ *transport.Session, st net.Conn) {
	defer st.Close()
	var req wire.StreamRequest
	if err := transport.ReadMsg(st, &req, maxHeader); err != nil {
		return
	}
	n := f.requests.Add(1)
	if f.hold != nil {
		<-f.hold
	}
	mode := f.mode(n)
	if mode == "missing" {
		transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindNotFound, Error: "fake: no such object"})
		return
	}
	transport.WriteMsg(st, wire.ObjectHeader{Size: int64(len(f.data))})
	out := f.data
	switch mode {
	case "corrupt":
		out = bytes.Clone(f.data)
		out[len(out)/2] ^= 0x40
	case "break":
		st.Write(out[:len(out)/2])
		return
	}
	st.Write(out)
	transport.WriteMsg(st, wire.ObjectTrailer{CRC32C: crc32.Checksum(f.data, castagnoli)})
}

func TestFetchRetriesACorruptTransfer(t *testing.T) {
	data := randomBytes(2<<20, 3)
	f := startFakePeer(t, data, func(n int32) string {
		if n == 1 {
			return "corrupt"
		}
		return "good"
	})
	b := startRaylet(t, "b", 8<<20)
	id := testObject(1)
	if err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: id, Locations: []string{f.addr}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(storedBytes(t, b.Store(), id), data) {
		t.Fatal("stored bytes differ")
	}
	if got, st := f.requests.Load(), b.storeStats(); got != 2 || st.TransferErrs != 1 || st.TransfersIn != 1 {
		t.Errorf("%d requests, stats %+v; want 2 requests, one error, one transfer", got, st)
	}
}

func TestFetchTriesTheNextLocation(t *testing.T) {
	data := randomBytes(1<<20, 4)
	broken := startFakePeer(t, data, func(int32) string { return "break" })
	good := startFakePeer(t, data, func(int32) string { return "good" })
	b := startRaylet(t, "b", 8<<20)
	id := testObject(1)
	if err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: id, Locations: []string{broken.addr, good.addr}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(storedBytes(t, b.Store(), id), data) {
		t.Fatal("stored bytes differ")
	}
	if broken.requests.Load() != 1 || good.requests.Load() != 1 {
		t.Errorf("requests: broken %d, good %d; want 1 each", broken.requests.Load(), good.requests.Load())
	}
}

func TestFetchFailsClearly(t *testing.T) {
	data := randomBytes(256<<10, 5)
	t.Run("always corrupt", func(t *testing.T) {
		f := startFakePeer(t, data, func(int32) string { return "corrupt" })
		b := startRaylet(t, "b", 4<<20)
		err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: testObject(1), Locations: []string{f.addr}})
		if !errors.Is(err, objclient.ErrChecksum) || !errors.Is(err, dag.ErrUnavailable) {
			t.Fatalf("err = %v; want a checksum error of kind unavailable", err)
		}
		for _, want := range []string{"gave up after 3 rounds", f.addr, "CRC-32C", testObject(1).String()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		if f.requests.Load() != fetchRounds {
			t.Errorf("%d attempts, want %d", f.requests.Load(), fetchRounds)
		}
		if st := b.Store().Stats(); st.Objects != 0 || st.Used != 0 {
			t.Errorf("a failed fetch left something in the store: %+v", st)
		}
	})
	t.Run("nobody has it", func(t *testing.T) {
		f := startFakePeer(t, data, func(int32) string { return "missing" })
		a := startRaylet(t, "a", 1<<20)
		b := startRaylet(t, "b", 4<<20)
		err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: testObject(2), Locations: []string{f.addr, a.Addr()}})
		if !errors.Is(err, dag.ErrNotFound) || !strings.Contains(err.Error(), "no location has it") {
			t.Fatalf("err = %v; want not found", err)
		}
		if f.requests.Load() != 1 {
			t.Errorf("a peer without the object was asked %d times", f.requests.Load())
		}
	})
	t.Run("no locations", func(t *testing.T) {
		b := startRaylet(t, "b", 1<<20)
		err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: testObject(3)})
		if !errors.Is(err, dag.ErrNotFound) {
			t.Fatalf("err = %v; want not found", err)
		}
	})
}

func TestConcurrentFetchesShareOneTransfer(t *testing.T) {
	const n = 8
	data := randomBytes(4<<20, 6)
	f := startFakePeer(t, data, func(int32) string { return "good" })
	f.hold = make(chan struct{})
	b := startRaylet(t, "b", 16<<20)
	id := testObject(1)
	in := &wire.InputSpec{Object: id, Locations: []string{f.addr}}
	errs := make(chan error, n)
	for range n {
		go func() {
			obj, _, _, err := b.localOrFetch(testCtx(t), in)
			if err == nil {
				if !bytes.Equal(obj.Data, data) {
					err = errors.New("wrong bytes")
				}
				b.Store().Release(id)
			}
			errs <- err
		}()
	}
	// All n are in: one transfer asked the peer, the others wait for it.
	testutil.WaitFor(t, waitLimit, "one request and n-1 waiters", func() bool {
		b.peers.mu.Lock()
		defer b.peers.mu.Unlock()
		c := b.peers.inflight[id]
		return f.requests.Load() == 1 && c != nil && c.waiters == n-1
	})
	close(f.hold)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got, st := f.requests.Load(), b.storeStats(); got != 1 || st.TransfersIn != 1 {
		t.Errorf("%d requests, %d transfers for %d concurrent fetches of one object; want 1", got, st.TransfersIn, n)
	}
}

func TestLocateInProcess(t *testing.T) {
	a := startRaylet(t, "a", 4<<20)
	id := testObject(1)
	data := randomBytes(100_000, 7)
	putObject(t, a.Store(), id, data, []byte("m"))
	s, err := transport.Dial(testCtx(t), a.Addr(), driverConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.Serve(nil)

	lr := objclient.NewLocalReader()
	t.Cleanup(func() { lr.Close() })
	o, err := lr.Read(testCtx(t), s, id, driverTicket(id, ticket.Read))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Data, data) || string(o.Meta) != "m" {
		t.Fatal("located object differs")
	}
	if st := a.Store().Stats(); st.Pinned != 1 {
		t.Errorf("while lent: %d pinned, want 1", st.Pinned)
	}
	// A second object of the same arena (objclient's tests check it is
	// mapped once).
	putObject(t, a.Store(), testObject(2), []byte("second"), nil)
	o2, err := lr.Read(testCtx(t), s, testObject(2), driverTicket(testObject(2), ticket.Read))
	if err != nil || string(o2.Data) != "second" {
		t.Fatalf("second read: %v", err)
	}
	o.Release()
	o2.Release()
	o2.Release() // twice is fine
	testutil.WaitFor(t, waitLimit, "the pins to go", func() bool { return a.Store().Stats().Pinned == 0 })
	if st := a.storeStats(); st.Locates != 2 {
		t.Errorf("locates %d, want 2", st.Locates)
	}

	_, err = lr.Read(testCtx(t), s, testObject(9), driverTicket(testObject(9), ticket.Read))
	if !errors.Is(err, dag.ErrNotFound) {
		t.Errorf("locate of a missing object: %v, want not found", err)
	}
}

// The child half of TestLocalReaderInAnotherProcess: it runs only in the
// re-executed test binary.
func TestLocalReaderChild(t *testing.T) {
	addr := os.Getenv("PHOBOS_TEST_LOCATE_ADDR")
	if addr == "" {
		t.Skip("runs as the child of TestLocalReaderInAnotherProcess")
	}
	id, err := dag.ParseObjectID(os.Getenv("PHOBOS_TEST_LOCATE_OBJECT"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	s, err := transport.Dial(ctx, addr, driverConfig())
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(nil)
	lr := objclient.NewLocalReader()
	o, err := lr.Read(ctx, s, id, driverTicket(id, ticket.Read))
	if err != nil {
		t.Fatal(err)
	}
	// No copy: the view lies inside this process's read-only shared
	// mapping of the raylet's arena file.
	arena, perms, err := mappingOf(uintptr(unsafe.Pointer(unsafe.SliceData(o.Data))))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("LOCATED size=%d crc=%08x arena=%s perms=%s\n", len(o.Data), crc32.Checksum(o.Data, castagnoli), arena, perms)
	if os.Getenv("PHOBOS_TEST_LOCATE_MODE") == "crash" {
		// Wait to be killed with the lease held.
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("RELEASED")
	lr.Close()
	s.Close()
}

// mappingOf finds the mapping holding address p in /proc/self/maps and
// returns its file and permissions.
func mappingOf(p uintptr) (file, perms string, err error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(p) >= l && uint64(p) < h {
			return f[5], f[1], nil
		}
	}
	return "", "", fmt.Errorf("address %#x is in no file mapping", p)
}

// TestLocalReaderInAnotherProcess runs a real second process that locates
// an object, maps the arena read-only and checksums the object in place;
// then one that is killed while it holds the object, whose pin must go.
func TestLocalReaderInAnotherProcess(t *testing.T) {
	a := startRaylet(t, "a", 32<<20)
	id := testObject(1)
	data := randomBytes(20<<20, 8)
	putObject(t, a.Store(), id, data, nil)
	want := fmt.Sprintf("LOCATED size=%d crc=%08x arena=%s perms=r--s", len(data), crc32.Checksum(data, castagnoli), a.Store().Path())

	child := func(mode string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLocalReaderChild$", "-test.v")
		cmd.Env = append(os.Environ(), "PHOBOS_TEST_LOCATE_ADDR="+a.Addr(), "PHOBOS_TEST_LOCATE_OBJECT="+id.String(), "PHOBOS_TEST_LOCATE_MODE="+mode)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("child stderr:\n%s", stderr.String())
			}
		})
		return cmd, bufio.NewScanner(stdout), stdin
	}
	expect := func(sc *bufio.Scanner, prefix string) string {
		t.Helper()
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				return sc.Text()
			}
		}
		t.Fatalf("child ended without printing %s", prefix)
		return ""
	}

	cmd, out, _ := child("read")
	if got := expect(out, "LOCATED"); got != want {
		t.Errorf("child printed\n  %s\nwant\n  %s", got, want)
	}
	expect(out, "RELEASED")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	testutil.WaitFor(t, waitLimit, "the released pin to go", func() bool { return a.Store().Stats().Pinned == 0 })

	cmd, out, _ = child("crash")
	if got := expect(out, "LOCATED"); got != want {
		t.Errorf("child printed\n  %s\nwant\n  %s", got, want)
	}
	if st := a.Store().Stats(); st.Pinned != 1 {
		t.Errorf("while the child holds the object: %d pinned, want 1", st.Pinned)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	testutil.WaitFor(t, waitLimit, "the crashed reader's pin to go", func() bool { return a.Store().Stats().Pinned == 0 })
}

func TestUnknownStreamKind(t *testing.T) {
	a := startRaylet(t, "a", 1<<20)
	s, err := transport.Dial(testCtx(t), a.Addr(), driverConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.Serve(nil)
	st, err := s.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	transport.WriteMsg(st, wire.StreamRequest{Kind: 99, ID: testObject(1)})
	var h wire.ObjectHeader
	if err := transport.ReadMsg(st, &h, maxHeader); err != nil {
		t.Fatal(err)
	}
	if h.Kind != dag.KindInvalidArgument || !strings.Contains(h.Error, "unknown stream request kind 99") {
		t.Errorf("answer %+v", h)
	}
}

// A transfer from a raylet the head declares lost (here: one that stopped
// answering mid-transfer) fails at once, as unavailable, without asking
// that raylet again, rather than when its stream times out.
func TestFetchGivesUpALostPeer(t *testing.T) {
	data := randomBytes(256<<10, 6)
	f := startFakePeer(t, data, func(int32) string { return "good" })
	f.hold = make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(f.hold) }) })
	b := startRaylet(t, "b", 4<<20)
	done := make(chan error, 1)
	go func() {
		done <- b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: testObject(1), Size: int64(len(data)), Locations: []string{f.addr}})
	}()
	testutil.WaitFor(t, waitLimit, "the transfer to start", func() bool { return f.requests.Load() == 1 })
	b.peers.lost(f.addr)
	var err error
	select {
	case err = <-done:
	case <-time.After(streamIdle / 2):
		t.Fatal("the fetch still waits on a peer declared lost")
	}
	if !errors.Is(err, dag.ErrUnavailable) || !strings.Contains(err.Error(), "declared that raylet lost") {
		t.Fatalf("err = %v; want unavailable, saying the raylet was lost", err)
	}
	if n := f.requests.Load(); n != 1 {
		t.Errorf("the lost peer was asked %d times, want once", n)
	}
	if st := b.Store().Stats(); st.Objects != 0 || st.Used != 0 {
		t.Errorf("the failed fetch left something in the store: %+v", st)
	}
	// A raylet at that address later (restarted) is dialled again.
	release.Do(func() { close(f.hold) })
	if err := b.peers.fetch(testCtx(t), b.Store(), &wire.InputSpec{Object: testObject(1), Size: int64(len(data)), Locations: []string{f.addr}}); err != nil {
		t.Fatalf("fetch after the loss: %v", err)
	}
}

// testSecret is the cluster secret the test raylets check drivers'
// tickets with (a real raylet gets it from the leader at registration).
var testSecret = bytes.Repeat([]byte{0x5e}, 32)

// driverConfig is how the tests dial a raylet as a driver: a plaintext
// client named "driver".
func driverConfig() transport.Config {
	return transport.Config{Insecure: true, Token: testToken, NodeID: "driver", Role: transport.RoleClient}
}

// driverTicket is the ticket the leader would give "driver" for id's task.
func driverTicket(id dag.ObjectID, rights ticket.Rights) *ticket.Ticket {
	tk := ticket.Issue(testSecret, id.Subtask().Task(), rights, "driver", time.Now().Add(time.Hour))
	return &tk
}

// TestFetchFromPeerWithoutBulkConns fetches a large object from a peer that
// refuses bulk conns (as a release before them does): the fetcher falls
// back to a session stream, remembers that peer, and dials no bulk conn.
func TestFetchFromPeerWithoutBulkConns(t *testing.T) {
	a := startRaylet(t, "a", 16<<20)
	b := startRaylet(t, "b", 16<<20)
	id, data := testObject(1), randomBytes(bulkConnMin+12345, 4)
	putObject(t, a.Store(), id, data, nil)

	// An "old" listener: serves a's objects on session streams, never
	// asks for bulk conns.
	cfg := a.tcfg
	cfg.NodeID = "old"
	ln, err := transport.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { s.Close() })
			s.Serve(peerHandler{a})
		}
	}()
	old := ln.Addr().String()
	for range 2 { // the second fetch does not even try a bulk conn
		in := &wire.InputSpec{Object: id, Size: int64(len(data)), Locations: []string{old}}
		if err := b.peers.fetch(testCtx(t), b.Store(), in); err != nil {
			t.Fatalf("fetch from a peer without bulk conns: %v", err)
		}
		if !bytes.Equal(storedBytes(t, b.Store(), id), data) {
			t.Fatal("object differs")
		}
		if err := b.Store().Delete(id); err != nil {
			t.Fatal(err)
		}
	}
	b.peers.mu.Lock()
	noBulk := b.peers.noBulk[old]
	b.peers.mu.Unlock()
	if !noBulk || b.peers.bulkDials.Load() != 0 {
		t.Errorf("noBulk[%s] = %v, %d bulk conns dialed; want true and 0", old, noBulk, b.peers.bulkDials.Load())
	}
}

// TestFetchOverTLSBulkConn moves objects over TLS bulk conns (records
// gathered into large writes, no CRC: the AEAD checks every byte), whole
// and in parallel ranges, and checks every byte arrived.
func TestFetchOverTLSBulkConn(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := startRayletTLS(t, ca, "a", 96<<20)
	b := startRayletTLS(t, ca, "b", 96<<20)
	for i, n := range []int{bulkConnMin + 7, splitMin + 3<<20 + 5} {
		id, data := testObject(uint64(10+i)), randomBytes(n, uint64(5+i))
		putObject(t, a.Store(), id, data, nil)
		in := &wire.InputSpec{Object: id, Size: int64(n), Locations: []string{a.Addr()}}
		if err := b.peers.fetch(testCtx(t), b.Store(), in); err != nil {
			t.Fatalf("fetch %d bytes over TLS: %v", n, err)
		}
		if !bytes.Equal(storedBytes(t, b.Store(), id), data) {
			t.Fatalf("object of %d bytes differs after a TLS bulk fetch", n)
		}
	}
	if got := b.peers.bulkDials.Load(); got != 1+parallelRanges {
		t.Errorf("%d bulk conns dialed, want %d (one, then one per range)", got, 1+parallelRanges)
	}
}
