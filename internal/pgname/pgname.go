// Package pgname validates the PostgreSQL schema and table names that courier's
// configuration accepts and renders them safely into SQL.
//
// Names are never spliced into SQL unchecked: a name must be a plain lower-case
// identifier, so it needs no quoting, cannot collide with a keyword trick, and
// every name derived from it (indexes, the migration version table) still fits
// PostgreSQL's 63-byte identifier limit.
package pgname

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// DefaultSchema is the schema used when none is configured.
	DefaultSchema = "public"
	// DefaultTable is the outbox table name used when none is configured.
	DefaultTable = "courier_outbox"
	// DefaultInboxTable is the dedupe inbox table name used when none is
	// configured.
	DefaultInboxTable = "courier_inbox"

	// MaxSchemaLen is PostgreSQL's identifier limit.
	MaxSchemaLen = 63
	// MaxTableLen leaves room for the suffixes of derived names such as
	// "<table>_idempotency_key" and "<table>_migrations".
	MaxTableLen = 40
)

// ErrInvalidName is matched by every validation error of this package.
var ErrInvalidName = errors.New("invalid PostgreSQL identifier")

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Table is a validated, schema-qualified table name.
type Table struct {
	Schema string
	Name   string
}

// NewTable applies the defaults to empty names and validates both. Errors
// name the configuration field (Schema or Table) and match ErrInvalidName.
func NewTable(schema, name string) (Table, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if name == "" {
		name = DefaultTable
	}
	if err := check("Schema", schema, MaxSchemaLen); err != nil {
		return Table{}, err
	}
	if err := check("Table", name, MaxTableLen); err != nil {
		return Table{}, err
	}
	return Table{Schema: schema, Name: name}, nil
}

// String returns the schema-qualified name, e.g. public.courier_outbox.
// It is safe to use in SQL because both parts were validated.
func (t Table) String() string { return t.Schema + "." + t.Name }

// Derived returns the name of an object derived from the table, e.g.
// Derived("migrations") is "courier_outbox_migrations", qualified by schema.
func (t Table) Derived(suffix string) string { return t.Schema + "." + t.Name + "_" + suffix }

func check(field, name string, maxLen int) error {
	switch {
	case len(name) > maxLen:
		return fmt.Errorf("%w: %s %q is %d bytes long; use at most %d", ErrInvalidName, field, name, len(name), maxLen)
	case !identifier.MatchString(name):
		return fmt.Errorf("%w: %s %q must be a lower-case identifier (letters a-z, digits, underscores; not starting with a digit)", ErrInvalidName, field, name)
	}
	return nil
}

// UndefinedTable reports whether err is PostgreSQL's error for a missing
// relation (SQLSTATE 42P01), which the callers answer with the migrate
// command that creates it.
func UndefinedTable(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "42P01"
}
