package dlqindex

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courierkit/courier/dlq"
)

// Item is one record of the dead-letter topic as the index holds it.
// Strings are as the record holds them, control characters and all: escape
// them before they reach a terminal or a page.
type Item struct {
	// Partition and Offset place the record in the dead-letter topic.
	Partition int32
	Offset    int64
	// Timestamp is the dead-letter record's own timestamp; zero when the
	// record has none.
	Timestamp time.Time
	// OriginalTopic is the topic the record failed on.
	OriginalTopic string
	// Key is the original key: nil when the record had none; its text, or
	// its standard base64 when KeyBinary (a key that is not UTF-8).
	Key       *string
	KeyBinary bool
	// Kind, Error, FailedAt, ConsumerGroup, Attempts and ReplayCount are
	// the envelope's (dlq.Envelope): the error cut to dlq.MaxErrorBytes
	// (see the package doc), the group empty for the relay's dead letters.
	Kind          dlq.ErrorKind
	Error         string
	FailedAt      time.Time
	ConsumerGroup string
	Attempts      int
	ReplayCount   int
	// Corrupt is why the record is not a readable dead letter (an
	// Entry.Err of dlq.Scan); the fields above but the place are zero
	// then. Empty for a readable one.
	Corrupt string
}

// item returns the Item of r.
func (s *snapshot) item(r *rec) Item {
	it := Item{Partition: r.partition, Offset: r.offset, Timestamp: fromMillis(r.ts)}
	if r.ids[colCorrupt] != 0 {
		it.Corrupt = s.vals[colCorrupt][r.ids[colCorrupt]]
		return it
	}
	it.OriginalTopic = s.vals[colTopic][r.ids[colTopic]]
	if r.keyKind != noKey {
		key := r.key
		it.Key, it.KeyBinary = &key, r.keyKind == binaryKey
	}
	it.Kind = dlq.ErrorKind(s.vals[colKind][r.ids[colKind]])
	it.Error = s.vals[colError][r.ids[colError]]
	it.FailedAt = fromMillis(r.failedAt)
	it.ConsumerGroup = s.vals[colGroup][r.ids[colGroup]]
	it.Attempts, it.ReplayCount = int(r.attempts), int(r.replays)
	return it
}

// Count is how many dead letters have a value.
type Count struct {
	Value string
	N     int
}

// MaxErrorGroups caps Summary.ByError: the errors past it are counted in
// Summary.OtherErrors.
const MaxErrorGroups = 50

// Summary counts the dead letters a filter selects.
type Summary struct {
	// Total counts the records selected, Corrupt those of them that are
	// not readable dead letters.
	Total, Corrupt int
	// ByOriginalTopic, ByKind, ByError and ByGroup count the readable
	// records selected by original topic, error kind, error text and
	// consumer group (the relay's dead letters have the group ""), the
	// biggest count first, then by value. ByError holds the
	// MaxErrorGroups biggest.
	ByOriginalTopic, ByKind, ByError, ByGroup []Count
	// OtherErrors counts the readable records selected whose error is
	// none of those in ByError.
	OtherErrors int
	// Oldest and Newest are the earliest and latest Timestamp of the
	// records selected; zero when none has one.
	Oldest, Newest time.Time
}

// Summary counts the records f selects (dlq.Filter.Match, see the package
// doc) in the index as it is now.
func (x *Index) Summary(f dlq.Filter) Summary {
	s := x.snap.Load()
	var counts [numColumns][]int
	for _, c := range []int{colTopic, colKind, colError, colGroup} {
		counts[c] = make([]int, len(s.vals[c]))
	}
	var sum Summary
	oldest, newest := int64(noTime), int64(noTime)
	m := newMatcher(s, f)
	for i := range s.recs {
		r := &s.recs[i]
		if !m.match(r) {
			continue
		}
		sum.Total++
		if r.ts != noTime {
			if oldest == noTime {
				oldest = r.ts // recs are sorted: the first selected is the oldest
			}
			newest = r.ts
		}
		if r.ids[colCorrupt] != 0 {
			sum.Corrupt++
			continue
		}
		counts[colTopic][r.ids[colTopic]]++
		counts[colKind][r.ids[colKind]]++
		counts[colError][r.ids[colError]]++
		counts[colGroup][r.ids[colGroup]]++
	}
	sum.Oldest, sum.Newest = fromMillis(oldest), fromMillis(newest)
	sum.ByOriginalTopic = s.counts(colTopic, counts[colTopic])
	sum.ByKind = s.counts(colKind, counts[colKind])
	sum.ByGroup = s.counts(colGroup, counts[colGroup])
	sum.ByError = s.counts(colError, counts[colError])
	if len(sum.ByError) > MaxErrorGroups {
		for _, c := range sum.ByError[MaxErrorGroups:] {
			sum.OtherErrors += c.N
		}
		sum.ByError = slices.Clip(sum.ByError[:MaxErrorGroups])
	}
	return sum
}

// counts returns the values of column c with their counts n (by id), the
// biggest first, then by value; values counted 0 times are left out.
func (s *snapshot) counts(c int, n []int) []Count {
	var out []Count
	for id, k := range n {
		if k > 0 {
			out = append(out, Count{Value: s.vals[c][id], N: k})
		}
	}
	slices.SortFunc(out, func(a, b Count) int {
		if c := cmp.Compare(b.N, a.N); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return out
}

// Limits of List.
const (
	// DefaultLimit is the page size of a limit below 1.
	DefaultLimit = 50
	// MaxLimit caps the page size.
	MaxLimit = 1000
)

// Cursor is where a page of List ends: the place of its last record in
// List's order (timestamp, partition, offset). The zero Cursor is before
// the first page. It stays valid while records are appended and dropped,
// and across Refresh calls; String and ParseCursor carry it through a URL.
type Cursor struct {
	ts        int64
	offset    int64
	partition int32
	set       bool
}

// IsZero reports whether c is the zero Cursor: the first page, or, as the
// next Cursor of List, no page after.
func (c Cursor) IsZero() bool { return !c.set }

// String returns c as ParseCursor reads it: "" for the zero Cursor, else
// "<unix ms>.<partition>.<offset>".
func (c Cursor) String() string {
	if !c.set {
		return ""
	}
	return strconv.FormatInt(c.ts, 10) + "." + strconv.FormatInt(int64(c.partition), 10) + "." + strconv.FormatInt(c.offset, 10)
}

// ParseCursor reads a Cursor written by Cursor.String; "" is the zero
// Cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	fields := strings.Split(s, ".")
	if len(fields) == 3 {
		ts, errTS := strconv.ParseInt(fields[0], 10, 64)
		p, errP := strconv.ParseInt(fields[1], 10, 32)
		o, errO := strconv.ParseInt(fields[2], 10, 64)
		if errTS == nil && errP == nil && errO == nil && p >= 0 && o >= 0 {
			return Cursor{ts: ts, partition: int32(p), offset: o, set: true}, nil
		}
	}
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return Cursor{}, fmt.Errorf("dlqindex: cursor %q is not one a page gave (<unix ms>.<partition>.<offset>); start again from the first page", s)
}

// List returns the records f selects (dlq.Filter.Match, see the package
// doc) newest first, by Timestamp and then partition and offset, starting
// after the cursor after (the zero Cursor: from the newest), at most limit
// of them (DefaultLimit below 1, at most MaxLimit). next is the Cursor of
// the page after, zero when there is none. Paging by cursor neither
// repeats nor skips a record while records are appended: those newer than
// the first page show on a new first page, older ones (a producer's clock
// behind) in the pages still to come.
func (x *Index) List(f dlq.Filter, after Cursor, limit int) (items []Item, next Cursor) {
	switch {
	case limit < 1:
		limit = DefaultLimit
	case limit > MaxLimit:
		limit = MaxLimit
	}
	s := x.snap.Load()
	end := len(s.recs) // the records before end come after the cursor
	if after.set {
		end, _ = slices.BinarySearchFunc(s.recs, after, func(r rec, c Cursor) int {
			return compareRecs(r, rec{ts: c.ts, partition: c.partition, offset: c.offset})
		})
	}
	var last *rec // the record of the last item
	m := newMatcher(s, f)
	for i := end - 1; i >= 0; i-- {
		r := &s.recs[i]
		if !m.match(r) {
			continue
		}
		if len(items) == limit { // one more: there is a page after
			return items, Cursor{ts: last.ts, partition: last.partition, offset: last.offset, set: true}
		}
		items = append(items, s.item(r))
		last = r
	}
	return items, Cursor{}
}
