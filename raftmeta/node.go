package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	bberrors "go.etcd.io/bbolt/errors"

	"github.com/phobos-project/phobos/dag"
)

// Server is one voter of the Raft cluster: a head's stable ID and the address
// its peers dial.
type Server struct {
	ID, Addr string
}

// Config configures a Node. Zero fields take the defaults of DefaultConfig,
// so a Config literal with only ID, DataDir and Bootstrap set is complete.
type Config struct {
	// ID is this head's Raft server ID. Required; keep it across restarts.
	ID string
	// Addr is the address peers dial to reach this head. Empty means the
	// stream layer's own address, which is right unless the head listens on
	// a wildcard address.
	Addr string
	// DataDir holds raft.db (the log and stable store) and snapshots/.
	// Required unless Storage is set; created if missing. Only one Node may
	// use a DataDir.
	DataDir string

	// Storage, if set, holds the log, the stable state and the snapshots
	// instead of DataDir, which is then not used. NewInmemStorage makes one
	// in memory for tests; reopen a Node on the same Storage to restart a
	// head whose disk survived.
	Storage *Storage
	// Transport, if set, carries Raft's RPCs instead of a network transport
	// over Open's stream layer (which Open then closes unused; it may be
	// nil). raft.NewInmemTransport makes one for clusters inside one test
	// process; Addr must then be empty or its LocalAddr. Raft closes it at
	// Shutdown, so a restarted Node needs a new one. It replicates without
	// pipelining, as the network transport does.
	Transport raft.Transport

	// Bootstrap is the initial voter list. Give every head of a new cluster
	// the same list, this head included. It is used only when DataDir holds
	// no Raft state, so restarting with the same list is harmless. Leave it
	// empty for a head that an existing cluster will add with AddVoter.
	Bootstrap []Server

	// Raft timings. The defaults (500ms, 500ms, 500ms, 1s) suit a LAN:
	// a dead leader is replaced in about one to two election timeouts. On
	// loopback 100/100/50ms works and fails over in ~0.2s; raise them on
	// slow or loaded networks, where too short a timeout causes needless
	// elections. A follower that hears nothing from the leader for
	// HeartbeatTimeout starts an election. A leader that has heard from no
	// quorum within LeaderLeaseTimeout steps down; it must not exceed
	// HeartbeatTimeout, which must not exceed ElectionTimeout. Raft takes
	// none of them under 5ms, nor CommitTimeout under 1ms. CommitTimeout
	// is how often an idle leader sends each follower an AppendEntries so
	// that it learns the commit index (new entries go at once whatever it
	// is): at 10ms that alone cost an idle leader 3-4% of a core and each
	// follower 1%, at 250ms some 12% of an idle leader's wake-ups, for
	// followers' applied state that only status shows (a new leader
	// applies everything before it reads).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// HeartbeatInterval is how often the leader sends its followers a
	// heartbeat, all of them at once. hashicorp/raft sends each follower
	// its own, every HeartbeatTimeout/10 to twice that on a timer of its
	// own, so an idle leader woke for each follower's heartbeat and again
	// for its answer; heartbeats are most of an idle leader's cost. So
	// while a head leads it asks raft to confirm its leadership every
	// HeartbeatInterval (raft.VerifyLeader, which heartbeats every
	// follower at once) and runs raft with HeartbeatTimeout
	// 15×HeartbeatInterval, whose own heartbeats (every 1.5 to 3
	// intervals, and on a leader raft uses HeartbeatTimeout for nothing
	// else but the cap of its back-off after failed heartbeats) then
	// only stand in if the timer stalls. Every other head keeps the
	// configured timeout: a dead leader is noticed as soon as before;
	// what the interval sets is the margin, the heartbeats a follower
	// may miss before it campaigns. Zero means max(HeartbeatTimeout/10,
	// 3/10 of the lesser of HeartbeatTimeout and LeaderLeaseTimeout),
	// 150ms with the other defaults: as many heartbeats as raft's own
	// 100–200ms, with none more than 150ms apart, so that a follower
	// hears at least three within its timeout and a leader from its
	// followers at least three times within its lease. Otherwise it must
	// lie in [HeartbeatTimeout/10, HeartbeatTimeout/2] and be at most
	// half LeaderLeaseTimeout.
	HeartbeatInterval time.Duration

	// SnapshotThreshold (default 8192) is how many new log entries trigger
	// a snapshot, checked every SnapshotInterval (default 2m, jittered).
	// TrailingLogs (default 10240) entries stay in the log after a snapshot
	// so that a briefly lagging follower needs no snapshot install.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// MaxAppendEntries (default 64, at most 1024) caps the entries sent in one
	// AppendEntries RPC and applied to the FSM in one batch.
	MaxAppendEntries int

	// DedupeWindow (default 65536) is how many request IDs the state machine
	// remembers. It must be equal on every head of a cluster.
	DedupeWindow int

	// Logger receives this package's and raft's logs. Nil discards.
	Logger *slog.Logger

	// SettingNames says how errors name this Config's fields to whoever
	// set them, as the head's Config does: a program that fills the Config
	// from flags maps a field's name ("HeartbeatInterval") to its flag
	// ("--raft-heartbeat-every"). An unmapped field is named Config.Field.
	// Open checks the timings and limits itself, so that raft's own
	// errors, which name raft's fields, do not reach whoever set them.
	SettingNames map[string]string
}

// setting names one of c's fields as c.SettingNames say.
func (c Config) setting(field string) string {
	if n, ok := c.SettingNames[field]; ok {
		return n
	}
	return "Config." + field
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      time.Second,
		SnapshotThreshold:  8192,
		SnapshotInterval:   2 * time.Minute,
		TrailingLogs:       10240,
		MaxAppendEntries:   64,
		DedupeWindow:       DefaultDedupeWindow,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	set(&c.ElectionTimeout, d.ElectionTimeout)
	set(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	set(&c.CommitTimeout, d.CommitTimeout)
	set(&c.HeartbeatInterval, max(c.HeartbeatTimeout/10, min(c.HeartbeatTimeout, c.LeaderLeaseTimeout)*3/10))
	set(&c.SnapshotInterval, d.SnapshotInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = d.MaxAppendEntries
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = d.DedupeWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Node is one head's Raft replica of the metadata: the raft instance, its
// stores (on disk, or Config.Storage) and the FSM. All methods are safe for
// concurrent use. Writes succeed only on the leader; reads (Job, Jobs,
// Raylets) are served from the local FSM and may be stale on a follower. A
// Node owns its DataDir (or Storage) and its transport until Shutdown.
type Node struct {
	id, addr string
	log      *slog.Logger
	fresh    bool // DataDir held no Raft state at Open
	window   int  // the FSM's dedupe window, for Restore's check

	raft  *raft.Raft
	fsm   *FSM
	trans raft.Transport
	store *diskStore // nil with Config.Storage
	// handlers tracks the raft connections the transport accepted, so
	// Shutdown closes the store only once their handlers have returned
	// (nil with Config.Transport).
	handlers *handlerLayer

	// pace is raft's heartbeat timing while this head leads ([1]) and
	// while it does not ([0]); see Config.HeartbeatInterval.
	pace    [2]pace
	beat    time.Duration // Config.HeartbeatInterval: while leading, the followers' heartbeats go together this often
	notify  chan bool
	stopFan chan struct{}
	fanDone chan struct{}
	subsMu  sync.Mutex
	subs    []chan bool
	closed  bool

	shutdownOnce sync.Once
	shutdownErr  error
}

// Open starts a Raft replica over layer (or cfg.Transport) with its state in
// cfg.DataDir (or cfg.Storage), bootstrapping the cluster from cfg.Bootstrap
// when the state is new. Open takes ownership of layer: Shutdown closes it,
// and so does Open when it fails or cfg.Transport replaces it. Open returns
// before an election; use LeaderCh or Leader to learn when a leader is known.
func Open(cfg Config, layer raft.StreamLayer) (_ *Node, err error) {
	if layer == nil && cfg.Transport == nil {
		return nil, invalid("raftmeta: open: no stream layer and no %s", cfg.setting("Transport"))
	}
	var closers []func() error
	if layer != nil {
		closers = append(closers, layer.Close)
	}
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	explicitInterval := cfg.HeartbeatInterval != 0
	cfg = cfg.withDefaults()
	if err := cfg.validate(explicitInterval); err != nil {
		return nil, err
	}
	addr := cfg.Addr
	switch {
	case cfg.Transport != nil:
		local := string(cfg.Transport.LocalAddr())
		if addr == "" {
			addr = local
		} else if addr != local {
			return nil, invalid("raftmeta: open %s: %s %q is not the address of %s (%q); leave %[2]s empty", cfg.ID, cfg.setting("Addr"), addr, cfg.setting("Transport"), local)
		}
	case addr == "":
		addr = layer.Addr().String()
	case addr != layer.Addr().String():
		layer = &advertised{StreamLayer: layer, addr: advertisedAddr(addr)}
	}
	if err := cfg.checkBootstrap(addr); err != nil {
		return nil, err
	}

	hl := newHCLog(cfg.Logger, "raft", nil)
	var (
		store  *diskStore
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.Storage != nil {
		if err := cfg.Storage.validate(cfg.ID); err != nil {
			return nil, err
		}
		logs, stable, snaps = cfg.Storage.Logs, cfg.Storage.Stable, cfg.Storage.Snapshots
	} else {
		if err := prepareDataDir(cfg.DataDir, cfg.Logger); err != nil {
			return nil, fmt.Errorf("raftmeta: open %s: %w", cfg.ID, err)
		}
		store, err = openDiskStore(cfg.DataDir)
		if err != nil {
			if errors.Is(err, bberrors.ErrTimeout) {
				return nil, fmt.Errorf("raftmeta: open %s: raft store %s (is another head using this data dir?): %w", cfg.ID, filepath.Join(cfg.DataDir, "raft.db"), err)
			}
			return nil, fmt.Errorf("raftmeta: open %s: %w", cfg.ID, err)
		}
		closers = append(closers, store.Close)
		logs, stable = store, store
		snaps, err = newPrivateSnapshots(cfg.DataDir, 2, hl.Named("snapshot"))
		if err != nil {
			return nil, fmt.Errorf("raftmeta: open %s: snapshot store in %s: %w", cfg.ID, cfg.DataDir, err)
		}
	}
	logs, err = raft.NewLogCache(512, logs)
	if err != nil {
		return nil, fmt.Errorf("raftmeta: open %s: log cache: %w", cfg.ID, err)
	}
	var (
		trans    raft.Transport
		handlers *handlerLayer
	)
	if cfg.Transport != nil {
		if layer != nil {
			layer.Close() // not used; closers stays as is: Close is idempotent
		}
		trans = serial(cfg.Transport)
	} else {
		handlers = newHandlerLayer(layer)
		nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  handlers,
			MaxPool: 3,
			Timeout: 10 * time.Second,
			// No pipelined replication: raft v1.7's pipeline can deadlock
			// when a follower rejects an append (its sender waits on a full
			// channel whose reader has quit), so that follower gets
			// heartbeats but no entries and Shutdown hangs
			// (hashicorp/raft#612). Found by phobos chaos
			// (blackhole-leader); pipelining gains little (raft#541).
			MaxRPCsInFlight: 1,
			Logger:          hl.Named("transport"),
		})
		closers = append(closers, nt.Close)
		trans = nt
	}

	n := &Node{
		id:       cfg.ID,
		addr:     addr,
		log:      cfg.Logger,
		fsm:      NewFSM(cfg.DedupeWindow, cfg.Logger),
		trans:    trans,
		store:    store,
		handlers: handlers,
		notify:   make(chan bool, 16),
		stopFan:  make(chan struct{}),
		fanDone:  make(chan struct{}),
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = true
	rc.NotifyCh = n.notify
	rc.Logger = hl
	rc.NoLegacyTelemetry = true
	// validate checked what raft checks of the settings; this and the
	// check of the leader's timings below only back it up.
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, invalid("raftmeta: open %s: %w", cfg.ID, err)
	}
	n.pace[0] = pace{heartbeat: rc.HeartbeatTimeout, election: rc.ElectionTimeout}
	lead := 15 * cfg.HeartbeatInterval
	n.pace[1] = pace{heartbeat: lead, election: max(rc.ElectionTimeout, lead)}
	n.beat = cfg.HeartbeatInterval
	leading := *rc
	leading.HeartbeatTimeout, leading.ElectionTimeout = n.pace[1].heartbeat, n.pace[1].election
	if err := raft.ValidateConfig(&leading); err != nil {
		return nil, invalid("raftmeta: open %s: timings while leading: %w", cfg.ID, err)
	}

	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("raftmeta: open %s: read existing state%s: %w", cfg.ID, inDir(cfg), err)
	}
	if !has && len(cfg.Bootstrap) > 0 {
		conf := raft.Configuration{}
		for _, s := range cfg.Bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Addr)})
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("raftmeta: open %s: bootstrap: %w", cfg.ID, err)
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raftmeta: open %s: start raft: %w", cfg.ID, err)
	}
	n.raft = r
	n.fresh = !has
	n.window = cfg.DedupeWindow
	go n.fanOut()
	n.log.Debug("raftmeta: node open", "id", cfg.ID, "addr", addr, "dir", cfg.DataDir, "in_memory", cfg.Storage != nil, "existing_state", has)
	return n, nil
}

// inDir names where cfg keeps the state, for errors.
func inDir(cfg Config) string {
	if cfg.Storage != nil {
		return " in Config.Storage"
	}
	return " in " + cfg.DataDir
}

// Raft's limits (raft.ValidateConfig): the least HeartbeatTimeout,
// ElectionTimeout, LeaderLeaseTimeout and SnapshotInterval, the least
// CommitTimeout, and the most MaxAppendEntries.
const (
	minRaftTimeout   = 5 * time.Millisecond
	minCommitTimeout = time.Millisecond
	maxAppendEntries = 1024
)

// validate reports the first setting of c, its zero fields defaulted, that
// Open cannot run with, naming the settings as SettingNames say. It checks
// what raft.ValidateConfig checks of them, whose errors name raft's fields
// instead. explicitInterval says that HeartbeatInterval was set rather
// than defaulted.
func (c Config) validate(explicitInterval bool) error {
	name := c.setting
	if c.ID == "" {
		return invalid("raftmeta: open: %s is empty; give every head a stable unique ID", name("ID"))
	}
	bad := func(format string, args ...any) error {
		return invalid("raftmeta: open %s: %s", c.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case c.DataDir == "" && c.Storage == nil:
		return bad("%s is empty; give the head a directory for its Raft state", name("DataDir"))
	case c.DedupeWindow < 0:
		return bad("%s %d is negative: set it above 0, the same on every head, or to 0 for the default %d", name("DedupeWindow"), c.DedupeWindow, DefaultDedupeWindow)
	case c.MaxAppendEntries < 1 || c.MaxAppendEntries > maxAppendEntries:
		return bad("%s %d: set it from 1 to %d", name("MaxAppendEntries"), c.MaxAppendEntries, maxAppendEntries)
	}
	for _, d := range []struct {
		field    string
		v, least time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout, minRaftTimeout}, {"ElectionTimeout", c.ElectionTimeout, minRaftTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout, minRaftTimeout}, {"CommitTimeout", c.CommitTimeout, minCommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval, minRaftTimeout},
	} {
		if d.v < d.least {
			return bad("%s %v is below %v, the least raft accepts: set %[1]s to at least %[3]v", name(d.field), d.v, d.least)
		}
	}
	hb, lease := c.HeartbeatTimeout, c.LeaderLeaseTimeout
	if lease > hb {
		return bad("%s %v is more than %s %v: set %[1]s at most %[3]s", name("LeaderLeaseTimeout"), lease, name("HeartbeatTimeout"), hb)
	}
	if c.ElectionTimeout < hb {
		return bad("%s %v is less than %s %v: set %[1]s at least %[3]s", name("ElectionTimeout"), c.ElectionTimeout, name("HeartbeatTimeout"), hb)
	}
	if hb/10 > lease/2 {
		// The leader's beat is at least a tenth of the heartbeat timeout
		// (defaulted or set), and the lease must hold two beats, or the
		// leader steps down whenever one answer is late.
		return bad("%s %v is under a fifth of %s %v: the leader beats its followers every tenth of that at the least, and a lease must span two beats; set %[1]s to at least %[5]v",
			name("LeaderLeaseTimeout"), lease, name("HeartbeatTimeout"), hb, hb/5)
	}
	if iv := c.HeartbeatInterval; explicitInterval && (iv < hb/10 || iv > hb/2 || 2*iv > lease) {
		return bad("%s %v: set it from %v to %v (a tenth to half of %s %v, and at most half of %s %v)",
			name("HeartbeatInterval"), iv, hb/10, min(hb, lease)/2, name("HeartbeatTimeout"), hb, name("LeaderLeaseTimeout"), lease)
	}
	return nil
}

// checkBootstrap checks c.Bootstrap against this head's ID and selfAddr,
// the address its peers reach it at.
func (c Config) checkBootstrap(selfAddr string) error {
	servers, self, list := c.Bootstrap, c.ID, c.setting("Bootstrap")
	if len(servers) == 0 {
		return nil
	}
	ids := make(map[string]bool, len(servers))
	addrs := make(map[string]bool, len(servers))
	found := false
	for _, s := range servers {
		switch {
		case s.ID == "" || s.Addr == "":
			return invalid("raftmeta: %s: server %q at %q needs both an ID and an address", list, s.ID, s.Addr)
		case ids[s.ID]:
			return invalid("raftmeta: %s: server ID %q appears twice", list, s.ID)
		case addrs[s.Addr]:
			return invalid("raftmeta: %s: address %q appears twice", list, s.Addr)
		}
		ids[s.ID], addrs[s.Addr] = true, true
		if s.ID == self {
			found = true
			if s.Addr != selfAddr {
				return invalid("raftmeta: %s gives head %q address %q but it is reached at %q; set %s or fix %[1]s", list, self, s.Addr, selfAddr, c.setting("Addr"))
			}
		}
	}
	if !found {
		return invalid("raftmeta: %s does not name this head %q; give every head the same list including itself, or none to be added later", list, self)
	}
	return nil
}

// fanOut drains raft's NotifyCh promptly (raft blocks on it) and passes
// each value to every LeaderCh subscriber. While this head leads a cluster
// of more than itself it also beats: every HeartbeatInterval it asks raft
// to verify the leadership, which sends every follower a heartbeat at
// once. The answer is not awaited (raft gives it when a quorum replies or
// the leadership ends, and drops the request from every follower's list
// either way), so a beat never holds up NotifyCh; a leader that has lost
// its followers notices by its lease, as before. A head alone has no one
// to beat to and is not woken for it; raft's observation of a follower
// added (or removed) while it leads makes it look again.
func (n *Node) fanOut() {
	defer close(n.fanDone)
	peers := make(chan raft.Observation, 4)
	obs := raft.NewObserver(peers, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.PeerObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	beat := time.NewTimer(n.beat)
	beat.Stop()
	defer beat.Stop()
	leading := false
	// arm starts the beat if this head leads others, and stops it if not.
	arm := func() {
		if leading && n.hasFollowers() {
			beat.Reset(n.beat)
		} else {
			beat.Stop()
		}
	}
	for {
		select {
		case v := <-n.notify:
			n.setPace(v)
			leading = v
			arm()
			n.subsMu.Lock()
			for _, ch := range n.subs {
				publish(ch, v)
			}
			n.subsMu.Unlock()
		case <-peers:
			arm()
		case <-beat.C:
			n.raft.VerifyLeader()
			arm()
		case <-n.stopFan:
			return
		}
	}
}

// hasFollowers says whether raft's latest configuration names a server
// other than this head.
func (n *Node) hasFollowers() bool {
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if string(s.ID) != n.id {
			return true
		}
	}
	return false
}

// pace is the part of raft's reloadable configuration that differs
// between a leader and the other heads.
type pace struct{ heartbeat, election time.Duration }

// setPace gives raft the heartbeat timing of a leader or of a follower.
// hashicorp/raft's leader sends each follower a heartbeat every
// HeartbeatTimeout/10 to twice that, and uses HeartbeatTimeout for nothing
// else but the cap of its back-off after failed heartbeats (and
// ElectionTimeout, which must not be shorter, only to wait for a leadership
// transfer); a follower starts an election when it has heard nothing for
// HeartbeatTimeout. So a leader runs with 15×HeartbeatInterval, leaving the
// heartbeats to fanOut's beat, and a head that stops leading goes back to
// the configured timeouts before it next waits for a leader (raft then
// checks its contact at once). Only fanOut calls it, in the order raft
// reports the changes.
func (n *Node) setPace(leading bool) {
	p := n.pace[0]
	if leading {
		p = n.pace[1]
	}
	if n.pace[0] == n.pace[1] {
		return
	}
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = p.heartbeat, p.election
	if err := n.raft.ReloadConfig(rc); err != nil {
		// Not expected: Open validated both timings. Raft keeps the
		// old one: as a leader, safe but not as quiet.
		n.log.Warn("raftmeta: set heartbeat timing", "leading", leading, "err", err)
	}
}

// publish sends v without blocking, dropping the oldest value if ch is full,
// so the last value a subscriber reads is always the newest.
func publish(ch chan bool, v bool) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// LeaderCh returns a new channel that receives true when this head becomes
// leader and false when it stops being leader. It first receives the current
// state. A slow reader loses the oldest values, never the newest, so read
// the values as "the state is now X" rather than counting edges (compare
// Stats().Term to tell two terms apart). The channel is closed by Shutdown.
// Each call adds a subscriber for the Node's lifetime: call it once per
// consumer.
func (n *Node) LeaderCh() <-chan bool {
	ch := make(chan bool, 8)
	n.subsMu.Lock()
	defer n.subsMu.Unlock()
	if n.closed {
		close(ch)
		return ch
	}
	ch <- n.raft.State() == raft.Leader
	n.subs = append(n.subs, ch)
	return ch
}

// handlerDrainWait bounds each of Shutdown's two waits for raft's
// connection handlers (see handlerLayer.drain).
const handlerDrainWait = 5 * time.Second

// Shutdown stops raft, closes the stream layer and the store, and closes
// every LeaderCh channel. It is safe to call more than once; later calls
// return the first call's result. Writes in flight fail with
// dag.KindUnavailable.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		rerr := n.raft.Shutdown().Error()
		close(n.stopFan)
		<-n.fanDone
		n.subsMu.Lock()
		n.closed = true
		for _, ch := range n.subs {
			close(ch)
		}
		n.subs = nil
		n.subsMu.Unlock()
		// raft closes the transport itself, except when it already shut
		// down on its own (removed from the cluster); Close is idempotent.
		var terr, serr error
		if c, ok := n.trans.(raft.WithClose); ok {
			terr = c.Close()
		}
		// The transport's Close stops accepting but leaves the handlers
		// of accepted connections running, and a heartbeat among them
		// may still write the term: the store closes after they return.
		if n.handlers != nil {
			if left := n.handlers.drain(handlerDrainWait); left > 0 {
				n.log.Warn("raft connection handlers still running at shutdown; closing the store under them", "node", n.id, "handlers", left)
			}
		}
		if n.store != nil {
			serr = n.store.Close()
		}
		if err := errors.Join(rerr, terr, serr); err != nil {
			n.shutdownErr = fmt.Errorf("raftmeta: shutdown %s: %w", n.id, err)
		}
	})
	return n.shutdownErr
}

// timeout turns ctx's deadline into raft's enqueue timeout (0: none).
func timeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Nanosecond
	}
	return 0
}

// wait waits for f or ctx. Raft futures cannot be cancelled: if ctx ends
// first the operation may still take effect, which the error says.
func (n *Node) wait(ctx context.Context, f raft.Future, what, retry string) error {
	done := ctx.Done()
	if done == nil {
		return n.mapErr(f.Error(), what, retry)
	}
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return n.mapErr(err, what, retry)
	case <-done:
		select {
		case err := <-ch: // both ready: the real answer wins
			return n.mapErr(err, what, retry)
		default:
			return n.mapErr(ctx.Err(), what, retry)
		}
	}
}

// Apply replicates cmd and returns the state machine's Result. It works only
// on the leader; elsewhere it returns a *NotLeaderError. A Result that
// carries an error (Result.Err) is also returned as the error, so callers
// check err alone.
//
// ctx's deadline bounds the wait to enqueue the command. If ctx ends, the
// leader loses leadership, or the queue is full, the outcome is unknown
// (dag.KindUnavailable, KindDeadlineExceeded or KindCancelled): retry with
// the same Command, whose RequestID makes a second apply answer from the
// dedupe table instead of applying again.
func (n *Node) Apply(ctx context.Context, cmd Command) (Result, error) {
	if cmd.Body == nil {
		return Result{}, invalid("raftmeta: apply request %s: command has no body", cmd.RequestID)
	}
	what := cmd.Body.Type().String() + " request " + cmd.RequestID.String()
	if cmd.RequestID.IsZero() {
		return Result{}, invalid("raftmeta: %s: zero request ID; pick one with NewRequestID", what)
	}
	if err := cmd.Body.validate(); err != nil {
		return Result{}, err
	}
	retry := "retry with the same request ID " + cmd.RequestID.String()
	if err := ctx.Err(); err != nil {
		return Result{}, n.mapErr(err, what, retry)
	}
	switch n.raft.State() {
	case raft.Leader:
	case raft.Shutdown:
		return Result{}, n.mapErr(raft.ErrRaftShutdown, what, retry)
	default:
		return Result{}, n.notLeader()
	}
	data, err := EncodeCommand(cmd)
	if err != nil {
		return Result{}, err
	}
	f := n.raft.Apply(data, timeout(ctx))
	if err := n.wait(ctx, f, what, retry); err != nil {
		return Result{}, err
	}
	res, ok := f.Response().(Result)
	if !ok {
		return Result{}, dag.Errorf(dag.KindInternal, "raftmeta: %s: state machine answered %T", what, f.Response())
	}
	return res, res.Err()
}

// AllocTask allocates the next task ID.
func (n *Node) AllocTask(ctx context.Context, req RequestID) (dag.TaskID, error) {
	r, err := n.Apply(ctx, Command{RequestID: req, Body: AllocTask{}})
	return r.Task, err
}

// AllocStage allocates the next stage ID of task.
func (n *Node) AllocStage(ctx context.Context, req RequestID, task dag.TaskID) (dag.StageID, error) {
	r, err := n.Apply(ctx, Command{RequestID: req, Body: AllocStage{Task: task}})
	return r.Stage, err
}

// AllocSubtasks allocates count subtask indexes of (task, stage) and returns
// the first: the range is [base, base+count).
func (n *Node) AllocSubtasks(ctx context.Context, req RequestID, task dag.TaskID, stage dag.StageID, count uint64) (base uint64, err error) {
	r, err := n.Apply(ctx, Command{RequestID: req, Body: AllocSubtasks{Task: task, Stage: stage, N: count}})
	return r.Base, err
}

// SubmitJob records a SUBMITTED job and returns its new task ID. graph and
// options are opaque CBOR; submitted is the time to record.
func (n *Node) SubmitJob(ctx context.Context, req RequestID, graph, options []byte, submitted time.Time) (dag.TaskID, error) {
	r, err := n.Apply(ctx, Command{RequestID: req, Body: SubmitJob{Graph: graph, Options: options, Time: submitted}})
	return r.Task, err
}

// BeginStage allocates the next stage of task's job with count subtask
// indexes and appends it to the job record, in one Raft entry.
func (n *Node) BeginStage(ctx context.Context, req RequestID, task dag.TaskID, count uint64, metas []byte) (Stage, error) {
	r, err := n.Apply(ctx, Command{RequestID: req, Body: BeginStage{Task: task, N: count, Metas: metas}})
	return Stage{ID: r.Stage, Base: r.Base, Count: r.Count, Metas: metas}, err
}

// SetJobStatus moves a job forward (see JobStatus).
func (n *Node) SetJobStatus(ctx context.Context, req RequestID, s SetJobStatus) error {
	_, err := n.Apply(ctx, Command{RequestID: req, Body: s})
	return err
}

// DeleteJob forgets a terminal job and its sequences.
func (n *Node) DeleteJob(ctx context.Context, req RequestID, task dag.TaskID) error {
	_, err := n.Apply(ctx, Command{RequestID: req, Body: DeleteJob{Task: task}})
	return err
}

// ReleaseJob records that a terminal job's results were released.
func (n *Node) ReleaseJob(ctx context.Context, req RequestID, task dag.TaskID) error {
	_, err := n.Apply(ctx, Command{RequestID: req, Body: ReleaseJob{Task: task}})
	return err
}

// RegisterRaylet records (or replaces) a raylet.
func (n *Node) RegisterRaylet(ctx context.Context, req RequestID, r Raylet) error {
	_, err := n.Apply(ctx, Command{RequestID: req, Body: RegisterRaylet{Raylet: r}})
	return err
}

// DeregisterRaylet forgets a raylet.
func (n *Node) DeregisterRaylet(ctx context.Context, req RequestID, id string) error {
	_, err := n.Apply(ctx, Command{RequestID: req, Body: DeregisterRaylet{ID: id}})
	return err
}

// Job returns task's job record from the local replica (possibly stale on a
// follower; call Barrier on the leader first for a fresh read). Its slices
// are shared with the state machine: read only.
func (n *Node) Job(task dag.TaskID) (Job, bool) { return n.fsm.Job(task) }

// Jobs returns every job record from the local replica, by task ID.
func (n *Node) Jobs() []Job { return n.fsm.Jobs() }

// Raylets returns every registered raylet from the local replica, by ID.
func (n *Node) Raylets() []Raylet { return n.fsm.Raylets() }

// Barrier waits, on the leader, until every entry committed before it has
// been applied to the local FSM, so that reads after it are fresh.
func (n *Node) Barrier(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return n.mapErr(err, "barrier", "retry")
	}
	return n.wait(ctx, n.raft.Barrier(timeout(ctx)), "barrier", "retry")
}

// Fresh reports whether DataDir held no Raft state when Open ran: a head
// that starts fresh without a Bootstrap list must be added by the cluster
// (AddVoter) before it takes part, and a head whose ID the cluster already
// knows has lost its data and must be removed and added again.
func (n *Node) Fresh() bool { return n.fresh }

// ID returns this head's Raft server ID.
func (n *Node) ID() string { return n.id }

// Addr returns the address peers dial to reach this head.
func (n *Node) Addr() string { return n.addr }

// IsLeader reports whether this head is the leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader this head knows of, or empty strings.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// Stats is a point-in-time view of a Node's Raft state.
type Stats struct {
	ID, Addr             string
	State                string // "leader", "follower", "candidate" or "shutdown"
	Term                 uint64
	CommitIndex          uint64
	AppliedIndex         uint64
	LastIndex            uint64
	LastContact          time.Time // last contact with the leader (zero if none yet)
	LeaderID, LeaderAddr string
}

// Stats returns this head's Raft state.
func (n *Node) Stats() Stats {
	id, addr := n.Leader()
	return Stats{
		ID:           n.id,
		Addr:         n.addr,
		State:        strings.ToLower(n.raft.State().String()),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LastIndex:    n.raft.LastIndex(),
		LastContact:  n.raft.LastContact(),
		LeaderID:     id,
		LeaderAddr:   addr,
	}
}

// Servers returns the cluster's current voters as this head knows them.
func (n *Node) Servers() ([]Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.mapErr(err, "list servers", "retry")
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address)})
	}
	return out, nil
}

// AddVoter adds (or re-addresses) a voting head. Leader only. The new head
// must be running with an empty Bootstrap list; it catches up from the log
// or a snapshot. Adding a voter that is already there is harmless.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return invalid("raftmeta: add voter %q at %q: both an ID and an address are needed", id, addr)
	}
	what := fmt.Sprintf("add voter %s at %s", id, addr)
	if err := ctx.Err(); err != nil {
		return n.mapErr(err, what, "retry")
	}
	f := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout(ctx))
	return n.wait(ctx, f, what, "retry; adding the same voter again is harmless")
}

// RemoveServer removes a head from the cluster. Leader only. A leader that
// removes itself steps down once the change commits. The removed head is no
// longer contacted, but it may not learn of its removal: call Shutdown on it.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if id == "" {
		return invalid("raftmeta: remove server: empty ID")
	}
	what := "remove server " + id
	if err := ctx.Err(); err != nil {
		return n.mapErr(err, what, "retry")
	}
	f := n.raft.RemoveServer(raft.ServerID(id), 0, timeout(ctx))
	return n.wait(ctx, f, what, "retry; removing it again is harmless")
}
