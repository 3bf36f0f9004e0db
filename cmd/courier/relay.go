package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/prom"
)

// relayFlags are the options of courier relay besides the database and
// Kafka connections. Each also comes from a COURIER_* variable (bindEnv).
type relayFlags struct {
	batchSize, workers, maxAttempts                         int
	pollInterval, probeInterval, retention, cleanupInterval time.Duration
	shutdownTimeout, missingTopicGrace                      time.Duration
	pollOnly, structured, publishDeadLetters, holdKey       bool
	noIdempotence                                           bool
	trace                                                   traceFlags
	source, deadLetterSuffix                                string
	metricsAddr, logFormat, logLevel                        string
	metricsTenants                                          []string
	webhook                                                 webhookFlags
}

// register adds the relay's flags to cmd and binds each to its variable.
func (f *relayFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&f.batchSize, "batch-size", producer.DefaultBatchSize, "most events one claim locks and publishes")
	fs.IntVar(&f.workers, "workers", producer.DefaultWorkers, fmt.Sprintf("batches in flight at once, each over its own share of the keys (1 to %d)", producer.MaxWorkers))
	fs.DurationVar(&f.probeInterval, "probe-interval", producer.DefaultProbeInterval, "longest gap between two looks for new events when none came for a while (one small query each)")
	fs.DurationVar(&f.pollInterval, "poll-interval", producer.DefaultPollInterval, "how often a worker claims even when no look found new events")
	fs.BoolVar(&f.pollOnly, "poll-only", false, "accepted for PgBouncer in transaction pooling mode, which the relay supports in any mode (it uses no LISTEN)")
	fs.IntVar(&f.maxAttempts, "max-attempts", producer.DefaultMaxAttempts, "attempts the broker refused the record itself that dead-letter an event that sets no MaxAttempts of its own (the cluster's condition counts none)")
	fs.DurationVar(&f.missingTopicGrace, "missing-topic-grace", producer.DefaultMissingTopicGrace, "how long a topic may be missing (UNKNOWN_TOPIC_OR_PARTITION) before its events' failures count attempts; a negative duration: never")
	fs.StringVar(&f.source, "source", producer.DefaultSource, "CloudEvents source (ce_source) of the published events, e.g. the service name")
	fs.BoolVar(&f.structured, "structured", false, "publish each event as a JSON CloudEvent (structured mode) instead of its payload with ce_ headers")
	fs.BoolVar(&f.publishDeadLetters, "publish-dead-letters", false, "also write each dead-lettered event to <topic><dead-letter-suffix> as a dlq envelope")
	fs.StringVar(&f.deadLetterSuffix, "dead-letter-suffix", producer.DefaultDeadLetterSuffix, "suffix of the dead-letter topics")
	fs.BoolVar(&f.noIdempotence, "no-idempotence", false, "send plain produce requests instead of idempotent ones, for a cluster that refuses idempotent writes (before Kafka 2.8 they need IdempotentWrite on the cluster); a request sent again after a lost answer may then write its events twice")
	fs.BoolVar(&f.holdKey, "hold-key-on-dead-letter", false, "keep a key's later events waiting behind its dead-lettered event until it is requeued or purged")
	fs.DurationVar(&f.retention, "retention", producer.DefaultRetention, "how long published events stay in the history (whole days are dropped: a day's events go once all of it is past); 0 keeps them forever")
	fs.DurationVar(&f.cleanupInterval, "cleanup-interval", producer.DefaultCleanupInterval, "how often the relay makes the history's day partitions ahead and drops those past --retention")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", producer.DefaultShutdownTimeout, "how long the batch in flight may take to finish after SIGINT or SIGTERM; with --webhook-url the queued notifications then get as long again (at most 1m), "+
		"so give the process (Kubernetes' terminationGracePeriodSeconds) more than this plus that drain; with tracing the last spans get what is left of it (at most 5s) and are dropped past it")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and the probes /livez and /readyz on this address, e.g. :9090 (empty: off)")
	fs.StringSliceVar(&f.metricsTenants, "metrics-tenants", nil, fmt.Sprintf("tenants (ce_tenantid) that get their own value of a tenant label on the published, failed and dead-lettered counters, comma-separated; "+
		"every other tenant counts as %q (at most %d; empty: no tenant label)", prom.TenantOther, prom.MaxTenants))
	fs.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "least severe level logged: debug (Sarama's own logs too), info, warn or error")
	bindEnv(fs, "batch-size", "workers", "probe-interval", "poll-interval", "poll-only", "max-attempts", "missing-topic-grace", "source", "structured",
		"publish-dead-letters", "dead-letter-suffix", "hold-key-on-dead-letter", "no-idempotence", "retention", "cleanup-interval",
		"shutdown-timeout", "metrics-addr", "metrics-tenants", "log-format", "log-level")
	renameFlag(fs, "max-retries", "max-attempts")
	f.trace.register(cmd)
	f.webhook.register(fs)
}

// validate checks what the relay's own validation would take for its
// defaults (0) or could only name by its Go field.
func (f *relayFlags) validate() error {
	for _, n := range []struct {
		flag       string
		value, max int
	}{{"--batch-size", f.batchSize, producer.MaxBatchSize}, {"--max-attempts", f.maxAttempts, producer.MaxMaxAttempts}} {
		if n.value < 1 || n.value > n.max {
			return usageError{fmt.Errorf("%s %d: use 1 to %d", n.flag, n.value, n.max)}
		}
	}
	if f.workers < 1 || f.workers > producer.MaxWorkers {
		return usageError{fmt.Errorf("--workers %d: use 1 to %d", f.workers, producer.MaxWorkers)}
	}
	for _, d := range []struct {
		flag     string
		value    time.Duration
		min, max time.Duration
	}{
		{"--probe-interval", f.probeInterval, producer.MinInterval, producer.MaxInterval},
		{"--poll-interval", f.pollInterval, producer.MinInterval, producer.MaxInterval},
		{"--cleanup-interval", f.cleanupInterval, producer.MinInterval, producer.MaxTimeout},
		{"--shutdown-timeout", f.shutdownTimeout, 1, producer.MaxTimeout},
		{"--missing-topic-grace", f.missingTopicGrace, -producer.MaxTimeout, producer.MaxTimeout},
	} {
		if d.value < d.min || d.value > d.max {
			return usageError{fmt.Errorf("%s %v: use a duration from %v to %v, such as 1s or 5m", d.flag, d.value, d.min, d.max)}
		}
	}
	if f.retention < 0 || f.retention > producer.MaxRetention {
		return usageError{fmt.Errorf("--retention %v: use a positive duration up to %v such as 168h, or 0 to keep published events forever", f.retention, producer.MaxRetention)}
	}
	// The list's entries lose the spaces around them, which a list in
	// COURIER_METRICS_TENANTS ("acme, globex") keeps.
	for i, tenant := range f.metricsTenants {
		f.metricsTenants[i] = strings.TrimSpace(tenant)
	}
	if err := (prom.Config{Tenants: f.metricsTenants}).Validate(); err != nil {
		return usageError{fmt.Errorf("--metrics-tenants: %w", err)}
	}
	return f.webhook.validate()
}

// webhookDrain is how long the webhook sends what is still queued once
// the relay stopped: --shutdown-timeout, at most webhook.MaxTimeout; 0
// without --webhook-url.
func (f *relayFlags) webhookDrain() time.Duration {
	if f.webhook.url == "" {
		return 0
	}
	return min(f.shutdownTimeout, webhook.MaxTimeout)
}

// stopBudget is how long the relay may take to exit after SIGINT or
// SIGTERM, which the relay guide (docs/relay.md) tells users to give it
// (terminationGracePeriodSeconds): --shutdown-timeout for the batch in
// flight, then the webhook's drain. The last spans get what is left.
func (f *relayFlags) stopBudget() time.Duration { return f.shutdownTimeout + f.webhookDrain() }

// logHandler is the stderr log handler that --log-format and --log-level
// ask for.
func (f *relayFlags) logHandler(w io.Writer) (slog.Handler, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		// slog escapes the C0 controls; the writer escapes DEL, C1 and
		// the other runes a terminal may act on (errors quote brokers and
		// databases).
		return slog.NewJSONHandler(jsonTextWriter{w}, opts), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: use text or json", f.logFormat)}
}

// relayConfig is the producer.RelayConfig the flags describe.
func (f *relayFlags) relayConfig() producer.RelayConfig {
	retention := f.retention
	if retention == 0 {
		retention = -1 // RelayConfig keeps published events forever for a negative retention
	}
	return producer.RelayConfig{
		Source:              f.source,
		Structured:          f.structured,
		BatchSize:           f.batchSize,
		Workers:             f.workers,
		ProbeInterval:       f.probeInterval,
		PollInterval:        f.pollInterval,
		PollOnly:            f.pollOnly,
		MaxAttempts:         f.maxAttempts,
		MissingTopicGrace:   f.missingTopicGrace,
		HoldKeyOnDeadLetter: f.holdKey,
		DisableIdempotence:  f.noIdempotence,
		PublishDeadLetters:  f.publishDeadLetters,
		DeadLetterSuffix:    f.deadLetterSuffix,
		ShutdownTimeout:     f.shutdownTimeout,
		Retention:           retention,
		CleanupInterval:     f.cleanupInterval,
	}
}

// newRelayCmd is `courier relay`.
func newRelayCmd() *cobra.Command {
	var db dbFlags
	var kafka kafkaFlags
	var out outputFlag
	var flags relayFlags
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish the outbox's events to Kafka until stopped (SIGINT or SIGTERM)",
		Long: `Runs the outbox relay as a worker: it claims due events in batches, publishes
them to Kafka in each key's order, retries with backoff, dead-letters what
cannot be published and drops published events after --retention. Any
number of relays may run against one table.

It notices new events by looking at the outbox's sequence: every millisecond
while events come, backing off to --probe-interval when none do, so the
transactions that enqueue carry no trigger and no NOTIFY.

At start it checks that the outbox table exists and that Kafka answers, and
fails with what to fix otherwise; later outages are ridden out (Kafka behind a
circuit breaker, PostgreSQL by retrying). On SIGINT or SIGTERM the batch in
flight finishes (within --shutdown-timeout), the relay prints what it did and
exits 0.

With --webhook-url it POSTs a JSON notification for each dead-lettered event
and each time the Kafka breaker opens or closes, from its own goroutine with a
bounded queue, so a slow or failing endpoint never holds the relay back.

Logs go to stderr (--log-format, --log-level). With --metrics-addr it serves
Prometheus metrics on /metrics (courier_outbox_*, plus Go and process
metrics) and /healthz, which answers 200 while the relay runs and 503 once it
is stopping, with the breaker's state and the held partitions. It also serves
Kubernetes probes: /livez answers 200 while the relay's loop runs (an outage
never fails it); /readyz answers 200 while each worker has published, or
found nothing to publish, within twice the sum of --poll-interval and the 30s
publish timeout (62s by default), and 503 once the relay is stuck
(PostgreSQL down, or events waiting while Kafka is down) or stopping.

Every flag also comes from an environment variable: COURIER_ and the flag's
name in capitals with _ for -, e.g. COURIER_BATCH_SIZE=500.`,
		Example: `  courier relay --database-url postgres://app@db:5432/shop --schema shop --brokers kafka-1:9092,kafka-2:9092
  courier relay --source orders-service --metrics-addr :9090 --log-format json
  courier relay --max-attempts 10 --publish-dead-letters --hold-key-on-dead-letter
  courier relay --webhook-url https://hooks.example.com/courier --webhook-header "Authorization: Bearer $TOKEN"
  COURIER_DATABASE_URL=postgres://app@db/shop COURIER_BROKERS=kafka:9092 courier relay --poll-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), cmd.ErrOrStderr()); err != nil {
				return err
			}
			if err := out.validate(); err != nil {
				return err
			}
			if err := flags.validate(); err != nil {
				return err
			}
			if err := flags.trace.validate(); err != nil {
				return err
			}
			return runRelay(cmd, &db, &kafka, out, flags)
		},
	}
	db.register(cmd)
	kafka.register(cmd)
	out.register(cmd)
	flags.register(cmd)
	return cmd
}

// runRelay starts the relay the validated flags describe and runs it until
// the command's context ends.
func runRelay(cmd *cobra.Command, db *dbFlags, kafka *kafkaFlags, out outputFlag, flags relayFlags) error {
	ctx := cmd.Context()
	handler, err := flags.logHandler(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	log := slog.New(handler)
	tracer, stopTracing, err := flags.trace.provider(ctx, "courier-relay", log, flags.stopBudget())
	if err != nil {
		return err
	}
	defer stopTracing()
	table, err := db.outboxTable()
	if err != nil {
		return err
	}
	brokers, saramaCfg, err := kafka.config()
	if err != nil {
		return err
	}
	// The connection options (TLS, SASL, client id) come from the flags,
	// the producer options from the relay's defaults.
	saramaCfg.Producer = producer.NewSaramaConfig().Producer
	boundReads(saramaCfg, kafka.timeout)
	if flags.logLevel == "debug" {
		previous := sarama.Logger
		sarama.Logger = slog.NewLogLogger(handler.WithAttrs([]slog.Attr{slog.String("component", "sarama")}), slog.LevelDebug)
		defer func() { sarama.Logger = previous }()
	}

	pool, err := db.pool(ctx, int32(flags.workers)+2, "courier-relay")
	if err != nil {
		return stoppedWhileStarting(ctx, log, err)
	}
	defer pool.Close()
	if err := requireOutboxTable(ctx, pool, table); err != nil {
		return stoppedWhileStarting(ctx, log, db.reached(pool, err))
	}
	// Wrong brokers or credentials fail the start instead of deferring
	// every event.
	probe, err := kafka.dialKafka(ctx, brokers, saramaCfg)
	if err != nil {
		return stoppedWhileStarting(ctx, log, err)
	}
	_ = probe.Close()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := prom.NewRelayMetrics(registry, prom.Config{Tenants: flags.metricsTenants}) // the config is checked by validate
	if err != nil {
		return err
	}
	tally := &relayTally{}
	cfg := flags.relayConfig()
	cfg.Schema, cfg.Table = table.Schema, table.Name
	cfg.Brokers, cfg.Sarama = brokers, saramaCfg
	cfg.Logger, cfg.Hooks = log, []producer.Hook{tally, metrics}
	cfg.TracerProvider = tracer
	// The webhook sends what the relay's last batch dead-lettered after
	// Run returned, within its drain.
	stopWebhook, err := flags.webhook.start(ctx, &cfg, flags.webhookDrain(), log)
	if err != nil {
		return err
	}
	defer stopWebhook()
	relay, err := producer.NewRelay(pool, cfg)
	if err != nil {
		return usageError{fmt.Errorf("relay options: %w", err)}
	}

	var stopping atomic.Bool
	if flags.metricsAddr != "" {
		srv, err := serveMetrics(flags.metricsAddr, registry, log, func() (int, any) {
			if stopping.Load() {
				return http.StatusServiceUnavailable, map[string]string{"status": "stopping"}
			}
			return http.StatusOK, newHealthJSON(relay)
		}, relay.Liveness(), relay.Readiness())
		if err != nil {
			return err
		}
		defer srv.stop(log)
	}
	stopLogged := make(chan struct{})
	stopLog := context.AfterFunc(ctx, func() {
		defer close(stopLogged)
		stopping.Store(true)
		log.Info("stopping: the batch in flight finishes, then the relay exits", "shutdown_timeout", flags.shutdownTimeout.String())
	})
	defer stopLog()

	log.Info("relay started", "database", databaseName(pool.Config().ConnConfig), "table", table.String(), "brokers", strings.Join(brokers, ","),
		"workers", flags.workers, "batch_size", flags.batchSize, "source", flags.source, "idempotent", !cfg.DisableIdempotence,
		"tracing", flags.trace.endpointText(), "webhook", flags.webhook.shown())
	started := time.Now()
	if err := relay.Run(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		<-stopLogged // "stopping" comes before "stopped", however fast Run returned
	}
	ran := time.Since(started)
	summary := tally.summary(ran)
	log.Info("relay stopped", "published", summary.Published, "publish_failures", summary.PublishFailures,
		"dead_lettered", summary.DeadLettered, "ran", ran.Round(time.Millisecond).String())
	return out.emit(cmd.OutOrStdout(), summary, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "relay stopped after %v: %d published, %d publish failure(s), %d dead-lettered\n",
			ran.Round(time.Second), summary.Published, summary.PublishFailures, summary.DeadLettered)
		return err
	})
}

// stoppedWhileStarting returns err, unless SIGINT or SIGTERM (the end of
// ctx) cut the start short: then nothing failed, and the relay exits 0.
func stoppedWhileStarting(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() != nil {
		log.Info("stopped before the relay started")
		return nil
	}
	return err
}

// databaseName says where a pool connects, user@host:port/database, with
// no room for a password (which a URL's query or a key=value string may
// hold).
func databaseName(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// metricsServer serves /metrics, /healthz, /livez and /readyz until
// stopped.
type metricsServer struct {
	srv    *http.Server
	served chan struct{} // closed when Serve returned
}

// healthJSON is a running relay's /healthz answer.
type healthJSON struct {
	Status  string         `json:"status"`
	Breaker string         `json:"breaker"`
	Held    []heldPartJSON `json:"held"`
}

// heldPartJSON is a partition the cluster's condition holds.
type heldPartJSON struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Since     time.Time `json:"since"`
	Until     time.Time `json:"until"`
	Error     string    `json:"error"`
}

// maxHealthHeld bounds the held partitions /healthz lists, and
// maxHealthError the bytes of each one's error, so that the answer stays
// well within what the console reads of it (64 KiB).
const (
	maxHealthHeld  = 50
	maxHealthError = 512
)

// newHealthJSON is relay's state for /healthz: its breaker and the
// partitions it holds, the longest held first.
func newHealthJSON(relay *producer.Relay) healthJSON {
	h := healthJSON{Status: "ok", Breaker: relay.Breaker().String(), Held: []heldPartJSON{}}
	held := relay.Held()
	for _, p := range held[:min(len(held), maxHealthHeld)] {
		h.Held = append(h.Held, heldPartJSON{Topic: p.Topic, Partition: p.Partition, Since: p.Since.UTC(), Until: p.Until.UTC(),
			Error: textcut.Cut(p.Error, maxHealthError, "…")})
	}
	return h
}

// serveMetrics listens on addr and serves the registry's metrics on
// /metrics, health's status and JSON body on /healthz, and the relay's
// probes live and ready on /livez and /readyz (which answer GET and HEAD,
// and 405 to other methods).
func serveMetrics(addr string, registry *prometheus.Registry, log *slog.Logger, health func() (int, any), live, ready http.Handler) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (is the port taken? choose another, or leave --metrics-addr empty to serve no metrics)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		status, body := health()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("/livez", live)
	mux.Handle("/readyz", ready)
	m := &metricsServer{
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served: make(chan struct{}),
	}
	go func() {
		defer close(m.served)
		if err := m.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving metrics failed", "addr", ln.Addr().String(), "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String(), "paths", "/metrics /healthz /livez /readyz")
	return m, nil
}

// stop lets requests in progress finish, for up to 5s, and waits for the
// server's goroutine.
func (m *metricsServer) stop(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		log.Warn("stopping the metrics server", "error", err)
		_ = m.srv.Close()
	}
	<-m.served
}

// relayTally is a relay hook that counts what the relay did, for the
// summary courier relay prints when it stops.
type relayTally struct {
	claims, published, publishFailures, deadLettered atomic.Int64
}

// relayTally hears of the claims, publishes, failures and dead letters.
var (
	_ producer.ClaimedHook       = (*relayTally)(nil)
	_ producer.PublishedHook     = (*relayTally)(nil)
	_ producer.PublishFailedHook = (*relayTally)(nil)
	_ producer.DeadLetteredHook  = (*relayTally)(nil)
)

// relaySummary is what courier relay prints when it stops.
type relaySummary struct {
	Published       int64   `json:"published"`
	PublishFailures int64   `json:"publish_failures"`
	DeadLettered    int64   `json:"dead_lettered"`
	Claims          int64   `json:"claims"`
	RanSeconds      float64 `json:"ran_seconds"`
}

// summary is what the relay did in the ran time.
func (t *relayTally) summary(ran time.Duration) relaySummary {
	return relaySummary{Published: t.published.Load(), PublishFailures: t.publishFailures.Load(),
		DeadLettered: t.deadLettered.Load(), Claims: t.claims.Load(), RanSeconds: ran.Seconds()}
}

// Claimed counts a claim query.
func (t *relayTally) Claimed(int) { t.claims.Add(1) }

// Published counts an acknowledged event.
func (t *relayTally) Published(string, time.Duration) { t.published.Add(1) }

// PublishFailed counts a failed publish (an attempt, or a deferral while
// Kafka is unreachable).
func (t *relayTally) PublishFailed(string, string) { t.publishFailures.Add(1) }

// DeadLettered counts a dead-lettered event.
func (t *relayTally) DeadLettered(string) { t.deadLettered.Add(1) }

// envAnnotation is the flag annotation that names a flag's environment
// variable.
const envAnnotation = "courier_env"

// bindEnv lets each named flag also be set by COURIER_<NAME> (the name in
// capitals, - as _), and says so in its help; applyEnv reads them.
func bindEnv(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		env := envName(name)
		f.Usage += " (env " + env + ")"
		_ = fs.SetAnnotation(name, envAnnotation, []string{env})
	}
}

// renamedAnnotation marks a flag kept under its old name, hidden: it names
// the flag that replaced it. envAliasAnnotation names the old variable of
// a renamed flag's replacement.
const (
	renamedAnnotation  = "courier_renamed_to"
	envAliasAnnotation = "courier_env_alias"
)

// envName is the COURIER_* variable of the flag name.
func envName(name string) string {
	return "COURIER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// renameFlag keeps the flag old working as a hidden alias of the flag
// named replacement (registered and bound by bindEnv), and old's variable
// as an alias of replacement's; applyEnv says on stderr, in one line each,
// what replaced them when they are used.
func renameFlag(fs *pflag.FlagSet, old, replacement string) {
	f := fs.Lookup(replacement)
	fs.Var(f.Value, old, "replaced by --"+replacement)
	_ = fs.MarkHidden(old)
	_ = fs.SetAnnotation(old, renamedAnnotation, []string{replacement})
	_ = fs.SetAnnotation(replacement, envAliasAnnotation, []string{envName(old)})
}

// applyEnv sets each flag bound by bindEnv that the command line left
// unset from its environment variable, if that is set (or else from the
// old variable of a renamed flag); a bad value is a usage error naming the
// variable. A renamed flag or variable in use gets a line on stderr naming
// its replacement.
func applyEnv(fs *pflag.FlagSet, stderr io.Writer) error {
	fs.VisitAll(func(f *pflag.Flag) {
		if to := f.Annotations[renamedAnnotation]; len(to) > 0 && f.Changed {
			fmt.Fprintf(stderr, "courier: --%s is deprecated, use --%s\n", f.Name, to[0])
			fs.Lookup(to[0]).Changed = true
		}
	})
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if err != nil || len(env) == 0 || f.Changed {
			return
		}
		value, ok := os.LookupEnv(env[0])
		if alias := f.Annotations[envAliasAnnotation]; !ok && len(alias) > 0 {
			if value, ok = os.LookupEnv(alias[0]); ok {
				fmt.Fprintf(stderr, "courier: %s is deprecated, use %s\n", alias[0], env[0])
				env = alias
			}
		}
		if ok {
			if setErr := f.Value.Set(value); setErr != nil {
				err = usageError{fmt.Errorf("%s=%q (for --%s): %w", env[0], value, f.Name, setErr)}
			}
		}
	})
	return err
}
