package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestAuditLogPagesNewestFirst: entries come back newest first, each with
// its id, time and fields as written (the filter as the same JSON), and
// AuditLog pages on by id.
func TestAuditLogPagesNewestFirst(t *testing.T) {
	t.Parallel()
	pg, _ := setup(t)
	ctx := context.Background()
	admin := newAdmin(t, pg)
	filter, err := json.Marshal(producer.Filter{Topic: "orders", TenantID: "acme", Statuses: []string{"dead_lettered"}})
	if err != nil {
		t.Fatal(err)
	}
	written := []producer.AuditEntry{
		{Actor: "alice", Remote: "10.0.0.7:51234", Action: "requeue", Target: "orders", Filter: filter, Count: 12, Detail: "after the broker incident"},
		{Actor: "bob", Action: "purge", Target: "01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2", Count: 1},
		{Actor: "alice", Action: "login", Detail: "émoji ✓ and a tab\there"},
	}
	start := time.Now()
	for _, e := range written {
		if err := admin.Audit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	page, err := admin.AuditLog(ctx, 0, 2)
	if err != nil || len(page) != 2 {
		t.Fatalf("AuditLog(0, 2) = %d entries, %v; want 2", len(page), err)
	}
	rest, err := admin.AuditLog(ctx, page[1].ID, 2)
	if err != nil || len(rest) != 1 {
		t.Fatalf("AuditLog(%d, 2) = %d entries, %v; want the oldest one", page[1].ID, len(rest), err)
	}
	got := append(page, rest...)
	for i, e := range got {
		want := written[len(written)-1-i]
		if i > 0 && e.ID >= got[i-1].ID {
			t.Errorf("entry %d has id %d after id %d: want newest first", i, e.ID, got[i-1].ID)
		}
		if e.At.Before(start.Add(-time.Minute)) || e.At.After(time.Now().Add(time.Minute)) {
			t.Errorf("entry %d at %v, want now", i, e.At)
		}
		if !sameJSON(t, e.Filter, want.Filter) {
			t.Errorf("entry %d filter %s, want %s", i, e.Filter, want.Filter)
		}
		e.ID, e.At, e.Filter, want.Filter = 0, time.Time{}, nil, nil
		if !reflect.DeepEqual(e, want) {
			t.Errorf("entry %d = %+v, want %+v", i, e, want)
		}
	}
	if last, err := admin.AuditLog(ctx, rest[0].ID, 10); err != nil || len(last) != 0 {
		t.Errorf("AuditLog before the oldest entry = %d entries, %v; want none", len(last), err)
	}
}

// sameJSON reports whether a and b are the same JSON value, or both empty.
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// TestAuditRefusesWhatTheLogCannotHold: entries without an actor or an
// action, with text that holds a NUL or is not UTF-8 or is too long, with
// a filter that is not JSON (or holds a NUL), or with a negative count are
// refused with ErrInvalidAuditEntry before any SQL; so are a bad limit or
// a negative id for AuditLog, with ErrInvalidFilter.
func TestAuditRefusesWhatTheLogCannotHold(t *testing.T) {
	t.Parallel()
	admin := refusingAdmin(t)
	ctx := context.Background()
	ok := producer.AuditEntry{Actor: "alice", Action: "requeue"}
	for name, change := range map[string]func(*producer.AuditEntry){
		"no actor":               func(e *producer.AuditEntry) { e.Actor = "" },
		"blank action":           func(e *producer.AuditEntry) { e.Action = " \t" },
		"NUL in actor":           func(e *producer.AuditEntry) { e.Actor = "ali\x00ce" },
		"NUL in remote":          func(e *producer.AuditEntry) { e.Remote = "10.0.0.1\x00" },
		"NUL in detail":          func(e *producer.AuditEntry) { e.Detail = "\x00" },
		"target not UTF-8":       func(e *producer.AuditEntry) { e.Target = "\xff\xfe" },
		"action too long":        func(e *producer.AuditEntry) { e.Action = strings.Repeat("a", producer.MaxAuditNameBytes+1) },
		"target too long":        func(e *producer.AuditEntry) { e.Target = strings.Repeat("t", producer.MaxAuditTargetBytes+1) },
		"detail too long":        func(e *producer.AuditEntry) { e.Detail = strings.Repeat("d", producer.MaxAuditDetailBytes+1) },
		"filter not JSON":        func(e *producer.AuditEntry) { e.Filter = json.RawMessage(`{"Topic": `) },
		"filter of two values":   func(e *producer.AuditEntry) { e.Filter = json.RawMessage(`{} {}`) },
		"NUL in a filter string": func(e *producer.AuditEntry) { e.Filter = json.RawMessage(`{"Topic":"a\u0000b"}`) },
		"NUL in a filter name":   func(e *producer.AuditEntry) { e.Filter = json.RawMessage(`{"\u0000":1}`) },
		"filter not UTF-8":       func(e *producer.AuditEntry) { e.Filter = json.RawMessage("{\"Topic\":\"\xff\"}") },
		"filter too large": func(e *producer.AuditEntry) {
			e.Filter = json.RawMessage(`"` + strings.Repeat("f", producer.MaxAuditFilterBytes) + `"`)
		},
		"negative count": func(e *producer.AuditEntry) { e.Count = -1 },
	} {
		e := ok
		change(&e)
		if err := admin.Audit(ctx, e); !errors.Is(err, producer.ErrInvalidAuditEntry) {
			t.Errorf("Audit with %s = %v, want ErrInvalidAuditEntry", name, err)
		}
	}
	for _, c := range []struct {
		before int64
		limit  int
	}{{-1, 10}, {0, 0}, {0, -5}, {0, producer.MaxPage + 1}} {
		if _, err := admin.AuditLog(ctx, c.before, c.limit); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Errorf("AuditLog(%d, %d) = %v, want ErrInvalidFilter", c.before, c.limit, err)
		}
	}
}

// TestAuditLogIsOptional: AuditReady says the audit log (migration 7) is
// missing from an outbox without it, Audit on it says to migrate, and a
// relay runs without it.
func TestAuditLogIsOptional(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	m := migrateOutbox(t, pg)
	ctx := context.Background()
	if ok, err := producer.AuditReady(ctx, pg.Pool, pg.Schema, ""); err != nil || !ok {
		t.Fatalf("AuditReady of a migrated outbox = %v, %v; want true", ok, err)
	}
	downTo(t, m, pg, 6)
	if ok, err := producer.AuditReady(ctx, pg.Pool, pg.Schema, ""); err != nil || ok {
		t.Fatalf("AuditReady without migration 7 = %v, %v; want false", ok, err)
	}
	if _, err := producer.AuditReady(ctx, pg.Pool, "Bad Schema", ""); !errors.Is(err, producer.ErrInvalidConfig) {
		t.Fatalf("AuditReady of a bad schema name = %v, want ErrInvalidConfig", err)
	}
	// The relay needs the later migrations; the audit log, it does not.
	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, "DROP TABLE "+pg.Schema+".courier_outbox_audit"); err != nil {
		t.Fatal(err)
	}
	admin := newAdmin(t, pg)
	err := admin.Audit(ctx, producer.AuditEntry{Actor: "alice", Action: "requeue"})
	if !errors.Is(err, producer.ErrOutboxNotReady) || !strings.Contains(err.Error(), "courier migrate up") {
		t.Fatalf("Audit without the log = %v, want ErrOutboxNotReady naming the migrate command", err)
	}

	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, pg, out, orderCreated("o-1"))
	pub := &fakePublisher{}
	runRelay(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub}))
	testkit.WaitFor(t, 10*time.Second, "the relay to publish without the audit log", func() bool {
		ids := pub.ackedIDs("orders")
		return len(ids) == 1 && ids[0] == id.String()
	})
}
