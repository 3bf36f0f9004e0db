package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// envConsoleToken holds the console's tokens: they are never a flag,
// which would show in the process list.
const envConsoleToken = "COURIER_CONSOLE_TOKEN"

// consoleFlags are the options of courier console.
type consoleFlags struct {
	db          dbFlags
	kafka       kafkaFlags
	listen      string
	readOnly    bool
	retryDelays []time.Duration
	retrySuffix string
	replayGroup string
	relays      []string
}

func newConsoleCmd() *cobra.Command {
	f := &consoleFlags{}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: the outbox, the dead-letter topics, consumer lag, and their repairs",
		Long: `Serves a web console for both halves of courier, on 127.0.0.1:8080 by
default: the outbox (counts, the oldest due event, the last hour's publish
rate and relay lag, dead letters by topic and error, a filtered list, each
event) and the dead-letter topics (counts by original topic, error kind,
error and group, a filtered list, each dead letter's envelope and original
record), consumer groups' lag per partition and the relays' breakers.

Its actions, each shown with its exact count before it runs and written to
the outbox's audit table (<table>_audit, shown on the Audit page):
requeue and purge events; dry-run and replay dead letters, to their
original topic or (with --retry-delays) only to the consumer group that
failed them, with a live progress bar.

Safety: on a loopback address it needs no sign-in and answers only pages
named localhost, 127.0.0.1 or [::1]. Listening anywhere else needs tokens
in ` + envConsoleToken + `: one token, or name:token pairs separated by commas
(each at least 16 characters); the audit names who signed in with which.
--read-only hides and refuses every action.`,
		Example: `  courier console --database-url postgres://app@db:5432/shop --brokers kafka-1:9092
  courier console --retry-delays 5s,1m,10m --relay http://relay-1:9090/healthz
  COURIER_CONSOLE_TOKEN=ana:$(openssl rand -hex 24) courier console --listen 0.0.0.0:8080 --read-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConsole(cmd, f) },
	}
	f.db.register(cmd)
	f.kafka.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", envOr("COURIER_CONSOLE_LISTEN", "127.0.0.1:8080"),
		"address to serve on (env COURIER_CONSOLE_LISTEN); beyond the loopback it needs "+envConsoleToken)
	fs.BoolVar(&f.readOnly, "read-only", false, "hide and refuse every action: requeue, purge, replay")
	fs.DurationSliceVar(&f.retryDelays, "retry-delays", nil,
		"the consumer groups' retry tier delays, as their RetryTopics.Delays (e.g. 5s,1m): offers replaying a dead letter to the group that failed it only")
	fs.StringVar(&f.retrySuffix, "retry-suffix", retrytopics.DefaultSuffix, "the retry topics' suffix, as the groups' RetryTopics.Suffix")
	fs.StringVar(&f.replayGroup, "replay-group", envOr("COURIER_REPLAY_GROUP", dlq.DefaultReplayGroup),
		"consumer group whose offsets keep the replays' position in each dead-letter topic, as courier dlq replay --group (env COURIER_REPLAY_GROUP)")
	fs.StringArrayVar(&f.relays, "relay", nil, "health URL of a relay started with --metrics-addr, e.g. http://relay-1:9090/healthz (repeat for more)")
	return cmd
}

// parseTokens reads COURIER_CONSOLE_TOKEN: a token, or name:token pairs
// separated by commas.
func parseTokens(raw string) (map[string]string, error) {
	tokens := map[string]string{}
	if strings.TrimSpace(raw) == "" {
		return tokens, nil
	}
	for i, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		name, token, ok := strings.Cut(part, ":")
		if !ok {
			if i > 0 || strings.Contains(raw, ",") {
				return nil, fmt.Errorf("%s: with several tokens, give each as name:token", envConsoleToken)
			}
			name, token = "token", part
		}
		if _, dup := tokens[name]; dup {
			return nil, fmt.Errorf("%s: the name %q appears twice", envConsoleToken, name)
		}
		tokens[name] = token
	}
	return tokens, nil
}

// loopbackListen reports whether addr listens on the loopback only.
func loopbackListen(addr string) (bool, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false, fmt.Errorf("--listen %q: use host:port, e.g. 127.0.0.1:8080", addr)
	}
	return console.IsLoopbackHost(addr), nil
}

// osUser names who runs the console, for the audit of a console without
// tokens.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "local:" + u.Username
	}
	return "local"
}

func runConsole(cmd *cobra.Command, f *consoleFlags) error {
	ctx := cmd.Context()
	tokens, err := parseTokens(os.Getenv(envConsoleToken))
	if err != nil {
		return usageError{err}
	}
	for name, token := range tokens {
		if err := console.CheckToken(name, token); err != nil {
			return usageError{fmt.Errorf("%s: %w", envConsoleToken, err)}
		}
	}
	loopback, err := loopbackListen(f.listen)
	if err != nil {
		return usageError{err}
	}
	if !loopback && len(tokens) == 0 {
		return usageError{fmt.Errorf("--listen %s is beyond the loopback: set %s (a token of 16 characters or more, or name:token pairs) so that only its holders can sign in",
			f.listen, envConsoleToken)}
	}
	for _, u := range f.relays {
		if err := console.CheckRelayURL(u); err != nil {
			return usageError{fmt.Errorf("--relay: %w", err)}
		}
	}
	if len(f.retryDelays) > 0 {
		if _, err := retrytopics.New("x", retrytopics.Config{Delays: f.retryDelays, Suffix: f.retrySuffix}, dlq.DefaultSuffix); err != nil {
			return usageError{fmt.Errorf("--retry-delays/--retry-suffix: %w", err)}
		}
	}
	table, err := f.db.outboxTable()
	if err != nil {
		return err
	}
	brokers, scfg, err := f.kafka.config()
	if err != nil {
		return err
	}
	// A page naming a topic that does not exist must not create it.
	scfg.Metadata.AllowAutoTopicCreation = false
	pool, err := f.db.pool(ctx, 4, "courier-console")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := requireOutboxTable(ctx, pool, table); err != nil {
		return f.db.reached(pool, err)
	}
	client, err := f.kafka.dialKafka(ctx, brokers, scfg)
	if err != nil {
		return err
	}
	defer client.Close()
	log := slog.New(slog.NewTextHandler(jsonTextWriter{cmd.ErrOrStderr()}, nil))
	srv, err := console.New(ctx, console.Config{DB: pool, Schema: table.Schema, Table: table.Name, Kafka: client, Brokers: brokers, Sarama: scfg,
		ReplayGroup: f.replayGroup, RetryDelays: f.retryDelays, RetrySuffix: f.retrySuffix, Relays: f.relays, Tokens: tokens,
		LocalActor: osUser(), ReadOnly: f.readOnly, Logger: log})
	if err != nil {
		return usageError{err}
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w (is the port taken? choose another)", f.listen, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	mode := ""
	if f.readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "courier console%s: http://%s/ (outbox %s, Kafka %s); stop with Ctrl-C\n", mode, ln.Addr(), table, strings.Join(brokers, ","))
	select {
	case err := <-served:
		return fmt.Errorf("serving the console: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
