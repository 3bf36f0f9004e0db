package bench

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// smallEnqueue is the smallest run that measures every case: 2 clients,
// one round of 1s runs, batches of 10.
func smallEnqueue(t *testing.T, url string) (EnqueueConfig, EnqueueReport) {
	t.Helper()
	var progress bytes.Buffer
	cfg := EnqueueConfig{DatabaseURL: url, Clients: []int{2}, Duration: time.Second, Rounds: 1, BatchEvents: 10,
		Name: testkit.UniqueName(t, maxNameLen), Progress: &progress}
	report, err := Enqueue(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Enqueue: %v\nprogress:\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "enqueue: round 1 of 1") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}
	return cfg, report
}

// checkFigures fails unless every case of report has a figure above 0 and
// every median and ratio is computed from the rounds' figures.
func checkFigures(t *testing.T, report EnqueueReport) {
	t.Helper()
	if len(report.Single) != 1 || report.Single[0].Clients != 2 || report.Rounds != 1 {
		t.Fatalf("single-event results %+v over %d rounds, want one for 2 clients over 1 round", report.Single, report.Rounds)
	}
	s := report.Single[0]
	medians := map[string]float64{}
	for _, name := range []string{OrderOnly, OrderFloorRow, OrderEnqueue} {
		runs := s.Runs[name]
		if len(runs) != 1 || runs[0] <= 0 {
			t.Errorf("%s: runs %v, want one figure above 0", name, runs)
		}
		medians[name] = sortedMiddle(runs)
	}
	if s.OrderOnly != medians[OrderOnly] || s.FloorRow != medians[OrderFloorRow] || s.CourierEnqueue != medians[OrderEnqueue] {
		t.Errorf("result %+v, want the medians %v", s, medians)
	}
	if s.FloorRatio != s.FloorRow/s.OrderOnly || s.CourierRatio != s.CourierEnqueue/s.OrderOnly || s.CourierToFloor != s.CourierEnqueue/s.FloorRow {
		t.Errorf("result %+v: the ratios are not those of the medians", s)
	}
	if s.Met != (s.CourierToFloor >= EnqueueTarget) {
		t.Errorf("result %+v: Met disagrees with the target %v", s, EnqueueTarget)
	}
	b := report.Batch
	if b.Name != "enqueue-batch-10" || b.Baseline != "copy-10" || len(b.Runs) != 1 || len(b.BaselineRuns) != 1 {
		t.Fatalf("batch result %+v, want enqueue-batch-10 beside copy-10, one run each", b)
	}
	if b.Rate <= 0 || b.Rate != sortedMiddle(b.Runs) || b.BaselineRate != sortedMiddle(b.BaselineRuns) || b.Ratio != b.Rate/b.BaselineRate {
		t.Errorf("batch result %+v: want rates above 0, the medians of the runs, and their ratio", b)
	}
}

// sortedMiddle is the middle figure of an odd count of figures.
func sortedMiddle(xs []float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	return slices.Sorted(slices.Values(xs))[len(xs)/2]
}

// checkDropped fails unless the run's schema is gone.
func checkDropped(t *testing.T, pg *testkit.PG, cfg EnqueueConfig) {
	t.Helper()
	var exists bool
	if err := pg.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", cfg.Name+"_enqueue").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s_enqueue was not dropped", cfg.Name)
	}
}

// TestEnqueueMeasuresEveryCaseWithPgbench runs the smallest enqueue run
// with pgbench: every case has a figure, medians and ratios follow from the
// rounds, the schema is dropped afterwards, and the courier case's script
// holds the statement Enqueue sends, its arguments written in as literals.
func TestEnqueueMeasuresEveryCaseWithPgbench(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench is not in PATH; install PostgreSQL's client programs (apt-get install postgresql-client)")
	}
	pg := testkit.Postgres(t)
	cfg, report := smallEnqueue(t, pg.URL)
	if report.Driver != DriverPgbench || !strings.HasPrefix(report.Pgbench, "pgbench (PostgreSQL)") ||
		report.Command != "pgbench -n -M prepared -j 2 -c <clients> -T 1 -f <case>.sql <database URL>" {
		t.Errorf("driver %q, pgbench %q, command %q; want pgbench's", report.Driver, report.Pgbench, report.Command)
	}
	checkFigures(t, report)
	checkDropped(t, pg, cfg)

	// What Enqueue sends into the run's schema, recorded afresh.
	out, err := producer.NewOutbox(producer.Config{Schema: cfg.Name + "_enqueue"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if _, err := out.Enqueue(context.Background(), rec, producer.Event{Topic: enqueueTopic, Key: "order-7", Type: enqueueType, Payload: orderPayload("order-1", 1)}); err != nil {
		t.Fatal(err)
	}
	sent := rec.statements[0]
	parts := placeholder.Split(strings.TrimSpace(sent.sql), -1)
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	// The script's statement is the SQL sent, a literal in place of each
	// argument.
	script := report.Scripts[OrderEnqueue]
	m := regexp.MustCompile(strings.Join(parts, "(.*?)") + ";\n").FindStringSubmatch(script)
	if m == nil || len(m)-1 != len(sent.args) {
		t.Fatalf("the script of %s does not hold the statement Enqueue sends:\n%s\nsent:\n%s", OrderEnqueue, script, sent.sql)
	}
	for i, arg := range sent.args {
		want, err := literal(arg)
		if _, isID := arg.(pgtype.UUID); isID {
			want, err = "gen_random_uuid()", nil // so that rows differ
		}
		if arg == "order-7" {
			want = ":cid" // the key
		}
		if err != nil {
			t.Fatal(err)
		}
		if m[i+1] != want {
			t.Errorf("argument $%d (%#v) is %s in the script, want %s", i+1, arg, m[i+1], want)
		}
	}
}

// TestEnqueueFallsBackToGoWithoutPgbench: with no pgbench in PATH, a Go
// driver runs the single-event cases, and the report says so.
func TestEnqueueFallsBackToGoWithoutPgbench(t *testing.T) {
	pg := testkit.Postgres(t)
	t.Setenv("PATH", t.TempDir())
	cfg, report := smallEnqueue(t, pg.URL)
	if report.Driver != DriverGo || report.Command != "" || !slices.ContainsFunc(report.Notes, func(n string) bool { return strings.Contains(n, "pgbench was not found") }) {
		t.Errorf("driver %q, command %q, notes %q; want the Go driver, noted", report.Driver, report.Command, report.Notes)
	}
	checkFigures(t, report)
	checkDropped(t, pg, cfg)
	var md bytes.Buffer
	if err := report.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "a Go driver (pgx, pgbench was not found)") {
		t.Errorf("the Markdown does not say the Go driver ran:\n%s", md.String())
	}
}

// TestEnqueueStatementWritesWhatEnqueueWrites runs the statement the
// courier case's script holds, with a customer id for :cid, beside
// Outbox.Enqueue of the same event: both write the same row, but for the
// id and the times.
func TestEnqueueStatementWritesWhatEnqueueWrites(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	ctx := context.Background()
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	payload := orderPayload("order-1", 1)
	stmt, err := enqueueStatement(out, payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, strings.ReplaceAll(stmt, ":cid", "$1"), "7"); err != nil {
		t.Fatalf("%v\n%s", err, stmt)
	}
	if _, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: enqueueTopic, Key: "7", Type: enqueueType, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	rows, err := pg.Pool.Query(ctx, `
SELECT id, ROW(topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id, causation_id,
    idempotency_key, payload, content_type, headers, max_retries, not_before)::text
FROM courier_outbox ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	var values []string
	for rows.Next() {
		var id uuid.UUID
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		ids, values = append(ids, id), append(values, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(values) != 2 || values[0] != values[1] || ids[0] == ids[1] {
		t.Errorf("the statement and Enqueue wrote %d rows, ids %v:\n%s\nwant two alike but for their ids", len(values), ids, strings.Join(values, "\n"))
	}
}

// TestLiteralWritesWhatPgxSends: each kind of argument Enqueue passes
// becomes the SQL literal of its value.
func TestLiteralWritesWhatPgxSends(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0195f3a2-7c4e-7d2a-9f00-1234567890ab")
	at := time.Date(2026, 11, 24, 9, 30, 0, 500_000_000, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, "NULL"},
		{"it's", "'it''s'"},
		{`back\slash`, `'back\slash'`},
		{[]byte{0xde, 0xad}, `'\xdead'::bytea`},
		{[]byte(nil), "NULL"},
		{[]byte{}, `'\x'::bytea`},
		{pgtype.UUID{Bytes: id, Valid: true}, "'0195f3a2-7c4e-7d2a-9f00-1234567890ab'::uuid"},
		{pgtype.UUID{}, "NULL"},
		{pgtype.Timestamptz{Time: at, Valid: true}, "'2026-11-24 08:30:00.5+00:00'::timestamptz"},
		{pgtype.Timestamptz{}, "NULL"},
		{pgtype.Text{String: "x", Valid: true}, "'x'"},
		{int32(0), "0"},
		{int64(-3), "-3"},
		{true, "true"},
	} {
		got, err := literal(c.in)
		if err != nil || got != c.want {
			t.Errorf("literal(%#v) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if got, err := literal(struct{}{}); err == nil {
		t.Errorf("literal(struct{}{}) = %s; want an error", got)
	}
}

// TestEnqueueConfigRefusesBadValues: each invalid field is refused with an
// error naming it, before anything connects.
func TestEnqueueConfigRefusesBadValues(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/none"
	for _, c := range []struct {
		cfg  EnqueueConfig
		want string
	}{
		{EnqueueConfig{}, "database URL"},
		{EnqueueConfig{DatabaseURL: url, Clients: []int{16, 0}}, "Clients"},
		{EnqueueConfig{DatabaseURL: url, Duration: 1500 * time.Millisecond}, "Duration"},
		{EnqueueConfig{DatabaseURL: url, Rounds: -1}, "negative"},
		{EnqueueConfig{DatabaseURL: url, Name: "Bad-Name"}, "Name"},
		{EnqueueConfig{DatabaseURL: url, PgbenchPath: "/nonexistent/pgbench"}, "PgbenchPath"},
	} {
		if _, err := Enqueue(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
}
