package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/internal/pgname"
)

// ErrInvalidAuditEntry is matched by the error of Audit for an entry the
// log cannot hold: it names the field and the bound.
var ErrInvalidAuditEntry = errors.New("producer: invalid audit entry")

// AuditEntry is one action of an operator in the audit log of an outbox
// (the table <table>_audit, created by migration 7): who did what, when,
// from where, on which events and to how many.
type AuditEntry struct {
	// ID and At are given by the log as it records the entry, in
	// increasing order; Audit ignores them.
	ID int64
	At time.Time
	// Actor is who acted (a user name; required), Remote where from (an
	// address), Action what they did (such as "requeue" or "purge";
	// required) and Target what on (an event id, a topic).
	Actor, Remote, Action, Target string
	// Filter is the selection the action applied to, as JSON (such as a
	// Filter, marshalled), or empty.
	Filter json.RawMessage
	// Count is how many events the action touched: 0 or more.
	Count int64
	// Detail is free text: a reason, an outcome. Optional.
	Detail string
}

// The bounds of AuditEntry's fields, in bytes.
const (
	MaxAuditNameBytes   = 256   // Actor, Action, Remote
	MaxAuditTargetBytes = 2048  // Target
	MaxAuditDetailBytes = 4096  // Detail
	MaxAuditFilterBytes = 16384 // Filter
)

// validate refuses what the log cannot hold or a reader should not get:
// a missing Actor or Action, text that is not UTF-8 or holds a NUL, text
// over its bound, a Filter that is not JSON (or holds a NUL), a negative
// Count.
func (e AuditEntry) validate() error {
	for _, f := range []struct {
		field, value string
		limit        int
		required     bool
	}{
		{"Actor", e.Actor, MaxAuditNameBytes, true}, {"Action", e.Action, MaxAuditNameBytes, true},
		{"Remote", e.Remote, MaxAuditNameBytes, false}, {"Target", e.Target, MaxAuditTargetBytes, false},
		{"Detail", e.Detail, MaxAuditDetailBytes, false},
	} {
		if f.required && strings.TrimSpace(f.value) == "" {
			return fmt.Errorf("%w: %s is empty: say who acted and what they did", ErrInvalidAuditEntry, f.field)
		}
		if err := checkText(f.value, f.limit); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidAuditEntry, f.field, err)
		}
	}
	if e.Count < 0 {
		return fmt.Errorf("%w: Count %d is negative", ErrInvalidAuditEntry, e.Count)
	}
	if len(e.Filter) == 0 {
		return nil
	}
	if len(e.Filter) > MaxAuditFilterBytes {
		return fmt.Errorf("%w: Filter: %d bytes, at most %d", ErrInvalidAuditEntry, len(e.Filter), MaxAuditFilterBytes)
	}
	if err := checkJSON(e.Filter); err != nil {
		return fmt.Errorf("%w: Filter: %w", ErrInvalidAuditEntry, err)
	}
	return nil
}

// checkJSON refuses what PostgreSQL's jsonb cannot hold: text that is not
// JSON or not UTF-8, and a string (or name) with a NUL.
func checkJSON(raw []byte) error {
	if !utf8.Valid(raw) || !json.Valid(raw) {
		return fmt.Errorf("%w: not JSON in UTF-8", ErrInvalidText)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidText, err)
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return fmt.Errorf("%w: a string holds a NUL (\\u0000)", ErrInvalidText)
		}
	}
}

// Audit records e in the audit log. Through an Admin on a pgx.Tx, the
// entry commits (or rolls back) with the action it records. An entry the
// log cannot hold is an error matching ErrInvalidAuditEntry, before any
// SQL; an outbox without the log (see AuditReady) one matching
// ErrOutboxNotReady.
func (a *Admin) Audit(ctx context.Context, e AuditEntry) error {
	if err := e.validate(); err != nil {
		return err
	}
	var filter []byte
	if len(e.Filter) > 0 {
		filter = e.Filter
	}
	_, err := a.db.Exec(ctx, a.store.names.render(auditSQL, false), e.Actor, e.Remote, e.Action, e.Target, filter, e.Count, e.Detail)
	if err != nil {
		return a.wrap("record the audit entry", err)
	}
	return nil
}

// AuditLog returns up to limit entries of the audit log, newest first,
// with an id below beforeID (0: from the newest): pass the last ID of a
// page to get the next one. limit is from 1 to MaxPage; a bad limit or a
// negative beforeID is an error matching ErrInvalidFilter.
func (a *Admin) AuditLog(ctx context.Context, beforeID int64, limit int) ([]AuditEntry, error) {
	switch {
	case beforeID < 0:
		return nil, fmt.Errorf("%w: beforeID %d: use the ID of an entry, or 0 for the newest", ErrInvalidFilter, beforeID)
	case limit < 1 || limit > MaxPage:
		return nil, fmt.Errorf("%w: limit %d: use 1 to %d", ErrInvalidFilter, limit, MaxPage)
	case beforeID == 0:
		beforeID = math.MaxInt64
	}
	rows, err := a.db.Query(ctx, a.store.names.render(auditLogSQL, false), beforeID, limit)
	if err != nil {
		return nil, a.wrap("read the audit log", err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Remote, &e.Action, &e.Target, &e.Filter, &e.Count, &e.Detail)
		return e, err
	})
	if err != nil {
		return nil, a.wrap("read the audit log", err)
	}
	return entries, nil
}

// AuditReady reports whether the outbox schema.table has its audit log
// (migration 7). A relay does not need it, so an outbox may run without
// it; a console can say to run `courier migrate up` when it is missing. A
// bad schema or table name matches ErrInvalidConfig.
func AuditReady(ctx context.Context, db DBTX, schema, table string) (bool, error) {
	t, err := pgname.NewTable(schema, table)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var ok bool
	if err := db.QueryRow(ctx, existsSQL, t.Derived("audit")).Scan(&ok); err != nil {
		return false, fmt.Errorf("producer: look up the audit log of %s: %w", t, err)
	}
	return ok, nil
}
