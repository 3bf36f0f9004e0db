// Command payouts is a payout worker: it pays each OrderCreated event of the
// orders topic once through a payment service provider (PSP), and loses
// none of them when the PSP fails.
//
//   - The PSP is called through a consumer.Breaker: while it is down
//     (connection refused, timeouts, 502/503/504, 429: the PSP client
//     marks its answers with consumer.Unavailable), the breaker opens and
//     the consumer pauses the partition (no attempt counted, nothing
//     dead-lettered) until the PSP answers again. Any other answer (a 500
//     for one payout, say) is that payout's failure alone: the breaker
//     does not count it, so one bad payout cannot pause the others.
//   - A failing payout is retried in process (MaxAttempts, above the
//     breaker's ConsecutiveFailures), then waits in orders.retry.5s and
//     orders.retry.30s, then goes to orders.dlq.
//   - A payout the PSP refuses (422), an event without ce_id or with a
//     value that is not JSON goes to orders.dlq at once (consumer.Permanent).
//   - Redis remembers the ce_id of every event paid (dedupe), so an event
//     delivered twice is paid once; the PSP's idempotency key (the ce_id)
//     is the second guard.
//   - GET /livez and /readyz on --health-addr (:8081) are the consumer's
//     probes for Kubernetes: live while it runs, ready while it is in its
//     consumer group (a PSP outage fails neither).
//
// Run it against `courier dev` and `make services`:
//
//	go run ./examples/payouts --psp-fail-for 10s
//
// See README.md beside this file.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/examples/payouts/psp"
	"github.com/courierkit/courier/kafkaauth"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// config is the worker's configuration; parseConfig fills it from flags
// and the environment.
type config struct {
	Brokers     []string             // Kafka bootstrap addresses
	Kafka       kafkaauth.Connection // TLS and SASL, from the variables courier's CLI reads (signIn)
	Topic       string               // the topic of OrderCreated events
	Partitions  int32                // partitions of Topic when the worker creates it
	Group       string               // the consumer group
	RedisURL    string               // the dedupe store
	DedupeScope string               // dedupe.RedisConfig.Scope
	RedisPrefix string               // dedupe.RedisConfig.Prefix; "" is dedupe.DefaultPrefix
	PSPURL      string               // "" starts an in-process stub PSP (psp.Start)
	PSPFailFor  time.Duration        // the in-process PSP fails (503) this long first
	PSPTimeout  time.Duration        // each PSP call's timeout
	RetryDelays []time.Duration      // the retry topics' delays

	MaxAttempts     int           // in-process attempts per topic; above BreakerFailures
	Backoff         time.Duration // the wait after a first failed attempt, doubling
	BreakerFailures int           // consecutive PSP failures that open the breaker
	BreakerOpenFor  time.Duration // how long the open breaker waits before a probe

	HealthAddr     string       // where GET /livez and /readyz are served; "" for nowhere
	HealthListener net.Listener // nil: listen on HealthAddr; tests pass their own

	Logger *slog.Logger    // nil: slog.Default()
	Hooks  []consumer.Hook // none: no measurements; e.g. prom.NewConsumerMetrics
}

// parseConfig reads the flags in args, with defaults from getenv.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	cfg := config{
		Partitions: 3, DedupeScope: "payouts", PSPTimeout: 2 * time.Second,
		MaxAttempts: 8, Backoff: 200 * time.Millisecond, BreakerFailures: 5,
	}
	fs := flag.NewFlagSet("payouts", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	brokers := fs.String("brokers", envOr(getenv, "COURIER_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS)")
	fs.StringVar(&cfg.RedisURL, "redis-url", envOr(getenv, "COURIER_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis for dedupe (env COURIER_REDIS_URL)")
	fs.StringVar(&cfg.Topic, "topic", "orders", "topic of the OrderCreated events")
	fs.StringVar(&cfg.Group, "group", "payouts", "consumer group id")
	fs.StringVar(&cfg.PSPURL, "psp-url", "", `PSP base URL; "" starts an in-process stub PSP`)
	fs.DurationVar(&cfg.PSPFailFor, "psp-fail-for", 0, "make the in-process PSP fail (503) this long first, e.g. 10s")
	delays := fs.String("retry-delays", "5s,30s", "delays of the retry topics, comma-separated")
	fs.DurationVar(&cfg.BreakerOpenFor, "breaker-open-for", 5*time.Second, "how long the open breaker waits before it probes the PSP")
	fs.StringVar(&cfg.HealthAddr, "health-addr", envOr(getenv, "COURIER_HEALTH_ADDR", ":8081"),
		`address of the health probes GET /livez and /readyz; "" serves none (env COURIER_HEALTH_ADDR)`)
	if err := fs.Parse(args); err != nil {
		var usage strings.Builder
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		return cfg, fmt.Errorf("%w\nusage of payouts:\n%s", err, usage.String())
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	for d := range strings.SplitSeq(*delays, ",") {
		delay, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return cfg, fmt.Errorf("--retry-delays %q: want durations separated by commas, e.g. 5s,30s", *delays)
		}
		cfg.RetryDelays = append(cfg.RetryDelays, delay)
	}
	if cfg.PSPURL != "" && cfg.PSPFailFor > 0 {
		return cfg, errors.New("--psp-fail-for makes the in-process PSP fail; drop --psp-url to use it")
	}
	var err error
	cfg.Kafka, err = signIn(getenv)
	return cfg, err
}

// signIn reads how to reach and sign in to Kafka from the variables
// courier's CLI reads, so that the worker and `courier relay` can share one
// Secret: COURIER_TLS (true) or COURIER_TLS_CA (a PEM file) for TLS;
// COURIER_SASL_MECHANISM with COURIER_SASL_USER and COURIER_SASL_PASSWORD
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), COURIER_SASL_OAUTH_TOKEN_URL,
// _CLIENT_ID, _CLIENT_SECRET, _SCOPE and _EXTENSIONS (OAUTHBEARER; or a
// fixed token in COURIER_SASL_OAUTH_TOKEN), or COURIER_AWS_REGION
// with COURIER_AWS_PROFILE and COURIER_AWS_ROLE_ARN (AWS_MSK_IAM, with
// the standard AWS credential chain). A variable of the CLI's it does not
// read is refused rather than ignored.
func signIn(getenv func(string) string) (kafkaauth.Connection, error) {
	var conn kafkaauth.Connection
	tlsOn, err := strconv.ParseBool(envOr(getenv, "COURIER_TLS", "false"))
	if err != nil {
		return conn, fmt.Errorf("COURIER_TLS=%q: use true or false", getenv("COURIER_TLS"))
	}
	for _, unread := range []string{"COURIER_TLS_CERT", "COURIER_TLS_KEY", "COURIER_TLS_SERVER_NAME", "COURIER_TLS_INSECURE_SKIP_VERIFY", "COURIER_SASL_OAUTH_PARAMS", "COURIER_SASL_OAUTH_CA"} {
		if getenv(unread) != "" {
			return conn, fmt.Errorf("%s is set, and this example does not read it: use courier's CLI, or add it to signIn", unread)
		}
	}
	if ca := getenv("COURIER_TLS_CA"); ca != "" || tlsOn {
		conn.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return conn, fmt.Errorf("COURIER_TLS_CA: %w", err)
			}
			conn.TLS.RootCAs = x509.NewCertPool()
			if !conn.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return conn, fmt.Errorf("COURIER_TLS_CA %s holds no PEM certificate", ca)
			}
		}
	}
	user, password := getenv("COURIER_SASL_USER"), getenv("COURIER_SASL_PASSWORD")
	switch mechanism := strings.ToUpper(getenv("COURIER_SASL_MECHANISM")); mechanism {
	case "":
	case "PLAIN":
		conn.SASL = kafkaauth.Plain(user, password)
	case "SCRAM-SHA-256":
		conn.SASL = kafkaauth.SCRAMSHA256(user, password)
	case "SCRAM-SHA-512":
		conn.SASL = kafkaauth.SCRAMSHA512(user, password)
	case "OAUTHBEARER":
		extensions := map[string]string{}
		for kv := range strings.SplitSeq(getenv("COURIER_SASL_OAUTH_EXTENSIONS"), ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			key, value, ok := strings.Cut(kv, "=")
			if !ok {
				return conn, fmt.Errorf("COURIER_SASL_OAUTH_EXTENSIONS %q: use key=value pairs, comma-separated", kv)
			}
			extensions[key] = value
		}
		var tokens *kafkaauth.Tokens
		if tokenURL := getenv("COURIER_SASL_OAUTH_TOKEN_URL"); tokenURL != "" {
			tokens, err = kafkaauth.ClientCredentials{TokenURL: tokenURL, ClientID: getenv("COURIER_SASL_OAUTH_CLIENT_ID"),
				ClientSecret: getenv("COURIER_SASL_OAUTH_CLIENT_SECRET"), Scopes: strings.Fields(getenv("COURIER_SASL_OAUTH_SCOPE")), Extensions: extensions}.Tokens()
		} else {
			tokens, err = kafkaauth.StaticToken(getenv("COURIER_SASL_OAUTH_TOKEN"), extensions)
		}
		if err != nil {
			return conn, fmt.Errorf("COURIER_SASL_MECHANISM OAUTHBEARER: %w", err)
		}
		conn.SASL = kafkaauth.OAuthBearer(tokens)
	case "AWS_MSK_IAM":
		if conn.TLS == nil {
			return conn, errors.New("COURIER_SASL_MECHANISM AWS_MSK_IAM needs COURIER_TLS=true: MSK's IAM listeners take TLS only")
		}
		tokens, err := kafkaauth.MSKIAM{Region: envOr(getenv, "COURIER_AWS_REGION", getenv("AWS_REGION")),
			Profile: getenv("COURIER_AWS_PROFILE"), RoleARN: getenv("COURIER_AWS_ROLE_ARN")}.Tokens(context.Background())
		if err != nil {
			return conn, fmt.Errorf("COURIER_SASL_MECHANISM AWS_MSK_IAM: %w", err)
		}
		conn.SASL = kafkaauth.OAuthBearer(tokens)
	default:
		return conn, fmt.Errorf("COURIER_SASL_MECHANISM %q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM", mechanism)
	}
	return conn, nil
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "payouts:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.Logger.Error("payouts stopped", "error", err)
		os.Exit(1)
	}
}

// orderCreated is the payload of an OrderCreated event.
type orderCreated struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// run pays the orders of cfg.Topic until ctx ends.
func run(ctx context.Context, cfg config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}

	pspURL := cfg.PSPURL
	if pspURL == "" {
		stub, err := psp.Start()
		if err != nil {
			return err
		}
		defer func() {
			log.Info("in-process PSP stopped", "paid", stub.Paid(), "calls", stub.Calls(), "duplicates", stub.Duplicates())
			stub.Close()
		}()
		if cfg.PSPFailFor > 0 {
			stub.SetModeFor(psp.ModeFail, cfg.PSPFailFor)
		}
		pspURL = stub.URL()
		log.Info("started an in-process PSP", "url", pspURL, "failing_for", cfg.PSPFailFor)
	}
	client := psp.NewClient(pspURL, cfg.PSPTimeout)
	defer client.Close()

	// One breaker for every call to the PSP.
	breaker, err := consumer.NewBreaker(consumer.BreakerConfig{
		Name:                "psp",
		ConsecutiveFailures: cfg.BreakerFailures,
		OpenFor:             cfg.BreakerOpenFor,
		Logger:              log,
		Hooks:               cfg.Hooks,
	})
	if err != nil {
		return err
	}

	redisOpts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("redis url %q: %w; want e.g. redis://127.0.0.1:6379/0", cfg.RedisURL, err)
	}
	rdb := redis.NewClient(redisOpts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w (is it running? try `make services`)", redisOpts.Addr, err)
	}
	seen, err := dedupe.NewRedis(rdb, dedupe.RedisConfig{Scope: cfg.DedupeScope, Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}

	sc, err := cfg.Kafka.Config(consumer.NewSaramaConfig())
	if err != nil {
		return err
	}
	if err := createTopic(cfg.Brokers, sc, cfg.Topic, cfg.Partitions); err != nil {
		return err
	}

	c, err := consumer.New(consumer.Config{
		Brokers:     cfg.Brokers,
		Sarama:      sc,
		Group:       cfg.Group,
		Topics:      []string{cfg.Topic},
		Handler:     payOrder(client, breaker, log),
		MaxAttempts: cfg.MaxAttempts,
		Backoff:     backoff.Backoff{Base: cfg.Backoff},
		RetryTopics: retrytopics.Config{Delays: cfg.RetryDelays, CreateTopics: true},
		Dedupe:      consumer.DedupeConfig{Store: seen},
		Logger:      log, // logs "message dead-lettered" with the error; OnDeadLetter could page someone
		Hooks:       cfg.Hooks,
	})
	if err != nil {
		return err
	}
	stopProbes, err := serveProbes(cfg, c, log)
	if err != nil {
		return err
	}
	defer stopProbes()
	log.Info("paying orders", "topic", cfg.Topic, "group", cfg.Group, "brokers", cfg.Brokers)
	return c.Run(ctx)
}

// serveProbes serves the consumer's health probes for Kubernetes on
// cfg.HealthListener, or else on cfg.HealthAddr (nowhere when it is
// empty), until stop is called: GET /livez answers 200 while c.Run runs,
// GET /readyz while the consumer is in its group (or out of it, for a
// rebalance or a reconnect, for less than consumer.Config.ReadinessGrace).
func serveProbes(cfg config, c *consumer.Consumer, log *slog.Logger) (stop func(), err error) {
	ln := cfg.HealthListener
	if ln == nil {
		if cfg.HealthAddr == "" {
			return func() {}, nil
		}
		if ln, err = net.Listen("tcp", cfg.HealthAddr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w (pick another address with --health-addr, or --health-addr '' for no probes)", cfg.HealthAddr, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/livez", c.Liveness())
	mux.Handle("/readyz", c.Readiness())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving the health probes failed", "addr", ln.Addr().String(), "error", err)
		}
	}()
	log.Info("serving health probes", "addr", ln.Addr().String(), "paths", "/livez /readyz")
	return func() {
		_ = srv.Close() // a probe answers at once: nothing worth draining
		<-served
	}, nil
}

// payOrder returns the handler: it pays an OrderCreated event through the
// breaker, with the event's id as the PSP's idempotency key.
func payOrder(client *psp.Client, breaker *consumer.Breaker, log *slog.Logger) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if t, ok := m.Headers.Lookup(producer.HeaderType); ok && string(t) != "OrderCreated" {
			return nil // another event of the topic: not ours to pay
		}
		if m.ID == "" {
			return consumer.Permanent(errors.New("no ce_id header: a payout needs the event id as its idempotency key"))
		}
		var o orderCreated
		if err := json.Unmarshal(m.Value, &o); err != nil {
			return consumer.Permanent(fmt.Errorf("the value is not an OrderCreated JSON: %w", err))
		}
		p := psp.Payout{ID: m.ID, OrderID: o.OrderID, AmountCents: o.AmountCents, Currency: o.Currency}
		// Pay marks a PSP that is down (503, timeout) consumer.Unavailable,
		// which the breaker counts; a 500 for this payout it does not.
		err := breaker.Do(ctx, func(ctx context.Context) error { return client.Pay(ctx, p) })
		if err == nil {
			log.Info("paid", "order_id", o.OrderID, "ce_id", m.ID, "amount_cents", o.AmountCents, "attempt", m.Attempt)
		}
		return err
	})
}

// createTopic creates topic unless it exists: the consumer creates the
// retry and dead-letter topics, but not the main one.
func createTopic(brokers []string, sc *sarama.Config, topic string, partitions int32) error {
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return fmt.Errorf("kafka at %s: %w (is it running? try `courier dev`)", strings.Join(brokers, ","), err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}
