// Package transport carries bytes between phobos processes. It owns the TCP
// listeners, the authentication handshake (mutual HMAC-SHA256 over the
// cluster token, which never crosses the wire), yamux sessions, the
// length-prefixed control frames that carry calls and one-way messages in
// both directions, and the bulk streams used for object transfer. Raw
// authenticated conns are handed to raft (PurposeRaft) so raft traffic never
// shares a session with bulk data.
//
// It does not define messages or method numbers (runtime/wire does), does
// not retry, reconnect or pick peers (its callers do), and knows nothing of
// jobs or subtasks. Bodies are CBOR via internal/codec. Error codes mirror
// dag.Kind numbers without importing dag, so errors.Is(err, dag.ErrUnavailable)
// works on any error this package returns or relays.
//
// The byte-level protocol is in docs/wire-protocol.md ("Transport").
package transport
