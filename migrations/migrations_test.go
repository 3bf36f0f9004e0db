package migrations_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

func newMigrator(t *testing.T, cfg migrations.Config) *migrations.Migrator {
	t.Helper()
	return outboxSeries.migrator(t, cfg)
}

// series is one of the two migration series, for tests that run on both.
type series struct {
	name  string
	new   func(migrations.Config) (*migrations.Migrator, error)
	all   func() []migrations.Migration
	dir   string // where the plain SQL files are
	table string // the default table name
	// tables are the series' tables, the default one first.
	tables []string
	// insert adds a row to the default table.
	insert string
}

var (
	outboxSeries = series{
		name: "outbox", new: migrations.New, all: migrations.All, dir: "sql", table: "courier_outbox",
		tables: []string{"courier_outbox", "courier_outbox_waiting", "courier_outbox_dead", "courier_outbox_published", "courier_outbox_keys",
			"courier_outbox_activity", "courier_outbox_audit"},
		insert: "INSERT INTO courier_outbox (id, topic, event_type, payload, content_type) VALUES (gen_random_uuid(), 'orders', 'X', '\\x7b7d', 'application/json')",
	}
	inboxSeries = series{
		name: "inbox", new: migrations.NewInbox, all: migrations.AllInbox, dir: "sql/inbox", table: migrations.DefaultInboxTable,
		tables: []string{migrations.DefaultInboxTable},
		insert: "INSERT INTO courier_inbox (scope, id) VALUES ('payouts', 'evt-1')",
	}
	bothSeries = []series{outboxSeries, inboxSeries}
)

func (s series) migrator(t *testing.T, cfg migrations.Config) *migrations.Migrator {
	t.Helper()
	m, err := s.new(cfg)
	if err != nil {
		t.Fatalf("%s migrator of %+v: %v", s.name, cfg, err)
	}
	return m
}

func (s series) versions() []int { return versions(s.all()) }

// eachSeries runs test once per series, in parallel subtests.
func eachSeries(t *testing.T, test func(t *testing.T, s series)) {
	for _, s := range bothSeries {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			test(t, s)
		})
	}
}

func versions(ms []migrations.Migration) []int {
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	return vs
}

func allVersions() []int { return outboxSeries.versions() }

// tableExists reports whether schema.table is a table.
func tableExists(t *testing.T, db *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var ok bool
	err := db.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT FROM pg_tables WHERE schemaname = $1 AND tablename = $2)", schema, table).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestUpTwiceAppliesOnce(t *testing.T) {
	t.Parallel()
	eachSeries(t, testUpTwiceAppliesOnce)
}

func testUpTwiceAppliesOnce(t *testing.T, s series) {
	pg := testkit.Postgres(t)
	m := s.migrator(t, migrations.Config{Schema: pg.Schema})
	ctx := context.Background()

	first, err := m.Up(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(versions(first), s.versions()) {
		t.Fatalf("first Up applied %v, want %v", versions(first), s.versions())
	}
	second, err := m.Up(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 {
		t.Fatalf("second Up applied %v, want nothing", versions(second))
	}
	states, err := m.Status(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if !s.Applied || s.AppliedAt.IsZero() {
			t.Errorf("migration %d: applied=%v at %v, want applied", s.Version, s.Applied, s.AppliedAt)
		}
	}
	if len(states) != len(s.versions()) {
		t.Errorf("Status lists %d migrations, want %d", len(states), len(s.versions()))
	}
	if !tableExists(t, pg.Pool, pg.Schema, s.table) || !tableExists(t, pg.Pool, pg.Schema, s.table+"_migrations") {
		t.Fatalf("%s or its version table not created", s.table)
	}
}

func TestConcurrentUpIsSerialized(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	for round := range 5 {
		schema := pg.FreshSchema(t) // does not exist yet: both race to create it
		m := newMigrator(t, migrations.Config{Schema: schema})
		var conns [2]*pgx.Conn
		for i := range conns {
			c, err := pgx.Connect(ctx, pg.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			conns[i] = c
		}
		var wg sync.WaitGroup
		var applied [2][]migrations.Migration
		var errs [2]error
		start := make(chan struct{})
		for i := range conns {
			wg.Go(func() {
				<-start
				applied[i], errs[i] = m.Up(ctx, conns[i])
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatalf("round %d: concurrent Up: %v", round, err)
		}
		got := append(versions(applied[0]), versions(applied[1])...)
		slices.Sort(got)
		if !slices.Equal(got, allVersions()) {
			t.Fatalf("round %d: the two runs applied %v and %v together, want each of %v exactly once",
				round, versions(applied[0]), versions(applied[1]), allVersions())
		}
		var rows int
		if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".courier_outbox_migrations").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != len(allVersions()) {
			t.Fatalf("round %d: version table has %d rows, want %d", round, rows, len(allVersions()))
		}
	}
}

func TestUpIntoCustomSchemaAndTable(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	schema := pg.FreshSchema(t)
	m := newMigrator(t, migrations.Config{Schema: schema, Table: "billing_events"})
	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	if !tableExists(t, pg.Pool, schema, "billing_events") {
		t.Fatalf("%s.billing_events not created", schema)
	}
	for _, s := range []string{schema, pg.Schema, "public"} {
		var n int
		err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname LIKE 'courier\\_outbox%'", s).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if s != "public" && n != 0 { // public may hold the test database's own outbox
			t.Errorf("schema %s holds %d relations named courier_outbox*, want none", s, n)
		}
	}
	// Every table of the outbox, and every index, is named after it.
	for table, want := range map[string][]string{
		"billing_events":         {"billing_events_pkey"},
		"billing_events_waiting": {"billing_events_waiting_pkey", "billing_events_waiting_key", "billing_events_waiting_due", "billing_events_waiting_held"},
		"billing_events_dead":    {"billing_events_dead_pkey", "billing_events_dead_key"},
		"billing_events_published": {"billing_events_published_id", "billing_events_published_seq", "billing_events_published_at",
			"billing_events_published_keys", "billing_events_published_error"},
		"billing_events_keys":     {"billing_events_keys_pkey", "billing_events_keys_created"},
		"billing_events_activity": {"billing_events_activity_pkey"},
		"billing_events_audit":    {"billing_events_audit_pkey"},
	} {
		indexes := indexNames(t, pg.Pool, schema, table)
		if !slices.Equal(indexes, slices.Sorted(slices.Values(want))) {
			t.Errorf("indexes of %s: %v, want %v", table, indexes, want)
		}
	}
	// A second table in the same schema migrates independently.
	other := newMigrator(t, migrations.Config{Schema: schema})
	applied, err := other.Up(ctx, pg.Pool)
	if err != nil || len(applied) != len(allVersions()) {
		t.Fatalf("Up of courier_outbox beside billing_events applied %v, %v; want all", versions(applied), err)
	}
}

func indexNames(t *testing.T, db *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY 1", schema, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestDownThenUp(t *testing.T) {
	t.Parallel()
	eachSeries(t, testDownThenUp)
}

func testDownThenUp(t *testing.T, s series) {
	pg := testkit.Postgres(t)
	ctx := context.Background()
	m := s.migrator(t, migrations.Config{Schema: pg.Schema})
	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, s.insert); err != nil {
		t.Fatal(err)
	}

	reverted, err := m.Down(ctx, pg.Pool, len(s.versions()))
	if err != nil {
		t.Fatal(err)
	}
	want := s.versions()
	slices.Reverse(want)
	if !slices.Equal(versions(reverted), want) {
		t.Fatalf("Down reverted %v, want %v (newest first)", versions(reverted), want)
	}
	if tableExists(t, pg.Pool, pg.Schema, s.table) {
		t.Fatalf("%s survived Down", s.table)
	}
	again, err := m.Down(ctx, pg.Pool, 1)
	if err != nil || len(again) != 0 {
		t.Fatalf("Down with nothing applied: %v, %v; want nothing reverted", versions(again), err)
	}
	states, err := m.Status(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Applied {
			t.Errorf("migration %d still applied after Down", s.Version)
		}
	}

	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s.table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%s has %d rows after down and up, want 0", s.table, n)
	}
}

func TestDownRejectsStepsBelowOne(t *testing.T) {
	m := newMigrator(t, migrations.Config{})
	if _, err := m.Down(context.Background(), nil, 0); !errors.Is(err, migrations.ErrInvalidSteps) {
		t.Fatalf("Down(0) = %v, want ErrInvalidSteps", err)
	}
}

func TestStatusOfMissingSchemaChangesNothing(t *testing.T) {
	t.Parallel()
	eachSeries(t, testStatusOfMissingSchemaChangesNothing)
}

func testStatusOfMissingSchemaChangesNothing(t *testing.T, s series) {
	pg := testkit.Postgres(t)
	schema := pg.FreshSchema(t)
	states, err := s.migrator(t, migrations.Config{Schema: schema}).Status(context.Background(), pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != len(s.versions()) || states[0].Applied {
		t.Fatalf("Status = %+v, want every migration unapplied", states)
	}
	var exists bool
	if err := pg.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("Status created schema %s", schema)
	}
}

func TestNewRejectsInvalidNames(t *testing.T) {
	for _, cfg := range []migrations.Config{
		{Schema: "Billing"},
		{Schema: "x; DROP TABLE users"},
		{Schema: `"quoted"`},
		{Table: "1outbox"},
		{Table: "outbox-events"},
		{Table: strings.Repeat("a", pgname.MaxTableLen+1)},
		{Schema: strings.Repeat("s", pgname.MaxSchemaLen+1)},
	} {
		for _, s := range bothSeries {
			_, err := s.new(cfg)
			if !errors.Is(err, migrations.ErrInvalidConfig) || !errors.Is(err, pgname.ErrInvalidName) {
				t.Errorf("%s migrator of %+v = %v, want ErrInvalidConfig wrapping ErrInvalidName", s.name, cfg, err)
			}
		}
	}
}

func TestUnreachableDatabaseSaysHowToStartIt(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = newMigrator(t, migrations.Config{}).Up(context.Background(), pool)
	if err == nil || !strings.Contains(err.Error(), "make services") {
		t.Fatalf("Up against a closed port = %v, want a hint to run make services", err)
	}
}

// TestPlainSQLFilesMatchTheGoAPI applies the files of each series (under sql/
// and sql/inbox/) with psql, as a team with its own migration tool would, and
// checks that they build the same table as the Migrator, then that the down
// files remove it.
func TestPlainSQLFilesMatchTheGoAPI(t *testing.T) {
	t.Parallel()
	eachSeries(t, testPlainSQLFilesMatchTheGoAPI)
}

func testPlainSQLFilesMatchTheGoAPI(t *testing.T, s series) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("psql not found; `make services` installs postgresql-client")
		}
		t.Skip("psql not found; run `make services`")
	}
	pg := testkit.Postgres(t)
	ctx := context.Background()
	viaGo := pg.FreshSchema(t)
	if _, err := s.migrator(t, migrations.Config{Schema: viaGo}).Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	ups, _ := filepath.Glob(s.dir + "/*.up.sql")
	downs, _ := filepath.Glob(s.dir + "/*.down.sql")
	if len(ups) != len(s.versions()) || len(downs) != len(s.versions()) {
		t.Fatalf("found %d up and %d down files under %s, want %d of each", len(ups), len(downs), s.dir, len(s.versions()))
	}
	slices.Reverse(downs)
	runPsql := func(files []string) {
		t.Helper()
		for _, f := range files {
			cmd := exec.Command(psql, pg.URL, "-v", "ON_ERROR_STOP=1", "-q", "-f", f)
			cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+pg.Schema)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("psql -f %s: %v\n%s", f, err, out)
			}
		}
	}
	runPsql(ups)
	for _, table := range s.tables {
		if got, want := describe(t, pg.Pool, pg.Schema, table), describe(t, pg.Pool, viaGo, table); !slices.Equal(got, want) {
			t.Fatalf("psql-applied %s differs from the Go API's:\n psql: %v\n   go: %v", table, got, want)
		}
	}
	runPsql(downs)
	if tableExists(t, pg.Pool, pg.Schema, s.table) {
		t.Fatalf("down files left %s behind", s.table)
	}
}

// describe lists a table's columns, index definitions, constraints and
// triggers with the schema name taken out, so two schemas compare equal.
func describe(t *testing.T, db *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = $2
		UNION ALL
		SELECT replace(indexdef, $1 || '.', '') FROM pg_indexes WHERE schemaname = $1 AND tablename = $2
		UNION ALL
		SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
		JOIN pg_namespace n ON n.oid = r.relnamespace WHERE n.nspname = $1 AND r.relname = $2
		UNION ALL
		SELECT replace(pg_get_triggerdef(t.oid), $1 || '.', '') FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = r.relnamespace WHERE n.nspname = $1 AND r.relname = $2 AND NOT t.tgisinternal
		ORDER BY 1`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("no %s in schema %s", table, schema)
	}
	return lines
}

// TestInboxBesideOutbox migrates both tables, renamed, into one schema: each
// keeps its own version table, and reverting one leaves the other.
func TestInboxBesideOutbox(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	out := outboxSeries.migrator(t, migrations.Config{Schema: pg.Schema})
	in := inboxSeries.migrator(t, migrations.Config{Schema: pg.Schema, Table: "billing_inbox"})
	for _, m := range []*migrations.Migrator{out, in} {
		if _, err := m.Up(ctx, pg.Pool); err != nil {
			t.Fatal(err)
		}
	}
	indexes := indexNames(t, pg.Pool, pg.Schema, "billing_inbox")
	if want := []string{"billing_inbox_pkey", "billing_inbox_processed"}; !slices.Equal(indexes, want) {
		t.Errorf("billing_inbox indexes = %v, want %v", indexes, want)
	}
	if tableExists(t, pg.Pool, pg.Schema, "courier_inbox") {
		t.Error("courier_inbox created although Table is billing_inbox")
	}
	if _, err := in.Down(ctx, pg.Pool, len(inboxSeries.versions())); err != nil {
		t.Fatal(err)
	}
	states, err := out.Status(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if !s.Applied {
			t.Errorf("outbox migration %d unapplied by the inbox's Down", s.Version)
		}
	}
	if tableExists(t, pg.Pool, pg.Schema, "billing_inbox") || !tableExists(t, pg.Pool, pg.Schema, "courier_outbox") {
		t.Fatal("the inbox's Down did not drop billing_inbox alone")
	}
}
