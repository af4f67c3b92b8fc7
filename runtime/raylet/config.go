package raylet

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/runtime/tasklog"
	"github.com/phobos-project/phobos/transport"
)

// Defaults of Config (see DefaultConfig) and limits Validate holds it to.
const (
	DefaultListen            = "127.0.0.1:0"
	DefaultPrefetch          = 2
	DefaultStoreCapacity     = 2 << 30
	DefaultHeartbeatInterval = time.Second
	DefaultCancelGrace       = 2 * time.Second
	DefaultSpinWait          = 100 * time.Microsecond
	// MaxSpinWait bounds SpinWait: past a millisecond, sleeping and
	// being woken costs less than looking.
	MaxSpinWait = time.Millisecond

	// MaxSlots bounds Slots: every slot is a goroutine with its own
	// buffers, so a typo should not start a million of them.
	MaxSlots = 4096
	// MaxPrefetch bounds Prefetch, and with it the credits of one pull.
	MaxPrefetch = 1 << 16
)

// Config configures a raylet. Zero fields take the defaults of
// DefaultConfig, so a Config with only Heads (and the credentials: Token,
// or Transport.TLS) is complete. A Config is read, never modified, by
// Start.
type Config struct {
	// ID names the raylet in the cluster; at most one live raylet holds an
	// ID. Default: the ID kept in IDFile if set (see StableID), else
	// "<hostname>-<port>", with the port the listener got.
	ID string
	// IDFile, when ID is empty, keeps the raylet's ID across restarts: it
	// is read from the file, or made once (the host name and a short
	// random suffix) and written there. Keep it beside the raylet's other
	// state (the CLI uses STATE-DIR/raylet-id).
	IDFile string
	// Listen is where peers and drivers reach this raylet's objects.
	// Default 127.0.0.1:0 (loopback, a port chosen by the system).
	Listen string
	// Advertise is the address given to others; default the listener's.
	Advertise string
	// Heads are addresses of any heads (HOST:PORT); the raylet finds the
	// leader among them. Required.
	Heads []string
	// Token is the cluster token of a plaintext cluster (Transport.Insecure);
	// under TLS (Transport.TLS) the certificate is the credential.
	Token []byte
	// Slots is how many subtasks run at once. Default the number of CPUs;
	// at most MaxSlots.
	Slots int
	// Prefetch is how many subtasks beyond the free slots a pull may ask
	// for while subtasks are long (at least 10ms on average), so that a
	// slot never idles waiting for the head; shorter subtasks get a deeper
	// window of their own (see docs/architecture.md). Default 2; a
	// negative value means none; at most MaxPrefetch.
	Prefetch int
	// Store configures the object store. Capacity defaults to 2 GiB, all
	// of it reserved on the store's file system at Start; Name defaults to
	// the raylet's ID and Logger to the raylet's.
	Store objectstore.Config
	// HeartbeatInterval is how often the raylet reports to the leader;
	// keep it well under the head's raylet timeout. The report is also the
	// leader check (leader.Config.CheckInterval): a leader that does not
	// answer it within 3s is left for another. Default 1s.
	HeartbeatInterval time.Duration
	// CancelGrace is how long an interrupted kernel may run on before it is
	// abandoned: reported cancelled, its slot given a new worker, and
	// whatever it stores later discarded. Default 2s.
	CancelGrace time.Duration
	// SpinWait is how long a worker whose subtask ended keeps looking for
	// its next one before it sleeps, while subtasks wait here for inputs
	// being made here (sent ahead of them: a pipeline). Waking a sleeping
	// thread costs tens of microseconds, which a step of fine-grained
	// dependent subtasks (one stencil timestep of Task Bench, say) pays on
	// its critical path; a worker looking yields to every other goroutine
	// meanwhile. Default 100µs; negative: never look, sleep at once; at
	// most MaxSpinWait.
	SpinWait time.Duration
	// MaxFrame caps the control frames this raylet accepts. Default
	// Transport.MaxFrameSize if set, else transport.DefaultMaxFrameSize
	// (16 MiB); transport.MinFrameSize to transport.MaxFrameLimit.
	MaxFrame int
	// HTTP is where the raylet serves its web service (its status, its
	// task logs, /metrics, /debug/pprof/; docs/http-api.md), HTTPS with
	// its certificate under TLS. "" serves none.
	HTTP string
	// HTTPTokenFile names the web service's bearer token file; on a
	// plaintext cluster it is required.
	HTTPTokenFile string
	// TaskLogs bounds the log lines kept of the subtasks run here
	// (tasklog.DefaultJobBytes per job, tasklog.DefaultTotalBytes in all).
	TaskLogs tasklog.Config
	// Transport is the base transport configuration (TLS, fault
	// injection); Token, NodeID and MaxFrame above override its fields.
	Transport transport.Config
	// Logger receives the raylet's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config (with no Heads).
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		Slots:             runtime.NumCPU(),
		Prefetch:          DefaultPrefetch,
		Store:             objectstore.Config{Capacity: DefaultStoreCapacity},
		HeartbeatInterval: DefaultHeartbeatInterval,
		CancelGrace:       DefaultCancelGrace,
		SpinWait:          DefaultSpinWait,
		MaxFrame:          transport.DefaultMaxFrameSize,
	}
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.Slots == 0 {
		c.Slots = d.Slots
	}
	switch {
	case c.Prefetch == 0:
		c.Prefetch = d.Prefetch
	case c.Prefetch < 0:
		c.Prefetch = 0
	}
	if c.Store.Capacity == 0 {
		c.Store.Capacity = d.Store.Capacity
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = d.CancelGrace
	}
	switch {
	case c.SpinWait == 0:
		c.SpinWait = d.SpinWait
	case c.SpinWait < 0:
		c.SpinWait = 0
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = c.Transport.MaxFrameSize
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = d.MaxFrame
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first field of c (its zero fields taking their
// defaults) that Start would refuse: an error of kind
// dag.KindInvalidArgument wrapping a *ConfigError that names the field.
// The transport and the store check their own configurations when Start
// opens them.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case len(c.Heads) == 0:
		return invalid("Heads", "empty: give the address (HOST:PORT) of at least one head")
	case c.Slots < 0 || c.Slots > MaxSlots:
		return invalid("Slots", "%d: want 1 to %d", c.Slots, MaxSlots)
	case c.Prefetch > MaxPrefetch:
		return invalid("Prefetch", "%d: want at most %d", c.Prefetch, MaxPrefetch)
	case c.Store.Capacity < 0:
		return invalid("Store.Capacity", "%d bytes: want a positive size", c.Store.Capacity)
	case c.HeartbeatInterval < 0:
		return invalid("HeartbeatInterval", "%v: want a positive duration such as 1s", c.HeartbeatInterval)
	case c.CancelGrace < 0:
		return invalid("CancelGrace", "%v: want a positive duration such as 2s", c.CancelGrace)
	case c.SpinWait > MaxSpinWait:
		return invalid("SpinWait", "%v: want at most %v (or negative: none)", c.SpinWait, MaxSpinWait)
	case c.MaxFrame < transport.MinFrameSize || c.MaxFrame > transport.MaxFrameLimit:
		return invalid("MaxFrame", "%d bytes: want %d to %d", c.MaxFrame, transport.MinFrameSize, transport.MaxFrameLimit)
	}
	for i, h := range c.Heads {
		if h == "" {
			return invalid("Heads", "address %d of %d is empty", i+1, len(c.Heads))
		}
	}
	return nil
}

// A ConfigError says which field of a Config Validate refuses and why, so
// that a caller can point at its own name for the field (the CLI names
// its flag).
type ConfigError struct {
	Field string // as in Config: "Slots", "Store.Capacity"
	Msg   string // the value and what the field takes
}

func (e *ConfigError) Error() string { return "raylet config: " + e.Field + " " + e.Msg }

func invalid(field, format string, args ...any) error {
	ce := &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	return &dag.Error{Kind: dag.KindInvalidArgument, Msg: ce.Error(), Err: ce}
}
