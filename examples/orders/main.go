// Command orders is an order service built on courier's transactional
// outbox: POST /orders writes the order row and its OrderCreated event in
// one PostgreSQL transaction, and a relay running in the same process
// publishes the event to Kafka. The event is published if and only if the
// order commits: an order that fails (a duplicate order id answers 409)
// takes its event with it. GET /relay/livez and /relay/readyz are the
// relay's health probes.
//
// Run it against `make services` and `courier dev`:
//
//	go run ./examples/orders
//	curl -i localhost:8080/orders -d '{"customer_id":"c-1","amount_cents":1999,"currency":"EUR"}'
//
// See README.md beside this file.
package main

import (
	"context"
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
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// config is the service's configuration; parseConfig fills it from flags
// and the environment.
type config struct {
	Addr        string   // the HTTP listen address
	DatabaseURL string   // PostgreSQL
	Brokers     []string // Kafka bootstrap addresses
	Schema      string   // holds the orders table and the outbox (courier_outbox)
	Topic       string   // the topic of OrderCreated events

	Listener net.Listener // nil: listen on Addr; tests pass their own
	Logger   *slog.Logger // nil: slog.Default()
}

// parseConfig reads the flags in args, with defaults from getenv.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Addr, "addr", ":8080", "HTTP listen address")
	fs.StringVar(&cfg.DatabaseURL, "database-url", envOr(getenv, "COURIER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
		"PostgreSQL URL (env COURIER_DATABASE_URL)")
	brokers := fs.String("brokers", envOr(getenv, "COURIER_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS)")
	fs.StringVar(&cfg.Schema, "schema", "orders_example", "PostgreSQL schema of the orders table and the outbox")
	fs.StringVar(&cfg.Topic, "topic", "orders", "topic of the OrderCreated events")
	if err := fs.Parse(args); err != nil {
		var usage strings.Builder
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		return cfg, fmt.Errorf("%w\nusage of orders:\n%s", err, usage.String())
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	return cfg, nil
}

// envOr returns the environment variable name, or def when it is empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// main runs the service until SIGINT or SIGTERM; it exits 2 on a usage error
// and 1 when run fails.
func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.Logger.Error("orders stopped", "error", err)
		os.Exit(1)
	}
}

// run serves the API and relays the outbox until ctx ends; then it lets
// the requests in flight and the relay's batch finish, and returns nil.
func run(ctx context.Context, cfg config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return fmt.Errorf("listen on %s: %w (pick another address with --addr)", cfg.Addr, err)
		}
	}
	defer ln.Close() // the server closes it too; this is for an early return

	migrator, err := migrations.New(migrations.Config{Schema: cfg.Schema}) // checks the schema name
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database url: %w; want e.g. postgres://postgres@127.0.0.1:5432/test", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("PostgreSQL: %w (is it running? try `make services`)", err)
	}

	// Once, at start-up: the outbox table (the migrations create the schema
	// too), then the service's own table beside it.
	if _, err := migrator.Up(ctx, pool); err != nil {
		return err
	}
	orders := pgx.Identifier{cfg.Schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+orders+` (
		id           text PRIMARY KEY,
		customer_id  text NOT NULL,
		amount_cents bigint NOT NULL,
		currency     text NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create %s: %w", orders, err)
	}

	outbox, err := producer.NewOutbox(producer.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Schema:  cfg.Schema,
		Brokers: cfg.Brokers,
		Source:  "orders-service", // ce_source
		Logger:  log,
	})
	if err != nil {
		return err
	}

	s := &service{pool: pool, outbox: outbox, insert: `INSERT INTO ` + orders +
		` (id, customer_id, amount_cents, currency) VALUES ($1, $2, $3, $4)`, topic: cfg.Topic, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.createOrder)
	// The relay's probes. /relay/livez fits a liveness probe: it fails
	// only once the relay's Run has returned. /relay/readyz fails while the
	// relay is stuck (PostgreSQL down, or events waiting with Kafka down):
	// alert on it, but keep it out of the service's readiness probe, which
	// would stop the orders the outbox keeps taking while Kafka is down.
	mux.Handle("/relay/livez", relay.Liveness())
	mux.Handle("/relay/readyz", relay.Readiness())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	// The relay and the server run until ctx ends or one of them fails.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx); stop() }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln); stop() }()
	log.Info("taking orders", "addr", ln.Addr().String(), "schema", cfg.Schema, "topic", cfg.Topic, "brokers", cfg.Brokers)
	<-ctx.Done()

	// Stop taking orders and let the requests in flight finish; the relay
	// finishes its batch (RelayConfig.ShutdownTimeout). Events it has not
	// published yet wait in the outbox for the next start.
	log.Info("stopping")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(shutdownCtx); err != nil {
		errs = append(errs, fmt.Errorf("stop the HTTP server: %w", err))
	}
	if err := <-serveDone; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("HTTP server on %s: %w", ln.Addr(), err))
	}
	if err := <-relayDone; err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	}
	return errors.Join(errs...)
}

// service handles the API.
type service struct {
	pool   *pgxpool.Pool
	outbox *producer.Outbox
	insert string // the INSERT of an order
	topic  string
	log    *slog.Logger
}

// orderRequest is the body of POST /orders.
type orderRequest struct {
	// OrderID is the order's id; empty makes a new one. A client that
	// retries with the same id gets 409 instead of a second order.
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// orderCreated is the payload of an OrderCreated event.
type orderCreated struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// orderCreatedResponse is the body of a 201.
type orderCreatedResponse struct {
	OrderID string `json:"order_id"`
	EventID string `json:"event_id"` // the event's ce_id on Kafka
}

// currencyCode is an ISO 4217 code.
var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// createOrder handles POST /orders.
func (s *service) createOrder(w http.ResponseWriter, r *http.Request) {
	var o orderRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&o); err != nil {
		writeError(w, http.StatusBadRequest, `the body is not an order (%v); send e.g. {"customer_id":"c-1","amount_cents":1999,"currency":"EUR"}`, err)
		return
	}
	switch {
	case o.CustomerID == "":
		writeError(w, http.StatusBadRequest, "customer_id is empty")
		return
	case o.AmountCents <= 0:
		writeError(w, http.StatusBadRequest, "amount_cents is %d; it must be above 0", o.AmountCents)
		return
	case !currencyCode.MatchString(o.Currency):
		writeError(w, http.StatusBadRequest, "currency %q is not an ISO 4217 code such as EUR", o.Currency)
		return
	}
	if o.OrderID == "" {
		o.OrderID = uuid.NewString()
	}

	eventID, err := s.placeOrder(r.Context(), o)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation: the order id is taken
		writeError(w, http.StatusConflict, "order %s exists already; nothing was written and no event will be published", o.OrderID)
		return
	case err != nil:
		s.log.Error("order not placed", "order_id", o.OrderID, "error", err)
		writeError(w, http.StatusInternalServerError, "the order was not placed; try again")
		return
	}
	s.log.Info("order placed", "order_id", o.OrderID, "event_id", eventID)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(orderCreatedResponse{OrderID: o.OrderID, EventID: eventID.String()})
}

// placeOrder writes the order and its OrderCreated event in one
// transaction and returns the event's id.
func (s *service) placeOrder(ctx context.Context, o orderRequest) (uuid.UUID, error) {
	payload, err := json.Marshal(orderCreated{OrderID: o.OrderID, AmountCents: o.AmountCents, Currency: o.Currency})
	if err != nil {
		return uuid.Nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit; after an error it removes the order and the event

	// The order of the two writes does not matter in a transaction. The
	// event goes first here to show it: when the order's INSERT fails (a
	// duplicate id), the rollback removes the event already written.
	event, err := s.outbox.Enqueue(ctx, tx, producer.Event{
		Topic:         s.topic,
		Key:           o.OrderID, // the events of an order are published in order
		Type:          "OrderCreated",
		Payload:       payload,
		AggregateType: "Order",
		AggregateID:   o.OrderID,
	})
	if err != nil {
		return uuid.Nil, err
	}
	if _, err := tx.Exec(ctx, s.insert, o.OrderID, o.CustomerID, o.AmountCents, o.Currency); err != nil {
		return uuid.Nil, err
	}
	return event.ID, tx.Commit(ctx) // commit publishes
}

// writeError answers status with a JSON {"error": …} body.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}
