package dlqindex

import (
	"fmt"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
)

// TestRetentionForgetsTheValuesOfRecordsGone: once retention deleted most
// records, the errors only they held leave the tables, while a snapshot
// taken before still reads its own.
func TestRetentionForgetsTheValuesOfRecordsGone(t *testing.T) {
	x := New(nil, "orders.dlq")
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	var fresh []rec
	for i := range 300 {
		fresh = append(fresh, x.rec(dlq.Entry{Partition: 0, Offset: int64(i), Timestamp: at.Add(time.Duration(i) * time.Second),
			Envelope: dlq.Envelope{OriginalTopic: "orders", Error: fmt.Sprintf("error %d", i), ErrorKind: dlq.KindPermanent, FailedAt: at}}))
	}
	x.apply([]dlq.Extent{{Partition: 0, Oldest: 0, From: 0, End: 300}}, fresh, true, at)
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
