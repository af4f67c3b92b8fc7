package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head"
	"github.com/phobos-project/phobos/runtime/head/sched"
	"github.com/phobos-project/phobos/runtime/raylet"
	"github.com/phobos-project/phobos/transport"
	"github.com/spf13/cobra"
)

func newHeadCmd() *cobra.Command {
	cmd, fs := newCommand("head", "run a head (Raft metadata replica; the leader schedules)", nil)
	config := configFlag(fs)
	var lf logFlags
	lf.register(fs)
	var sec tlsFlags
	sec.register(fs)
	// --fault-file is for the chaos harness, not for people: hidden.
	faultFile := fs.String("fault-file", "", "file of fault rules for this process's outgoing connections (chaos harness)")
	fs.MarkHidden("fault-file")
	id := fs.String("id", "", "this head's stable Raft ID (required)")
	listen := fs.String("listen", "127.0.0.1:7070", "address for raylets, drivers and other heads")
	advertise := fs.String("advertise", "", "address others dial (default: the listen address)")
	dataDir := fs.String("data-dir", "", "directory for the Raft log and snapshots (required)")
	peers := fs.String("peers", "", "initial voters as ID=ADDR,... (identical on every head of a new cluster; default: this head alone)")
	join := fs.String("join", "", "addresses of heads of a running cluster, comma-separated: ask them to add this head as a voter (instead of --peers)")
	hd := head.DefaultConfig()
	d := hd.Raft
	hb := fs.Duration("raft-heartbeat", d.HeartbeatTimeout, "Raft heartbeat timeout: a follower that hears nothing this long starts an election (LAN default; 100ms suits loopback)")
	el := fs.Duration("raft-election", d.ElectionTimeout, "Raft election timeout (LAN default; 100ms suits loopback)")
	lease := fs.Duration("raft-lease", d.LeaderLeaseTimeout, "Raft leader lease timeout, from a fifth of the heartbeat timeout to all of it (50ms suits loopback)")
	commit := fs.Duration("raft-commit-timeout", d.CommitTimeout, "longest delay before followers learn the commit index when the leader is idle")
	interval := fs.Duration("raft-heartbeat-every", 0, "how often the leader sends its followers a heartbeat, all at once; followers keep --raft-heartbeat (default: 3/10 of --raft-heartbeat or of --raft-lease, whichever is less, and at least a tenth of --raft-heartbeat; at most half of either)")
	maxAppend := fs.Int("raft-max-append-entries", d.MaxAppendEntries, "most log entries per replication message and per state-machine batch (at most 1024)")
	snap := fs.Uint64("raft-snapshot-threshold", d.SnapshotThreshold, "log entries between snapshots")
	snapEvery := fs.Duration("raft-snapshot-interval", d.SnapshotInterval, "how often to check whether a snapshot is due")
	trailing := fs.Uint64("raft-trailing-logs", d.TrailingLogs, "log entries kept after a snapshot, so a lagging follower needs no snapshot")
	rayletTimeout := fs.Duration("raylet-timeout", hd.RayletTimeout, "a raylet silent this long is lost and its work runs elsewhere")
	resultTTL := fs.Duration("result-ttl", hd.ResultTTL, "how long results stay after a job ends unless the driver releases them")
	retries := fs.Int("retries", hd.Retries, fmt.Sprintf("default re-runs of a failed subtask before its job fails (at most %d)", sched.MaxRetries))
	putGrace := fs.Duration("put-grace", hd.PutGrace, "how long a client's put objects outlive its last session (time to reconnect after a failover)")
	jobBudget, admitBudget := int64(0), int64(0)
	fs.Var(byteSize{&jobBudget}, "job-budget", "most head memory one job may take to lower and schedule, as estimated before tiling (default: a quarter of the memory the head may use)")
	fs.Var(byteSize{&admitBudget}, "admit-budget", "most head memory all jobs being lowered and run may take together; others wait (default: half the memory the head may use)")
	admitQueue := fs.Int("admit-queue", hd.AdmitQueue, "jobs that may wait for --admit-budget; more are refused")
	noPipeline := fs.Bool("no-pipeline", false, "dispatch no subtask before its inputs are stored (by default one whose inputs are being made on a raylet may go to that raylet ahead of them)")
	ret := retentionFlags(fs, hd)
	maxFrame := int64(16 << 20)
	fs.Var(byteSize{&maxFrame}, "max-frame", "largest control message this head accepts (job graphs travel in one)")
	var hf httpFlags
	hf.register(fs)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := applyConfig(fs, *config); err != nil {
			return err
		}
		if *id == "" || *dataDir == "" {
			return usagef("--id and --data-dir are required")
		}
		if *peers != "" && *join != "" {
			return usagef("--peers bootstraps a new cluster and --join joins a running one; give one of them")
		}
		if *maxAppend < 1 || *maxAppend > 1024 {
			return usagef("--raft-max-append-entries %d: want 1 to 1024", *maxAppend)
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		tcfg := transport.Config{MaxFrameSize: int(maxFrame)}
		if err := sec.apply(&tcfg, transport.RoleHead, log); err != nil {
			return err
		}
		servers, err := parsePeers(*peers)
		if err != nil {
			return err
		}
		var joinAddrs []string
		for _, a := range strings.Split(*join, ",") {
			if a = strings.TrimSpace(a); a != "" {
				joinAddrs = append(joinAddrs, a)
			}
		}
		faultDial, err := watchFaults(ctx, *faultFile, log)
		if err != nil {
			return err
		}
		rc := d
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout = *hb, *el, *lease, *commit
		rc.HeartbeatInterval = *interval
		rc.MaxAppendEntries, rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = *maxAppend, *snap, *snapEvery, *trailing
		rc.SettingNames = raftFlags
		tcfg.Dial = faultDial
		s, err := head.Start(head.Config{
			ID: *id, Listen: *listen, Advertise: *advertise, DataDir: *dataDir, Peers: servers, Join: joinAddrs, Token: tcfg.Token,
			JobRetention: ret.age(), JobRetentionCount: ret.count(), RayletPurgeAfter: ret.purge(),
			Raft: rc, RayletTimeout: *rayletTimeout, ResultTTL: *resultTTL, Retries: *retries, Logger: log,
			PutGrace: *putGrace, JobBudget: jobBudget, AdmitBudget: admitBudget, AdmitQueue: *admitQueue,
			NoPipeline: *noPipeline, Transport: tcfg, SettingNames: headFlags, HTTP: hf.addr, HTTPTokenFile: hf.tokenFile,
		})
		if err != nil {
			return err
		}
		sec.warn(log)
		reloadTLS(ctx, tcfg.TLS, certCheckInterval, log)
		serving(log, "head serving", "id", *id, "addr", s.Addr(), "http", s.HTTPURL())
		if len(joinAddrs) > 0 {
			// Join until a head answers; a refusal retrying cannot fix ends the process.
			if err := s.Join(ctx); err != nil && ctx.Err() == nil {
				s.Close()
				return err
			}
		}
		select {
		case <-ctx.Done():
		case <-s.Removed(): // the head logged why; a clean exit, not a failure to restart
		}
		return s.Close()
	}
	return cmd
}

// transportFlags and storeFlags name the flags that set transport.Config's
// and objectstore.Config's fields, for their errors (SettingNames).
var (
	transportFlags = map[string]string{
		"TLS": "--tls-cert, --tls-key, --tls-ca", "Insecure": "--insecure-plaintext", "Token": "--token-file",
		"MaxFrameSize": "--max-frame",
	}
	storeFlags = map[string]string{"Capacity": "--store-size", "Dir": "--store-dir", "SpillDir": "--spill-dir"}
)

// headFlags names the head.Config fields that runHead sets from flags, so
// that the head's errors name the flags.
var headFlags = map[string]string{
	"ID": "--id", "DataDir": "--data-dir", "Listen": "--listen", "Advertise": "--advertise", "Join": "--join",
	"RayletTimeout": "--raylet-timeout", "ResultTTL": "--result-ttl", "Retries": "--retries", "PutGrace": "--put-grace",
	"JobBudget": "--job-budget", "AdmitBudget": "--admit-budget", "AdmitQueue": "--admit-queue",
	"JobRetention": "--job-retention", "JobRetentionCount": "--job-retention-count", "RayletPurgeAfter": "--raylet-purge-after",
}

// raftFlags names the raftmeta.Config fields that runHead sets from flags
// (directly, or through head.Config: ID, DataDir, Addr and Bootstrap), so
// that Raft's errors name the flags.
var raftFlags = map[string]string{
	"ID": "--id", "DataDir": "--data-dir", "Addr": "--advertise", "Bootstrap": "--peers",
	"HeartbeatTimeout": "--raft-heartbeat", "ElectionTimeout": "--raft-election", "LeaderLeaseTimeout": "--raft-lease",
	"CommitTimeout": "--raft-commit-timeout", "HeartbeatInterval": "--raft-heartbeat-every",
	"MaxAppendEntries": "--raft-max-append-entries", "SnapshotThreshold": "--raft-snapshot-threshold",
	"SnapshotInterval": "--raft-snapshot-interval", "TrailingLogs": "--raft-trailing-logs",
}

// certCheckInterval is how often daemons look for renewed certificate files.
const certCheckInterval = 10 * time.Second

func parsePeers(s string) ([]raftmeta.Server, error) {
	if s == "" {
		return nil, nil
	}
	var out []raftmeta.Server
	for _, p := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || id == "" || addr == "" {
			return nil, usagef("--peers entry %q: want ID=HOST:PORT", p)
		}
		out = append(out, raftmeta.Server{ID: id, Addr: addr})
	}
	return out, nil
}

// rayletFlags are the flags that set raylet.Config's fields.
var rayletFlags = map[string]string{"Heads": "head", "Slots": "slots", "Store.Capacity": "store-size",
	"CancelGrace": "cancel-grace", "SpinWait": "spin-wait", "MaxFrame": "max-frame"}

// rayletFlagError puts the flag's name on a config error of the raylet
// library, which names the Config field.
func rayletFlagError(err error) error {
	var ce *raylet.ConfigError
	if errors.As(err, &ce) {
		if f, ok := rayletFlags[ce.Field]; ok {
			return usagef("--%s %s", f, ce.Msg)
		}
	}
	return err
}

func newRayletCmd() *cobra.Command {
	cmd, fs := newCommand("raylet", "run a raylet (pulls and runs subtasks, stores objects), or drain one: raylet drain|undrain ID", nil)
	cmd.AddCommand(
		newRayletDrainCmd("drain", "stop placing work on a raylet and let its running work finish (admin)"),
		newRayletDrainCmd("undrain", "put a drained raylet back in service (admin)"))
	config := configFlag(fs)
	var lf logFlags
	lf.register(fs)
	var sec tlsFlags
	sec.register(fs)
	// --fault-file is for the chaos harness, not for people: hidden.
	faultFile := fs.String("fault-file", "", "file of fault rules for this process's outgoing connections (chaos harness)")
	fs.MarkHidden("fault-file")
	def := raylet.DefaultConfig()
	heads := fs.String("head", "127.0.0.1:7070", "addresses of any heads, comma-separated")
	id := fs.String("id", "", "raylet name (default: the one kept in --state-dir, made once from the host name)")
	stateDir := fs.String("state-dir", "", "directory for the raylet's lasting state, its ID in DIR/"+raylet.IDFileName+" (default: --store-dir if given, else ~/.local/state/phobos/raylet); give each raylet on a host its own")
	listen := fs.String("listen", def.Listen, "address peers and drivers fetch objects from")
	advertise := fs.String("advertise", "", "address others dial (default: the listen address)")
	slots := fs.Int("slots", def.Slots, "subtasks run at once; 0 means one per CPU")
	storeSize := def.Store.Capacity
	fs.Var(byteSize{&storeSize}, "store-size", "object store capacity, e.g. 512MiB or 2GiB")
	storeDir := fs.String("store-dir", "", "directory for the store's memory-mapped arena (default /dev/shm)")
	spillDir := fs.String("spill-dir", "", "directory on disk for objects spilled from a full store (default: the temp dir); the raylet uses its own subdirectory and removes it on exit")
	maxFrame := int64(def.MaxFrame)
	fs.Var(byteSize{&maxFrame}, "max-frame", "largest control message this raylet accepts")
	var hf httpFlags
	hf.register(fs)
	cancelGrace := fs.Duration("cancel-grace", def.CancelGrace, "how long a cancelled kernel may run on before the raylet abandons it and frees its slot")
	spinWait := fs.Duration("spin-wait", def.SpinWait, "how long an idle worker looks for its next subtask before it sleeps, while subtasks here wait for inputs made here (negative: never)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := applyConfig(fs, *config); err != nil {
			return err
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		tcfg := transport.Config{}
		if err := sec.apply(&tcfg, transport.RoleRaylet, log); err != nil {
			return err
		}
		if *cancelGrace <= 0 {
			return usagef("--cancel-grace %v: want a positive duration such as 2s", *cancelGrace)
		}
		if storeSize <= 0 {
			return usagef("--store-size must be positive")
		}
		cfg := raylet.Config{
			ID: *id, IDFile: rayletIDFile(*stateDir, *storeDir), Listen: *listen, Advertise: *advertise, Heads: strings.Split(*heads, ","), Token: tcfg.Token,
			Slots: *slots, Store: objectstore.Config{Dir: *storeDir, Capacity: storeSize, SpillDir: *spillDir, SettingNames: storeFlags}, Logger: log,
			MaxFrame: int(maxFrame), Transport: tcfg, CancelGrace: *cancelGrace, SpinWait: *spinWait, HTTP: hf.addr, HTTPTokenFile: hf.tokenFile,
		}
		if err := cfg.Validate(); err != nil {
			return rayletFlagError(err)
		}
		faultDial, err := watchFaults(ctx, *faultFile, log)
		if err != nil {
			return err
		}
		cfg.Transport.Dial = faultDial
		r, err := raylet.Start(ctx, cfg)
		if err != nil {
			return err
		}
		sec.warn(log)
		reloadTLS(ctx, tcfg.TLS, certCheckInterval, log)
		serving(log, "raylet serving", "id", r.ID(), "addr", r.Addr(), "heads", *heads, "http", r.HTTPURL())
		select {
		case <-ctx.Done():
		case <-r.Done(): // refused by the head: exit with its reason
		}
		if err := r.Close(); err != nil {
			return fmt.Errorf("close raylet: %w", err)
		}
		return r.Err()
	}
	return cmd
}
