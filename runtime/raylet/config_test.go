package raylet

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/transport"
)

func TestDefaultConfigIsWhatZeroFieldsMean(t *testing.T) {
	d := DefaultConfig()
	if d.Listen != "127.0.0.1:0" || d.Slots != runtime.NumCPU() || d.Prefetch != 2 || d.Store.Capacity != 2<<30 ||
		d.HeartbeatInterval != time.Second || d.CancelGrace != 2*time.Second || d.SpinWait != 100*time.Microsecond || d.MaxFrame != transport.DefaultMaxFrameSize {
		t.Errorf("DefaultConfig() = %+v, not the documented defaults", d)
	}
	got := Config{}.withDefaults()
	got.Logger = nil
	if got.Listen != d.Listen || got.Slots != d.Slots || got.Prefetch != d.Prefetch || got.Store.Capacity != d.Store.Capacity ||
		got.HeartbeatInterval != d.HeartbeatInterval || got.CancelGrace != d.CancelGrace || got.SpinWait != d.SpinWait || got.MaxFrame != d.MaxFrame {
		t.Errorf("zero Config with defaults = %+v, want DefaultConfig's values %+v", got, d)
	}
	if p := (Config{Prefetch: -1}).withDefaults().Prefetch; p != 0 {
		t.Errorf("negative prefetch became %d, want none (0)", p)
	}
	if w := (Config{SpinWait: -1}).withDefaults().SpinWait; w != 0 {
		t.Errorf("negative spin wait became %v, want none (0)", w)
	}
	if f := (Config{Transport: transport.Config{MaxFrameSize: 1 << 20}}).withDefaults().MaxFrame; f != 1<<20 {
		t.Errorf("MaxFrame defaulted to %d, want Transport.MaxFrameSize (1 MiB)", f)
	}
	for _, c := range []Config{{Heads: []string{"h:1"}}, func() Config { c := DefaultConfig(); c.Heads = []string{"h:1"}; return c }()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestValidateNamesTheField checks that each refused field is named in
// Config's terms, with the value and what it takes, and never by a CLI
// flag (the CLI adds those).
func TestValidateNamesTheField(t *testing.T) {
	heads := []string{"h:1"}
	for _, c := range []struct {
		cfg   Config
		field string
		text  string
	}{
		{Config{}, "Heads", "give the address (HOST:PORT) of at least one head"},
		{Config{Heads: []string{"h:1", ""}}, "Heads", "address 2 of 2 is empty"},
		{Config{Heads: heads, Slots: -1}, "Slots", "-1: want 1 to 4096"},
		{Config{Heads: heads, Slots: MaxSlots + 1}, "Slots", "4097: want 1 to 4096"},
		{Config{Heads: heads, Prefetch: MaxPrefetch + 1}, "Prefetch", "want at most 65536"},
		{Config{Heads: heads, HeartbeatInterval: -time.Second}, "HeartbeatInterval", "-1s: want a positive duration"},
		{Config{Heads: heads, CancelGrace: -time.Second}, "CancelGrace", "-1s: want a positive duration such as 2s"},
		{Config{Heads: heads, SpinWait: 2 * time.Millisecond}, "SpinWait", "2ms: want at most 1ms (or negative: none)"},
		{Config{Heads: heads, MaxFrame: 100}, "MaxFrame", "100 bytes: want 4096 to"},
	} {
		err := c.cfg.Validate()
		var ce *ConfigError
		switch {
		case err == nil:
			t.Errorf("%+v: accepted", c.cfg)
		case !errors.As(err, &ce) || ce.Field != c.field:
			t.Errorf("%+v: %v, want a ConfigError for %s", c.cfg, err, c.field)
		case !errors.Is(err, dag.ErrInvalidArgument):
			t.Errorf("%v: kind %v, want invalid argument", err, dag.KindOf(err))
		case !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), c.field):
			t.Errorf("%v: want it to name %s and say %q", err, c.field, c.text)
		case strings.Contains(err.Error(), "--"):
			t.Errorf("%v: names a CLI flag", err)
		}
	}
}

func TestStartRefusesABadConfigFirst(t *testing.T) {
	// The config is refused before the listener and the store are opened.
	_, err := Start(context.Background(), Config{Heads: []string{"h:1"}, Slots: -3, Store: DefaultConfig().Store})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Slots" {
		t.Fatalf("Start: %v, want the Slots config error", err)
	}
}
