package bench

import (
	"bytes"
	"cmp"
	"context"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// Defaults of EnqueueConfig.
const (
	DefaultEnqueueDuration = 10 * time.Second
	DefaultEnqueueRounds   = 3
	DefaultBatchEvents     = 100
)

// DefaultEnqueueClients are the client counts EnqueueConfig.Clients
// defaults to.
func DefaultEnqueueClients() []int { return []int{16, 64} }

// The goal Enqueue reports against.
const (
	// EnqueueTarget is the least a single-event transaction with courier's
	// enqueue may reach of the floor's (the same transaction with one row
	// in a table with only a primary key): 0.95.
	EnqueueTarget = 0.95
	// BatchTarget is the least EnqueueBatch may reach of a COPY of the
	// same rows, in events per second: 0.9.
	BatchTarget = 0.9
)

// Names of the single-event cases of Enqueue: the business transaction
// alone, with the floor's row, and with courier's enqueue.
const (
	OrderOnly      = "order-only"
	OrderFloorRow  = "order+floor-row"
	OrderEnqueue   = "order+courier-enqueue"
	enqueueTopic   = "courier.bench.orders"
	enqueueType    = "OrderCreated"
	pgbenchThreads = 2  // pgbench's -j: the cores of the machine this was written for
	batchClients   = 16 // goroutines, each on its own connection, in a batch run
)

// Drivers of the single-event cases, as EnqueueReport.Driver names them.
const (
	// DriverPgbench is PostgreSQL's pgbench, the harness of choice.
	DriverPgbench = "pgbench"
	// DriverGo is a pgx loop of one goroutine per client, used when
	// pgbench is not installed.
	DriverGo = "go"
)

// EnqueueConfig says where and how long the enqueue harness measures.
// DatabaseURL is required.
type EnqueueConfig struct {
	// DatabaseURL is the PostgreSQL database to measure in: the run
	// creates a schema there, named after Name, and drops it at the end.
	// pgbench is given it as its dbname, so it must be a URL or conninfo
	// string that libpq understands too.
	DatabaseURL string
	// Clients are the client counts the single-event cases run with, each
	// a pgbench -c. Defaults to 16 and 64 (DefaultEnqueueClients).
	Clients []int
	// Duration is the length of each run: pgbench's -T, so whole seconds.
	// Defaults to 10s.
	Duration time.Duration
	// Rounds is how many times each case runs, the cases taking turns;
	// figures are the medians. Defaults to 3.
	Rounds int
	// BatchEvents is how many events a batch transaction writes. Defaults
	// to 100.
	BatchEvents int
	// PgbenchPath is the pgbench to run. Defaults to "pgbench" looked up in
	// PATH; when it is not there, the single-event cases run on a Go
	// driver instead, and the report says so.
	PgbenchPath string
	// Progress, when set, receives a line as each run ends. Defaults to
	// none.
	Progress io.Writer
	// Name makes the schema's name unique: a lower-case identifier
	// (letters, digits, underscores) of at most 40 bytes. Defaults to a
	// random one.
	Name string
}

func (c *EnqueueConfig) setDefaults() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: no PostgreSQL database URL given, e.g. postgres://postgres@127.0.0.1:5432/test")
	case c.Duration < 0 || c.Duration%time.Second != 0:
		return fmt.Errorf("bench: Duration %v: pgbench runs for whole seconds; use e.g. 10s, or 0 for the default of %v", c.Duration, DefaultEnqueueDuration)
	}
	if len(c.Clients) == 0 {
		c.Clients = DefaultEnqueueClients()
	}
	for _, n := range c.Clients {
		if n < 1 {
			return fmt.Errorf("bench: Clients holds %d: use client counts of 1 or more, e.g. 16 and 64", n)
		}
	}
	if c.Duration == 0 {
		c.Duration = DefaultEnqueueDuration
	}
	if err := applyCounts(count{&c.Rounds, DefaultEnqueueRounds}, count{&c.BatchEvents, DefaultBatchEvents}); err != nil {
		return err
	}
	return applyName(&c.Name)
}

// EnqueueReport is the figures of one Enqueue run.
type EnqueueReport struct {
	// PostgreSQL is the server's version.
	PostgreSQL string `json:"postgresql"`
	// Driver ran the single-event cases: DriverPgbench or DriverGo.
	Driver string `json:"driver"`
	// Pgbench is what `pgbench --version` says; empty with DriverGo.
	Pgbench string `json:"pgbench,omitempty"`
	// Command is the pgbench command line of a run, <clients>, <case> and
	// <database URL> standing for each run's; empty with DriverGo.
	Command string `json:"command,omitempty"`
	// Clients, Duration, Rounds and BatchEvents are the run's
	// configuration; BatchClients is the goroutines of a batch run.
	Clients      []int         `json:"clients"`
	Duration     time.Duration `json:"duration_ns"`
	Rounds       int           `json:"rounds"`
	BatchEvents  int           `json:"batch_events"`
	BatchClients int           `json:"batch_clients"`
	// Scripts are the pgbench scripts of the single-event cases, by case
	// name. The Go driver runs the same statements, with $1 for :cid.
	Scripts map[string]string `json:"scripts"`
	// Single has the single-event figures of each client count.
	Single []EnqueueResult `json:"single"`
	// Batch has the batch figures.
	Batch BatchResult `json:"batch"`
	// Notes say why the figures may not be what they seem.
	Notes []string `json:"notes,omitempty"`
}

// EnqueueResult is the single-event figures of one client count:
// transactions per second, medians over the rounds.
type EnqueueResult struct {
	Clients        int     `json:"clients"`
	OrderOnly      float64 `json:"order_only_tps"`
	FloorRow       float64 `json:"floor_row_tps"`
	CourierEnqueue float64 `json:"courier_enqueue_tps"`
	// FloorRatio and CourierRatio are FloorRow and CourierEnqueue over
	// OrderOnly: what the extra row costs the business transaction.
	FloorRatio   float64 `json:"floor_ratio"`
	CourierRatio float64 `json:"courier_ratio"`
	// CourierToFloor is CourierEnqueue over FloorRow, the goal's figure.
	CourierToFloor float64 `json:"courier_to_floor"`
	// Met is whether CourierToFloor reaches EnqueueTarget.
	Met bool `json:"met"`
	// Runs are each case's transactions per second, a figure per round,
	// by case name.
	Runs map[string][]float64 `json:"runs_tps"`
}

// BatchResult is the batch figures: events per second, medians over the
// rounds.
type BatchResult struct {
	// Name is EnqueueBatch's case, e.g. enqueue-batch-100; Baseline is the
	// COPY's, e.g. copy-100.
	Name         string  `json:"name"`
	Baseline     string  `json:"baseline"`
	Rate         float64 `json:"events_per_s"`
	BaselineRate float64 `json:"baseline_events_per_s"`
	// Ratio is Rate over BaselineRate; Met is whether it reaches
	// BatchTarget.
	Ratio float64 `json:"ratio"`
	Met   bool    `json:"met"`
	// Runs and BaselineRuns are the events per second of each round.
	Runs         []float64 `json:"runs"`
	BaselineRuns []float64 `json:"baseline_runs"`
}

// Enqueue measures what courier's enqueue costs the business transaction
// that carries it, beside baselines measured in the same run on the same
// PostgreSQL, the relay not running: the figures `courier bench enqueue`
// prints.
//
// In a schema of its own it makes an orders table, a floor table with only
// a primary key and courier's outbox (its default migrations), then runs
// three single-event transactions with pgbench, at each client count: the
// order alone (OrderOnly), with one row in the floor table (OrderFloorRow),
// and with the statement Outbox.Enqueue sends for a 200-byte JSON event
// with a key (OrderEnqueue). Then, on a Go driver, transactions of
// BatchEvents events through Outbox.EnqueueBatch beside a COPY of the same
// rows into a table like the outbox's queue. Every case runs Rounds times,
// the cases taking turns, from emptied tables; the figures are medians.
//
// It returns the report, or the first error.
func Enqueue(ctx context.Context, cfg EnqueueConfig) (EnqueueReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return EnqueueReport{}, err
	}
	run, err := newEnqueueRun(ctx, cfg)
	if err == nil {
		for i := range cfg.Rounds {
			progress(cfg.Progress, "enqueue: round %d of %d", i+1, cfg.Rounds)
			if err = run.round(ctx); err != nil {
				break
			}
		}
	}
	if run != nil {
		err = errors.Join(err, run.close())
	}
	if err != nil {
		return EnqueueReport{}, err
	}
	return run.report(), nil
}

// enqueueRun is the schema, the cases and the figures of one Enqueue run.
type enqueueRun struct {
	cfg            EnqueueConfig
	schema         string
	db             *pgxpool.Pool
	version        string
	out            *producer.Outbox
	pgbench        string // its path; empty: the Go driver runs the single-event cases
	pgbenchVersion string
	dir            string // holds the pgbench scripts
	notes          []string
	singles        []*singleCase // OrderOnly, OrderFloorRow, OrderEnqueue
	batches        []*batchCase  // EnqueueBatch, then the COPY
	rounds         int
}

// singleCase is a single-event transaction: BEGIN, its statements, COMMIT.
type singleCase struct {
	name string
	// statements have :cid where the customer id goes, a pgbench variable.
	statements []string
	tps        map[int][]float64 // by client count, a figure per round
}

// batchCase is a batch transaction: BEGIN, write, COMMIT.
type batchCase struct {
	name  string
	write func(ctx context.Context, tx pgx.Tx, events []producer.Event) error
	rates []float64 // events per second, a figure per round
}

// newEnqueueRun finds pgbench, connects, and makes the schema, its tables
// and the cases. On failure it undoes what it did and returns a nil run.
func newEnqueueRun(ctx context.Context, cfg EnqueueConfig) (*enqueueRun, error) {
	r := &enqueueRun{cfg: cfg, schema: cfg.Name + "_enqueue"}
	m := ThisMachine()
	if load, busy := m.busy(); busy {
		r.notes = append(r.notes, fmt.Sprintf("the machine was busy when the run started (load average %.2f over the last minute, on %s): the figures are lower and noisier than on a quiet machine", load, plural(m.NumCPU, "core")))
	}
	if err := r.findPgbench(); err != nil {
		return nil, err
	}
	conns := batchClients
	if r.pgbench == "" {
		conns = max(conns, slices.Max(cfg.Clients))
	}
	var err error
	if r.db, err = connect(ctx, cfg.DatabaseURL, int32(conns), ""); err != nil {
		return nil, err
	}
	if err = r.setUp(ctx); err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

// findPgbench sets the path and version of pgbench, or notes that the Go
// driver stands in for it.
func (r *enqueueRun) findPgbench() error {
	path, err := exec.LookPath(cmp.Or(r.cfg.PgbenchPath, "pgbench"))
	switch {
	case err != nil && r.cfg.PgbenchPath != "":
		return fmt.Errorf("bench: PgbenchPath %q: %w (install PostgreSQL's client programs, e.g. apt-get install postgresql-client, or leave it empty to fall back to a Go driver)", r.cfg.PgbenchPath, err)
	case err != nil:
		r.notes = append(r.notes, "pgbench was not found in PATH, so a Go driver (pgx) ran the single-event cases: one goroutine and connection per client, the same statements with $1 for :cid; its figures include Go's own cost and do not compare with pgbench's (install PostgreSQL's client programs for those)")
		return nil
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return fmt.Errorf("bench: %s --version: %w (is it PostgreSQL's pgbench?)", path, err)
	}
	r.pgbench, r.pgbenchVersion = path, strings.TrimSpace(string(out))
	return nil
}

// tablesSQL makes the business table, the floor table and the COPY's
// target beside the outbox in schema %[1]s.
const tablesSQL = `
CREATE TABLE %[1]s.orders (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer_id bigint      NOT NULL,
    amount      numeric     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE %[1]s.floor_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic         text        NOT NULL,
    partition_key text,
    event_type    text        NOT NULL,
    payload       bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE %[1]s.copy_target (LIKE %[1]s.courier_outbox INCLUDING ALL);`

// setUp reads the server's version, makes the schema and its tables, the
// cases, and the pgbench scripts.
func (r *enqueueRun) setUp(ctx context.Context) error {
	if err := r.db.QueryRow(ctx, "SHOW server_version").Scan(&r.version); err != nil {
		return fmt.Errorf("read PostgreSQL's version: %w", err)
	}
	m, err := migrations.New(migrations.Config{Schema: r.schema})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx, r.db); err != nil {
		return fmt.Errorf("migrate %s: %w", r.schema, err)
	}
	if _, err := r.db.Exec(ctx, fmt.Sprintf(tablesSQL, r.schema)); err != nil {
		return fmt.Errorf("create the tables of %s: %w", r.schema, err)
	}
	if r.out, err = producer.NewOutbox(producer.Config{Schema: r.schema}); err != nil {
		return err
	}
	payload := orderPayload("order-1", 1)
	enqueue, err := enqueueStatement(r.out, payload)
	if err != nil {
		return err
	}
	order := fmt.Sprintf("INSERT INTO %s.orders (customer_id, amount) VALUES (:cid, 42.00)", r.schema)
	floor := fmt.Sprintf("INSERT INTO %s.floor_events (topic, partition_key, event_type, payload) VALUES (%s, :cid, %s, %s)",
		r.schema, quote(enqueueTopic), quote(enqueueType), byteaLiteral(payload))
	for _, c := range []struct {
		name  string
		extra []string
	}{{OrderOnly, nil}, {OrderFloorRow, []string{floor}}, {OrderEnqueue, []string{enqueue}}} {
		r.singles = append(r.singles, &singleCase{name: c.name, statements: append([]string{order}, c.extra...), tps: map[int][]float64{}})
	}
	r.batches = []*batchCase{
		{name: fmt.Sprintf("enqueue-batch-%d", r.cfg.BatchEvents), write: func(ctx context.Context, tx pgx.Tx, events []producer.Event) error {
			_, err := r.out.EnqueueBatch(ctx, tx, events)
			return err
		}},
		{name: fmt.Sprintf("copy-%d", r.cfg.BatchEvents), write: r.copyEvents},
	}
	if r.pgbench == "" {
		return nil
	}
	if r.dir, err = os.MkdirTemp("", "courier-bench-enqueue-"); err != nil {
		return fmt.Errorf("a directory for the pgbench scripts: %w", err)
	}
	for _, c := range r.singles {
		if err := os.WriteFile(r.scriptFile(c), []byte(c.script()), 0o644); err != nil {
			return fmt.Errorf("write the pgbench script of %s: %w", c.name, err)
		}
	}
	return nil
}

// script is the case's pgbench script: a customer id drawn per
// transaction, BEGIN, the statements, COMMIT.
func (c *singleCase) script() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\\set cid random(1, %d)\nBEGIN;\n", keys)
	for _, s := range c.statements {
		b.WriteString(strings.TrimSpace(s) + ";\n")
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

func (r *enqueueRun) scriptFile(c *singleCase) string { return filepath.Join(r.dir, c.name+".sql") }

// round runs every case once: the single-event cases at each client count,
// then the batch cases, starting one further along each list than the
// round before, so that a machine whose speed drifts meets them all alike.
func (r *enqueueRun) round(ctx context.Context) error {
	for _, clients := range r.cfg.Clients {
		err := inTurn(r.rounds, len(r.singles), func(i int) error {
			c := r.singles[i]
			tps, err := r.runSingle(ctx, c, clients)
			if err != nil {
				return fmt.Errorf("%s, %d clients: %w", c.name, clients, err)
			}
			c.tps[clients] = append(c.tps[clients], tps)
			progress(r.cfg.Progress, "enqueue:   %-22s %3d clients  %s tps", c.name, clients, thousands(tps))
			return nil
		})
		if err != nil {
			return err
		}
	}
	err := inTurn(r.rounds, len(r.batches), func(i int) error {
		c := r.batches[i]
		rate, err := r.runBatch(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		c.rates = append(c.rates, rate)
		progress(r.cfg.Progress, "enqueue:   %-22s %3d clients  %s events/s", c.name, batchClients, thousands(rate))
		return nil
	})
	r.rounds++
	return err
}

// inTurn calls run for each of n cases, starting with case round % n.
func inTurn(round, n int, run func(i int) error) error {
	for i := range n {
		if err := run((round + i) % n); err != nil {
			return err
		}
	}
	return nil
}

// empty truncates the tables, so that every run starts from the same size.
func (r *enqueueRun) empty(ctx context.Context) error {
	_, err := r.db.Exec(ctx, fmt.Sprintf("TRUNCATE %[1]s.orders, %[1]s.floor_events, %[1]s.courier_outbox, %[1]s.copy_target", r.schema))
	return err
}

// runSingle runs the case with clients clients for the configured duration
// and returns its transactions per second.
func (r *enqueueRun) runSingle(ctx context.Context, c *singleCase, clients int) (float64, error) {
	if err := r.empty(ctx); err != nil {
		return 0, err
	}
	if r.pgbench != "" {
		return r.runPgbench(ctx, c, clients)
	}
	statements := make([]string, len(c.statements))
	for i, s := range c.statements {
		statements[i] = strings.ReplaceAll(s, ":cid", "$1")
	}
	return drive(ctx, r.db, clients, r.cfg.Duration, 1, func(ctx context.Context, tx pgx.Tx, rng *rand.Rand) error {
		cid := strconv.Itoa(rng.IntN(keys) + 1)
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s, cid); err != nil {
				return err
			}
		}
		return nil
	})
}

// pgbenchArgs are the arguments of a pgbench run.
func pgbenchArgs(clients, seconds, script, database string) []string {
	return []string{"-n", "-M", "prepared", "-j", strconv.Itoa(pgbenchThreads), "-c", clients, "-T", seconds, "-f", script, database}
}

// tpsLine is pgbench's figure: "tps = 1234.567890 (without initial
// connection time)"; before PostgreSQL 14, "(excluding connections
// establishing)".
var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)

// runPgbench runs pgbench on the case's script and returns the tps it
// reports.
func (r *enqueueRun) runPgbench(ctx context.Context, c *singleCase, clients int) (float64, error) {
	args := pgbenchArgs(strconv.Itoa(clients), strconv.Itoa(int(r.cfg.Duration/time.Second)), r.scriptFile(c), r.cfg.DatabaseURL)
	cmd := exec.CommandContext(ctx, r.pgbench, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s (does the database URL suit libpq, and does max_connections allow %d clients?)",
			err, strings.TrimSpace(stderr.String()), clients)
	}
	m := tpsLine.FindSubmatch(stdout.Bytes())
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s%s", stdout.String(), stderr.String())
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// runBatch runs the batch case on batchClients connections for the
// configured duration and returns its events per second.
func (r *enqueueRun) runBatch(ctx context.Context, c *batchCase) (float64, error) {
	if err := r.empty(ctx); err != nil {
		return 0, err
	}
	n := r.cfg.BatchEvents
	return drive(ctx, r.db, batchClients, r.cfg.Duration, n, func(ctx context.Context, tx pgx.Tx, rng *rand.Rand) error {
		events := make([]producer.Event, n)
		for i := range events {
			k := rng.IntN(keys)
			key := "order-" + strconv.Itoa(k)
			events[i] = producer.Event{Topic: enqueueTopic, Key: key, Type: enqueueType, Payload: orderPayload(key, k)}
		}
		return c.write(ctx, tx, events)
	})
}

// copyColumns are the columns the COPY baseline writes: those Enqueue
// writes that are not NULL, and created_at, which Enqueue leaves to its
// default.
var copyColumns = []string{"id", "topic", "partition_key", "event_type", "payload", "content_type", "created_at"}

// copyEvents COPYs events into copy_target, with ids made as Enqueue makes
// them (UUIDv7).
func (r *enqueueRun) copyEvents(ctx context.Context, tx pgx.Tx, events []producer.Event) error {
	rows := make([][]any, len(events))
	now := time.Now()
	for i, e := range events {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		rows[i] = []any{pgtype.UUID{Bytes: id, Valid: true}, e.Topic, e.Key, e.Type, e.Payload, producer.DefaultContentType, now}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{r.schema, "copy_target"}, copyColumns, pgx.CopyFromRows(rows))
	return err
}

// drive runs workers goroutines, each on a connection of its own taken
// before the clock starts, each repeating BEGIN, body and COMMIT for d. It
// returns the units the committed transactions wrote (units each) per
// second.
func drive(ctx context.Context, pool *pgxpool.Pool, workers int, d time.Duration, units int,
	body func(ctx context.Context, tx pgx.Tx, rng *rand.Rand) error) (float64, error) {
	conns := make([]*pgxpool.Conn, 0, workers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range workers {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
	}
	var committed atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w, conn := range conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for time.Now().Before(deadline) {
				if errs[w] = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return body(ctx, tx, rng) }); errs[w] != nil {
					return
				}
				committed.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(committed.Load()*int64(units)) / elapsed.Seconds(), nil
}

// close removes the scripts, drops the schema and closes the pool.
func (r *enqueueRun) close() error {
	var errs []error
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.db.Exec(ctx, "DROP SCHEMA IF EXISTS "+r.schema+" CASCADE"); err != nil {
		errs = append(errs, fmt.Errorf("drop schema %s: %w", r.schema, err))
	}
	r.db.Close()
	return errors.Join(errs...)
}

// report is the figures of the rounds run.
func (r *enqueueRun) report() EnqueueReport {
	cfg := r.cfg
	rep := EnqueueReport{
		PostgreSQL: r.version, Driver: DriverGo, Clients: cfg.Clients, Duration: cfg.Duration, Rounds: r.rounds,
		BatchEvents: cfg.BatchEvents, BatchClients: batchClients, Scripts: map[string]string{}, Notes: r.notes,
	}
	if r.pgbench != "" {
		rep.Driver = DriverPgbench
		rep.Command = "pgbench " + strings.Join(pgbenchArgs("<clients>", strconv.Itoa(int(cfg.Duration/time.Second)), "<case>.sql", "<database URL>"), " ")
		rep.Pgbench = r.pgbenchVersion
	}
	for _, c := range r.singles {
		rep.Scripts[c.name] = c.script()
	}
	for _, clients := range cfg.Clients {
		res := EnqueueResult{Clients: clients, Runs: map[string][]float64{}}
		for _, c := range r.singles {
			res.Runs[c.name] = c.tps[clients]
		}
		res.OrderOnly, res.FloorRow, res.CourierEnqueue = median(res.Runs[OrderOnly]), median(res.Runs[OrderFloorRow]), median(res.Runs[OrderEnqueue])
		res.FloorRatio, res.CourierRatio = ratioOf(res.FloorRow, res.OrderOnly), ratioOf(res.CourierEnqueue, res.OrderOnly)
		res.CourierToFloor = ratioOf(res.CourierEnqueue, res.FloorRow)
		res.Met = res.CourierToFloor >= EnqueueTarget
		rep.Single = append(rep.Single, res)
	}
	batch, base := r.batches[0], r.batches[1]
	rep.Batch = BatchResult{Name: batch.name, Baseline: base.name, Rate: median(batch.rates), BaselineRate: median(base.rates),
		Runs: batch.rates, BaselineRuns: base.rates}
	rep.Batch.Ratio = ratioOf(rep.Batch.Rate, rep.Batch.BaselineRate)
	rep.Batch.Met = rep.Batch.Ratio >= BatchTarget
	return rep
}

// median is the median of xs; 0 without any.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// ratioOf is x over base; 0 when base is 0.
func ratioOf(x, base float64) float64 {
	if base == 0 {
		return 0
	}
	return x / base
}

// ---- the statement Enqueue sends ----

// enqueueStatement is the statement Outbox.Enqueue sends for an event of
// enqueueTopic with payload and a key, its id left to Enqueue (the common
// path: an id of the caller's own is claimed too), its arguments written
// in as SQL literals, but for the event's id, made by gen_random_uuid() so
// that rows differ as Enqueue's do, and its key, the pgbench variable :cid.
func enqueueStatement(out *producer.Outbox, payload []byte) (string, error) {
	const key = "courier-bench-key"
	rec := &recorder{}
	res, err := out.Enqueue(context.Background(), rec, producer.Event{Topic: enqueueTopic, Key: key, Type: enqueueType, Payload: payload})
	if err != nil {
		return "", fmt.Errorf("record the enqueue's statement: %w", err)
	}
	if len(rec.statements) != 1 {
		return "", fmt.Errorf("bench: Enqueue sent %d statements for one event without an idempotency key, want 1", len(rec.statements))
	}
	literals := make([]string, len(rec.statements[0].args))
	for i, arg := range rec.statements[0].args {
		var err error
		switch arg {
		case pgtype.UUID{Bytes: res.ID, Valid: true}:
			literals[i] = "gen_random_uuid()"
		case key:
			literals[i] = ":cid"
		default:
			literals[i], err = literal(arg)
		}
		if err != nil {
			return "", fmt.Errorf("bench: argument $%d of the enqueue: %w", i+1, err)
		}
	}
	if !slices.Contains(literals, "gen_random_uuid()") || !slices.Contains(literals, ":cid") {
		return "", fmt.Errorf("bench: the enqueue's arguments %v hold neither the event's id nor its key as this harness expects; update enqueueStatement", rec.statements[0].args)
	}
	stmt, err := bind(rec.statements[0].sql, literals)
	if err != nil {
		return "", err
	}
	if vars := pgbenchVariables(stmt); !slices.Equal(vars, []string{"cid"}) {
		return "", fmt.Errorf("bench: pgbench would read %v as variables in the enqueue's statement, not just :cid", vars)
	}
	return stmt, nil
}

// recorder is a producer.DBTX that records the statements and arguments
// Exec is given instead of running them. Query and QueryRow fail.
type recorder struct {
	statements []recorded
}

// recorded is one statement a recorder was given.
type recorded struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.statements = append(r.statements, recorded{sql, args})
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func (r *recorder) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("bench: the recorder records only Exec")
}

func (r *recorder) QueryRow(context.Context, string, ...any) pgx.Row {
	return failedRow{errors.New("bench: the recorder records only Exec")}
}

// failedRow is a pgx.Row whose Scan fails with err.
type failedRow struct{ err error }

func (f failedRow) Scan(...any) error { return f.err }

// placeholder is a parameter of a statement: $1, $2, …
var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// bind writes literals[n-1] in the place of each $n of sql.
func bind(sql string, literals []string) (string, error) {
	var err error
	out := placeholder.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		if n < 1 || n > len(literals) {
			err = fmt.Errorf("bench: %s in a statement given %d arguments", p, len(literals))
			return p
		}
		return literals[n-1]
	})
	return out, err
}

// variable is a pgbench variable in a statement: a colon and a name, not
// part of a :: cast. pgbench replaces them inside quoted literals too.
var variable = regexp.MustCompile(`(?:^|[^:]):([A-Za-z0-9_]+)`)

// pgbenchVariables are the names pgbench would take for variables in sql.
func pgbenchVariables(sql string) []string {
	var names []string
	for _, m := range variable.FindAllStringSubmatch(sql, -1) {
		names = append(names, m[1])
	}
	return names
}

// literal is v as an SQL literal, as pgx would send it as a parameter:
// nil as NULL, text quoted, bytes as bytea, UUIDs and timestamps with
// their casts, pgtype values by their Valid flag, numbers and booleans as
// themselves.
func literal(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "NULL", nil
	case string:
		return quote(v), nil
	case []byte:
		if v == nil {
			return "NULL", nil
		}
		return byteaLiteral(v), nil
	case pgtype.UUID:
		if !v.Valid {
			return "NULL", nil
		}
		return quote(uuid.UUID(v.Bytes).String()) + "::uuid", nil
	case uuid.UUID:
		return quote(v.String()) + "::uuid", nil
	case time.Time:
		return quote(v.UTC().Format("2006-01-02 15:04:05.999999-07:00")) + "::timestamptz", nil
	case bool:
		return strconv.FormatBool(v), nil
	case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v), nil
	case driver.Valuer: // the other pgtype values: NULL unless Valid
		value, err := v.Value()
		if err != nil {
			return "", err
		}
		return literal(value)
	}
	return "", fmt.Errorf("no SQL literal for a %T", v)
}

// quote is s as a quoted SQL string (standard_conforming_strings on).
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// byteaLiteral is b as a bytea literal in hex.
func byteaLiteral(b []byte) string { return `'\x` + hex.EncodeToString(b) + "'::bytea" }

// ---- output ----

// WriteText writes the report as the tables the benchmarks print.
func (r EnqueueReport) WriteText(w io.Writer) error {
	var b strings.Builder
	driver := "pgbench"
	if r.Driver == DriverGo {
		driver = "a Go driver (pgx)"
	}
	fmt.Fprintf(&b, "enqueue cost, single-event transactions on %s, %v runs, %s taking turns, medians, the relay not running:\n",
		driver, r.Duration, plural(r.Rounds, "round"))
	fmt.Fprintf(&b, "  %7s  %14s  %23s  %29s  %14s\n", "clients", "order only tps", "+ floor row tps", "+ courier enqueue tps", "courier/floor")
	for _, s := range r.Single {
		fmt.Fprintf(&b, "  %7d  %14.0f  %14.0f (%5.2fx)  %20.0f (%5.2fx)  %13.2fx  %s\n",
			s.Clients, s.OrderOnly, s.FloorRow, s.FloorRatio, s.CourierEnqueue, s.CourierRatio, s.CourierToFloor, targetNote(s.Met, EnqueueTarget))
	}
	bt := r.Batch
	fmt.Fprintf(&b, "batches of %d events on %d connections, events/s:\n  %-22s %9.0f  %5.2fx %s (%.0f)  %s\n",
		r.BatchEvents, r.BatchClients, bt.Name, bt.Rate, bt.Ratio, bt.Baseline, bt.BaselineRate, targetNote(bt.Met, BatchTarget))
	for _, note := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the report's section of a Markdown document.
func (r EnqueueReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	r.writeMarkdown(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r EnqueueReport) writeMarkdown(b *strings.Builder) {
	how := fmt.Sprintf("`%s`\n(%v per run)", r.Command, r.Duration)
	if r.Driver == DriverGo {
		how = fmt.Sprintf("a Go driver (pgx, pgbench was not found), one goroutine and connection per\nclient, %v per run,", r.Duration)
	}
	fmt.Fprintf(b, `
## Enqueue cost

What courier's enqueue costs the business transaction that carries it, with the relay not
running: pure transaction cost, `+"`synchronous_commit`"+` left at the server's setting. Three
single-event transactions, each `+"`BEGIN; …; COMMIT`"+`:

- `+"`%s`"+`: one INSERT into `+"`orders`"+` (bigint identity primary key): the business transaction alone;
- `+"`%s`"+`: the same plus one row with a %d-byte JSON payload in `+"`floor_events`"+`, a table with
  only a primary key: the floor, the least an extra row can cost;
- `+"`%s`"+`: the same plus the statement courier's `+"`Outbox.Enqueue`"+` sends for a %d-byte
  JSON event with a key, recorded from Enqueue and written with literals (the id from
  `+"`gen_random_uuid()`"+`, the key from `+"`:cid`"+`), into an outbox made by courier's default
  migrations.

Each case ran with
%s at each client count, the three cases taking turns, %s, the tables
emptied before each run; figures are medians (pgbench's tps without connection time), in brackets
the ratio to `+"`%s`"+`. Goal: courier / floor at least %s at every client count.

| clients | order only tps | + floor row tps | + courier enqueue tps | courier / floor | target |
| --- | ---: | ---: | ---: | ---: | --- |
`, OrderOnly, OrderFloorRow, payloadSize, OrderEnqueue, payloadSize, how, plural(r.Rounds, "round"), OrderOnly, ratio(EnqueueTarget))
	for _, s := range r.Single {
		fmt.Fprintf(b, "| %d | %s | %s (%s) | %s (%s) | %s | %s |\n", s.Clients, thousands(s.OrderOnly),
			thousands(s.FloorRow), ratio(s.FloorRatio), thousands(s.CourierEnqueue), ratio(s.CourierRatio), ratio(s.CourierToFloor), targetCell(s.Met, EnqueueTarget))
	}
	bt := r.Batch
	fmt.Fprintf(b, `
Batches, on a Go driver (pgx): %d goroutines, each on its own connection, repeat `+"`BEGIN; …; COMMIT`"+`
for %v: `+"`%s`"+` enqueues %d events (%d-byte JSON, %s keys) with `+"`Outbox.EnqueueBatch`"+`;
its baseline `+"`%s`"+` COPYs the same rows (pgx CopyFrom, ids made alike) into a table like the
outbox's queue (`+"`LIKE courier_outbox INCLUDING ALL`"+`). %s, taking turns with each other; events/s
are medians. Goal: at least %s the COPY.

| events/s | baseline | ratio | target |
| ---: | --- | ---: | --- |
| %s | `+"`%s`"+`: %s | %s | %s |
`, r.BatchClients, r.Duration, bt.Name, r.BatchEvents, payloadSize, thousands(keys), bt.Baseline,
		plural(r.Rounds, "round"), ratio(BatchTarget), thousands(bt.Rate), bt.Baseline, thousands(bt.BaselineRate), ratio(bt.Ratio), targetCell(bt.Met, BatchTarget))
	b.WriteString("\n<details><summary>The pgbench scripts</summary>\n\n")
	for _, name := range []string{OrderOnly, OrderFloorRow, OrderEnqueue} {
		fmt.Fprintf(b, "`%s.sql`:\n\n```sql\n%s```\n\n", name, r.Scripts[name])
	}
	b.WriteString("</details>\n")
	if len(r.Notes) > 0 {
		b.WriteByte('\n')
		for _, note := range r.Notes {
			fmt.Fprintf(b, "- Note: %s.\n", note)
		}
	}
}

// targetCell is a target's Markdown cell, as the relay's tables have it:
// "0.95× (met)", or "0.95× (**not met**)".
func targetCell(met bool, target float64) string {
	if met {
		return ratio(target) + " (met)"
	}
	return ratio(target) + " (**not met**)"
}

// targetNote is a target as the text lines say it: "target 0.95x met", or
// "not met".
func targetNote(met bool, target float64) string {
	if met {
		return fmt.Sprintf("target %.2fx met", target)
	}
	return fmt.Sprintf("target %.2fx not met", target)
}
