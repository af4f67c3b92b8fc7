// Package leader keeps a transport session to the current head leader. Any
// head can be named at the start; the package asks it who leads, connects
// there, and when the leader changes or the session breaks it finds the new
// leader by itself. Calls that fail because there is no leader yet, or
// because the head they reached is no longer the leader, are retried with
// backoff (Config.Retry) until the caller's context ends.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/backoff"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// Config configures a Conn. A zero field means its default (see
// DefaultConfig); Validate reports what is wrong with the rest.
type Config struct {
	// Heads are addresses (host:port) of any heads of the cluster; one is
	// enough, since a head names the leader. Required.
	Heads []string
	// Transport configures the sessions to the heads.
	Transport transport.Config
	// Handler serves calls and messages the leader sends on the session
	// (nil refuses them).
	Handler transport.Handler
	// OnConnect runs on every new leader session before any call uses it,
	// e.g. to register a raylet. An error drops the session and retries.
	OnConnect func(ctx context.Context, s *transport.Session) error
	// Logger receives the Conn's logs; nil discards them.
	Logger *slog.Logger

	// CheckInterval is how often the leader session is checked: the head
	// is asked who leads, and the session is dropped (and the leader found
	// again) if the head does not answer within CheckTimeout or names
	// another leader. This finds a leader that is paused or cut off much
	// sooner than the transport's keepalive, which only notices a dead
	// connection. Default 1s; negative turns the check off.
	CheckInterval time.Duration
	// CheckTimeout bounds one check; default 3s.
	CheckTimeout time.Duration
	// Check asks the head of s who leads, for the check; nil calls
	// MethodLeader. A raylet makes its heartbeat the question (a call the
	// head answers with the leader), so that one exchange a second does
	// both.
	Check func(ctx context.Context, s *transport.Session) (wire.Leader, error)
	// AttemptTimeout bounds the dial and the leader question at one head,
	// so a head whose packets vanish (its machine gone without a reset)
	// costs seconds before the next head is tried, not the system's
	// connect timeout of about two minutes. Default 3s.
	AttemptTimeout time.Duration
	// Retry spaces the attempts to find a leader and the retries of a
	// call; default 10ms doubling to 500ms, half of each delay jittered.
	Retry backoff.Policy
}

// DefaultConfig returns the defaults of every field that has one; Heads
// (required) is left empty.
func DefaultConfig() Config {
	return Config{
		CheckInterval:  time.Second,
		CheckTimeout:   3 * time.Second,
		AttemptTimeout: 3 * time.Second,
		Retry:          backoff.Policy{Base: 10 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5},
	}
}

// Validate reports the first problem of c: no head address, an address
// that is not host:port, a negative timeout. Zero fields are fine (they
// take their defaults).
func (c Config) Validate() error {
	n := 0
	for _, a := range c.Heads {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return dag.Errorf(dag.KindInvalidArgument, "leader: head address %q is not host:port: %v", a, err)
		}
		n++
	}
	switch {
	case n == 0:
		return dag.Errorf(dag.KindInvalidArgument, "leader: no head address given; name at least one head as host:port")
	case c.CheckTimeout < 0:
		return dag.Errorf(dag.KindInvalidArgument, "leader: negative check timeout %v", c.CheckTimeout)
	case c.AttemptTimeout < 0:
		return dag.Errorf(dag.KindInvalidArgument, "leader: negative attempt timeout %v", c.AttemptTimeout)
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults and its
// head addresses trimmed.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CheckInterval == 0 {
		c.CheckInterval = d.CheckInterval
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = d.CheckTimeout
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = d.AttemptTimeout
	}
	if c.Retry == (backoff.Policy{}) {
		c.Retry = d.Retry
	}
	if c.Check == nil {
		c.Check = AskLeader
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	heads := make([]string, 0, len(c.Heads))
	for _, a := range c.Heads {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(heads, a) {
			heads = append(heads, a)
		}
	}
	c.Heads = heads
	return c
}

// Conn is a session to the head leader that follows leadership changes. It
// is safe for concurrent use.
type Conn struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	sess    *transport.Session
	dialing chan struct{} // closed when the current dial attempt ends
	known   []string      // head addresses, last known leader first
	closed  bool
	done    chan struct{}
	err     error // the Config's problem, if any: every call fails with it
}

// New returns a Conn; it connects on first use. A Config that fails
// Validate makes every call of the Conn fail with Validate's error
// (kind dag.KindInvalidArgument); check it first to report it sooner.
func New(cfg Config) *Conn {
	err := cfg.Validate()
	cfg = cfg.withDefaults()
	return &Conn{cfg: cfg, log: cfg.Logger, err: err, known: slices.Clone(cfg.Heads), done: make(chan struct{})}
}

// Retryable reports whether err means "try again, perhaps elsewhere": no
// leader, a former leader, or a broken session.
func Retryable(err error) bool {
	return errors.Is(err, dag.ErrNotLeader) || errors.Is(err, dag.ErrUnavailable)
}

// Session returns a session to the leader, connecting if needed. It waits
// for a leader until ctx ends.
func (c *Conn) Session(ctx context.Context) (*transport.Session, error) {
	if c.err != nil {
		return nil, c.err
	}
	b := c.cfg.Retry.Start()
	for {
		s, err := c.session(ctx)
		if err == nil {
			return s, nil
		}
		if !Retryable(err) || ctx.Err() != nil {
			return nil, err
		}
		c.log.Debug("no leader session yet", "err", err)
		if serr := wait(ctx, &b); serr != nil {
			return nil, fmt.Errorf("find the head leader among %v: %w (last error: %v)", c.cfg.Heads, serr, err)
		}
	}
}

// Current returns the current leader session without connecting, or nil.
func (c *Conn) Current() *transport.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil && c.sess.Err() == nil {
		return c.sess
	}
	return nil
}

// session returns the current session or runs one connection attempt;
// concurrent callers share the attempt.
func (c *Conn) session(ctx context.Context) (*transport.Session, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, dag.Errorf(dag.KindUnavailable, "connection to the head leader is closed")
	}
	if s := c.sess; s != nil {
		select {
		case <-s.Done():
			c.sess = nil
		default:
			c.mu.Unlock()
			return s, nil
		}
	}
	if ch := c.dialing; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
			return c.session(ctx)
		case <-ctx.Done():
			return nil, dag.Errorf(dag.KindDeadlineExceeded, "waiting for the head leader: %w", ctx.Err())
		}
	}
	ch := make(chan struct{})
	c.dialing = ch
	known := slices.Clone(c.known)
	c.mu.Unlock()

	s, err := c.connect(ctx, known)

	c.mu.Lock()
	c.dialing = nil
	close(ch)
	if err == nil {
		if c.closed {
			c.mu.Unlock()
			s.Close()
			return nil, dag.Errorf(dag.KindUnavailable, "connection to the head leader is closed")
		}
		c.sess = s
		if c.cfg.CheckInterval > 0 {
			c.startChecks(s, c.known[0]) // connect put the leader's address first
		}
	}
	c.mu.Unlock()
	return s, err
}

// startChecks has the head of session s asked who leads every
// CheckInterval until s ends or c closes (check). The checks run from a
// timer, not a goroutine asleep between them: with a goroutine each, a
// thousand raylets in one process (phobos bench --sim-raylets) were a
// thousand more stacks for every collection to read.
func (c *Conn) startChecks(s *transport.Session, addr string) {
	// Armed only once stored: the first check reads the timer back.
	var t atomic.Pointer[time.Timer]
	t.Store(time.AfterFunc(time.Duration(math.MaxInt64), func() {
		start := time.Now()
		if c.check(s, addr) {
			// Every CheckInterval from the last check's start, as a
			// ticker would (at once if the check took longer).
			t.Load().Reset(max(c.cfg.CheckInterval-time.Since(start), 0))
		}
	}))
	t.Load().Reset(c.cfg.CheckInterval)
}

// check asks the head of session s who leads and reports whether to ask
// again; it drops s when the head does not answer in time or names
// another leader, so that the next call finds the leader again.
func (c *Conn) check(s *transport.Session, addr string) bool {
	select {
	case <-s.Done():
		return false
	case <-c.done:
		return false
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CheckTimeout)
	ld, err := c.cfg.Check(ctx, s)
	cancel()
	switch {
	case s.Err() != nil:
		return false
	case err != nil:
		c.log.Warn("head leader does not answer; looking for the leader again", "head", s.RemoteID(), "timeout", c.cfg.CheckTimeout, "err", err)
		c.demote(addr) // ask the other heads first
	case ld.ID != s.RemoteID():
		c.log.Info("head is no longer the leader; looking for the leader again", "head", s.RemoteID(), "leader", ld.ID)
		c.remember(ld.Addr)
	default:
		return true
	}
	c.drop(s)
	return false
}

// AskLeader asks the head of s who leads (MethodLeader): the check's
// question unless Config.Check names another.
func AskLeader(ctx context.Context, s *transport.Session) (wire.Leader, error) {
	var ld wire.Leader
	err := s.Call(ctx, wire.MethodLeader, struct{}{}, &ld)
	return ld, err
}

// connect asks the known heads who leads and connects to the leader.
func (c *Conn) connect(ctx context.Context, heads []string) (*transport.Session, error) {
	var lastErr error
	tried := map[string]bool{}
	for len(heads) > 0 {
		addr := heads[0]
		heads = heads[1:]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		s, err := transport.Dial(actx, addr, c.cfg.Transport)
		if err != nil {
			cancel()
			if errors.Is(err, dag.ErrPermissionDenied) {
				return nil, err // a wrong token will not get better
			}
			lastErr = fmt.Errorf("head %s: %w", addr, err)
			continue
		}
		s.Serve(c.cfg.Handler) // nil refuses the peer's calls and streams
		var ld wire.Leader
		err = s.Call(actx, wire.MethodLeader, struct{}{}, &ld)
		cancel()
		if err != nil {
			s.Close()
			lastErr = fmt.Errorf("ask head %s for the leader: %w", addr, err)
			continue
		}
		if ld.ID == "" {
			s.Close()
			lastErr = dag.Errorf(dag.KindUnavailable, "head %s knows no leader yet (election in progress?)", addr)
			continue
		}
		if ld.ID != s.RemoteID() {
			s.Close()
			c.remember(ld.Addr)
			heads = append([]string{ld.Addr}, heads...)
			delete(tried, ld.Addr)
			continue
		}
		if c.cfg.OnConnect != nil {
			if err := c.cfg.OnConnect(ctx, s); err != nil {
				s.Close()
				if !Retryable(err) {
					return nil, err
				}
				lastErr = fmt.Errorf("set up session with leader %s: %w", addr, err)
				continue
			}
		}
		c.remember(addr)
		c.log.Debug("connected to head leader", "id", ld.ID, "addr", addr)
		return s, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no head addresses")
	}
	return nil, dag.Errorf(dag.KindUnavailable, "no head leader reachable: %w", lastErr)
}

// remember puts addr first in the list of known heads.
func (c *Conn) remember(addr string) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known = append([]string{addr}, slices.DeleteFunc(c.known, func(a string) bool { return a == addr })...)
}

// demote puts addr last in the list of known heads.
func (c *Conn) demote(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known = append(slices.DeleteFunc(c.known, func(a string) bool { return a == addr }), addr)
}

// drop forgets s if it is still the current session.
func (c *Conn) drop(s *transport.Session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
	s.Close()
}

// Call calls the leader, retrying retryable failures until ctx ends. Only
// use it for calls that are safe to repeat (idempotent, or deduplicated by a
// request ID).
func (c *Conn) Call(ctx context.Context, m transport.Method, req, resp any) error {
	_, err := c.CallFrom(ctx, m, req, resp)
	return err
}

// CallFrom is Call, also returning the session the last try went on (nil
// if none was found): the one that answered, when err is nil.
func (c *Conn) CallFrom(ctx context.Context, m transport.Method, req, resp any) (*transport.Session, error) {
	return c.CallEach(ctx, m, func(*transport.Session, int) any { return req }, resp)
}

// CallEach is CallFrom with the request made for each try by req, given
// the session the try goes on (OnConnect has run on it) and the number of
// tries before it. A try that failed may still have reached the leader, or
// a former one: a request that is not safe to repeat as it was can be
// made safe again (the raylet's completions: see runtime/raylet).
func (c *Conn) CallEach(ctx context.Context, m transport.Method, req func(s *transport.Session, try int) any, resp any) (*transport.Session, error) {
	b := c.cfg.Retry.Start()
	for try := 0; ; try++ {
		s, err := c.Session(ctx)
		if err != nil {
			return nil, err
		}
		err = s.Call(ctx, m, req(s, try), resp)
		if err == nil || !Retryable(err) || ctx.Err() != nil {
			return s, err
		}
		c.log.Debug("retrying call to the leader", "method", m, "err", err)
		// Unavailable from a head we reached means it knows no leader (it
		// was cut off and stepped down): look for the leader elsewhere
		// rather than asking the same head again.
		if errors.Is(err, dag.ErrNotLeader) || errors.Is(err, dag.ErrUnavailable) || s.Err() != nil {
			c.drop(s)
		}
		if err := wait(ctx, &b); err != nil {
			return s, err
		}
	}
}

// Send sends a one-way message on the current leader session.
func (c *Conn) Send(ctx context.Context, m transport.Method, msg any) error {
	s, err := c.Session(ctx)
	if err != nil {
		return err
	}
	return s.Send(m, msg)
}

// Close closes the session; later calls fail.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// Done is closed when Close is called.
func (c *Conn) Done() <-chan struct{} { return c.done }

// wait waits out b's next delay; when ctx ends first, its error says so
// with the kind deadline exceeded.
func wait(ctx context.Context, b *backoff.Backoff) error {
	if err := b.Wait(ctx); err != nil {
		return dag.Errorf(dag.KindDeadlineExceeded, "%w", err)
	}
	return nil
}
