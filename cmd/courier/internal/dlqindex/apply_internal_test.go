package dlqindex

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/ceheader"
)

// entries returns n readable entries of partition p from offset from, one
// a second from at, each with an error of its own.
func entries(x *Index, p int32, from int64, n int, at time.Time) []rec {
	var out []rec
	for i := range int64(n) {
		o := from + i
		out = append(out, x.rec(dlq.Entry{Partition: p, Offset: o, Timestamp: at.Add(time.Duration(o) * time.Second),
			Envelope: dlq.Envelope{OriginalTopic: "orders", Error: fmt.Sprintf("error %d", o), ErrorKind: dlq.KindPermanent, FailedAt: at}}))
	}
	return out
}

// TestAnInterruptedReadKeepsWhatItGot: a read that ctx stopped part way
// keeps the records it took, publishes them, and the next read starts
// after them; RefreshedAt waits for a complete read.
func TestAnInterruptedReadKeepsWhatItGot(t *testing.T) {
	x := New(nil, "orders.dlq")
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	x.apply([]dlq.Extent{{Partition: 0, From: 0, End: 4}, {Partition: 1, From: 0, End: 0}}, entries(x, 0, 0, 4, at), false, at)
	if x.Len() != 4 || x.parts[0].next != 4 || x.parts[1].next != 0 || !x.RefreshedAt().IsZero() {
		t.Fatalf("after an interrupted read: Len %d, next %d and %d, RefreshedAt %v; want 4, 4 and 0, zero",
			x.Len(), x.parts[0].next, x.parts[1].next, x.RefreshedAt())
	}
	fresh := append(entries(x, 0, 4, 2, at), entries(x, 1, 0, 3, at)...)
	x.apply([]dlq.Extent{{Partition: 0, From: 4, End: 6}, {Partition: 1, From: 0, End: 3}}, fresh, true, at)
	if x.Len() != 9 || !x.RefreshedAt().Equal(at) {
		t.Errorf("after the next read: Len %d, RefreshedAt %v; want 9, %v", x.Len(), x.RefreshedAt(), at)
	}
}

// TestRetentionForgetsTheValuesOfRecordsGone: once retention deleted most
// records, the errors only they held leave the tables, while a snapshot
// taken before still reads its own.
func TestRetentionForgetsTheValuesOfRecordsGone(t *testing.T) {
	x := New(nil, "orders.dlq")
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	x.apply([]dlq.Extent{{Partition: 0, Oldest: 0, From: 0, End: 300}}, entries(x, 0, 0, 300, at), true, at)
	before := x.snap.Load()

	x.apply([]dlq.Extent{{Partition: 0, Oldest: 290, From: 300, End: 300}}, nil, true, at)
	if n := len(x.tabs[colError].vals); n != 11 {
		t.Errorf("the error table holds %d values after retention left 10 records, want their 10 and \"\"", n)
	}
	items, _ := x.List(dlq.Filter{}, Cursor{}, 100)
	if len(items) != 10 || items[0].Error != "error 299" || items[9].Error != "error 290" || items[0].OriginalTopic != "orders" {
		t.Errorf("after retention List gives %d items, from %q to %q", len(items), items[0].Error, items[len(items)-1].Error)
	}
	if s := x.Summary(dlq.Filter{ErrorContains: "error 29"}); s.Total != 10 || len(s.ByError) != 10 {
		t.Errorf("after retention Summary counts %d records in %d errors, want 10 in 10", s.Total, len(s.ByError))
	}
	if it := before.item(&before.recs[5]); it.Error != "error 5" {
		t.Errorf("the snapshot taken before retention reads %q, want \"error 5\"", it.Error)
	}
}

// TestHostileTenantsAreNotKept: ce_tenantid values that are no tenant
// (ceheader.ValidTenant: too long, control characters) count as none, so
// the tenant table keeps none of them however many distinct ones arrive,
// while the valid tenants beside them are kept and filtered on.
func TestHostileTenantsAreNotKept(t *testing.T) {
	x := New(nil, "orders.dlq")
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	var recs []rec
	for i := range 200 {
		tenant := fmt.Sprintf("%d-%s", i, strings.Repeat("t", 64<<10))
		if i%2 == 1 {
			tenant = fmt.Sprintf("acme-%d\x1b[2J", i)
		}
		if i%50 == 0 {
			tenant = "acme"
		}
		recs = append(recs, x.rec(dlq.Entry{Partition: 0, Offset: int64(i), Timestamp: at,
			Envelope: dlq.Envelope{OriginalTopic: "orders", Error: "boom", ErrorKind: dlq.KindPermanent, FailedAt: at,
				OriginalHeaders: map[string]string{ceheader.TenantID: tenant}}}))
	}
	x.apply([]dlq.Extent{{Partition: 0, From: 0, End: 200}}, recs, true, at)
	if vals := x.tabs[colTenant].vals; len(vals) != 2 {
		t.Errorf("the tenant table holds %d values, want 2: acme and \"\"", len(vals))
	}
	if s := x.Summary(dlq.Filter{TenantID: "acme"}); s.Total != 4 {
		t.Errorf("Summary of tenant acme counts %d records, want 4", s.Total)
	}
}
