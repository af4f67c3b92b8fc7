package transport

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"
	"unicode/utf8"
)

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
)

func (p Purpose) String() string {
	switch p {
	case PurposeRPC:
		return "rpc"
	case PurposeRaft:
		return "raft"
	}
	return "purpose(" + strconv.Itoa(int(p)) + ")"
}

// ProtocolVersion is the version of the handshake and frame format. Nodes
// with different versions refuse each other at the handshake, with an error
// naming both versions.
const ProtocolVersion uint16 = 1

// Defaults and limits for Config.
const (
	DefaultMaxFrameSize      = 16 << 20
	DefaultHandshakeTimeout  = 5 * time.Second
	DefaultKeepAliveInterval = 5 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultStreamWindow      = 8 << 20
	DefaultMaxInflightCalls  = 4096

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
type Config struct {
	// Token is the cluster token; required, non-empty. It keys the HMAC of
	// the handshake and never crosses the wire.
	Token []byte
	// NodeID is this node's name, sent in the handshake and used in the
	// peer's logs and errors. At most 255 bytes of UTF-8.
	NodeID string
	// MaxFrameSize caps the body of a frame this node accepts, announced to
	// the peer at the handshake. Default 16 MiB; 4 KiB to 1 GiB.
	MaxFrameSize int
	// HandshakeTimeout bounds the whole handshake (and, on the listener, the
	// wait for the dialer's control stream). Default 5s.
	HandshakeTimeout time.Duration
	// KeepAliveInterval is how often yamux pings the peer; a ping that gets
	// no answer within WriteTimeout closes the session. Default 5s.
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
	// Logger receives warnings (failed handshakes, dropped frames) and debug
	// detail. nil discards.
	Logger *slog.Logger
	// Dial, if set, replaces net.Dialer for outgoing TCP (fault injection).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// WrapConn, if set, wraps every accepted and dialed raw conn before the
	// handshake (fault injection, byte counting).
	WrapConn func(net.Conn) net.Conn

	version uint16 // test hook: handshake version to speak; 0 = ProtocolVersion
}

// resolve validates c and fills in defaults. what names the operation for
// the error message ("listen on :7070").
func (c Config) resolve(what string) (Config, error) {
	if len(c.Token) == 0 {
		return c, errorf(CodeInvalidArgument, "%s: the cluster token is empty; give every node the same non-empty token (--token-file)", what)
	}
	if len(c.NodeID) > MaxNodeIDLen || !utf8.ValidString(c.NodeID) {
		return c, errorf(CodeInvalidArgument, "%s: node id %q must be at most %d bytes of UTF-8", what, c.NodeID, MaxNodeIDLen)
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.MaxFrameSize < MinFrameSize || c.MaxFrameSize > MaxFrameLimit {
		return c, errorf(CodeInvalidArgument, "%s: max frame size %d is outside [%d, %d] bytes (--max-frame)", what, c.MaxFrameSize, MinFrameSize, MaxFrameLimit)
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.version == 0 {
		c.version = ProtocolVersion
	}
	return c, nil
}
