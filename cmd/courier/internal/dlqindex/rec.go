package dlqindex

import (
	"errors"
	"math"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/ceheader"
)

// The columns whose values the index interns: a record holds the id of
// its value in each.
const (
	colTopic   = iota // original topic
	colKind           // error kind
	colError          // error text
	colGroup          // consumer group
	colTenant         // tenant of the original record (dlq.Envelope.TenantID)
	colCorrupt        // why the record is not a readable dead letter; "" when it is
	numColumns
)

// Kinds of keys.
const (
	noKey = iota
	textKey
	binaryKey // key holds the key in base64
)

// rec is one record of the topic as the index keeps it: strings by their
// id in the columns' tables, times in Unix milliseconds (noTime when
// unknown).
type rec struct {
	ts, offset, failedAt int64
	key                  string
	ids                  [numColumns]uint32
	partition            int32
	attempts, replays    int32 // dlq caps both at dlq.MaxCount, math.MaxInt32
	keyKind              uint8
}

// noTime stands for an unknown timestamp, which sorts oldest.
const noTime = math.MinInt64

func millis(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixMilli()
}

func fromMillis(ms int64) time.Time {
	if ms == noTime {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// table interns the values of one column: vals[id] is the value of id, and
// id 0 is "".
type table struct {
	vals []string
	ids  map[string]uint32
}

func newTable() table { return table{vals: []string{""}, ids: map[string]uint32{"": 0}} }

// id returns the id of s, adding s when new.
func (t *table) id(s string) uint32 {
	if id, ok := t.ids[s]; ok {
		return id
	}
	id := uint32(len(t.vals))
	t.vals = append(t.vals, s)
	t.ids[s] = id
	return id
}

// values returns the tables' values as a snapshot keeps them: later ids
// are appended past their lengths, so they never change.
func (x *Index) values() [numColumns][]string {
	var vals [numColumns][]string
	for c := range x.tabs {
		vals[c] = x.tabs[c].vals
	}
	return vals
}

// compact rebuilds a table holding more than twice the values recs use
// (retention deleted the others), so values of records long gone are not
// kept for ever. recs must be no snapshot's yet: their ids are rewritten.
func (x *Index) compact(recs []rec) {
	const slack = 64 // values a table may hold unused before it is rebuilt
	for c := range x.tabs {
		t := &x.tabs[c]
		used := make([]bool, len(t.vals))
		live := 0
		for i := range recs {
			if id := recs[i].ids[c]; !used[id] {
				used[id] = true
				live++
			}
		}
		if len(t.vals) <= 2*live+slack {
			continue
		}
		fresh := newTable()
		remap := make([]uint32, len(t.vals))
		for id, v := range t.vals {
			if used[id] {
				remap[id] = fresh.id(v)
			}
		}
		for i := range recs {
			recs[i].ids[c] = remap[recs[i].ids[c]]
		}
		*t = fresh
	}
}

// rec turns an entry read from the topic into the index's record.
func (x *Index) rec(e dlq.Entry) rec {
	r := rec{ts: millis(e.Timestamp), offset: e.Offset, partition: e.Partition}
	if e.Err != nil {
		r.ids[colCorrupt] = x.tabs[colCorrupt].id(corruptReason(e.Err))
		return r
	}
	env := e.Envelope
	text := env.Error
	if len(text) > dlq.MaxErrorBytes { // not courier's: Decode takes any length
		text = dlq.TruncateError(text)
	}
	r.ids[colTopic] = x.tabs[colTopic].id(env.OriginalTopic)
	r.ids[colKind] = x.tabs[colKind].id(string(env.ErrorKind))
	r.ids[colError] = x.tabs[colError].id(text)
	r.ids[colGroup] = x.tabs[colGroup].id(env.ConsumerGroup)
	r.ids[colTenant] = x.tabs[colTenant].id(env.TenantID())
	r.failedAt = millis(env.FailedAt)
	r.attempts, r.replays = int32(env.Attempts), int32(env.ReplayCount)
	switch {
	case env.OriginalKey != nil:
		r.key, r.keyKind = *env.OriginalKey, textKey
	case env.OriginalKeyBase64 != nil:
		r.key, r.keyKind = *env.OriginalKeyBase64, binaryKey
	}
	return r
}

// fillTenant adds to e, filled from r, the one header Filter.Match reads,
// the tenant's (Envelope.TenantID), for a filter of a tenant. The map is
// e's own, reused, so that a match allocates nothing.
func (s *snapshot) fillTenant(e *dlq.Entry, r *rec) {
	env := &e.Envelope
	if env.OriginalHeaders == nil {
		env.OriginalHeaders = map[string]string{}
	}
	clear(env.OriginalHeaders)
	if tenant := s.vals[colTenant][r.ids[colTenant]]; tenant != "" {
		env.OriginalHeaders[ceheader.TenantID] = tenant
	}
}

// corruptReason is the text of why a record is not a readable dead letter:
// never "", which means readable.
func corruptReason(err error) string {
	if reason := dlq.TruncateError(err.Error()); reason != "" {
		return reason
	}
	return "unreadable"
}

// errCorrupt stands for the reason of a corrupt record in the entries
// rebuilt for dlq.Filter.Match, which asks only whether there is one.
var errCorrupt = errors.New("dlqindex: not a readable dead letter")

// fill makes e the dlq.Entry of r, as dlq.Scan gave it, for
// dlq.Filter.Match: the fields an Item holds. It writes e in place, as
// zeroing a whole Entry per record would cost more than the match.
func (s *snapshot) fill(e *dlq.Entry, r *rec) {
	e.Partition, e.Offset, e.Timestamp = r.partition, r.offset, fromMillis(r.ts)
	if r.ids[colCorrupt] != 0 {
		e.Err, e.Envelope = errCorrupt, dlq.Envelope{}
		return
	}
	env := &e.Envelope
	e.Err = nil
	env.Version = dlq.EnvelopeVersion
	env.OriginalTopic = s.vals[colTopic][r.ids[colTopic]]
	env.Error = s.vals[colError][r.ids[colError]]
	env.ErrorKind = dlq.ErrorKind(s.vals[colKind][r.ids[colKind]])
	env.Attempts = int(r.attempts)
	env.FailedAt = fromMillis(r.failedAt)
	env.ConsumerGroup = s.vals[colGroup][r.ids[colGroup]]
	env.ReplayCount = int(r.replays)
	env.OriginalKey, env.OriginalKeyBase64 = nil, nil
	switch r.keyKind {
	case textKey:
		env.OriginalKey = &r.key
	case binaryKey:
		env.OriginalKeyBase64 = &r.key
	}
}
