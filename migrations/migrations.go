// Package migrations creates and upgrades courier's PostgreSQL tables.
//
// There are two series of migrations, one per table:
//
//   - the outbox (New, All): sql/NNNN_name.up.sql and .down.sql, creating
//     courier_outbox, the producer's transactional outbox;
//   - the inbox (NewInbox, AllInbox): sql/inbox/NNNN_name.up.sql and
//     .down.sql, creating courier_inbox, the ids of processed messages that
//     dedupe.Inbox records in a handler's transaction.
//
// The files are embedded, and are plain SQL that create their table in the
// current schema, so a team with its own migration tool (golang-migrate,
// goose, Flyway, …) can copy and apply them as they are. A Migrator applies
// one series into a configured schema and table name, records each applied
// version in <table>_migrations, and serializes concurrent runs with a
// PostgreSQL advisory lock, so any number of processes may migrate at
// start-up.
//
// The guide tells how to use it: [The outbox tables, migrations and upgrades].
//
// [The outbox tables, migrations and upgrades]: https://github.com/courierkit/courier/blob/main/docs/outbox-tables.md
package migrations

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courierkit/courier/internal/pgname"
)

//go:embed sql/*.sql sql/inbox/*.sql
var files embed.FS

// Defaults of Config.
const (
	// DefaultSchema is the schema New and NewInbox use when none is
	// configured.
	DefaultSchema = pgname.DefaultSchema
	// DefaultTable is the outbox table name New uses when none is
	// configured.
	DefaultTable = pgname.DefaultTable
	// DefaultInboxTable is the inbox table name NewInbox uses when none is
	// configured.
	DefaultInboxTable = pgname.DefaultInboxTable
)

// series is one table's migrations: the embedded files under dir, written
// for the table named table.
type series struct {
	table      string
	tableWord  *regexp.Regexp // table at the start of a word, for render
	migrations []Migration
}

func mustSeries(fsys fs.FS, dir, table string) *series {
	ms, err := load(fsys, dir)
	if err != nil {
		panic(err) // the files are compiled in; a test covers them
	}
	return &series{table: table, tableWord: regexp.MustCompile(`\b` + table), migrations: ms}
}

var (
	outbox = mustSeries(files, "sql", DefaultTable)
	inbox  = mustSeries(files, "sql/inbox", DefaultInboxTable)
)

// Migration is one embedded schema change.
type Migration struct {
	// Version orders migrations; it is the NNNN prefix of the file names.
	Version int
	// Name is the file name's middle part, e.g. "create_outbox".
	Name string
	// Up and Down are the file contents, with the default table name.
	Up, Down string
}

// State is a migration and whether it is applied to a table.
type State struct {
	Migration
	Applied   bool
	AppliedAt time.Time // zero when not applied
}

// Config selects where the migrations apply. The zero value is valid.
type Config struct {
	// Schema holds the table; it is created when missing. Must be a
	// lower-case identifier. Defaults to "public" (DefaultSchema).
	Schema string
	// Table is the table name. Must be a lower-case identifier of at most 40
	// bytes. Defaults to "courier_outbox" (DefaultTable) for New and to
	// "courier_inbox" (DefaultInboxTable) for NewInbox.
	Table string
	// Logger receives one line per applied or reverted migration. Defaults to
	// a logger that discards everything.
	Logger *slog.Logger
}

// ErrInvalidConfig is matched by every error New and NewInbox return.
var ErrInvalidConfig = errors.New("migrations: invalid config")

// ErrInvalidSteps is returned by Down for a step count below 1.
var ErrInvalidSteps = errors.New("migrations: steps must be at least 1")

// DB is what the Migrator needs from PostgreSQL: *pgx.Conn, *pgxpool.Pool and
// *pgxpool.Conn all satisfy it. Each Up or Down runs in one transaction.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrator applies one series of embedded migrations (the outbox's or the
// inbox's) to one table.
type Migrator struct {
	series *series
	table  pgname.Table
	log    *slog.Logger
}

// New applies cfg's defaults (see Config.WithDefaults), validates it and
// returns a Migrator of the outbox table.
func New(cfg Config) (*Migrator, error) { return newMigrator(outbox, cfg.WithDefaults()) }

// NewInbox applies cfg's defaults (see Config.WithInboxDefaults), validates
// it and returns a Migrator of the inbox table that dedupe.Inbox uses. Its
// versions are recorded apart from the outbox's, in <table>_migrations
// (courier_inbox_migrations by default).
func NewInbox(cfg Config) (*Migrator, error) { return newMigrator(inbox, cfg.WithInboxDefaults()) }

// WithDefaults returns c as New runs it: Schema DefaultSchema and Table
// DefaultTable when empty, and a Logger that discards everything when nil.
func (c Config) WithDefaults() Config { return c.withDefaults(DefaultTable) }

// WithInboxDefaults returns c as NewInbox runs it: as WithDefaults, but
// with Table DefaultInboxTable when empty.
func (c Config) WithInboxDefaults() Config { return c.withDefaults(DefaultInboxTable) }

func (c Config) withDefaults(table string) Config {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.Table = cmp.Or(c.Table, table)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate refuses what c, its defaults applied, cannot run with, naming
// the field and the fix, and returns the table it names.
func (c Config) validate() (pgname.Table, error) {
	table, err := pgname.NewTable(c.Schema, c.Table)
	if err != nil {
		return table, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return table, nil
}

// newMigrator returns a Migrator of series s running cfg, whose defaults
// are applied.
func newMigrator(s *series, cfg Config) (*Migrator, error) {
	table, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Migrator{series: s, table: table, log: cfg.Logger}, nil
}

// All returns the embedded outbox migrations in version order.
func All() []Migration { return slices.Clone(outbox.migrations) }

// AllInbox returns the embedded inbox migrations in version order.
func AllInbox() []Migration { return slices.Clone(inbox.migrations) }

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// load reads the migrations in directory dir of fsys; subdirectories are
// other series and are skipped.
func load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not named NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		body, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		version, _ := strconv.Atoi(m[1])
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Version: version, Name: m[2]}
			byVersion[version] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %d has two names, %q and %q", version, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	var ms []Migration
	for _, mig := range byVersion {
		if mig.Up == "" || mig.Down == "" {
			return nil, fmt.Errorf("migrations: version %d (%s) needs both an up and a down file", mig.Version, mig.Name)
		}
		ms = append(ms, *mig)
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, mig := range ms {
		if mig.Version != i+1 {
			return nil, fmt.Errorf("migrations: versions must run 1, 2, 3, … without gaps; found %d at position %d", mig.Version, i+1)
		}
	}
	return ms, nil
}

// Up applies every migration not yet applied, in version order, in one
// transaction, and returns the ones it applied (none when up to date).
func (m *Migrator) Up(ctx context.Context, db DB) ([]Migration, error) {
	var applied []Migration
	err := m.locked(ctx, db, func(tx pgx.Tx, done map[int]time.Time) error {
		for _, mig := range m.series.migrations {
			if _, ok := done[mig.Version]; ok {
				continue
			}
			if err := m.exec(ctx, tx, mig, mig.Up); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+m.versionTable()+" (version, name) VALUES ($1, $2)", mig.Version, mig.Name); err != nil {
				return fmt.Errorf("migrations: record version %d: %w", mig.Version, err)
			}
			m.log.InfoContext(ctx, "migration applied", "table", m.table.String(), "version", mig.Version, "name", mig.Name)
			applied = append(applied, mig)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// Down reverts the most recent steps applied migrations, newest first, in one
// transaction, and returns the ones it reverted. Reverting the first migration
// drops the table and every row in it: the outbox's events, or the inbox's
// processed ids.
func (m *Migrator) Down(ctx context.Context, db DB, steps int) ([]Migration, error) {
	if steps < 1 {
		return nil, fmt.Errorf("%w: got %d", ErrInvalidSteps, steps)
	}
	var reverted []Migration
	err := m.locked(ctx, db, func(tx pgx.Tx, done map[int]time.Time) error {
		all := m.series.migrations
		for i := len(all) - 1; i >= 0 && len(reverted) < steps; i-- {
			mig := all[i]
			if _, ok := done[mig.Version]; !ok {
				continue
			}
			if err := m.exec(ctx, tx, mig, mig.Down); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+m.versionTable()+" WHERE version = $1", mig.Version); err != nil {
				return fmt.Errorf("migrations: forget version %d: %w", mig.Version, err)
			}
			m.log.InfoContext(ctx, "migration reverted", "table", m.table.String(), "version", mig.Version, "name", mig.Name)
			reverted = append(reverted, mig)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reverted, nil
}

// Status reports every embedded migration and whether it is applied. It
// changes nothing, not even when the schema does not exist yet.
func (m *Migrator) Status(ctx context.Context, db DB) ([]State, error) {
	var states []State
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		done, err := m.appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		for _, mig := range m.series.migrations {
			at, ok := done[mig.Version]
			states = append(states, State{Migration: mig, Applied: ok, AppliedAt: at})
		}
		return nil
	})
	if err != nil {
		return nil, wrapConnErr(err)
	}
	return states, nil
}

// locked runs fn in a transaction holding the schema's migration lock, with
// the schema and version table in place and search_path set to the schema.
func (m *Migrator) locked(ctx context.Context, db DB, fn func(tx pgx.Tx, done map[int]time.Time) error) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// One lock per schema: it serializes migrators of every table in the
		// schema, which also makes CREATE SCHEMA IF NOT EXISTS race-free.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "courier.migrations:"+m.table.Schema); err != nil {
			return fmt.Errorf("migrations: take advisory lock: %w", err)
		}
		setup := "CREATE SCHEMA IF NOT EXISTS " + m.table.Schema + ";\n" +
			"SET LOCAL search_path TO " + m.table.Schema + ";\n" +
			"CREATE TABLE IF NOT EXISTS " + m.versionTable() + " (\n" +
			"    version    integer     PRIMARY KEY,\n" +
			"    name       text        NOT NULL,\n" +
			"    applied_at timestamptz NOT NULL DEFAULT now()\n" +
			")"
		if _, err := tx.Exec(ctx, setup); err != nil {
			return fmt.Errorf("migrations: prepare schema %s: %w", m.table.Schema, err)
		}
		done, err := m.appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		return fn(tx, done)
	})
	return wrapConnErr(err)
}

func (m *Migrator) appliedVersions(ctx context.Context, tx pgx.Tx) (map[int]time.Time, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", m.versionTable()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: look up %s: %w", m.versionTable(), err)
	}
	done := map[int]time.Time{}
	if !exists {
		return done, nil
	}
	rows, err := tx.Query(ctx, "SELECT version, applied_at FROM "+m.versionTable())
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", m.versionTable(), err)
	}
	var version int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&version, &at}, func() error {
		done[version] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", m.versionTable(), err)
	}
	return done, nil
}

func (m *Migrator) exec(ctx context.Context, tx pgx.Tx, mig Migration, sql string) error {
	if _, err := tx.Exec(ctx, render(sql, m.series.tableWord, m.table.Name)); err != nil {
		return fmt.Errorf("migrations: version %d (%s) on %s: %w", mig.Version, mig.Name, m.table, err)
	}
	return nil
}

func (m *Migrator) versionTable() string { return m.table.Derived("migrations") }

// render returns a migration's SQL with the series' default table name
// (matched by defaultWord), and every index and constraint name derived from
// it, replaced by the validated table.
func render(sql string, defaultWord *regexp.Regexp, table string) string {
	return defaultWord.ReplaceAllLiteralString(sql, table)
}

// wrapConnErr adds a hint to errors of a server that could not be reached.
func wrapConnErr(err error) error {
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) {
		return err
	}
	return fmt.Errorf("%w (is PostgreSQL running? try `make services`)", err)
}
