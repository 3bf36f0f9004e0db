package producer_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/courierkit/courier/producer"
)

// TestCountByTenantCountsTheEventsStillInTheOutbox: per tenant, the
// pending, failed and dead-lettered events, not the published ones; the
// top by events waiting first, then by dead letters; the rest summed in
// Others.
func TestCountByTenantCountsTheEventsStillInTheOutbox(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t)
	ctx := context.Background()
	acme := producer.TenantCount{TenantID: "acme", Pending: 1, Failed: 1, DeadLettered: 1}
	globex := producer.TenantCount{TenantID: "globex", DeadLettered: 1}
	got, err := f.admin.CountByTenant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (producer.TenantCounts{Top: []producer.TenantCount{acme, globex}}); !reflect.DeepEqual(got, want) {
		t.Errorf("CountByTenant(10) = %+v, want %+v", got, want)
	}
	got, err = f.admin.CountByTenant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	globex.TenantID = ""
	if want := (producer.TenantCounts{Top: []producer.TenantCount{acme}, Others: globex, OtherTenants: 1}); !reflect.DeepEqual(got, want) {
		t.Errorf("CountByTenant(1) = %+v, want %+v", got, want)
	}
}

// TestCountByTenantIsBoundedWhateverTheTenants: 2,000 tenants give top
// rows and one of the others, which together count every event; the
// events without a tenant are a row of their own; the biggest tenant
// comes first.
func TestCountByTenantIsBoundedWhateverTheTenants(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	var batch []producer.Event
	for i := range 2000 {
		batch = append(batch, producer.Event{Topic: "orders", Key: fmt.Sprint(i), Type: "Changed", Payload: []byte(`{}`), TenantID: fmt.Sprintf("t-%04d", i)})
	}
	for i := range 7 {
		batch = append(batch, producer.Event{Topic: "orders", Key: fmt.Sprint(i), Type: "Changed", Payload: []byte(`{}`), TenantID: "big"},
			producer.Event{Topic: "orders", Key: fmt.Sprint(i), Type: "Changed", Payload: []byte(`{}`)})
	}
	batch = append(batch, producer.Event{Topic: "orders", Key: "x", Type: "Changed", Payload: []byte(`{}`), TenantID: "big"})
	if _, err := out.EnqueueBatch(ctx, pg.Pool, batch); err != nil {
		t.Fatal(err)
	}
	got, err := newAdmin(t, pg).CountByTenant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Top) != 5 || got.OtherTenants != 2002-5 {
		t.Fatalf("%d top tenants and %d others, want 5 and %d", len(got.Top), got.OtherTenants, 2002-5)
	}
	if got.Top[0] != (producer.TenantCount{TenantID: "big", Pending: 8}) || got.Top[1] != (producer.TenantCount{Pending: 7}) {
		t.Errorf("top two %+v, want big with 8 pending, then the 7 events without a tenant", got.Top[:2])
	}
	total := got.Others.Pending
	for _, c := range got.Top {
		total += c.Pending
	}
	if total != int64(len(batch)) || got.Others.Failed != 0 || got.Others.DeadLettered != 0 {
		t.Errorf("top and others count %d pending (others %+v), want all %d", total, got.Others, len(batch))
	}
}

// TestCountByTenantCountsAnEmptyTenantAsNone: an empty tenant_id that
// other SQL wrote (Enqueue stores NULL) counts with the events without a
// tenant, in one row, whatever table holds them.
func TestCountByTenantCountsAnEmptyTenantAsNone(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t)
	ctx := context.Background()
	for _, sql := range []string{
		`UPDATE courier_outbox SET tenant_id = '' WHERE tenant_id = 'acme'`,
		`UPDATE courier_outbox_dead SET tenant_id = NULL WHERE tenant_id = 'globex'`,
	} {
		if tag, err := f.pg.Pool.Exec(ctx, sql); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v rows, %v", sql, tag.RowsAffected(), err)
		}
	}
	got, err := f.admin.CountByTenant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := producer.TenantCounts{Top: []producer.TenantCount{
		{Pending: 1, DeadLettered: 1},
		{TenantID: "acme", Failed: 1, DeadLettered: 1},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CountByTenant(10) = %+v, want %+v: one row without a tenant", got, want)
	}
}

// TestCountByTenantRefusesATopOutOfRange: the top is 1 to MaxTopTenants,
// checked before any SQL.
func TestCountByTenantRefusesATopOutOfRange(t *testing.T) {
	t.Parallel()
	admin := refusingAdmin(t)
	for _, top := range []int{0, -1, producer.MaxTopTenants + 1} {
		if _, err := admin.CountByTenant(context.Background(), top); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Errorf("CountByTenant(%d): %v, want ErrInvalidFilter", top, err)
		}
	}
}
