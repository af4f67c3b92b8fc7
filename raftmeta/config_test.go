package raftmeta

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/phobos-project/phobos/dag"
)

// configFields are the Config fields a program may fill from flags.
var configFields = []string{
	"ID", "Addr", "DataDir", "Storage", "Transport", "Bootstrap",
	"HeartbeatTimeout", "ElectionTimeout", "LeaderLeaseTimeout", "CommitTimeout", "HeartbeatInterval",
	"SnapshotThreshold", "SnapshotInterval", "TrailingLogs", "MaxAppendEntries", "DedupeWindow",
}

// goName is a Config field's or raft.Config's name, as raft's own errors
// give it ("LeaderLeaseTimeout (2s) cannot be larger than heartbeat timeout
// (1s)"). ID is left out: "server ID" is a word, not a field.
var goName = regexp.MustCompile(`\b(` + strings.Join(configFields[1:], "|") + `)\b|(?i)heartbeat timeout`)

// TestConfigErrorsNameSettings: each bad setting is refused, by Open and
// before it starts raft, with an invalid-argument error naming the setting
// (and the others it is measured against) as Config.Field; with
// SettingNames it names them as the map says and by no Go field name, and
// so neither as raft.ValidateConfig's errors do.
func TestConfigErrorsNameSettings(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		field  string   // the setting at fault
		others []string // the settings it is measured against
	}{
		{"no id", func(c *Config) { c.ID = "" }, "ID", nil},
		{"no data dir", func(c *Config) { c.Storage = nil }, "DataDir", nil},
		{"negative dedupe window", func(c *Config) { c.DedupeWindow = -1 }, "DedupeWindow", nil},
		{"too many append entries", func(c *Config) { c.MaxAppendEntries = 1025 }, "MaxAppendEntries", nil},
		{"negative append entries", func(c *Config) { c.MaxAppendEntries = -1 }, "MaxAppendEntries", nil},
		{"heartbeat too short", func(c *Config) { c.HeartbeatTimeout = 4 * ms }, "HeartbeatTimeout", nil},
		{"negative heartbeat", func(c *Config) { c.HeartbeatTimeout = -time.Second }, "HeartbeatTimeout", nil},
		{"election too short", func(c *Config) { c.ElectionTimeout = ms }, "ElectionTimeout", nil},
		{"lease too short", func(c *Config) { c.LeaderLeaseTimeout = ms }, "LeaderLeaseTimeout", nil},
		{"commit timeout too short", func(c *Config) { c.CommitTimeout = ms / 2 }, "CommitTimeout", nil},
		{"snapshot interval too short", func(c *Config) { c.SnapshotInterval = ms }, "SnapshotInterval", nil},
		{"lease over the heartbeat", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 2*time.Second
		},
			"LeaderLeaseTimeout", []string{"HeartbeatTimeout"}},
		{"election under the heartbeat", func(c *Config) { c.ElectionTimeout = 100 * ms }, "ElectionTimeout", []string{"HeartbeatTimeout"}},
		{"beat over half the heartbeat", func(c *Config) { c.HeartbeatInterval = time.Second },
			"HeartbeatInterval", []string{"HeartbeatTimeout", "LeaderLeaseTimeout"}},
		{"beat under a tenth of the heartbeat", func(c *Config) { c.HeartbeatInterval = 49 * ms },
			"HeartbeatInterval", []string{"HeartbeatTimeout", "LeaderLeaseTimeout"}},
		{"no beat fits the lease", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.HeartbeatInterval = time.Second, time.Second, 100*ms, 30*ms
		}, "LeaderLeaseTimeout", []string{"HeartbeatTimeout"}},
		{"lease under two default beats", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 100*ms
		}, "LeaderLeaseTimeout", []string{"HeartbeatTimeout"}},
		{"address not the transport's", func(c *Config) { c.Addr = "10.0.0.1:7" }, "Addr", []string{"Transport"}},
		{"bootstrap with another address", func(c *Config) { c.Bootstrap = []Server{{"a", "10.0.0.1:7"}} }, "Bootstrap", []string{"Addr"}},
		{"bootstrap without self", func(c *Config) { c.Bootstrap = []Server{{"b", "10.0.0.1:7"}} }, "Bootstrap", nil},
		{"bootstrap duplicate ID", func(c *Config) { c.Bootstrap = []Server{{"a", "inmem-a"}, {"a", "10.0.0.1:7"}} }, "Bootstrap", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := func(names map[string]string) error {
				_, tr := raft.NewInmemTransport("inmem-a")
				cfg := Config{ID: "a", Storage: NewInmemStorage(), Transport: tr, SettingNames: names}
				c.mutate(&cfg)
				n, err := Open(cfg, nil)
				if err == nil {
					n.Shutdown()
					t.Fatal("Open succeeded")
				}
				if !errors.Is(err, dag.ErrInvalidArgument) {
					t.Fatalf("Open: %v; want an invalid-argument error", err)
				}
				return err
			}

			err := open(nil)
			for _, f := range append([]string{c.field}, c.others...) {
				if !strings.Contains(err.Error(), "Config."+f) {
					t.Errorf("Open: %v; want it to name Config.%s", err, f)
				}
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("Open: %v; names a flag without SettingNames", err)
			}

			names := map[string]string{}
			for _, f := range configFields {
				names[f] = "--" + strings.ToLower(f)
			}
			names[c.field] = "--the-flag"
			err = open(names)
			for _, f := range append([]string{c.field}, c.others...) {
				if !strings.Contains(err.Error(), names[f]) {
					t.Errorf("with SettingNames: %v; want it to name %s", err, names[f])
				}
			}
			if m := goName.FindString(err.Error()); m != "" || strings.Contains(err.Error(), "Config.") {
				t.Errorf("with SettingNames: %v; names a setting by its Go name %q", err, m)
			}
		})
	}
}
