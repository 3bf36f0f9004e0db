package dlqindex

import (
	"reflect"

	"github.com/courierkit/courier/dlq"
)

// matcher applies a dlq.Filter to the records of a snapshot with
// dlq.Filter.Match, on the entry rebuilt from each record (fill). It leans
// on what dlq.Filter documents, that empty fields match everything and set
// fields must all match, for two shortcuts: the zero Filter matches every
// record without a call, and ErrorContains, which lowers the case of every
// error it looks at, is asked once per distinct error (the errors are
// interned) with a filter of ErrorContains alone, the other fields per
// record with the filter without it.
type matcher struct {
	s   *snapshot
	all bool       // the zero Filter
	f   dlq.Filter // the filter, for corrupt records (and all when byError is nil)
	// With ErrorContains set: the filter without it, the filter of it
	// alone, and its answer per error id (0 not asked yet, 1 yes, -1 no).
	rest, errorOnly dlq.Filter
	byError         []int8
	e               dlq.Entry // the entry of the record asked about, reused
	tenant          bool      // the filter asks for a tenant (see fill)
}

func newMatcher(s *snapshot, f dlq.Filter) *matcher {
	m := &matcher{s: s, f: f, all: reflect.ValueOf(f).IsZero(), tenant: f.TenantID != ""}
	if f.ErrorContains != "" {
		m.rest, m.errorOnly = f, dlq.Filter{ErrorContains: f.ErrorContains}
		m.rest.ErrorContains = ""
		m.byError = make([]int8, len(s.vals[colError]))
	}
	return m
}

// match reports whether the filter selects r.
func (m *matcher) match(r *rec) bool {
	switch {
	case m.all:
		return true
	case m.byError == nil || r.ids[colCorrupt] != 0:
		m.fill(r)
		return m.f.Match(m.e)
	}
	id := r.ids[colError]
	if m.byError[id] == 0 {
		m.byError[id] = -1
		if m.errorOnly.Match(dlq.Entry{Envelope: dlq.Envelope{Error: m.s.vals[colError][id]}}) {
			m.byError[id] = 1
		}
	}
	if m.byError[id] < 0 {
		return false
	}
	m.fill(r)
	return m.rest.Match(m.e)
}

// fill makes m.e the entry of r, with its tenant only when the filter
// asks for one: the other filters pay nothing for it.
func (m *matcher) fill(r *rec) {
	m.s.fill(&m.e, r)
	if m.tenant {
		m.s.fillTenant(&m.e, r)
	}
}
