package dlqindex_test

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
)

// refreshed returns an index of the fixture's topic after one Refresh.
func (f *fixture) refreshed(t *testing.T) *dlqindex.Index {
	t.Helper()
	x := dlqindex.New(f.client, f.topic)
	f.refresh(t, x)
	return x
}

func (f *fixture) refresh(t *testing.T, x *dlqindex.Index) {
	t.Helper()
	if err := x.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
}

// scanned returns what dlq.Scan selects with filter: what the index must
// select.
func (f *fixture) scanned(t *testing.T, filter dlq.Filter) []dlq.Entry {
	t.Helper()
	var out []dlq.Entry
	if err := dlq.Scan(context.Background(), f.client, f.topic, filter, func(e dlq.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// itemOf is the Item the index must give for e.
func itemOf(e dlq.Entry) dlqindex.Item {
	it := dlqindex.Item{Partition: e.Partition, Offset: e.Offset}
	if !e.Timestamp.IsZero() {
		it.Timestamp = e.Timestamp.UTC()
	}
	if e.Err != nil {
		it.Corrupt = dlq.TruncateError(e.Err.Error())
		return it
	}
	env := e.Envelope
	it.OriginalTopic, it.Kind, it.Error = env.OriginalTopic, env.ErrorKind, dlq.TruncateError(env.Error)
	it.FailedAt, it.ConsumerGroup = env.FailedAt.UTC(), env.ConsumerGroup
	it.Attempts, it.ReplayCount = env.Attempts, env.ReplayCount
	switch {
	case env.OriginalKey != nil:
		it.Key = env.OriginalKey
	case env.OriginalKeyBase64 != nil:
		it.Key, it.KeyBinary = env.OriginalKeyBase64, true
	}
	return it
}

// newestFirst returns the items of entries in List's order.
func newestFirst(entries []dlq.Entry) []dlqindex.Item {
	var items []dlqindex.Item
	for _, e := range entries {
		items = append(items, itemOf(e))
	}
	slices.SortFunc(items, func(a, b dlqindex.Item) int {
		if c := b.Timestamp.Compare(a.Timestamp); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Partition, a.Partition); c != 0 {
			return c
		}
		return cmp.Compare(b.Offset, a.Offset)
	})
	return items
}

// summaryOf is the Summary the index must give for entries.
func summaryOf(entries []dlq.Entry) dlqindex.Summary {
	var s dlqindex.Summary
	var topics, kinds, texts, groups = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, e := range entries {
		s.Total++
		if ts := e.Timestamp.UTC(); !e.Timestamp.IsZero() {
			if s.Oldest.IsZero() || ts.Before(s.Oldest) {
				s.Oldest = ts
			}
			if ts.After(s.Newest) {
				s.Newest = ts
			}
		}
		if e.Err != nil {
			s.Corrupt++
			continue
		}
		topics[e.Envelope.OriginalTopic]++
		kinds[string(e.Envelope.ErrorKind)]++
		texts[dlq.TruncateError(e.Envelope.Error)]++
		groups[e.Envelope.ConsumerGroup]++
	}
	counts := func(m map[string]int) []dlqindex.Count {
		var out []dlqindex.Count
		for v, n := range m {
			out = append(out, dlqindex.Count{Value: v, N: n})
		}
		slices.SortFunc(out, func(a, b dlqindex.Count) int { return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Value, b.Value)) })
		return out
	}
	s.ByOriginalTopic, s.ByKind, s.ByError, s.ByGroup = counts(topics), counts(kinds), counts(texts), counts(groups)
	if len(s.ByError) > dlqindex.MaxErrorGroups {
		for _, c := range s.ByError[dlqindex.MaxErrorGroups:] {
			s.OtherErrors += c.N
		}
		s.ByError = s.ByError[:dlqindex.MaxErrorGroups]
	}
	return s
}

// listAll walks every page of x.List with filter.
func listAll(t *testing.T, x *dlqindex.Index, filter dlq.Filter, limit int) []dlqindex.Item {
	t.Helper()
	var all []dlqindex.Item
	var after dlqindex.Cursor
	for pages := 0; ; pages++ {
		if pages > x.Len()+1 {
			t.Fatalf("List is still paging after %d pages of %d records", pages, x.Len())
		}
		items, next := x.List(filter, after, limit)
		if len(items) > limit {
			t.Fatalf("a page of limit %d holds %d items", limit, len(items))
		}
		all = append(all, items...)
		if next.IsZero() {
			return all
		}
		if len(items) != limit {
			t.Fatalf("a page of %d items (limit %d) has a page after it", len(items), limit)
		}
		after = next
	}
}

// writeCorrupt writes two records that are not readable dead letters: a
// value that is not an envelope, and a raw-mode record without its
// context headers.
func (f *fixture) writeCorrupt(t *testing.T, at time.Time) {
	t.Helper()
	f.produce(t, []*kgo.Record{
		{Partition: 0, Key: []byte("k"), Value: []byte("not an envelope"), Timestamp: at},
		{Partition: f.partitions - 1, Value: []byte(`{}`), Timestamp: at.Add(time.Millisecond),
			Headers: []kgo.RecordHeader{{Key: dlq.HeaderFormat, Value: []byte(dlq.FormatRaw)}}},
	})
}

// filters are the filters the index must apply as dlq.Scan does: each
// field, and several together.
func filters(start time.Time) map[string]dlq.Filter {
	return map[string]dlq.Filter{
		"none":             {},
		"original topic":   {OriginalTopic: "payouts"},
		"key":              {Key: "order-7"},
		"error contains":   {ErrorContains: "TimeOut"},
		"since until":      {Since: start.Add(10 * time.Minute), Until: start.Add(30 * time.Minute)},
		"partitions":       {Partitions: []int32{1}},
		"offsets":          {FromOffset: 40, UntilOffset: 120},
		"tenant":           {TenantID: "acme"},
		"tenant and topic": {TenantID: "globex", OriginalTopic: "orders"},
		"several": {OriginalTopic: "orders", ErrorContains: "http", Partitions: []int32{0, 2},
			Since: start.Add(5 * time.Minute)},
		"no match": {OriginalTopic: "no-such-topic"},
	}
}

func TestSummaryAndListSelectWhatScanSelects(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	c := newCorpus(3)
	f.produce(t, c.next(t, 600))
	f.writeCorrupt(t, c.start.Add(15*time.Minute))
	x := f.refreshed(t)
	if x.Len() != 602 {
		t.Fatalf("Len = %d after the first Refresh, want 602", x.Len())
	}

	for name, filter := range filters(c.start) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			entries := f.scanned(t, filter)
			if got, want := x.Summary(filter), summaryOf(entries); !reflect.DeepEqual(got, want) {
				t.Errorf("Summary:\n got %+v\nwant %+v", got, want)
			}
			if got, want := listAll(t, x, filter, 7), newestFirst(entries); !reflect.DeepEqual(got, want) {
				t.Errorf("List holds %d items, Scan %d; first difference at %d", len(got), len(want), firstDifference(got, want))
			}
		})
	}
}

// firstDifference returns the index of the first item that differs.
func firstDifference(a, b []dlqindex.Item) int {
	for i := range min(len(a), len(b)) {
		if !reflect.DeepEqual(a[i], b[i]) {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestSummaryCapsTheErrorGroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range dlqindex.MaxErrorGroups + 10 {
		for range 1 + i%3 {
			recs = append(recs, deadLetter(t, 0, dlq.Original{Topic: "orders", Partition: 0, Offset: 1},
				dlq.Failure{Error: "error " + string(rune('A'+i)), Kind: dlq.KindPermanent, FailedAt: at}, false))
		}
	}
	f.produce(t, recs)
	x := f.refreshed(t)
	s := x.Summary(dlq.Filter{})
	if want := summaryOf(f.scanned(t, dlq.Filter{})); !reflect.DeepEqual(s, want) {
		t.Fatalf("Summary:\n got %+v\nwant %+v", s, want)
	}
	listed := 0
	for _, c := range s.ByError {
		listed += c.N
	}
	if len(s.ByError) != dlqindex.MaxErrorGroups || s.OtherErrors == 0 || listed+s.OtherErrors != s.Total {
		t.Errorf("ByError holds %d groups (%d records) and OtherErrors %d of %d records; want %d groups and the rest in OtherErrors",
			len(s.ByError), listed, s.OtherErrors, s.Total, dlqindex.MaxErrorGroups)
	}
}

func TestCursorPagesNeitherRepeatNorSkipWhileRecordsAreAppended(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	c := newCorpus(3)
	f.produce(t, c.next(t, 100))
	x := f.refreshed(t)
	before := listAll(t, x, dlq.Filter{}, 1000)

	page, next := x.List(dlq.Filter{}, dlqindex.Cursor{}, 30)
	// Appended: newer dead letters, and older ones, as a producer whose
	// clock lags writes them.
	f.produce(t, c.next(t, 50))
	lagging := dlq.Failure{Error: "late", Kind: dlq.KindPermanent, FailedAt: c.start.Add(time.Minute)}
	f.produce(t, []*kgo.Record{deadLetter(t, 2, dlq.Original{Topic: "orders", Partition: 0, Offset: 1}, lagging, false)})
	f.refresh(t, x)
	if x.Len() != 151 {
		t.Fatalf("Len = %d after appending 51, want 151", x.Len())
	}

	// The cursor, carried as text, goes on where the first page ended.
	cursor, err := dlqindex.ParseCursor(next.String())
	if err != nil || cursor != next {
		t.Fatalf("ParseCursor(%q) = %v, %v; want the cursor back", next.String(), cursor, err)
	}
	for !cursor.IsZero() {
		var items []dlqindex.Item
		items, cursor = x.List(dlq.Filter{}, cursor, 30)
		page = append(page, items...)
	}
	if len(page) != 101 {
		t.Fatalf("the pages hold %d items, want the 100 of the first page's time and the lagging one", len(page))
	}
	lateAt := -1
	for i, it := range page {
		if it.Error == "late" {
			lateAt = i
		}
	}
	if lateAt < 0 {
		t.Fatal("the pages after the first left out the dead letter appended with an old timestamp")
	}
	if got := slices.Delete(slices.Clone(page), lateAt, lateAt+1); !reflect.DeepEqual(got, before) {
		t.Errorf("the pages read across the Refresh differ from the list before it at item %d", firstDifference(got, before))
	}
	if first, _ := x.List(dlq.Filter{}, dlqindex.Cursor{}, 50); !reflect.DeepEqual(first, listAll(t, x, dlq.Filter{}, 1000)[:50]) || first[0].Timestamp.Before(before[0].Timestamp) {
		t.Errorf("a new first page does not start with the newest dead letters appended")
	}
}

func TestRefreshForgetsWhatRetentionDeleted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	c := newCorpus(2)
	f.produce(t, c.next(t, 40)) // 20 on each partition, offsets 0-19
	x := f.refreshed(t)
	admin, err := sarama.NewClusterAdminFromClient(f.client)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteRecords(f.topic, map[int32]int64{0: 15, 1: 5}); err != nil {
		t.Fatal(err)
	}
	f.produce(t, c.next(t, 4))
	f.refresh(t, x)

	if x.Len() != 5+15+4 {
		t.Fatalf("Len = %d after retention deleted 15+5 of 40 and 4 were appended, want 24", x.Len())
	}
	for _, it := range listAll(t, x, dlq.Filter{}, 10) {
		if (it.Partition == 0 && it.Offset < 15) || (it.Partition == 1 && it.Offset < 5) {
			t.Errorf("List shows %d/%d, which retention deleted", it.Partition, it.Offset)
		}
	}
	if s, want := x.Summary(dlq.Filter{}), summaryOf(f.scanned(t, dlq.Filter{})); !reflect.DeepEqual(s, want) {
		t.Errorf("Summary after retention:\n got %+v\nwant %+v", s, want)
	}
}

func TestRefreshStartsOverWhenTheTopicIsCreatedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	c := newCorpus(1)
	f.produce(t, c.next(t, 10))
	x := f.refreshed(t)
	admin, err := sarama.NewClusterAdminFromClient(f.client)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteTopic(f.topic); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(f.topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	if err := f.client.RefreshMetadata(f.topic); err != nil {
		t.Fatal(err)
	}
	f.producer = f.newProducer(t) // the old one knows the old topic's id
	f.produce(t, c.next(t, 3))
	f.refresh(t, x)
	if got, want := listAll(t, x, dlq.Filter{}, 5), newestFirst(f.scanned(t, dlq.Filter{})); len(want) != 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("after the topic was made again the index holds %d records, want the %d of the new topic", len(got), len(want))
	}
}

func TestCorruptRecordsAreCountedAndListedByPlace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	c := newCorpus(2)
	f.produce(t, c.next(t, 10))
	f.writeCorrupt(t, c.start.Add(time.Hour))
	x := f.refreshed(t)

	s := x.Summary(dlq.Filter{})
	if s.Total != 12 || s.Corrupt != 2 {
		t.Errorf("Summary counts %d records, %d corrupt; want 12, 2", s.Total, s.Corrupt)
	}
	items, _ := x.List(dlq.Filter{}, dlqindex.Cursor{}, 2)
	for _, it := range items {
		if it.Corrupt == "" || it.OriginalTopic != "" || it.Key != nil || it.Error != "" {
			t.Errorf("corrupt record listed as %+v; want its reason and its place only", it)
		}
	}
	if !strings.Contains(items[1].Corrupt, "corrupt envelope") || !strings.Contains(items[0].Corrupt, dlq.HeaderEnvelopeVersion) {
		t.Errorf("reasons %q and %q do not say what is wrong", items[1].Corrupt, items[0].Corrupt)
	}
	if s := x.Summary(dlq.Filter{ErrorContains: "e"}); s.Corrupt != 0 {
		t.Errorf("a filter on the envelope selected %d corrupt records", s.Corrupt)
	}
	if s := x.Summary(dlq.Filter{Partitions: []int32{0}}); s.Corrupt != 1 {
		t.Errorf("a filter on the place selected %d corrupt records of partition 0, want 1", s.Corrupt)
	}
}

func TestRefreshOfAMissingTopic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	x := dlqindex.New(f.client, "no.such.topic.dlq")
	if err := x.Refresh(context.Background()); !errors.Is(err, dlq.ErrNoTopic) {
		t.Errorf("Refresh of a missing topic: %v, want dlq.ErrNoTopic", err)
	}
	if x.Len() != 0 || !x.RefreshedAt().IsZero() {
		t.Errorf("a failed first Refresh left Len %d, RefreshedAt %v", x.Len(), x.RefreshedAt())
	}
}

func TestTopicsListsTheDeadLetterTopics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	other := f.k.Topic(t, 1) + dlq.DefaultSuffix
	f.k.CreateTopic(t, other, 1)
	topics, err := dlqindex.Topics(context.Background(), f.client)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(topics) || !slices.Contains(topics, f.topic) || !slices.Contains(topics, other) {
		t.Errorf("Topics = %q; want both dead-letter topics, sorted", topics)
	}
	for _, topic := range topics {
		if !strings.HasSuffix(topic, dlq.DefaultSuffix) {
			t.Errorf("Topics lists %q, not a dead-letter topic", topic)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dlqindex.Topics(ctx, f.client); !errors.Is(err, context.Canceled) {
		t.Errorf("Topics with an ended context: %v, want context.Canceled", err)
	}
}
