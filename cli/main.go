// Package cli is phobos's command line: every command of the phobos binary
// (head, raylet, up, demo, status, job, jobs, cancel, submit, plan, put,
// raft, bench, chaos, tls, version, completion). cmd/phobos is nothing but
// a call to Main. The commands are spf13/cobra commands: `phobos help CMD`,
// `-h` on stdout, flags before or after arguments, and shell completion
// come from it. docs/cli.md documents every command.
//
// Adding a command is one small change: write a constructor
//
//	func newFooCmd() *cobra.Command {
//		cmd, fs := newCommand("foo ARG", "one line saying what foo does", cobra.ExactArgs(1))
//		var cf connectFlags
//		cf.register(fs)
//		cmd.RunE = func(cmd *cobra.Command, args []string) error { ... }
//		return cmd
//	}
//
// in its own file and add newFooCmd to the commands list below.
//
// A program that registers its own Go functions (package bindings/fn)
// calls Main too, so that it can run as a raylet (or a head) of a cluster
// and its functions exist on every node:
//
//	func main() {
//		if len(os.Args) > 1 && cli.IsCommand(os.Args[1]) {
//			cli.Main() // ./myprog raylet --head ADDR --tls-ca F --tls-cert F --tls-key F
//		}
//		// ... the program's own work ...
//	}
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	// Every binding's ops, so heads can tile any graph and raylets run
	// every built-in kernel.
	_ "github.com/phobos-project/phobos/bindings/bench"
	_ "github.com/phobos-project/phobos/bindings/fn"
	_ "github.com/phobos-project/phobos/bindings/kv"
	_ "github.com/phobos-project/phobos/bindings/tensor"
)

// commands are the constructors of phobos's top-level commands. To add a
// command, add its constructor here (help lists commands sorted by name).
var commands = []func() *cobra.Command{
	newHeadCmd,
	newRayletCmd,
	newUpCmd,
	newDemoCmd,
	newStatusCmd,
	newPlanCmd,
	newSubmitCmd,
	newPutCmd,
	newRaftCmd,
	newJobCmd,
	newJobsCmd,
	newCancelCmd,
	newLogsCmd,
	newTimelineCmd,
	newBenchCmd,
	newChaosCmd,
	newTLSCmd,
	newVersionCmd,
}

// IsCommand reports whether name is one of the commands Main runs.
func IsCommand(name string) bool {
	if name == "help" || name == "completion" {
		return true
	}
	for _, mk := range commands {
		if mk().Name() == name {
			return true
		}
	}
	return false
}

// Main runs the command named by os.Args[1] with the arguments after it,
// and exits: status 0 on success, 1 on failure, 2 on a usage mistake.
func Main() {
	os.Exit(Run(os.Args[1:]))
}

// Run runs the command args[0] with the arguments after it and returns the
// exit status: 0 on success, 1 on failure, 2 on a usage mistake. SIGINT
// and SIGTERM cancel the command's context, and so does the reader of its
// stdout or stderr going away (see cancelOnBrokenOutput).
func Run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := cancelOnBrokenOutput(ctx, nil, 1, 2)
	defer cancel()
	go func() {
		// After the first signal, a second one kills at once: the command
		// is cleaning up (cancelling its job, stopping its cluster).
		<-ctx.Done()
		stop()
	}()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// run runs a command line with the given output streams and returns the
// exit status; errors are printed to stderr, once, as "phobos CMD: error".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := execute(ctx, args, stdout, stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, errorLine(err))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// execute runs a command line and returns its error, with the command's
// path attached (see errorLine).
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	if cmd == nil {
		cmd = root
	}
	return cmdError{path: cmd.CommandPath(), err: err}
}

// runCommand runs `phobos ARGS...` in-process and returns its error (for
// tests and wrappers).
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return execute(ctx, args, stdout, stderr)
}

// cmdError is a command's error with the command that failed.
type cmdError struct {
	path string
	err  error
}

func (e cmdError) Error() string { return e.err.Error() }
func (e cmdError) Unwrap() error { return e.err }

// errorLine is the one line printed for a failed command: "phobos head:
// --id is required", naming the command once however the error was
// wrapped, and pointing at -h for usage mistakes.
func errorLine(err error) string {
	path := "phobos"
	var ce cmdError
	if errors.As(err, &ce) {
		path = ce.path
	}
	msg := err.Error()
	// "phobos head: head: no id" says head once.
	if i := strings.LastIndexByte(path, ' '); i >= 0 {
		msg = strings.TrimPrefix(msg, path[i+1:]+": ")
	}
	msg = strings.TrimPrefix(msg, path+": ")
	line := path + ": " + msg
	var ue usageError
	if errors.As(err, &ue) && !strings.Contains(msg, " -h") {
		line += fmt.Sprintf(" (see %s -h)", path)
	}
	return line
}

// newRoot builds the phobos command and its subcommands.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "phobos",
		Short: "run and use phobos clusters: heads, raylets, jobs, benchmarks, fault injection",
		Long: `phobos runs a distributed task runtime: heads (Raft-replicated metadata; the
leader schedules) and raylets (run subtasks, store objects), and talks to
running clusters. Client commands find the cluster from PHOBOS_ADDR and their
credentials from PHOBOS_TLS_CA, PHOBOS_TLS_CERT and PHOBOS_TLS_KEY (or
PHOBOS_TOKEN_FILE), which "phobos up" writes to DIR/env. See docs/cli.md.`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		// Completion scripts are "phobos completion bash|zsh|fish|powershell".
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	root.SuggestionsMinimumDistance = 2
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	for _, mk := range commands {
		root.AddCommand(mk())
	}
	return root
}

// newCommand makes a command whose flags are set up by the caller (on the
// returned flag set) and whose RunE the caller sets. use is the usage line
// after "phobos" ("cancel JOB"); args checks the positional arguments
// (nil: none allowed).
func newCommand(use, short string, args cobra.PositionalArgs) (*cobra.Command, *pflag.FlagSet) {
	if args == nil {
		args = noArgs
	}
	cmd := &cobra.Command{Use: use, Short: short, Args: args, SilenceErrors: true, SilenceUsage: true}
	cmd.SetFlagErrorFunc(flagError)
	fs := cmd.Flags()
	fs.SortFlags = false
	return cmd, fs
}

// group makes a command that only holds subcommands (raft, tls): without
// one, or with an unknown one, it is a usage error listing them.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, SilenceErrors: true, SilenceUsage: true}
	var names []string
	for _, s := range subs {
		cmd.AddCommand(s)
		names = append(names, s.Name())
	}
	want := strings.Join(names, ", ")
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown subcommand %q; want one of: %s", args[0], want)
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return usagef("a subcommand is needed: one of %s", want)
	}
	return cmd
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
			}
			return usagef("unknown command %q%s; run %s -h for the list", args[0], hint, cmd.CommandPath())
		}
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// exactArgs wants n positional arguments, described by what (for the
// error).
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("give %s (got %d)", what, len(args))
		}
		return nil
	}
}

// flagError makes a flag parsing error a usage error.
func flagError(_ *cobra.Command, err error) error { return usageError{err.Error()} }

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// logFlags are the logging flags every command has.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

func (l *logFlags) logger() (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", l.format)
}
