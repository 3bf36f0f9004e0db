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
//
// What it prints from Kafka or PostgreSQL never reaches the terminal raw:
// text output escapes control characters, DEL, C1 and other non-printable
// runes, and a backslash, as the inside of a Go string literal (text
// without them is printed as is), and JSON output escapes the same runes
// as \uXXXX. Bytes that are not UTF-8 are shown in base64 (the
// *_base64 fields of JSON). No password given in a connection string
// (URL userinfo, password= or sslpassword= with or without spaces and
// quotes, a query parameter), in COURIER_DATABASE_URL, PGPASSWORD or
// --sasl-password / COURIER_SASL_PASSWORD is ever printed, nor the OAuth
// client secret (COURIER_SASL_OAUTH_CLIENT_SECRET), a token
// (COURIER_SASL_OAUTH_TOKEN, or one an identity provider or AWS's signer
// made) or AWS_SECRET_ACCESS_KEY, nor the password,
// path or query of --webhook-url nor a --webhook-header value, nor the
// password (or lone user) of --otlp-endpoint or an OTEL_EXPORTER_OTLP_*
// endpoint nor an OTEL_EXPORTER_OTLP_*HEADERS value. Against Kafka
// brokers that refuse or never answer a command fails within about twice
// --kafka-timeout (default 10s); against PostgreSQL within the URL's
// connect_timeout (default 10s); the message names Kafka or PostgreSQL and
// the address.
//
// The guides tell how to use it: [The CLI] and [CLI reference].
//
// [The CLI]: https://github.com/courierkit/courier/blob/main/docs/cli.md
// [CLI reference]: https://github.com/courierkit/courier/blob/main/docs/cli-reference.md
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

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/internal/redact"
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
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	// Errors quote what Kafka and PostgreSQL sent (and may hold the
	// connection strings given): escaped and with every secret masked.
	fmt.Fprintln(stderr, "courier:", display.Lines(redactSecrets(err.Error(), secretsOf(cmd)), ""))
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
	root.AddCommand(newMigrateCmd(), newRelayCmd(), newOutboxCmd(), newDLQCmd(), newConsoleCmd(), newDevCmd(), newDemoCmd(), newBenchCmd())
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

// secretEnv are the environment variables that may hold a secret courier
// is given.
var secretEnv = []string{"COURIER_DATABASE_URL", "DATABASE_URL", "PGPASSWORD", "PGSSLPASSWORD", envSASLPassword, envOAuthSecret, envOAuthStaticToken,
	"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "COURIER_WEBHOOK_URL"}

// secretsOf returns the secrets cmd was given, in its flags or the
// environment: those of every connection string (redact.Secrets), the
// passwords themselves, the webhook's and tracing's (otlpSecrets).
func secretsOf(cmd *cobra.Command) []string {
	var out []string
	for _, name := range secretEnv {
		if v := os.Getenv(name); v != "" {
			out = append(out, v)
			out = append(out, redact.Secrets(v)...)
		}
	}
	out = append(out, webhookSecrets(os.Getenv("COURIER_WEBHOOK_URL"), os.Getenv("COURIER_WEBHOOK_HEADER"))...)
	otlpEndpoint := ""
	if cmd != nil {
		if f := cmd.Flags().Lookup("otlp-endpoint"); f != nil {
			otlpEndpoint = f.Value.String()
		}
	}
	out = append(out, otlpSecrets(os.Getenv("COURIER_OTLP_ENDPOINT"), otlpEndpoint)...)
	if cmd == nil {
		return out
	}
	if headers, err := cmd.Flags().GetStringArray("webhook-header"); err == nil {
		rawURL, _ := cmd.Flags().GetString("webhook-url")
		out = append(out, webhookSecrets(rawURL, headers...)...)
	}
	for _, name := range []string{"database-url", "redis-url", "sasl-password", "sasl-oauth-client-secret", "webhook-url"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Value.String() != "" {
			if name == "sasl-password" || name == "sasl-oauth-client-secret" {
				out = append(out, f.Value.String())
			}
			out = append(out, redact.Secrets(f.Value.String())...)
		}
	}
	return out
}

// redactSecrets masks every secret of secrets in s.
func redactSecrets(s string, secrets []string) string { return redact.String(s, secrets) }

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
