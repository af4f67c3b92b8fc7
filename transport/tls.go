package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/phobos-project/phobos/transport/pki"
)

// Who may do what at the handshake. Everything finer (which calls a role
// may make) is the callers' to enforce, from Session.Peer.
var (
	// serverRoles may accept connections: only heads and raylets listen.
	serverRoles = []Role{RoleHead, RoleRaylet}
	// raftRoles may speak Raft, on either end.
	raftRoles = []Role{RoleHead}
)

// clientTLSConfig is the dialer's TLS configuration for purpose p: it
// presents this node's certificate and accepts a server certificate from
// the cluster's CA with a role that may serve p. No host name is checked
// (see package pki).
func clientTLSConfig(cfg *Config, p Purpose) *tls.Config {
	roles := serverRoles
	if p == PurposeRaft {
		roles = raftRoles
	}
	c := cfg.TLS.ClientTLS(roles...)
	c.DynamicRecordSizingDisabled = true // full records from the start: bulk, not web pages
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := cfg.TLS.Verify(cs.PeerCertificates, pki.Want{Usage: x509.ExtKeyUsageServerAuth, Roles: roles, For: p.String() + " servers"})
		return err
	}
	return c
}

// serverTLSConfig is the listener's: TLS 1.3 only, and a client
// certificate is required (so a peer without one cannot finish even the
// TLS handshake), but the listener checks that certificate itself after
// the handshake, so that it can tell the client why it is refused.
func serverTLSConfig(src *pki.Source) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		GetCertificate:         src.GetCertificate,
		ClientAuth:             tls.RequireAnyClientCert,
		SessionTicketsDisabled: true, // each connection shows its certificate, checked against the CAs trusted now

		DynamicRecordSizingDisabled: true,
	}
}

// sniffConn keeps the first bytes crypto/tls reads through it, so that
// when the peer turns out to send something that is not TLS (a plaintext
// reject or hello), the whole of it can still be read and explained.
// Sniffing stops at sniffLimit bytes or when stop is called, before the
// conn is shared between goroutines.
type sniffConn struct {
	net.Conn
	buf []byte
	off bool
}

const sniffLimit = rejectHeadLen + maxRejectMsg

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.off && n > 0 {
		if room := sniffLimit - len(c.buf); room > 0 {
			c.buf = append(c.buf, p[:min(n, room)]...)
		}
	}
	return n, err
}

func (c *sniffConn) stop() { c.off, c.buf = true, nil }

// replay reads what the peer sent from the start: the bytes crypto/tls
// consumed, then the rest of the conn.
func (c *sniffConn) replay() io.Reader {
	return io.MultiReader(bytes.NewReader(c.buf), c.Conn)
}

// dialTLS runs the dialer's TLS handshake and the phobos hello inside it.
func dialTLS(conn net.Conn, remote string, p Purpose, cfg *Config) (net.Conn, peerInfo, error) {
	what := "handshake with " + remote
	cc := &corkConn{Conn: conn}
	sc := &sniffConn{Conn: cc}
	tc := tls.Client(sc, clientTLSConfig(cfg, p))
	if err := tc.Handshake(); err != nil {
		return nil, peerInfo{}, clientTLSError(what, sc, err, cfg)
	}
	sc.stop()
	_, srv, err := clientHello(tc, remote, p, cfg)
	if err != nil {
		return nil, peerInfo{}, tlsIOError(what, err)
	}
	cs := tc.ConnectionState()
	id, err := pki.IdentityOf(cs.PeerCertificates[0]) // verified by VerifyConnection
	if err != nil {
		return nil, peerInfo{}, errorf(CodePermissionDenied, "%s: %w", what, err)
	}
	return bulkOrTLS(tc, cc, p, true), peerInfo{nodeID: srv.nodeID, maxFrame: int(srv.maxFrame), purpose: p,
		peer: Peer{Name: id.Name, Role: id.Role, NodeID: srv.nodeID, NotAfter: id.NotAfter, Verified: true}}, nil
}

// bulkOrTLS returns tc, or for a bulk conn tc with its records gathered
// into large writes and reads (see corkConn).
func bulkOrTLS(tc *tls.Conn, cc *corkConn, p Purpose, dialer bool) net.Conn {
	if p != PurposeBulk {
		return tc
	}
	cc.start(dialer)
	return &bulkTLSConn{Conn: tc, c: cc}
}

// clientTLSError explains a failed TLS handshake on the dialer's side.
func clientTLSError(what string, sc *sniffConn, err error, cfg *Config) error {
	var rh tls.RecordHeaderError
	var ce *pki.CertError
	switch {
	case errors.As(err, &rh) && bytes.HasPrefix(rh.RecordHeader[:], magic[:]):
		// A phobos reject sent before TLS: busy, or the server runs plaintext.
		r := sc.replay()
		var head [7]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return handshakeIOError(what, "reading the rejection", err)
		}
		if head[4] == statusOK {
			return errorf(CodeInvalidArgument, "%s: the peer does not speak TLS: it runs plaintext; run every node of a cluster in the same mode", what)
		}
		return readReject(r, what, head[4], cfg.version, uint16(head[5])<<8|uint16(head[6]))
	case errors.As(err, &rh):
		return errorf(CodeInvalidArgument, "%s: the peer does not speak TLS — does it run in plaintext mode? (it sent %q)", what, rh.RecordHeader[:])
	case errors.As(err, &ce):
		return errorf(CodePermissionDenied, "%s: permission denied: refusing the peer's %w", what, err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return errorf(CodePermissionDenied, "%s: the peer refused this node's certificate %s (%w); is it from the cluster's CA, and valid?",
			what, describe(cfg.TLS), err)
	}
	return tlsIOError(what, err)
}

// tlsIOError classifies other failures during or just after the TLS
// handshake: an alert from the peer, a dead conn, a protocol error.
func tlsIOError(what string, err error) error {
	var oe *net.OpError
	var coded *codedError
	switch {
	case errors.As(err, &coded):
		return err
	case errors.As(err, &oe) && oe.Op == "remote error":
		return errorf(CodePermissionDenied, "%s: the peer refused the TLS handshake (%w); is this node's certificate from the cluster's CA, and valid?", what, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &oe):
		return handshakeIOError(what, "in the TLS handshake", err)
	}
	return errorf(CodeInvalidArgument, "%s: TLS handshake failed: %w", what, err)
}

// acceptTLS runs the listener's TLS handshake, then reads the phobos
// hello inside it and checks the client's certificate for the purpose
// the hello names. A refused certificate is answered with a reject naming
// the certificate and the reason, so both ends log the same problem.
func (l *Listener) acceptTLS(conn net.Conn, remote string) (net.Conn, peerInfo, error) {
	what := "handshake from " + remote
	cc := &corkConn{Conn: conn}
	sc := &sniffConn{Conn: cc}
	tc := tls.Server(sc, l.tlsConf)
	if err := tc.Handshake(); err != nil {
		return conn, peerInfo{}, l.serverTLSError(what, conn, sc, err)
	}
	sc.stop()
	check := func(h *clientHelloMsg) (Peer, byte, string, error) {
		want := pki.Want{Usage: x509.ExtKeyUsageClientAuth, For: h.purpose.String() + " connections"}
		if h.purpose == PurposeRaft {
			want.Roles = raftRoles
		}
		id, err := l.cfg.TLS.Verify(tc.ConnectionState().PeerCertificates, want)
		if err != nil {
			return Peer{}, statusDenied, fmt.Sprintf("node %q refused the %v", l.cfg.NodeID, err),
				errorf(CodePermissionDenied, "%s: permission denied: peer %q presented a %w", what, h.nodeID, err)
		}
		return Peer{Name: id.Name, Role: id.Role, NodeID: h.nodeID, NotAfter: id.NotAfter, Verified: true}, 0, "", nil
	}
	h, _, peer, err := serverHello(tc, what, &l.cfg, l.refuse, check)
	if err != nil {
		return tc, peerInfo{}, tlsIOError(what, err)
	}
	return bulkOrTLS(tc, cc, h.purpose, false), peerInfo{nodeID: h.nodeID, maxFrame: int(h.maxFrame), purpose: h.purpose, peer: peer}, nil
}

// serverTLSError explains a failed TLS handshake on the listener's side,
// and tells a plaintext phobos client that this node requires TLS.
func (l *Listener) serverTLSError(what string, conn net.Conn, sc *sniffConn, err error) error {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		if !bytes.HasPrefix(rh.RecordHeader[:], magic[:]) {
			return errorf(CodeInvalidArgument, "%s: not a TLS client (it sent %q); this node requires TLS", what, rh.RecordHeader[:])
		}
		peer := ""
		if h, err := readHello(sc.replay(), what, l.cfg.version); err == nil {
			peer = fmt.Sprintf(" %q", h.nodeID)
		}
		writeReject(conn, statusTLSRequired, l.cfg.version, fmt.Sprintf(
			"node %q requires TLS, and this connection is plaintext: give this node a certificate, its key and the cluster's CA, or run every node in plaintext mode", l.cfg.NodeID))
		return errorf(CodeInvalidArgument, "%s: the peer%s speaks plaintext, but this node requires TLS (does the peer run in plaintext mode?)", what, peer)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return errorf(CodePermissionDenied, "%s: the peer refused this node's certificate %s (%w); is the peer's CA file this cluster's?",
			what, describe(l.cfg.TLS), err)
	}
	return tlsIOError(what, err)
}

// describe names a node's own certificate in its logs.
func describe(src *pki.Source) string {
	leaf := src.Leaf()
	return fmt.Sprintf("%q (serial %x, expires %s)", leaf.Subject.String(), leaf.SerialNumber.Bytes(), leaf.NotAfter.UTC().Format(time.RFC3339))
}

// isServerRole reports whether r may listen.
func isServerRole(r Role) bool { return slices.Contains(serverRoles, r) }
