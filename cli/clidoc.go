package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// writeReference writes the generated command reference of docs/cli.md:
// every command, its usage line and its flags with their defaults, as -h
// prints them. TestCLIDocIsCurrent keeps the doc in step.
func writeReference(w io.Writer) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		// A command with subcommands is listed when it has flags of its
		// own (bench, raylet), not when it only groups others (raft, tls).
		if c.HasParent() && c.Runnable() && (!c.HasSubCommands() || c.LocalFlags().HasAvailableFlags()) {
			fmt.Fprintf(w, "### %s\n\n%s.\n\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."))
			fmt.Fprintf(w, "```\n%s\n", c.UseLine())
			if fl := c.LocalFlags(); fl.HasAvailableFlags() {
				fmt.Fprintf(w, "\n%s", fl.FlagUsagesWrapped(100))
			}
			fmt.Fprint(w, "```\n\n")
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}
