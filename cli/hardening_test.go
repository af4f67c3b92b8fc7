package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
)

// TestHeadUnderAttack attacks one head process (beside one raylet) the
// ways an untrusted network can, and checks after each that it refused
// the attack cheaply and went on serving everyone else:
//
//   - a flood of 1,100 idle TCP connections from 127.0.0.2: the head holds
//     32 of them in the handshake and answers the rest "busy", a TLS dial
//     from that address is told it is busy, while status from 127.0.0.1
//     works; the flood is logged in a couple of lines with a count;
//   - a job whose tiling would take gigabytes is refused before tiling,
//     fast, naming its size, the budget and --job-budget;
//   - a dozen sessions each sending a 16 MiB SubmitJob built to decode
//     badly: each caller gets an error, the head's peak memory stays far
//     below the frames' decoded worth, status works meanwhile;
//   - a TCP relay in the middle sees only TLS records, never a job's name;
//     it cannot open a session of its own without a certificate, nor pass
//     itself off as the head with a certificate of its own.
//
// The flood goes on while the other attacks run (it keeps 32 connections
// in the handshake from its source throughout): that the head serves
// 127.0.0.1 meanwhile is part of what is tested, and the flood's log line
// with a count needs the head's failure-log interval (30s) to pass.
//
// The processes are built without the race detector: its shadow memory
// makes a head's RSS three to four times what the product uses, and the
// bounds checked here are the product's.
func TestHeadUnderAttack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := noRaceBin.build(t)
	c := startClusterBin(t, ctx, bin, 1, 1, []string{"--job-budget", "1GiB"})
	h := c.Heads[0]
	admin := adminConfig(t, c)
	client, err := c.Transport("client", transport.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	status := func(t *testing.T) {
		t.Helper()
		out, err := runPhobos(ctx, bin, flat("status", "--connect", h.Addr, c.AuthFlags("admin"), "--timeout", "10s")...)
		if err != nil || !strings.Contains(out, "leader h1") {
			t.Fatalf("phobos status: %v\n%s", err, out)
		}
	}

	const floodConns, floodSrc = 1100, "127.0.0.2"
	fl := startFlood(t, ctx, h.Addr, floodSrc, floodConns) // until the whole test ends
	t.Run("flood of idle connections", func(t *testing.T) {
		// The first dial from the flooded source to succeed would be a
		// hole in the cap; every one is told the head is busy.
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		defer fcancel()
		_, err := transport.Dial(fctx, h.Addr, fromIP(client, floodSrc))
		if err == nil || !strings.Contains(err.Error(), "busy") || !strings.Contains(err.Error(), floodSrc) {
			t.Fatalf("a TLS dial from %s during the flood: %v, want a busy refusal naming the source", floodSrc, err)
		}
		t.Logf("a dial from the flooded source: %v", err)
		status(t)
		poll(t, ctx, 20*time.Millisecond, "the head to answer all but 32 flood connections busy", func() bool {
			return fl.refused.Load() >= floodConns-transport.DefaultMaxHandshakesPerSource
		})
		t.Logf("flood: %d connections refused busy", fl.refused.Load())
		if !h.Running() {
			t.Fatal("the head exited")
		}
	})

	t.Run("huge job refused fast", func(t *testing.T) {
		pid := h.PID()
		rss := procStatus(t, pid, "VmRSS")
		if !resetPeakRSS(pid) {
			t.Logf("cannot reset the head's peak RSS; measuring against its earlier peak")
		}
		drv, err := phobos.Connect(ctx, h.Addr, clientCreds(t, c))
		if err != nil {
			t.Fatal(err)
		}
		defer drv.Close()
		t0 := time.Now()
		_, err = drv.Submit(ctx, tensor.Rand([]int64{1 << 25}, tensor.Chunks(1)).Sum())
		took := time.Since(t0)
		peak := procStatus(t, pid, "VmHWM")
		t.Logf("refused in %v; head RSS %s before, peak %s during (growth %s): %v", took, mib(rss), mib(peak), mib(peak-rss), err)
		if !errors.Is(err, dag.ErrResourceExhausted) {
			t.Fatalf("submit of 2^25 chunks: %v, want ErrResourceExhausted", err)
		}
		if !regexp.MustCompile(`needs about [0-9.]+ GiB of head memory .*budget of 1\.0 GiB \(--job-budget\)`).MatchString(err.Error()) {
			t.Errorf("the refusal does not name the job's size, the budget and --job-budget: %v", err)
		}
		if took > 10*time.Second {
			t.Errorf("the refusal took %v", took)
		}
		if peak-rss > 100<<20 {
			t.Errorf("the head's RSS grew by %s refusing the job", mib(peak-rss))
		}
		v, err := drv.Run(ctx, seedExample(true, 100_000, 10_000, 0))
		if err != nil || v.Float64() != 200_000 {
			t.Fatalf("a normal job after the refusal: %v, %v", v, err)
		}
	})

	t.Run("hostile frames", func(t *testing.T) {
		pid := h.PID()
		rss := procStatus(t, pid, "VmRSS")
		if !resetPeakRSS(pid) {
			t.Logf("cannot reset the head's peak RSS; measuring against its earlier peak")
		}
		frames := hostileFrames(t, transport.DefaultMaxFrameSize-4096)
		if only := os.Getenv("PHOBOS_HOSTILE_FRAME"); only != "" {
			// For measuring one kind's worst case: every session sends it.
			frames = slices.DeleteFunc(frames, func(f hostileFrame) bool { return f.name != only })
			if len(frames) == 0 {
				t.Fatalf("no hostile frame named %q", only)
			}
		}
		const sessions = 12
		errs := make([]error, sessions)
		var pending atomic.Int32
		pending.Store(sessions)
		var wg sync.WaitGroup
		started := make(chan struct{}, sessions)
		send := make(chan struct{})
		// The head reads the frames as fast as the machine lets it, which
		// with other tests running may be slower than a 16 MiB frame a
		// WriteTimeout (10 s); how long a write may take is not under test.
		hostile := client
		hostile.WriteTimeout = 2 * time.Minute
		for i := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer pending.Add(-1)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				s, err := openSession(t, cctx, h.Addr, hostile, "hostile "+strconv.Itoa(i))
				started <- struct{}{}
				if err != nil {
					errs[i] = err
					return
				}
				defer s.Close()
				<-send
				var rep wire.SubmitReply
				if err := s.Call(cctx, wire.MethodSubmitJob, codec.RawMessage(frames[i%len(frames)].body), &rep); err != nil {
					errs[i] = err
					return
				}
				errs[i] = errors.New("accepted as job " + strconv.Itoa(int(rep.Task)))
			}()
		}
		// Every session is open before any frame goes out: the frames
		// are under test, and twelve handshakes on a machine busy with
		// decoding them (and with other tests) could outlast the head's
		// handshake timeout.
		for range sessions {
			<-started
		}
		close(send)
		// Meanwhile another connection is served, within 20 s, on a
		// session known to be open: the head times out
		// a handshake that takes 5 s, as one may while it decodes the
		// frames on a machine busy with other tests, and a client dials
		// again then; so does this one.
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		var st wire.ClusterStatus
		ss, err := openSession(t, sctx, h.Addr, admin, "status")
		if err == nil {
			err = ss.Call(sctx, wire.MethodClusterStatus, wire.ClusterStatusRequest{}, &st)
			ss.Close()
		}
		scancel()
		left := pending.Load()
		if err != nil || st.Leader != "h1" {
			t.Errorf("status during the hostile frames: %+v, %v", st, err)
		}
		t.Logf("status answered while %d of %d hostile calls were still pending", left, sessions)
		wg.Wait()
		for i, err := range errs {
			f := frames[i%len(frames)]
			switch {
			case err == nil:
				t.Errorf("session %d (%s): no error", i, f.name)
			case !errors.Is(err, f.kind) || !strings.Contains(err.Error(), f.want):
				t.Errorf("session %d (%s): %v, want %v saying %q", i, f.name, err, f.kind, f.want)
			case i < len(frames):
				t.Logf("%s: %.300s", f.name, err)
			}
		}
		peak := procStatus(t, pid, "VmHWM")
		t.Logf("head RSS %s before, peak %s during %d frames of %s (growth %s)", mib(rss), mib(peak), sessions, mib(int64(len(frames[0].body))), mib(peak-rss))
		if peak-rss > 1<<30 {
			t.Errorf("the head's RSS grew by %s", mib(peak-rss))
		}
		if !h.Running() {
			t.Fatal("the head exited")
		}
		status(t)
	})

	t.Run("relay", func(t *testing.T) {
		r := startRelay(t, h.Addr)
		drv, err := phobos.Connect(ctx, r.addr(), clientCreds(t, c))
		if err != nil {
			t.Fatal(err)
		}
		defer drv.Close()
		var nonce [8]byte
		rand.Read(nonce[:])
		name := "relay-secret-" + hex.EncodeToString(nonce[:])
		j, err := drv.Submit(ctx, seedExample(true, 100_000, 10_000, 0), phobos.JobOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Wait(ctx)
		if err != nil || res.Values[0].Float64() != 200_000 {
			t.Fatalf("a job through the relay: %v", err)
		}
		jobs, err := drv.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		named := false
		for _, js := range jobs {
			named = named || js.Name == name
		}
		if !named {
			t.Fatalf("the job list through the relay lacks the job named %s: %+v", name, jobs)
		}
		drv.Close()
		up, down := r.captured()
		t.Logf("the relay carried %d bytes to the head and %d back", len(up), len(down))
		if len(up) < 1000 || len(down) < 1000 {
			t.Fatalf("the relay carried too little to mean anything: %d and %d bytes", len(up), len(down))
		}
		if up[0] != 0x16 || up[1] != 0x03 || down[0] != 0x16 || down[1] != 0x03 {
			t.Errorf("the streams do not start with TLS handshake records: % x / % x", up[:5], down[:5])
		}
		// Under TLS 1.3 even the certificates travel encrypted: nothing
		// of the job, the frames or the identities shows.
		for dir, b := range map[string][]byte{"to the head": up, "from the head": down} {
			for _, plain := range []string{name, "SUCCEEDED", "driver", "phobos"} {
				if bytes.Contains(b, []byte(plain)) {
					t.Errorf("the relay saw %q in plaintext %s", plain, dir)
				}
			}
		}

		// The relay opens a session of its own, with no certificate.
		raw, err := net.Dial("tcp", h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte("PHOB"))
		}
		if err == nil {
			_, err = tc.Read(make([]byte, 1))
		}
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("a session without a certificate: %v, want the head to require one", err)
		}

		// A relay that ends TLS itself, with a certificate of its own
		// (another CA's head certificate), is refused by the client.
		mitm := startImpostor(t, t.TempDir())
		_, err = phobos.Connect(ctx, mitm, clientCreds(t, c))
		if !errors.Is(err, dag.ErrPermissionDenied) || !strings.Contains(err.Error(), "signed by another CA") {
			t.Errorf("a client dialing an impostor head: %v, want a refusal of its certificate", err)
		}
		status(t)
	})

	t.Run("flood logged with a count", func(t *testing.T) {
		// The head logs a source's first failure at once and counts the
		// rest into the first line after its 30s interval.
		line := waitLog(t, ctx, h.LogPath, floodSrc, "suppressed=")
		lines := logLines(t, h.LogPath, floodSrc)
		t.Logf("flood: %d connections refused busy, %d held until the head's handshake timeout", fl.refused.Load(), fl.held.Load())
		t.Logf("the head logged %d lines about %s:\n%s", len(lines), floodSrc, strings.Join(lines, "\n"))
		if len(lines) > 4 {
			t.Errorf("%d log lines about the flood, want a few", len(lines))
		}
		m := regexp.MustCompile(`suppressed=(\d+)`).FindStringSubmatch(line)
		if n, _ := strconv.Atoi(m[1]); n < floodConns-transport.DefaultMaxHandshakesPerSource {
			t.Errorf("the count of suppressed failures is %d, want at least %d: %s", n, floodConns-transport.DefaultMaxHandshakesPerSource, line)
		}
		status(t)
	})
}

// flood is idle TCP connections from one source address to a head: they
// connect and send nothing. Those the head holds in its handshake until it
// times them out are opened again, so the flood goes on until the test ends.
type flood struct {
	refused atomic.Int64 // connections answered "busy"
	held    atomic.Int64 // connections the head held until its handshake timeout
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startFlood(t *testing.T, ctx context.Context, addr, src string, n int) *flood {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			cancel()
			for _, c := range conns {
				c.Close()
			}
			t.Fatalf("flood: connection %d from %s: %v", len(conns)+1, src, err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		f.wg.Add(1)
		go f.hold(ctx, d, addr, c)
	}
	t.Cleanup(func() {
		f.cancel()
		f.wg.Wait()
	})
	return f
}

// hold reads c until the head closes it. A connection refused at once
// ends its slot of the flood. One the head held until its handshake
// timeout is opened again, and again after a short pause while the head
// answers busy (its slot frees only once the timed-out connection has
// lingered), so that the source keeps its 32 handshakes occupied.
func (f *flood) hold(ctx context.Context, d *net.Dialer, addr string, c net.Conn) {
	defer f.wg.Done()
	held := false
	for {
		stop := context.AfterFunc(ctx, func() { c.Close() })
		b, _ := io.ReadAll(io.LimitReader(c, 4096))
		stop()
		c.Close()
		if ctx.Err() != nil {
			return
		}
		if bytes.HasPrefix(b, []byte("PHOB")) && bytes.Contains(b, []byte("busy")) {
			f.refused.Add(1)
			if !held {
				return
			}
			pause := time.NewTimer(100 * time.Millisecond)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return
			}
		} else {
			held = true
			f.held.Add(1)
		}
		var err error
		if c, err = d.DialContext(ctx, "tcp", addr); err != nil {
			return
		}
	}
}

// openSession dials a session to the head at addr and makes one round
// trip on it, so that the head is known to hold it (a dial can return
// while the head, busy, is timing out its side of the handshake). A
// failure is tried again, up to three times, and logged: what a test
// checks is what the session then carries.
func openSession(t *testing.T, ctx context.Context, addr string, cfg transport.Config, name string) (*transport.Session, error) {
	var err error
	for try := 1; ; try++ {
		var s *transport.Session
		if s, err = transport.Dial(ctx, addr, cfg); err == nil {
			s.Serve(nil)
			var l wire.Leader
			if err = s.Call(ctx, wire.MethodLeader, struct{}{}, &l); err == nil {
				return s, nil
			}
			s.Close()
		}
		if try == 3 || ctx.Err() != nil {
			return nil, err
		}
		t.Logf("%s session: opening it failed (try %d), trying again: %v", name, try, err)
	}
}

// hostileFrame is a SubmitJob body built to be expensive to decode, and
// the error a head must answer it with.
type hostileFrame struct {
	name string
	body []byte
	kind error
	want string
}

// hostileFrames builds SubmitJob bodies of about size bytes each, as raw
// CBOR, the way a client that does not use phobos's encoder could: each is
// well-formed (the session's encoder checks that much) but built to be
// costly to decode or to check.
func hostileFrames(t *testing.T, size int) []hostileFrame {
	t.Helper()
	op := binary.BigEndian.AppendUint32([]byte{0x1a}, uint32(dag.OpIDOf("tensor.rand")))
	var reqID [16]byte
	rand.Read(reqID[:])
	const overhead = 64
	// submit is map{1: request id, 2: graph, 3: options}; pad fills the
	// body to size with a byte string under an options key nobody reads.
	submit := func(graph, opts []byte, pad bool) []byte {
		b := append([]byte{0xa3, 0x01, 0x50}, reqID[:]...)
		b = append(append(b, 0x02), graph...)
		b = append(b, 0x03)
		if !pad {
			return append(b, opts...)
		}
		b = append(b, 0xa2, 0x19, 0x03, 0xe8) // {1000: opts, 1001: padding}
		b = append(b, opts...)
		b = append(b, 0x19, 0x03, 0xe9)
		n := size - len(b) - 9
		b = cborHead(b, 2, uint64(n))
		return append(b, make([]byte, n)...)
	}
	emptyGraph := []byte{0xa2, 0x01, 0x80, 0x02, 0x80}
	var out []hostileFrame

	// Millions of one-field nodes: 7 bytes each on the wire, 120 decoded.
	node := append([]byte{0xa1, 0x01}, op...)
	n := (size - overhead) / len(node)
	g := cborHead([]byte{0xa2, 0x01}, 4, uint64(n))
	g = append(g, bytes.Repeat(node, n)...)
	g = append(g, 0x02, 0x81, 0x00)
	out = append(out, hostileFrame{"2.4M tiny nodes", submit(g, []byte{0xa0}, false), dag.ErrResourceExhausted, "would take"})

	// A map of 2M pairs, twice what any decoder takes.
	m := cborHead(nil, 5, 2<<20)
	m = append(m, make([]byte, 2*(2<<20))...)
	out = append(out, hostileFrame{"a map of 2M pairs", submit(emptyGraph, m, true), dag.ErrInvalidArgument, "max number of key-value pairs"})

	// Arrays nested 60,000 deep.
	deep := append(bytes.Repeat([]byte{0x81}, 60_000), 0x00)
	out = append(out, hostileFrame{"arrays nested 60,000 deep", submit(emptyGraph, deep, true), dag.ErrInvalidArgument, "max nested level"})

	// One node whose inputs are 16 million zeros: refused by the decoder's
	// first pass (at most dag.MaxInputs), before the 64 MiB of int32s it
	// would take.
	k := size - overhead - 32
	g = append([]byte{0xa2, 0x01, 0x81, 0xa2, 0x01}, op...)
	g = cborHead(append(g, 0x03), 4, uint64(k))
	g = append(g, make([]byte, k)...)
	g = append(g, 0x02, 0x81, 0x00)
	out = append(out, hostileFrame{"a node with 16M inputs", submit(g, []byte{0xa0}, false), dag.ErrResourceExhausted, "inputs; at most 65536"})

	// One node of 16 million dimensions.
	g = append([]byte{0xa2, 0x01, 0x81, 0xa2, 0x01}, op...)
	g = cborHead(append(g, 0x04), 4, uint64(k))
	g = append(g, bytes.Repeat([]byte{0x01}, k)...)
	g = append(g, 0x02, 0x81, 0x00)
	out = append(out, hostileFrame{"a node of 16M dimensions", submit(g, []byte{0xa0}, false), dag.ErrInvalidArgument, "dimensions"})

	for _, f := range out {
		if len(f.body) > size || len(f.body) < size-1024 {
			t.Fatalf("hostile frame %q is %d bytes, want about %d", f.name, len(f.body), size)
		}
	}
	return out
}

// cborHead appends a CBOR head of major type major with argument n.
func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), n)
}

// relay is a TCP relay in front of a head that keeps every byte it
// carries, as an attacker on the path would.
type relay struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	up, down bytes.Buffer
	conns    []net.Conn
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(out, in, &r.up)
		go r.pipe(in, out, &r.down)
	}
}

// pipe copies from src to dst, keeping a copy in log.
func (r *relay) pipe(dst, src net.Conn, log *bytes.Buffer) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			log.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// captured returns copies of the bytes carried each way.
func (r *relay) captured() (up, down []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.up.Bytes()), bytes.Clone(r.down.Bytes())
}

// startImpostor listens as a "head" presenting a head certificate of
// another CA, completing TLS handshakes and nothing more. It returns its
// address.
func startImpostor(t *testing.T, dir string) string {
	t.Helper()
	other := otherCA(t, dir)
	ca, err := pki.LoadCA(other.CA, filepath.Join(dir, "other-ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := ca.Issue(pki.Request{Role: pki.RoleHead, Name: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := hc.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(hc.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}
