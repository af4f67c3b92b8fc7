package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phobos-project/phobos/transport/pki"
)

// rogueCA is a CA the test servers do not trust.
var rogueCA = sync.OnceValue(func() *pki.CA {
	ca, err := pki.NewCA("rogue CA", 0)
	if err != nil {
		panic(err)
	}
	return ca
})

// issued returns a Source trusting trust and presenting a certificate
// that signer issued for r.
func issued(t *testing.T, trust, signer *pki.CA, r pki.Request) *pki.Source {
	t.Helper()
	c, err := signer.Issue(r)
	if err != nil {
		t.Fatal(err)
	}
	return trust.Source(c)
}

func tlsConfigWith(id string, src *pki.Source) Config {
	c := testConfig(id, nil)
	c.TLS = src
	return c
}

// wantRefused checks a dial error and the server's log line: both name
// the certificate (its subject) and contain every part.
func wantRefused(t *testing.T, err error, code uint16, ts *testServer, subject string, clientParts, serverParts []string) {
	t.Helper()
	wantCode(t, err, code)
	for _, p := range append([]string{subject}, clientParts...) {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("client error %q lacks %q", err, p)
		}
	}
	ts.logs.waitFor(t, append([]string{"WARN", "handshake failed", subject}, serverParts...)...)
}

func TestTLSRefusesBadCertificates(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	now := time.Now()

	t.Run("client certificate from another CA", func(t *testing.T) {
		src := issued(t, testCA(), rogueCA(), pki.Request{Role: RoleAdmin, Name: "mallory"})
		_, err := Dial(callCtx(t), ts.addr(), tlsConfigWith("mallory", src))
		wantRefused(t, err, CodePermissionDenied, ts, "CN=mallory,OU=admin",
			[]string{`node "srv" refused the certificate`, "signed by another CA", "rogue CA"},
			[]string{`peer "mallory" presented a certificate`, "signed by another CA"})
	})
	t.Run("expired client certificate", func(t *testing.T) {
		src := issued(t, testCA(), testCA(), pki.Request{Role: RoleClient, Name: "late", NotBefore: now.Add(-48 * time.Hour), Validity: 24 * time.Hour})
		_, err := Dial(callCtx(t), ts.addr(), tlsConfigWith("late", src))
		wantRefused(t, err, CodePermissionDenied, ts, "CN=late,OU=client",
			[]string{"expired " + now.Add(-24*time.Hour).UTC().Format("2006-01-02")},
			[]string{"expired", "ago"})
	})
	t.Run("client certificate not yet valid", func(t *testing.T) {
		src := issued(t, testCA(), testCA(), pki.Request{Role: RoleClient, Name: "early", NotBefore: now.Add(time.Hour), Validity: 24 * time.Hour})
		_, err := Dial(callCtx(t), ts.addr(), tlsConfigWith("early", src))
		wantRefused(t, err, CodePermissionDenied, ts, "CN=early", []string{"not valid until"}, []string{"not valid until"})
	})
	t.Run("client certificate without a role", func(t *testing.T) {
		err := dialWithRawCert(t, ts.addr(), rolelessCert(t, "nobody"), PurposeRPC)
		wantRefused(t, err, CodePermissionDenied, ts, "CN=nobody", []string{"has no phobos role"}, []string{"has no phobos role"})
	})
	t.Run("client certificate dialing raft", func(t *testing.T) {
		for _, r := range []Role{RoleClient, RoleRaylet, RoleAdmin} {
			src := sourceFor("not-a-head-"+r.String(), r)
			_, err := DialRaw(callCtx(t), ts.addr(), PurposeRaft, tlsConfigWith("x", src))
			wantRefused(t, err, CodePermissionDenied, ts, "CN=not-a-head-"+r.String(),
				[]string{"has role " + r.String() + ", but raft connections need role head"},
				[]string{"has role " + r.String() + ", but raft connections need role head"})
		}
	})
	t.Run("expired server certificate", func(t *testing.T) {
		old := issued(t, testCA(), testCA(), pki.Request{Role: RoleHead, Name: "old-srv", NotBefore: now.Add(-48 * time.Hour), Validity: 24 * time.Hour})
		ts2 := startServer(t, tlsConfigWith("old-srv", old), newTestHandler())
		_, err := Dial(callCtx(t), ts2.addr(), testConfig("cli", nil))
		wantRefused(t, err, CodePermissionDenied, ts2, "CN=old-srv",
			[]string{"refusing the peer's certificate", "expired"},
			[]string{"the peer refused this node's certificate", "bad certificate"})
	})
	t.Run("server certificate from another CA", func(t *testing.T) {
		ts2 := startServer(t, tlsConfigWith("fake", issued(t, rogueCA(), rogueCA(), pki.Request{Role: RoleHead, Name: "fake"})), newTestHandler())
		_, err := Dial(callCtx(t), ts2.addr(), testConfig("cli", nil))
		wantCode(t, err, CodePermissionDenied)
		if !strings.Contains(err.Error(), "CN=fake") || !strings.Contains(err.Error(), "signed by another CA") {
			t.Errorf("client error %q", err)
		}
		ts2.logs.waitFor(t, "WARN", "handshake failed", "the peer refused this node's certificate")
	})
	t.Run("raft to a raylet", func(t *testing.T) {
		ts2 := startServer(t, tlsConfigWith("r1", sourceFor("r1", RoleRaylet)), newTestHandler())
		_, err := DialRaw(callCtx(t), ts2.addr(), PurposeRaft, testConfig("h1", nil))
		wantCode(t, err, CodePermissionDenied)
		if !strings.Contains(err.Error(), "CN=r1") || !strings.Contains(err.Error(), "has role raylet, but raft servers need role head") {
			t.Errorf("client error %q", err)
		}
	})
	t.Run("client certificate may not listen", func(t *testing.T) {
		_, err := Listen("127.0.0.1:0", tlsConfigWith("c", sourceFor("c", RoleClient)))
		if err == nil || !strings.Contains(err.Error(), `certificate "c" has role client; only head and raylet certificates may accept connections`) {
			t.Errorf("Listen with a client certificate: %v", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		c, err := tls.Dial("tcp", ts.addr(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err == nil {
			c.SetReadDeadline(time.Now().Add(waitLimit))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("a client without a certificate: %v", err)
		}
		ts.logs.waitFor(t, "WARN", "handshake failed", "didn't provide a certificate")
	})

	// After all that, the server still serves.
	c := dial(t, ts.addr(), testConfig("good", nil), nil)
	if err := c.Call(callCtx(t), mEcho, echoMsg{S: "still here"}, nil); err != nil {
		t.Fatalf("call after the refusals: %v", err)
	}
	if p := c.Peer(); p.Name != "srv" || !p.Verified || !p.NotAfter.Equal(sourceFor("srv", RoleHead).NotAfter()) {
		t.Errorf("client sees peer %+v", p)
	}
}

// rolelessCert is a certificate the test CA signed without a phobos role,
// which no pki API makes: it is built by hand from the CA's key.
func rolelessCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	dir := t.TempDir()
	ca := testCA()
	caKeyFile := filepath.Join(dir, "ca-key.pem")
	if err := ca.WriteFiles(filepath.Join(dir, "ca.pem"), caKeyFile); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(caKeyFile)
	blk, _ := pem.Decode(b)
	caKey, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leafSrc := sourceFor("donor", RoleClient) // borrow a key pair
	donor, _ := leafSrc.GetClientCertificate(nil)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(12345), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate(), donor.Leaf.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: donor.PrivateKey}
}

// dialWithRawCert runs the dialer's side by hand with any certificate:
// TLS, then the phobos hello, returning the error the dialer would.
func dialWithRawCert(t *testing.T, addr string, cert tls.Certificate, p Purpose) error {
	t.Helper()
	cfg, err := testConfig("raw", nil).resolve("test")
	if err != nil {
		t.Fatal(err)
	}
	conn := rawDial(t, nil, addr)
	conn.SetDeadline(time.Now().Add(waitLimit))
	tc := tls.Client(conn, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}})
	if err := tc.Handshake(); err != nil {
		return err
	}
	_, _, err = clientHello(tc, addr, p, &cfg)
	return err
}

// A TLS 1.2 client is refused; a good one gets TLS 1.3 and is asked for a
// client certificate.
func TestTLS13OnlyAndClientCertificateRequested(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	_, err := tls.Dial("tcp", ts.addr(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("a TLS 1.2 client: %v", err)
	}
	ts.logs.waitFor(t, "WARN", "handshake failed", "TLS handshake failed", "unsupported versions")

	var asked atomic.Bool
	src := sourceFor("cli", RoleClient)
	c, err := tls.Dial("tcp", ts.addr(), &tls.Config{
		InsecureSkipVerify: true,
		GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			return src.GetClientCertificate(cri)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("negotiated version %x, want TLS 1.3", v)
	}
	if !asked.Load() {
		t.Error("the server did not ask for a client certificate")
	}
}

// openssl s_client, as an operator would run it, sees TLS 1.3 and a
// request for a client certificate.
func TestOpenSSLSeesTLS13(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl binary")
	}
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", ts.addr(), "-state")
	cmd.Stdin = strings.NewReader("") // EOF: s_client hangs up after the handshake
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{"TLSv1.3", "SSL_connect:SSLv3/TLS read server certificate request"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("openssl s_client output lacks %q:\n%s", want, out)
		}
	}
}

func TestModeMismatchIsExplainedAtBothEnds(t *testing.T) {
	t.Run("plaintext client, TLS server", func(t *testing.T) {
		ts := startServer(t, testConfig("srv", nil), newTestHandler())
		_, err := Dial(callCtx(t), ts.addr(), plainConfig("cli", nil))
		wantCode(t, err, CodeInvalidArgument)
		for _, p := range []string{`node "srv" requires TLS`, "this connection is plaintext"} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("client error %q lacks %q", err, p)
			}
		}
		ts.logs.waitFor(t, "WARN", "handshake failed", `the peer "cli" speaks plaintext, but this node requires TLS`, "plaintext mode")
	})
	t.Run("TLS client, plaintext server", func(t *testing.T) {
		ts := startServer(t, plainConfig("srv", nil), newTestHandler())
		_, err := Dial(callCtx(t), ts.addr(), testConfig("cli", nil))
		wantCode(t, err, CodeInvalidArgument)
		if !strings.Contains(err.Error(), `node "srv" runs without TLS`) {
			t.Errorf("client error %q", err)
		}
		ts.logs.waitFor(t, "WARN", "handshake failed", "the peer speaks TLS, but this node runs plaintext")
	})
}

// relay is a TCP proxy between a client and addr that records what the
// client sends and what it gets back, and can stop passing the client's
// bytes on and send its own instead.
type relay struct {
	addr      string
	mu        sync.Mutex
	up, down  bytes.Buffer
	hijack    chan []byte // bytes to send upstream instead of the client's
	hijacking atomic.Bool
}

func startRelay(t *testing.T, target string) *relay {
	r := &relay{hijack: make(chan []byte, 1)}
	r.addr = rawListener(t, nil, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		done := make(chan struct{}, 2)
		go func() {
			r.copy(up, c, &r.up, true)
			done <- struct{}{}
		}()
		go func() {
			r.copy(c, up, &r.down, false)
			done <- struct{}{}
		}()
		<-done
	})
	return r
}

func (r *relay) copy(dst, src net.Conn, rec *bytes.Buffer, upstream bool) {
	buf := make([]byte, 32<<10)
	for {
		if upstream && r.hijacking.Load() {
			dst.Write(<-r.hijack)
			io.Copy(io.Discard, src) // the client is cut off
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			rec.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) seen() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(append([]byte(nil), r.up.Bytes()...), r.down.Bytes()...)
}

// A relay that holds no certificate sees no frames (the secret and the
// handshake's magic never appear in what it passes) and cannot use the
// session it carried: what it injects after cutting the client off is
// refused by TLS, and no handler runs it.
func TestRelayCannotReadOrHijack(t *testing.T) {
	var calls atomic.Int64
	h := &countingHandler{testHandler: newTestHandler(), calls: &calls}
	ts := startServer(t, testConfig("srv", nil), h)
	r := startRelay(t, ts.addr())

	c := dial(t, r.addr, testConfig("cli", nil), nil)
	secret := "the job status a relay must not read: " + strings.Repeat("S3CR3T", 100)
	var out echoMsg
	if err := c.Call(callCtx(t), mEcho, echoMsg{S: secret}, &out); err != nil || out.S != secret {
		t.Fatalf("call through the relay: %v", err)
	}
	seen := r.seen()
	for _, leak := range [][]byte{[]byte("S3CR3T"), magic[:]} {
		if bytes.Contains(seen, leak) {
			t.Errorf("the relay read %q in the clear", leak)
		}
	}
	s := ts.nextSession(t)
	before := calls.Load()

	// Cut the client off and send a plaintext request frame of our own,
	// as the relay of issue 13 did.
	var frame [headerSize + 1]byte
	(&header{length: 1, typ: frameRequest, method: mEcho, id: 99}).put(frame[:])
	frame[headerSize] = 0xa0
	r.hijacking.Store(true)
	r.hijack <- frame[:]
	c.Send(mSeq, echoMsg{N: 1}) // wake the relay's upstream loop
	select {
	case <-s.Done():
	case <-time.After(waitLimit):
		t.Fatal("the server's session survived injected bytes")
	}
	if calls.Load() != before {
		t.Errorf("a handler ran %d injected calls", calls.Load()-before)
	}
	t.Logf("the server closed the hijacked session: %v", s.Err())
	// (That the relay cannot start a session of its own without a
	// certificate is TestTLSRefusesBadCertificates/no_client_certificate.)
}

type countingHandler struct {
	*testHandler
	calls *atomic.Int64
}

func (h *countingHandler) HandleCall(ctx context.Context, s *Session, m Method, body Body) (any, error) {
	h.calls.Add(1)
	return h.testHandler.HandleCall(ctx, s, m, body)
}

// A man in the middle that terminates TLS with its own CA is refused by
// the client (its certificate is not from the cluster's CA), and cannot
// pass itself off to the server either.
func TestMITMWithItsOwnCAIsRefused(t *testing.T) {
	ts := startServer(t, testConfig("srv", nil), newTestHandler())
	// The MITM presents a head certificate named like the server, from its own CA.
	mitmSrc := issued(t, rogueCA(), rogueCA(), pki.Request{Role: RoleHead, Name: "srv"})
	mitm := startServer(t, tlsConfigWith("srv", mitmSrc), newTestHandler())
	_, err := Dial(callCtx(t), mitm.addr(), testConfig("cli", nil))
	wantCode(t, err, CodePermissionDenied)
	for _, p := range []string{"refusing the peer's certificate", "CN=srv", "signed by another CA", "rogue CA"} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("client error %q lacks %q", err, p)
		}
	}
	mitm.logs.waitFor(t, "WARN", "handshake failed", "the peer refused this node's certificate")

	// Its own onward connection to the real server is refused too.
	_, err = Dial(callCtx(t), ts.addr(), tlsConfigWith("srv", issued(t, testCA(), rogueCA(), pki.Request{Role: RoleHead, Name: "srv"})))
	wantCode(t, err, CodePermissionDenied)
	ts.logs.waitFor(t, "WARN", "handshake failed", "signed by another CA")
}

// After the certificate files are rewritten and the Source reloaded, new
// connections present the new certificate, and sessions made before go on.
func TestReloadChangesNewConnectionsOnly(t *testing.T) {
	dir := t.TempDir()
	ca := testCA()
	f := pki.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "srv.pem"), Key: filepath.Join(dir, "srv-key.pem")}
	if err := os.WriteFile(f.CA, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := ca.Issue(pki.Request{Role: RoleHead, Name: "srv", Validity: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.WriteFiles(f.Cert, f.Key); err != nil {
		t.Fatal(err)
	}
	src, err := pki.LoadSource(f)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, tlsConfigWith("srv", src), newTestHandler())
	old := dial(t, ts.addr(), testConfig("cli", nil), nil)
	if !old.Peer().NotAfter.Equal(first.Leaf.NotAfter) {
		t.Fatalf("peer expiry %v, want %v", old.Peer().NotAfter, first.Leaf.NotAfter)
	}

	next, err := ca.Issue(pki.Request{Role: RoleHead, Name: "srv", Validity: 96 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.ReplaceFiles(f.Cert, f.Key); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, ts.addr(), testConfig("cli2", nil), nil)
	if !fresh.Peer().NotAfter.Equal(next.Leaf.NotAfter) {
		t.Errorf("a new connection sees expiry %v, want the new certificate's %v", fresh.Peer().NotAfter, next.Leaf.NotAfter)
	}
	for _, s := range []*Session{old, fresh} {
		if err := s.Call(callCtx(t), mEcho, echoMsg{S: "after reload"}, nil); err != nil {
			t.Errorf("call on a session to %v after the reload: %v", s.Peer().NotAfter, err)
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := write("good", "  "+string(testToken)+"\n", 0o600)
	tok, err := ReadTokenFile(good)
	if err != nil || !bytes.Equal(tok, testToken) {
		t.Fatalf("ReadTokenFile(good) = %q, %v", tok, err)
	}
	open := write("open", string(testToken), 0o644)
	_, err = ReadTokenFile(open)
	for _, p := range []string{open, "mode 0644", "must not be accessible by group or others", "chmod 600 " + open} {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("0644 token file: error %v lacks %q", err, p)
		}
	}
	short := write("short", "correct horse battery staple", 0o600)
	_, err = ReadTokenFile(short)
	if err == nil || !strings.Contains(err.Error(), "holds 28 bytes") || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | xxd -p -c 64 > token") {
		t.Errorf("short token: %v", err)
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing token file: %v", err)
	}
	if errors.Is(err, kind(CodeUnknown)) {
		t.Error("token errors carry no code")
	}
}
