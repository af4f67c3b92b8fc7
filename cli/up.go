package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/phobos-project/phobos/runtime/cluster"
)

func runUp(ctx context.Context, args []string) error {
	fs := newFlagSet("up", "[--heads H] [--raylets R] [--dir DIR] [--json]")
	var lf logFlags
	lf.register(fs)
	heads := fs.Int("heads", 1, "number of heads: 1, 3 or 5")
	raylets := fs.Int("raylets", 2, "number of raylets")
	dir := fs.String("dir", "", "directory for data, logs and the token file (default: a new temp dir)")
	slots := fs.Int("slots", 0, "slots per raylet (default: number of CPUs)")
	storeSize := int64(512 << 20)
	fs.Var(byteSize{&storeSize}, "store-size", "object store capacity per raylet")
	storeDir := fs.String("store-dir", "", "directory for store arenas (default /dev/shm)")
	spillDir := fs.String("spill-dir", "", "directory for objects spilled from full stores (default: the temp dir)")
	asJSON := fs.Bool("json", false, "print one JSON line describing the cluster once it is ready")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *heads != 1 && *heads != 3 && *heads != 5 {
		return usagef("--heads %d: run 1, 3 or 5 heads (Raft needs an odd number to keep a majority)", *heads)
	}
	if *raylets < 0 {
		return usagef("--raylets must not be negative")
	}
	if _, err := lf.logger(); err != nil {
		return err
	}
	d := *dir
	if d == "" {
		var err error
		if d, err = os.MkdirTemp("", "phobos-up-"); err != nil {
			return err
		}
	}
	spec := cluster.Spec{Dir: d, Heads: *heads, Raylets: *raylets, Slots: *slots, StoreSize: formatBytes(storeSize), StoreDir: *storeDir, SpillDir: *spillDir,
		HeadArgs: []string{"--log-level", lf.level, "--log-format", lf.format}, RayletArgs: []string{"--log-level", lf.level, "--log-format", lf.format}}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := cluster.Start(startCtx, spec)
	cancel()
	if err != nil {
		return err
	}
	if *asJSON {
		type proc struct {
			ID   string `json:"id"`
			Addr string `json:"addr"`
			PID  int    `json:"pid"`
		}
		out := struct {
			Heads     []proc `json:"heads"`
			Raylets   []proc `json:"raylets"`
			TokenFile string `json:"token_file"`
			Dir       string `json:"dir"`
		}{TokenFile: c.TokenFile, Dir: d, Heads: []proc{}, Raylets: []proc{}}
		for _, p := range c.Heads {
			out.Heads = append(out.Heads, proc{p.ID, p.Addr, p.PID()})
		}
		for _, p := range c.Raylets {
			out.Raylets = append(out.Raylets, proc{p.ID, p.Addr, p.PID()})
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	} else {
		fmt.Printf("phobos cluster up: %d heads, %d raylets; data and logs in %s\n", *heads, *raylets, d)
		for _, p := range c.Heads {
			fmt.Printf("  head   %-4s %-21s pid %d\n", p.ID, p.Addr, p.PID())
		}
		for _, p := range c.Raylets {
			fmt.Printf("  raylet %-4s %-21s pid %d\n", p.ID, p.Addr, p.PID())
		}
		fmt.Printf("connect with: --connect %s --token-file %s\nCtrl-C stops the cluster.\n", c.HeadAddrs(), c.TokenFile)
	}
	<-ctx.Done()
	return c.Stop()
}
