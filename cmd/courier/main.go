// Command courier is the operator's tool for courier: it migrates the outbox
// and inbox tables (migrate), runs the outbox relay (relay), inspects and
// repairs the outbox (outbox), inspects dead-letter topics and replays them
// (dlq), runs a local Kafka-protocol broker (dev), runs the whole pipeline
// once on an embedded broker (demo), and measures courier beside baselines
// (bench).
//
// Every command takes its flags also from COURIER_* environment variables,
// prints JSON with --output json, and exits 0 on success, 1 on failure and 2
// on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks errors caused by how the command was called.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "courier:", err)
	if _, ok := errors.AsType[usageError](err); ok || isCobraUsageError(err) {
		fmt.Fprintln(stderr, "run `courier --help` for usage")
		return exitUsage
	}
	return exitFailure
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "courier",
		Short:         "Operate courier's transactional outbox and Kafka consumers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newMigrateCmd(), newRelayCmd(), newOutboxCmd(), newDLQCmd(), newDevCmd(), newDemoCmd(), newBenchCmd())
	return root
}

// isCobraUsageError recognises cobra's own errors for unknown commands and
// wrong argument counts, which it does not type.
func isCobraUsageError(err error) bool {
	for _, prefix := range []string{"unknown command", "accepts ", "requires at least", "invalid argument", "required flag"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return true
		}
	}
	return false
}

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
