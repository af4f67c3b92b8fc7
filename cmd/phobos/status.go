package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

func runStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("status", "--connect ADDR --token-file F [--json]")
	var lf logFlags
	lf.register(fs)
	connect := fs.String("connect", "127.0.0.1:7070", "address of any head")
	tokenFile := fs.String("token-file", "", "cluster token file (required)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := lf.logger()
	if err != nil {
		return err
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// Ask the named head itself, whatever its role: status must work on a
	// follower and while there is no leader.
	addr := strings.Split(*connect, ",")[0]
	s, err := transport.Dial(ctx, addr, transport.Config{Token: token, NodeID: "status", Logger: log})
	if err != nil {
		return err
	}
	defer s.Close()
	s.Serve(nopHandler{})
	var st wire.ClusterStatus
	if err := s.Call(ctx, wire.MethodClusterStatus, struct{}{}, &st); err != nil {
		return err
	}
	if *asJSON {
		out := struct {
			Leader  string            `json:"leader"`
			Term    uint64            `json:"term"`
			Heads   []wire.HeadInfo   `json:"heads"`
			Raylets []wire.RayletInfo `json:"raylets"`
		}{st.Leader, st.Term, st.Heads, st.Raylets}
		if out.Heads == nil {
			out.Heads = []wire.HeadInfo{}
		}
		if out.Raylets == nil {
			out.Raylets = []wire.RayletInfo{}
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	fmt.Printf("leader %s, term %d\n\n", orNone(st.Leader), st.Term)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HEAD\tADDR\tROLE\tCOMMIT INDEX")
	for _, h := range st.Heads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", h.ID, h.Addr, h.Role, h.CommitIndex)
	}
	tw.Flush()
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RAYLET\tADDR\tSTATE\tSLOTS\tSTORE USED\tSPILLED")
	for _, r := range st.Raylets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s / %s\t%d (%s)\n", r.ID, r.Addr, r.State, r.Slots, formatBytes(r.Store.Used), formatBytes(r.Store.Capacity), r.Store.Spilled, formatBytes(r.Store.SpilledBytes))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
