package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/courierkit/courier/internal/pgname"
)

// ErrOutboxNotReady is matched (errors.Is) by the error Run returns at start
// when the outbox's schema, one of its tables or one of their columns is
// missing, and by the errors of the claims, enqueues and admin queries that
// meet such an outbox. Its *OutboxNotReadyError says what is missing.
var ErrOutboxNotReady = errors.New("producer: the outbox tables are missing or older than this courier")

// OutboxNotReadyError says what of an outbox's objects is missing: the
// schema, a table (the outbox of an older courier lacks <table>_waiting and
// the others), or a column. Create or upgrade the tables with `courier
// migrate up --schema <schema> --table <table>` or migrations.Migrator.Up.
type OutboxNotReadyError struct {
	// Schema and Table name the outbox.
	Schema, Table string
	// Missing is what is missing: "schema <s>", "table <s>.<t>",
	// "column <s>.<t>.<c>" or "index <s>.<i> on a hash of topic and key",
	// several joined by ", ".
	Missing string
	// Err is PostgreSQL's error, when the absence came up as one.
	Err error
}

func (e *OutboxNotReadyError) Error() string {
	what := "is not at the layout this courier needs"
	switch {
	case strings.HasPrefix(e.Missing, "schema "):
		what = "does not exist"
	case e.Missing == "table "+e.Schema+"."+e.Table:
		what = "does not exist"
	case strings.HasPrefix(e.Missing, "index "), strings.HasPrefix(e.Missing, "table "):
		what = "has the layout of an older courier" // a table or index of a later migration is missing
	}
	msg := fmt.Sprintf("producer: the outbox table %s.%s %s (missing: %s): create or upgrade it with "+
		"`courier migrate up --schema %s --table %s`, or in Go with migrations.New(migrations.Config{Schema: %q, Table: %q}) and its Up; "+
		"or fix the relay's Schema and Table",
		e.Schema, e.Table, what, e.Missing, e.Schema, e.Table, e.Schema, e.Table)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns PostgreSQL's error, if any.
func (e *OutboxNotReadyError) Unwrap() error { return e.Err }

// Is matches ErrOutboxNotReady.
func (e *OutboxNotReadyError) Is(target error) bool { return target == ErrOutboxNotReady }

// layoutKeyIndexes are the tables, by suffix, whose index by key must be
// on a hash of topic and key (migration 5, see keyHash): the relay's
// claim looks keys up by that hash.
var layoutKeyIndexes = []string{"waiting", "dead"}

// checkLayout returns an *OutboxNotReadyError when the outbox's schema,
// tables, columns or indexes by key hash are missing, and PostgreSQL's error when it could not
// look.
func (s *store) checkLayout(ctx context.Context, db DBTX) error {
	t := s.names.table
	var relations, columnRels, columns []string
	for _, l := range layoutColumns {
		rel := t.String()
		if l.suffix != "" {
			rel = t.Derived(l.suffix)
		}
		relations = append(relations, rel)
		for c := range strings.SplitSeq(l.columns, ",") {
			columnRels, columns = append(columnRels, rel), append(columns, strings.TrimSpace(c))
		}
	}
	var indexRels, indexes []string
	for _, suffix := range layoutKeyIndexes {
		indexRels, indexes = append(indexRels, t.Derived(suffix)), append(indexes, t.Derived(suffix+"_key"))
	}
	var missing []string
	if err := db.QueryRow(ctx, layoutSQL, t.Schema, relations, columns, columnRels, indexRels, indexes).Scan(&missing); err != nil {
		return fmt.Errorf("producer: look up the outbox tables %s: %w", t, err)
	}
	if len(missing) == 0 {
		return nil
	}
	switch {
	case strings.HasPrefix(missing[0], "schema "), missing[0] == "table "+t.String():
		missing = missing[:1] // the whole outbox is missing with it
	case strings.HasPrefix(missing[0], "table "):
		// An older layout: its tables say it, their columns would only
		// add noise.
		missing = slices.DeleteFunc(missing, func(m string) bool { return !strings.HasPrefix(m, "table ") })
	}
	return &OutboxNotReadyError{Schema: t.Schema, Table: t.Name, Missing: strings.Join(missing, ", ")}
}

// undefinedObject turns PostgreSQL's error for a missing table (42P01) or
// column (42703) into an *OutboxNotReadyError, which names the migrate
// command that creates it; other errors are returned as they are.
func (s *store) undefinedObject(err error) error {
	pgErr, ok := pgError(err)
	if !ok || (pgErr.Code != "42P01" && pgErr.Code != "42703") {
		return err
	}
	what := strings.TrimSuffix(pgErr.Message, " does not exist")
	what = strings.NewReplacer("relation ", "table ", `"`, "").Replace(what)
	return &OutboxNotReadyError{Schema: s.names.table.Schema, Table: s.names.table.Name, Missing: what, Err: err}
}

// ready checks the outbox's layout before Run starts: an outbox that is
// not ready is returned; failing to look (PostgreSQL down) is logged and
// retried until ctx ends, as the batches would.
func (r *Relay) ready(ctx context.Context) error {
	delay := time.Duration(0)
	for {
		err := r.store.checkLayout(ctx, r.pool)
		if err == nil || errors.Is(err, ErrOutboxNotReady) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		delay = min(max(2*delay, 100*time.Millisecond), 5*time.Second)
		r.log.Error("checking the outbox tables failed; retrying", "error", err, "retry_in", delay)
		sleep(ctx, delay, nil)
	}
}

// LookupOutbox reports whether the outbox table schema.table exists, and
// whether it is current: an outbox of an older courier lacks
// <table>_waiting and the other tables. It is a quick check for a tool
// about to use the outbox; the relay's own check at start (see
// ErrOutboxNotReady) also looks at every column. A bad schema or table name
// matches ErrInvalidConfig.
func LookupOutbox(ctx context.Context, db DBTX, schema, table string) (exists, current bool, err error) {
	t, err := pgname.NewTable(schema, table)
	if err != nil {
		return false, false, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	err = db.QueryRow(ctx, outboxTablesSQL, t.String(), t.Derived("waiting")).Scan(&exists, &current)
	return exists, current, err
}
