package transport

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/phobos-project/phobos/transport/pki"
)

// MakeTokenCommand is a shell command that writes a good cluster token.
const MakeTokenCommand = "head -c 32 /dev/urandom | xxd -p -c 64 > token"

// Purpose says what a connection is for; the dialer announces it in the
// handshake and the listener routes the authenticated conn by it.
type Purpose uint8

const (
	// PurposeRPC connections become yamux sessions (Dial / Listener.Accept).
	PurposeRPC Purpose = 1
	// PurposeRaft connections stay raw byte streams for hashicorp/raft's
	// network transport (DialRaw / Listener.RaftListener), so raft traffic
	// never shares a session with bulk transfers.
	PurposeRaft Purpose = 2
	// PurposeBulk connections stay raw byte streams that carry one bulk
	// request and its bytes (DialRaw / Listener.BulkListener), bypassing
	// yamux: large objects move at the connection's own rate, with no
	// session window or per-frame buffers in the way.
	PurposeBulk Purpose = 3
)

func (p Purpose) String() string {
	switch p {
	case PurposeRPC:
		return "rpc"
	case PurposeRaft:
		return "raft"
	case PurposeBulk:
		return "bulk"
	}
	return "purpose(" + strconv.Itoa(int(p)) + ")"
}

// ProtocolVersion is the version of the handshake and frame format. Nodes
// with different versions refuse each other at the handshake, with an error
// naming both versions.
// Version 2 added TLS, roles and the client-proves-first token handshake.
const ProtocolVersion uint16 = 2

// Defaults and limits for Config.
const (
	DefaultMaxFrameSize      = 16 << 20
	DefaultHandshakeTimeout  = 5 * time.Second
	DefaultKeepAliveInterval = 5 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultStreamWindow      = 8 << 20
	DefaultMaxInflightCalls  = 4096

	DefaultMaxHandshakes          = 1024
	DefaultMaxHandshakesPerSource = 32
	DefaultFailureLogInterval     = 30 * time.Second

	// SessionReserve is how many in-flight bytes each session may hold
	// without drawing on its listener's budget (see Config.ListenerBudget).
	SessionReserve = 256 << 10

	// MinTokenLen is the shortest cluster token plaintext mode accepts: 128
	// bits written as hex.
	MinTokenLen = 32

	// MinFrameSize is the smallest max frame a node may announce: room for
	// any error response.
	MinFrameSize = 4 << 10
	// MaxFrameLimit is the largest max frame a node may announce (the header's
	// length field is 32 bits; 1 GiB keeps one frame from eating a process).
	MaxFrameLimit = 1 << 30
	// MaxNodeIDLen is the longest NodeID, in bytes (one length byte on the wire).
	MaxNodeIDLen = 255

	minStreamWindow = 256 << 10 // yamux's initial window; it refuses smaller
)

// Config configures a Listener, Dial or DialRaw. Zero values mean the
// default. A Config is read, never modified, by this package; one value may
// serve many listeners and dials at once.
//
// A node runs in one of two modes. By default (TLS set) every connection
// is mutual TLS 1.3 and the certificates are the whole credential: the
// peer's name and role come from its certificate. With Insecure set,
// connections are plaintext and authenticated by the shared Token only:
// every token holder is equally trusted and may claim any name and role.
type Config struct {
	// TLS is this node's certificate and the CAs it trusts; required unless
	// Insecure. A listener's certificate must have role head or raylet.
	TLS *pki.Source
	// Insecure turns TLS off: plaintext connections authenticated by Token.
	// Nodes of one cluster must all use the same mode.
	Insecure bool
	// Token is the cluster token, used only with Insecure: at least
	// MinTokenLen bytes. It keys the HMAC of the handshake and never
	// crosses the wire. Ignored under TLS.
	Token []byte
	// Role is the role this node claims in plaintext mode, where nothing
	// proves it. Under TLS the certificate's role is used instead.
	Role Role
	// NodeID is this node's name, sent in the handshake and used in the
	// peer's logs and errors. At most 255 bytes of UTF-8. Under TLS it is
	// a label only: the peer's identity is its certificate's name.
	NodeID string
	// MaxFrameSize caps the body of a frame this node accepts, announced to
	// the peer at the handshake. Default 16 MiB; 4 KiB to 1 GiB.
	MaxFrameSize int
	// HandshakeTimeout bounds the whole handshake (and, on the listener, the
	// wait for the dialer's control stream). Default 5s.
	HandshakeTimeout time.Duration
	// KeepAliveInterval is how often a session checks that its peer is
	// alive: a peer from which nothing arrived for a whole interval is
	// pinged, and the session closes if nothing, the answer included,
	// arrives within WriteTimeout. Default 5s.
	KeepAliveInterval time.Duration
	// WriteTimeout bounds one control-frame write (and is yamux's
	// ConnectionWriteTimeout). A write that cannot finish in time closes the
	// session, since half a frame may have gone out. Default 10s.
	WriteTimeout time.Duration
	// StreamWindow is yamux's MaxStreamWindowSize: the bytes one stream may
	// have in flight, which bounds bulk throughput per stream. Default 8 MiB;
	// at least 256 KiB.
	StreamWindow uint32
	// MaxInflightCalls caps the peer's requests this node runs at once on one
	// session; more get a resource-exhausted error response. Default 4096.
	MaxInflightCalls int
	// MaxHandshakes caps the connections a listener has in the handshake
	// at once. Default 1024.
	MaxHandshakes int
	// MaxHandshakesPerSource caps those from one IP address, so that one
	// source cannot fill MaxHandshakes (as Nomad's rpc_max_conns_per_client).
	// A connection over either cap is answered "busy" and closed. Default 32.
	MaxHandshakesPerSource int
	// SessionBudget caps the bytes of the peer's requests and one-way
	// messages one session holds at once, counted by frame size from the
	// frame's read until its handler returns. A session over it stops
	// reading (TCP pushes back on that peer alone). Default 2 x
	// MaxFrameSize; at least MaxFrameSize, so a max-size frame always fits.
	SessionBudget int64
	// ListenerBudget caps the same bytes across all of a listener's
	// sessions; each session's first SessionReserve bytes are not counted,
	// so a peer with small calls is never held up by others' big ones.
	// Default 4 x MaxFrameSize; at least MaxFrameSize.
	ListenerBudget int64
	// FailureLogInterval is how often a listener logs failed handshakes
	// and busy refusals from one source address: the first at once, the
	// rest counted and reported with the next. Default 30s.
	FailureLogInterval time.Duration
	// Logger receives warnings (failed handshakes, dropped frames) and debug
	// detail. nil discards.
	Logger *slog.Logger
	// SettingNames says how errors name this Config's fields to whoever
	// set them: a program that fills the Config from flags maps a field
	// ("MaxFrameSize") to its flag ("--max-frame"). An unmapped field is
	// named Config.Field. Errors about a peer's settings name none.
	SettingNames map[string]string
	// Network is what the node listens and dials on: TCP when nil, or an
	// in-memory network (MemNetwork, possibly behind a faultnet Injector)
	// for clusters inside one test process. TLS, the handshake and
	// everything above run over it unchanged.
	Network Network
	// Dial, if set, replaces Network's Dial for outgoing conns (fault
	// injection over TCP: faultnet.Injector.Dial). Prefer a Network, which
	// covers listening too.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// WrapConn, if set, wraps every accepted and dialed raw conn before the
	// handshake (fault injection, byte counting). Under TLS it sees ciphertext.
	WrapConn func(net.Conn) net.Conn

	version uint16           // test hook: handshake version to speak; 0 = ProtocolVersion
	now     func() time.Time // test hook: the clock of the failure log; nil = time.Now
}

// setting names one of c's fields as c.SettingNames say.
func (c *Config) setting(field string) string {
	if n, ok := c.SettingNames[field]; ok {
		return n
	}
	return "Config." + field
}

// resolve validates c and fills in defaults. what names the operation for
// the error message ("listen on :7070").
func (c Config) resolve(what string) (Config, error) {
	switch {
	case c.Insecure && c.TLS != nil:
		return c, errorf(CodeInvalidArgument, "%s: both a TLS certificate and plaintext mode are set; give one (%s turns TLS off)", what, c.setting("Insecure"))
	case !c.Insecure && c.TLS == nil:
		return c, errorf(CodeInvalidArgument,
			"%s: no TLS certificate: give this node a certificate, its key and the cluster's CA (%s), or run every node plaintext (%s with %s)", what, c.setting("TLS"), c.setting("Insecure"), c.setting("Token"))
	case c.Insecure && len(c.Token) == 0:
		return c, errorf(CodeInvalidArgument, "%s: the cluster token is empty; plaintext mode needs every node to hold the same token (%s)", what, c.setting("Token"))
	case c.Insecure && len(c.Token) < MinTokenLen:
		return c, errorf(CodeInvalidArgument, "%s: the cluster token is %d bytes, shorter than %d (128 bits as hex); make one with: %s", what, len(c.Token), MinTokenLen, MakeTokenCommand)
	}
	if c.Role > RoleAdmin {
		return c, errorf(CodeInvalidArgument, "%s: unknown role %s", what, c.Role)
	}
	if len(c.NodeID) > MaxNodeIDLen || !utf8.ValidString(c.NodeID) {
		return c, errorf(CodeInvalidArgument, "%s: node id %q must be at most %d bytes of UTF-8", what, c.NodeID, MaxNodeIDLen)
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.MaxFrameSize < MinFrameSize || c.MaxFrameSize > MaxFrameLimit {
		return c, errorf(CodeInvalidArgument, "%s: max frame size %d is outside [%d, %d] bytes (%s)", what, c.MaxFrameSize, MinFrameSize, MaxFrameLimit, c.setting("MaxFrameSize"))
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.KeepAliveInterval <= 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = DefaultStreamWindow
	}
	if c.StreamWindow < minStreamWindow {
		return c, errorf(CodeInvalidArgument, "%s: stream window %d is below yamux's minimum of %d bytes", what, c.StreamWindow, minStreamWindow)
	}
	if c.MaxInflightCalls <= 0 {
		c.MaxInflightCalls = DefaultMaxInflightCalls
	}
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = DefaultMaxHandshakes
	}
	if c.MaxHandshakesPerSource <= 0 {
		c.MaxHandshakesPerSource = DefaultMaxHandshakesPerSource
	}
	if c.SessionBudget == 0 {
		c.SessionBudget = 2 * int64(c.MaxFrameSize)
	}
	if c.ListenerBudget == 0 {
		c.ListenerBudget = 4 * int64(c.MaxFrameSize)
	}
	if c.SessionBudget < int64(c.MaxFrameSize) || c.ListenerBudget < int64(c.MaxFrameSize) {
		return c, errorf(CodeInvalidArgument, "%s: byte budgets (session %d, listener %d) must each hold at least one max-size frame of %d bytes",
			what, c.SessionBudget, c.ListenerBudget, c.MaxFrameSize)
	}
	if c.FailureLogInterval <= 0 {
		c.FailureLogInterval = DefaultFailureLogInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.version == 0 {
		c.version = ProtocolVersion
	}
	return c, nil
}
