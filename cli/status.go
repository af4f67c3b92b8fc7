package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/internal/buildinfo"
	"github.com/phobos-project/phobos/runtime/wire"
)

func newStatusCmd() *cobra.Command {
	cmd, fs := newCommand("status", "show a cluster's heads and raylets", nil)
	var lf logFlags
	lf.register(fs)
	var cf connectFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	headTimeout := fs.Duration("head-timeout", time.Second, "how long the asked head waits for each other head before listing it unreachable")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return status(cmd.Context(), &cf, &lf, *headTimeout, *asJSON)
	}
	return cmd
}

func status(ctx context.Context, cf *connectFlags, lf *logFlags, headTimeout time.Duration, asJSON bool) error {
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	// Ask the named head itself, whatever its role: status must work on a
	// follower and while there is no leader. That head asks every other.
	s, err := cf.dial(ctx, lf, "status")
	if err != nil {
		return err
	}
	defer s.Close()
	var ws wire.ClusterStatus
	if err := s.Call(ctx, wire.MethodClusterStatus, wire.ClusterStatusRequest{Timeout: headTimeout}, &ws); err != nil {
		return fmt.Errorf("ask head %s for the cluster status: %w", s.RemoteID(), err)
	}
	st := phobos.ClusterStatusOf(&ws)
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	fmt.Printf("leader %s, term %d (asked %s; this client: %s)\n\n", orNone(st.Leader), st.Term, s.RemoteID(), buildinfo.Get().Short())
	printHeads(st)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RAYLET\tADDR\tSTATE\tSLOTS\tSTORE USED\tSPILLED\tCERT EXPIRES")
	for _, r := range st.Raylets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s / %s\t%d (%s)\t%s\n", r.ID, r.Addr, r.State, r.Slots, formatBytes(r.Store.Used), formatBytes(r.Store.Capacity),
			r.Store.Spilled, formatBytes(r.Store.SpilledBytes), certExpiry(r.CertNotAfter))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printWebServices(st)
	for _, w := range certWarnings(st, time.Now()) {
		fmt.Println(w)
	}
	for _, w := range st.Warnings {
		fmt.Println("warning: " + w)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
