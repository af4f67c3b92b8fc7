package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unicode/utf8"
)

// The phobos handshake, byte for byte (big-endian integers;
// docs/wire-protocol.md has the same in prose). Under TLS it runs inside
// the TLS connection and ends with the server's accept. In plaintext mode
// it runs on the bare connection and goes on with the token proofs, in
// which the client proves first: nothing derived from the token leaves a
// server before the client has shown it holds the token.
//
//	client hello   magic[4] version u16 | purpose u8 role u8 idLen u8 maxFrame u32 nonce[32] id[idLen]
//	server reject  magic[4] status u8 version u16 msgLen u16 msg[msgLen]    (status != 0; the server closes)
//	server accept  magic[4] 0 version u16 | maxFrame u32 role u8 nonce[32] idLen u8 id[idLen]
//	-- plaintext mode only --
//	client proof   mac[32]                 HMAC(token, labelClient || transcript)
//	server final   status u8 [mac[32]]     0 and HMAC(token, labelServer || transcript): the proof holds;
//	                                       1 and no mac: it does not (the server closes)
//	client confirm status u8               0: the server's mac holds; 1: it does not (the client closes)
//
// The 6-byte prefix of the hello and the reject layout never change between
// versions, so nodes of different versions can always explain the
// mismatch. A listener may also send a reject before TLS, on the bare
// connection (busy; wrong mode): a TLS dialer sees it as a record that is
// not TLS and reads it as a reject. Nonces are zero under TLS, where TLS
// itself keeps sessions apart.

var magic = [4]byte{'P', 'H', 'O', 'B'}

const (
	nonceSize = 32
	macSize   = sha256.Size

	helloPrefixLen = 6                         // magic, version
	helloFixedLen  = 1 + 1 + 1 + 4 + nonceSize // purpose, role, idLen, maxFrame, nonce
	acceptFixedLen = 4 + 1 + nonceSize + 1     // maxFrame, role, nonce, idLen
	rejectHeadLen  = 9                         // magic, status, version, msgLen
	maxRejectMsg   = 1024

	// reply status
	statusOK          = 0
	statusVersion     = 1 // protocol versions differ; msg is the server's node id
	statusPurpose     = 2 // the listener does not serve this purpose
	statusMalformed   = 3 // the hello did not parse
	statusBusy        = 4 // too many connections in the handshake; retry later
	statusTLSRequired = 5 // the server requires TLS; the client spoke plaintext
	statusPlaintext   = 6 // the server runs plaintext; the client spoke TLS
	statusDenied      = 7 // the client's certificate or role is refused

	// final / confirm status
	proofOK     = 0
	proofDenied = 1

	labelServer = "phobos transport server proof v2\x00"
	labelClient = "phobos transport client proof v2\x00"
)

// side is what one end announces in the handshake.
type side struct {
	nonce    [nonceSize]byte
	nodeID   string
	maxFrame uint32
	role     Role
}

// peerInfo is what a completed handshake learned about the other end.
type peerInfo struct {
	nodeID   string
	maxFrame int
	purpose  Purpose
	peer     Peer
}

// computeMAC binds everything both sides announced, so a man in the middle
// cannot change an id, a role, a frame cap or the purpose without breaking
// the MAC.
func computeMAC(token []byte, label string, version uint16, p Purpose, client, server *side) [macSize]byte {
	m := hmac.New(sha256.New, token)
	var b [4]byte
	io.WriteString(m, label)
	binary.BigEndian.PutUint16(b[:2], version)
	m.Write(b[:2])
	m.Write([]byte{byte(p), byte(client.role), byte(server.role)})
	m.Write(client.nonce[:])
	m.Write(server.nonce[:])
	for _, s := range [2]*side{client, server} {
		binary.BigEndian.PutUint32(b[:], s.maxFrame)
		m.Write(b[:])
		m.Write([]byte{byte(len(s.nodeID))})
		io.WriteString(m, s.nodeID)
	}
	var out [macSize]byte
	m.Sum(out[:0])
	return out
}

// newSide is what this node announces. Under TLS the role is the
// certificate's and the nonce stays zero.
func newSide(cfg *Config) (side, error) {
	s := side{nodeID: cfg.NodeID, maxFrame: uint32(cfg.MaxFrameSize), role: cfg.Role}
	if !cfg.Insecure {
		s.role = cfg.TLS.Role()
		return s, nil
	}
	if _, err := rand.Read(s.nonce[:]); err != nil {
		return s, errorf(CodeInternal, "handshake: reading a random nonce: %w", err)
	}
	return s, nil
}

func appendHello(b []byte, version uint16, p Purpose, me *side) []byte {
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, byte(p), byte(me.role), byte(len(me.nodeID)))
	b = binary.BigEndian.AppendUint32(b, me.maxFrame)
	b = append(b, me.nonce[:]...)
	return append(b, me.nodeID...)
}

func appendAccept(b []byte, version uint16, me *side) []byte {
	b = append(b, magic[:]...)
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint32(b, me.maxFrame)
	b = append(b, byte(me.role))
	b = append(b, me.nonce[:]...)
	b = append(b, byte(len(me.nodeID)))
	return append(b, me.nodeID...)
}

// clientHello sends the hello and reads the server's accept (or reject)
// over rw (deadlines are the caller's). remote names the peer in errors.
func clientHello(rw io.ReadWriter, remote string, p Purpose, cfg *Config) (me, peer side, err error) {
	if me, err = newSide(cfg); err != nil {
		return me, peer, err
	}
	hello := appendHello(make([]byte, 0, helloPrefixLen+helloFixedLen+len(me.nodeID)), cfg.version, p, &me)
	if _, err := rw.Write(hello); err != nil {
		return me, peer, handshakeIOError("handshake with "+remote, "sending hello", err)
	}
	peer, err = readReply(rw, remote, cfg.version)
	return me, peer, err
}

// clientHandshake runs the dialer's side of the plaintext handshake.
func clientHandshake(rw io.ReadWriter, remote string, p Purpose, cfg *Config) (peerInfo, error) {
	what := "handshake with " + remote
	me, peer, err := clientHello(rw, remote, p, cfg)
	if err != nil {
		return peerInfo{}, err
	}
	proof := computeMAC(cfg.Token, labelClient, cfg.version, p, &me, &peer)
	if _, err := rw.Write(proof[:]); err != nil {
		return peerInfo{}, handshakeIOError(what, "sending proof", err)
	}
	var final [1 + macSize]byte
	if _, err := io.ReadFull(rw, final[:1]); err != nil {
		return peerInfo{}, handshakeIOError(what, "reading the server's proof", err)
	}
	switch final[0] {
	case proofOK:
	case proofDenied:
		return peerInfo{}, errorf(CodePermissionDenied,
			"permission denied: peer %q at %s rejected this node's proof: this node does not hold the cluster token (check %s)", peer.nodeID, remote, cfg.setting("Token"))
	default:
		return peerInfo{}, errorf(CodeInvalidArgument, "%s: not a phobos peer (final status byte %d)", what, final[0])
	}
	if _, err := io.ReadFull(rw, final[1:]); err != nil {
		return peerInfo{}, handshakeIOError(what, "reading the server's proof", err)
	}
	want := computeMAC(cfg.Token, labelServer, cfg.version, p, &me, &peer)
	if !hmac.Equal(want[:], final[1:]) {
		// Tell the server why we hang up, so both logs name the problem.
		rw.Write([]byte{proofDenied})
		return peerInfo{}, errorf(CodePermissionDenied,
			"permission denied: peer %q at %s does not hold the cluster token (if it should, check this node's token: %s)", peer.nodeID, remote, cfg.setting("Token"))
	}
	if _, err := rw.Write([]byte{proofOK}); err != nil {
		return peerInfo{}, handshakeIOError(what, "sending the confirmation", err)
	}
	return peerInfo{nodeID: peer.nodeID, maxFrame: int(peer.maxFrame), purpose: p,
		peer: Peer{Name: peer.nodeID, Role: peer.role, NodeID: peer.nodeID}}, nil
}

// readReply parses the server's accept or reject.
func readReply(r io.Reader, remote string, version uint16) (side, error) {
	what := "handshake with " + remote
	var rep side
	var head [7]byte // magic, status, version
	n, err := io.ReadFull(r, head[:])
	if n > 0 && !bytes.HasPrefix(magic[:], head[:min(n, len(magic))]) {
		return rep, errorf(CodeInvalidArgument, "%s: not a phobos peer (it replied %q)", what, head[:n])
	}
	if err != nil {
		return rep, handshakeIOError(what, "reading the reply", err)
	}
	status := head[4]
	peerVersion := binary.BigEndian.Uint16(head[5:7])
	if status != statusOK {
		return rep, readReject(r, what, status, version, peerVersion)
	}
	if peerVersion != version {
		return rep, errorf(CodeInvalidArgument,
			"%s: protocol version mismatch: this node speaks v%d, the peer speaks v%d; run the same phobos release on every node",
			what, version, peerVersion)
	}
	var fixed [acceptFixedLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return rep, handshakeIOError(what, "reading the reply", err)
	}
	rep.maxFrame = binary.BigEndian.Uint32(fixed[:4])
	rep.role = Role(fixed[4])
	copy(rep.nonce[:], fixed[5:5+nonceSize])
	id := make([]byte, int(fixed[5+nonceSize]))
	if _, err := io.ReadFull(r, id); err != nil {
		return rep, handshakeIOError(what, "reading the reply", err)
	}
	rep.nodeID = string(id)
	switch {
	case !utf8.ValidString(rep.nodeID):
		return rep, errorf(CodeInvalidArgument, "%s: malformed reply: node id %q is not UTF-8", what, rep.nodeID)
	case rep.maxFrame < MinFrameSize || rep.maxFrame > MaxFrameLimit:
		return rep, errorf(CodeInvalidArgument, "%s: malformed reply: peer %q announced a max frame of %d bytes, outside [%d, %d]",
			what, rep.nodeID, rep.maxFrame, MinFrameSize, MaxFrameLimit)
	case rep.role > RoleAdmin:
		return rep, errorf(CodeInvalidArgument, "%s: malformed reply: peer %q announced unknown %s", what, rep.nodeID, rep.role)
	}
	return rep, nil
}

// readReject reads the rest of a reject whose 7-byte head has been read,
// and turns it into the error the dialer returns.
func readReject(r io.Reader, what string, status byte, version, peerVersion uint16) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return handshakeIOError(what, "reading the rejection", err)
	}
	msgLen := int(binary.BigEndian.Uint16(n[:]))
	if msgLen > maxRejectMsg {
		return errorf(CodeInvalidArgument, "%s: malformed rejection (%d-byte message)", what, msgLen)
	}
	msg := make([]byte, msgLen)
	if _, err := io.ReadFull(r, msg); err != nil {
		return handshakeIOError(what, "reading the rejection", err)
	}
	text := string(bytes.ToValidUTF8(msg, []byte("?")))
	switch status {
	case statusVersion:
		// The message is the server's node id.
		return errorf(CodeInvalidArgument,
			"%s: protocol version mismatch: this node speaks v%d, peer %q speaks v%d; run the same phobos release on every node",
			what, version, text, peerVersion)
	case statusBusy:
		return errorf(CodeResourceExhausted, "%s: %s", what, text)
	case statusDenied:
		return errorf(CodePermissionDenied, "%s: permission denied: %s", what, text)
	case statusPurpose:
		return errorf(CodeInvalidArgument, "%s: rejected by the peer: %s: %w", what, text, ErrPurposeNotServed)
	}
	return errorf(CodeInvalidArgument, "%s: rejected by the peer: %s", what, text)
}

type clientHelloMsg struct {
	side
	version uint16
	purpose Purpose
}

// helloError is a failure to parse a hello, with the reject status to send.
type helloError struct {
	status byte
	err    error
}

func (e *helloError) Error() string { return e.err.Error() }
func (e *helloError) Unwrap() error { return e.err }

// errSpeaksTLS is readHello's error for a peer that opened with a TLS
// ClientHello: it runs with TLS and this node does not.
var errSpeaksTLS = errors.New("the peer speaks TLS")

// readHello parses a client hello. A returned helloError says what to
// reply; any other error means the conn failed or was never phobos, and
// nothing useful can be said back.
func readHello(r io.Reader, what string, version uint16) (clientHelloMsg, error) {
	var h clientHelloMsg
	var prefix [helloPrefixLen]byte
	n, err := io.ReadFull(r, prefix[:])
	if n >= 3 && prefix[0] == 0x16 && prefix[1] == 3 { // a TLS handshake record
		return h, errorf(CodeInvalidArgument, "%s: %w, but this node runs plaintext; run every node of a cluster in the same mode", what, errSpeaksTLS)
	}
	if n > 0 && !bytes.HasPrefix(magic[:], prefix[:min(n, len(magic))]) {
		return h, errorf(CodeInvalidArgument, "%s: not a phobos peer (it sent %q)", what, prefix[:n])
	}
	if err != nil {
		return h, handshakeIOError(what, "reading hello", err)
	}
	h.version = binary.BigEndian.Uint16(prefix[4:])
	if h.version != version {
		return h, &helloError{statusVersion, errorf(CodeInvalidArgument,
			"%s: protocol version mismatch: this node speaks v%d, the peer speaks v%d; run the same phobos release on every node",
			what, version, h.version)}
	}
	var fixed [helloFixedLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return h, handshakeIOError(what, "reading hello", err)
	}
	h.purpose = Purpose(fixed[0])
	h.role = Role(fixed[1])
	h.maxFrame = binary.BigEndian.Uint32(fixed[3:7])
	copy(h.nonce[:], fixed[7:])
	id := make([]byte, fixed[2])
	if _, err := io.ReadFull(r, id); err != nil {
		return h, handshakeIOError(what, "reading hello", err)
	}
	h.nodeID = string(id)
	switch {
	case !utf8.ValidString(h.nodeID):
		return h, &helloError{statusMalformed, errorf(CodeInvalidArgument, "%s: malformed hello: node id %q is not UTF-8", what, h.nodeID)}
	case h.maxFrame < MinFrameSize || h.maxFrame > MaxFrameLimit:
		return h, &helloError{statusMalformed, errorf(CodeInvalidArgument,
			"%s: malformed hello: peer %q announced a max frame of %d bytes, outside [%d, %d]",
			what, h.nodeID, h.maxFrame, MinFrameSize, MaxFrameLimit)}
	case h.role > RoleAdmin:
		return h, &helloError{statusMalformed, errorf(CodeInvalidArgument, "%s: malformed hello: peer %q claims unknown %s", what, h.nodeID, h.role)}
	}
	return h, nil
}

// serverHello reads the client's hello and answers it: a reject if the
// hello does not parse, the purpose is not served or check refuses the
// peer (check returns the peer's identity, or the reject status and the
// message for the peer along with the error for this node's log);
// otherwise the accept.
func serverHello(rw io.ReadWriter, what string, cfg *Config, refuse func(Purpose) string,
	check func(h *clientHelloMsg) (Peer, byte, string, error)) (clientHelloMsg, side, Peer, error) {
	h, err := readHello(rw, what, cfg.version)
	var he *helloError
	if errors.As(err, &he) {
		msg := cfg.NodeID
		if he.status != statusVersion {
			msg = fmt.Sprintf("node %q: %v", cfg.NodeID, he.err)
		}
		writeReject(rw, he.status, cfg.version, msg)
		return h, side{}, Peer{}, he.err
	}
	if errors.Is(err, errSpeaksTLS) {
		writeReject(rw, statusPlaintext, cfg.version, fmt.Sprintf(
			"node %q runs without TLS (plaintext mode); this node speaks TLS: run every node of a cluster in the same mode", cfg.NodeID))
		return h, side{}, Peer{}, err
	}
	if err != nil {
		return h, side{}, Peer{}, err
	}
	peer, status, msg, err := check(&h)
	if err != nil {
		writeReject(rw, status, cfg.version, msg)
		return h, side{}, Peer{}, err
	}
	if reason := refuse(h.purpose); reason != "" {
		writeReject(rw, statusPurpose, cfg.version, fmt.Sprintf("node %q: %s", cfg.NodeID, reason))
		return h, side{}, Peer{}, errorf(CodeInvalidArgument, "%s: peer %q asked for %s connections: %s", what, h.nodeID, h.purpose, reason)
	}
	me, err := newSide(cfg)
	if err != nil {
		return h, me, Peer{}, err
	}
	reply := appendAccept(make([]byte, 0, 7+acceptFixedLen+len(me.nodeID)), cfg.version, &me)
	if _, err := rw.Write(reply); err != nil {
		return h, me, Peer{}, handshakeIOError(what, "sending the accept", err)
	}
	return h, me, peer, nil
}

// serverHandshake runs the listener's side of the plaintext handshake.
// refuse reports why a purpose is not served ("" = served).
func serverHandshake(rw io.ReadWriter, remote string, cfg *Config, refuse func(Purpose) string) (peerInfo, error) {
	what := "handshake from " + remote
	claimed := func(h *clientHelloMsg) (Peer, byte, string, error) {
		return Peer{Name: h.nodeID, Role: h.role, NodeID: h.nodeID}, 0, "", nil
	}
	h, me, peer, err := serverHello(rw, what, cfg, refuse, claimed)
	if err != nil {
		return peerInfo{}, err
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return peerInfo{}, handshakeIOError(what, "reading the client's proof", err)
	}
	want := computeMAC(cfg.Token, labelClient, cfg.version, h.purpose, &h.side, &me)
	if !hmac.Equal(want[:], proof[:]) {
		rw.Write([]byte{proofDenied})
		return peerInfo{}, errorf(CodePermissionDenied,
			"permission denied: peer %q at %s does not hold the cluster token (if it should, check this node's token: %s)", h.nodeID, remote, cfg.setting("Token"))
	}
	// Only now, with the client's proof checked, does anything derived
	// from the token leave this node.
	mine := computeMAC(cfg.Token, labelServer, cfg.version, h.purpose, &h.side, &me)
	if _, err := rw.Write(append([]byte{proofOK}, mine[:]...)); err != nil {
		return peerInfo{}, handshakeIOError(what, "sending the server's proof", err)
	}
	var confirm [1]byte
	if _, err := io.ReadFull(rw, confirm[:]); err != nil {
		return peerInfo{}, handshakeIOError(what, "reading the client's confirmation", err)
	}
	switch confirm[0] {
	case proofOK:
	case proofDenied:
		return peerInfo{}, errorf(CodePermissionDenied,
			"permission denied: peer %q at %s does not hold the cluster token (it rejected this node's proof; check this node's token: %s)", h.nodeID, remote, cfg.setting("Token"))
	default:
		return peerInfo{}, errorf(CodeInvalidArgument, "%s: not a phobos peer (confirmation byte %d)", what, confirm[0])
	}
	return peerInfo{nodeID: h.nodeID, maxFrame: int(h.maxFrame), purpose: h.purpose, peer: peer}, nil
}

// writeReject sends a reject; best effort, as the conn is closed next.
func writeReject(w io.Writer, status byte, version uint16, msg string) {
	w.Write(appendReject(nil, status, version, msg))
}

func appendReject(b []byte, status byte, version uint16, msg string) []byte {
	if len(msg) > maxRejectMsg {
		msg = msg[:maxRejectMsg]
	}
	b = append(b, magic[:]...)
	b = append(b, status)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// handshakeIOError classifies a conn failure during the handshake.
func handshakeIOError(what, step string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errorf(CodeDeadlineExceeded, "%s: timed out %s (is the peer a phobos node? is it overloaded?): %w", what, step, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return errorf(CodeUnavailable, "%s: the peer closed the connection while %s: %w", what, step, err)
	}
	return errorf(CodeUnavailable, "%s: %s: %w", what, step, err)
}
