package objclient

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/testutil"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

var testToken = []byte("objclient test token, 32 bytes or more")

func testObject(i uint64) dag.ObjectID {
	return dag.NewObjectID(dag.PackSubtaskID(7, 1, i+1), 0)
}

// fakeRaylet answers the three object streams from a real store, as a
// raylet does, without the raylet's tickets, spilling or peers: enough to
// test the client half on its own. corrupt flips the first byte sent.
type fakeRaylet struct {
	store   *objectstore.Store
	corrupt atomic.Bool
	hangup  atomic.Bool    // close object streams without an answer
	pinned  atomic.Int32   // lends in progress
	active  sync.WaitGroup // streams being answered
}

func (f *fakeRaylet) HandleCall(context.Context, *transport.Session, transport.Method, transport.Body) (any, error) {
	return nil, nil
}
func (f *fakeRaylet) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (f *fakeRaylet) HandleStream(_ *transport.Session, st net.Conn) {
	f.active.Add(1)
	defer f.active.Done()
	defer st.Close()
	var req wire.StreamRequest
	if err := transport.ReadMsg(st, &req, MaxHeader); err != nil {
		return
	}
	if f.hangup.Load() {
		return
	}
	switch req.Kind {
	case wire.StreamGetObject:
		o, err := f.store.Get(req.ID)
		if err != nil {
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		defer f.store.Release(req.ID)
		data := o.Data
		transport.WriteMsg(st, wire.ObjectHeader{Size: int64(len(data)), Meta: o.Meta})
		crc := NewCRCPipe()
		crc.Add(data)
		sum := crc.Sum()
		if f.corrupt.Load() && len(data) > 0 {
			data = append([]byte{data[0] ^ 0xff}, data[1:]...)
		}
		st.Write(data)
		transport.WriteMsg(st, wire.ObjectTrailer{CRC32C: sum})
	case wire.StreamLocateObject:
		o, err := f.store.Get(req.ID)
		if err != nil {
			transport.WriteMsg(st, wire.ObjectLocation{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		defer f.store.Release(req.ID)
		af := f.store.ArenaFile()
		f.pinned.Add(1)
		defer f.pinned.Add(-1)
		transport.WriteMsg(st, wire.ObjectLocation{Size: int64(len(o.Data)), Meta: o.Meta, Arena: af.Path, ArenaID: af.ID[:], Offset: o.Offset})
		var b [1]byte
		st.Read(b[:]) // the lease lasts until the reader closes
	case wire.StreamPutObject:
		buf, err := f.store.Create(req.ID, req.Size, req.Meta)
		if err != nil {
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		r := &Range{Conn: st, From: "driver", ID: req.ID, N: req.Size, Deadline: func() { st.SetDeadline(time.Now().Add(StreamIdle)) }}
		if err := r.Receive(context.Background(), buf); err != nil {
			f.store.Abort(req.ID)
			transport.WriteMsg(st, wire.ObjectHeader{Kind: dag.KindOf(err), Error: err.Error()})
			return
		}
		f.store.Seal(req.ID)
		transport.WriteMsg(st, wire.ObjectHeader{Size: req.Size})
	}
}

// startFake serves a fake raylet with a fresh store and returns it and a
// driver's session to it.
func startFake(t *testing.T) (*fakeRaylet, *transport.Session) {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "phobos-objclient-test-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	store, err := objectstore.Open(objectstore.Config{Dir: dir, Capacity: 8 << 20, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRaylet{store: store}
	t.Cleanup(func() { // last: after the sessions closed and their streams ended
		f.active.Wait()
		store.Close()
	})
	addr := testutil.Serve(t, transport.Config{Insecure: true, Token: testToken, NodeID: "fake-raylet"}, f)
	s, err := transport.Dial(testCtx(t), addr, transport.Config{Insecure: true, Token: testToken, NodeID: "driver", Role: transport.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(nil)
	t.Cleanup(func() { s.Close() })
	return f, s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A put is sealed on the raylet with its bytes and meta; a fetch brings
// them back, into dst when dst has the object's size; a missing object is
// not found.
func TestPutThenFetch(t *testing.T) {
	f, s := startFake(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // 1.6 MB: more than one receive chunk
	id := testObject(1)
	if err := PutObject(testCtx(t), s, id, []byte("meta"), data, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	o, err := f.store.Get(id)
	if err != nil || !bytes.Equal(o.Data, data) || string(o.Meta) != "meta" {
		t.Fatalf("stored object: err %v, equal %v, meta %q", err, err == nil && bytes.Equal(o.Data, data), o.Meta)
	}
	f.store.Release(id)

	dst := make([]byte, len(data))
	got, meta, err := FetchObject(testCtx(t), s, id, dst, nil)
	if err != nil || &got[0] != &dst[0] || !bytes.Equal(got, data) || string(meta) != "meta" {
		t.Fatalf("fetch into dst: err %v, into dst %v, meta %q", err, err == nil && &got[0] == &dst[0], meta)
	}
	if got, _, err := FetchObject(testCtx(t), s, id, make([]byte, 3), nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetch into a new buffer: %v", err)
	}
	if _, _, err := FetchObject(testCtx(t), s, testObject(9), nil, nil); !errors.Is(err, dag.ErrNotFound) {
		t.Fatalf("fetch of a missing object: %v; want not found", err)
	}
}

// Bytes that do not match the sender's CRC are refused as unavailable
// (another attempt may succeed), wrapping ErrChecksum.
func TestFetchRefusesCorruptBytes(t *testing.T) {
	f, s := startFake(t)
	id := testObject(1)
	if err := PutObject(testCtx(t), s, id, nil, []byte("payload"), nil); err != nil {
		t.Fatal(err)
	}
	f.corrupt.Store(true)
	_, _, err := FetchObject(testCtx(t), s, id, nil, nil)
	if !errors.Is(err, ErrChecksum) || dag.KindOf(err) != dag.KindUnavailable {
		t.Fatalf("fetch of corrupted bytes: %v (kind %v); want unavailable wrapping ErrChecksum", err, dag.KindOf(err))
	}
}

// A stream that breaks before the answer (the raylet went away, or its
// session closed when it stopped answering) fails a fetch or a local read as
// unavailable, naming the object and the raylet: a chaos campaign saw a
// bare "EOF" of no kind when a paused raylet's session timed out.
func TestFetchFromABrokenStreamIsUnavailable(t *testing.T) {
	f, s := startFake(t)
	id := testObject(1)
	if err := PutObject(testCtx(t), s, id, nil, []byte("payload"), nil); err != nil {
		t.Fatal(err)
	}
	f.hangup.Store(true)
	_, _, err := FetchObject(testCtx(t), s, id, nil, nil)
	if dag.KindOf(err) != dag.KindUnavailable || !strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), "fake-raylet") {
		t.Fatalf("fetch over a stream closed unanswered: %v (kind %v); want unavailable naming %s and fake-raylet", err, dag.KindOf(err), id)
	}
	lr := NewLocalReader()
	t.Cleanup(func() { lr.Close() })
	if _, err := lr.Read(testCtx(t), s, id, nil); dag.KindOf(err) != dag.KindUnavailable || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("local read over a stream closed unanswered: %v (kind %v); want unavailable naming %s", err, dag.KindOf(err), id)
	}
}

// A LocalReader lends views straight into the raylet's arena, maps that
// arena once however many objects it reads, keeps each object pinned until
// Release, and says not found for an object the raylet lacks.
func TestLocalReaderMapsEachArenaOnce(t *testing.T) {
	f, s := startFake(t)
	for i, v := range []string{"first object", "second"} {
		if err := PutObject(testCtx(t), s, testObject(uint64(i)), []byte{'m'}, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	lr := NewLocalReader()
	t.Cleanup(func() { lr.Close() })
	o1, err := lr.Read(testCtx(t), s, testObject(0), nil)
	if err != nil || string(o1.Data) != "first object" || string(o1.Meta) != "m" {
		t.Fatalf("first read: %v", err)
	}
	o2, err := lr.Read(testCtx(t), s, testObject(1), nil)
	if err != nil || string(o2.Data) != "second" {
		t.Fatalf("second read: %v", err)
	}
	lr.mu.Lock()
	mapped := len(lr.readers)
	lr.mu.Unlock()
	if mapped != 1 {
		t.Errorf("%d arenas mapped for two objects of one arena; want 1", mapped)
	}
	if n := f.pinned.Load(); n != 2 {
		t.Errorf("%d objects lent while both views are held; want 2", n)
	}
	o1.Release()
	o2.Release()
	o2.Release() // twice is fine
	testutil.WaitFor(t, 20*time.Second, "the leases to end", func() bool { return f.pinned.Load() == 0 })
	if _, err := lr.Read(testCtx(t), s, testObject(9), nil); !errors.Is(err, dag.ErrNotFound) {
		t.Errorf("read of a missing object: %v; want not found", err)
	}
}
