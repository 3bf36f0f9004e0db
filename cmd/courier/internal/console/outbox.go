package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/producer"
)

// pageSize is how many events or dead letters a list shows at once.
const pageSize = 50

// maxFilterText bounds a filter's text fields.
const maxFilterText = 2048

// statuses are the outbox's statuses in the order pages show them.
var statuses = []string{producer.StatusPending, producer.StatusFailed, producer.StatusPublished, producer.StatusDeadLettered}

// outboxFilter is the outbox list's filter as a form holds it.
type outboxFilter struct {
	Statuses                                 []string
	ID                                       string
	Topic, Key, Tenant, AggregateType, AggID string
	Error, Since, Until                      string
}

// outboxFilterFields are the query fields of outboxFilter, in order.
var outboxFilterFields = []string{"id", "topic", "key", "tenant", "aggregate_type", "aggregate_id", "error", "since", "until"}

// readOutboxFilter reads the filter from a query or form.
func readOutboxFilter(v url.Values) outboxFilter {
	return outboxFilter{Statuses: v["status"], ID: v.Get("id"), Topic: v.Get("topic"), Key: v.Get("key"), Tenant: v.Get("tenant"),
		AggregateType: v.Get("aggregate_type"), AggID: v.Get("aggregate_id"), Error: v.Get("error"), Since: v.Get("since"), Until: v.Get("until")}
}

// values is f as query fields.
func (f outboxFilter) values() url.Values {
	v := url.Values{}
	for _, s := range f.Statuses {
		v.Add("status", s)
	}
	for i, s := range f.fields() {
		if s != "" {
			v.Set(outboxFilterFields[i], s)
		}
	}
	return v
}

// fields are f's text fields in the order of outboxFilterFields.
func (f outboxFilter) fields() []string {
	return []string{f.ID, f.Topic, f.Key, f.Tenant, f.AggregateType, f.AggID, f.Error, f.Since, f.Until}
}

// Query is f as a query string, for links.
func (f outboxFilter) Query() template.URL { return template.URL(f.values().Encode()) }

// Describe says what f selects, for people.
func (f outboxFilter) Describe() string {
	var parts []string
	if len(f.Statuses) > 0 {
		parts = append(parts, "status "+strings.Join(f.Statuses, " or "))
	}
	for i, s := range f.fields() {
		if s != "" {
			parts = append(parts, strings.ReplaceAll(outboxFilterFields[i], "_", " ")+" "+display.Text(s))
		}
	}
	return strings.Join(parts, ", ")
}

// Has reports whether status is selected, for the form's checkboxes.
func (f outboxFilter) Has(status string) bool { return slices.Contains(f.Statuses, status) }

// Hidden is f as hidden form fields' names and values, in order.
func (f outboxFilter) Hidden() [][2]string {
	var out [][2]string
	for _, s := range f.Statuses {
		out = append(out, [2]string{"status", s})
	}
	for i, s := range f.fields() {
		if s != "" {
			out = append(out, [2]string{outboxFilterFields[i], s})
		}
	}
	return out
}

// checkText refuses a filter text PostgreSQL cannot take or that is too
// long to be a real value.
func checkText(field, s string) error {
	switch {
	case len(s) > maxFilterText:
		return fmt.Errorf("%s is %d bytes long; a filter takes at most %d", field, len(s), maxFilterText)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s holds a NUL character, which no stored value holds", field)
	}
	return nil
}

// filter converts f to producer.Filter, refusing what it cannot use.
func (f outboxFilter) filter(now time.Time) (producer.Filter, error) {
	for i, s := range f.fields() {
		if err := checkText(outboxFilterFields[i], s); err != nil {
			return producer.Filter{}, err
		}
	}
	var ids []uuid.UUID
	if f.ID != "" {
		id, err := uuid.Parse(f.ID)
		if err != nil {
			return producer.Filter{}, fmt.Errorf("id %q is not an event id (a UUID)", f.ID)
		}
		ids = []uuid.UUID{id}
	}
	for _, st := range f.Statuses {
		if !slices.Contains(statuses, st) {
			return producer.Filter{}, fmt.Errorf("status %q: use pending, failed, published or dead_lettered", st)
		}
	}
	since, until, err := display.ParseTimeRange("since", f.Since, "until", f.Until, now)
	if err != nil {
		return producer.Filter{}, err
	}
	return producer.Filter{IDs: ids, Statuses: slices.Compact(slices.Sorted(slices.Values(f.Statuses))), Topic: f.Topic, Key: f.Key,
		TenantID: f.Tenant, AggregateType: f.AggregateType, AggregateID: f.AggID, ErrorContains: f.Error, Since: since, Until: until}, nil
}

// overviewData is the outbox overview.
type overviewData struct {
	Stats       producer.Stats
	ExactLimit  int64
	Statuses    []string
	Chart       chart
	DeadLetters []producer.DeadLetterGroup
	Held        []producer.HeldGroup
}

// overview is the outbox at a glance.
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	stats, err := s.admin.Stats(ctx)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	activity, err := s.admin.Activity(ctx, time.Hour, time.Minute)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	groups, err := s.admin.DeadLetterGroups(ctx, 20)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	held, err := s.admin.HeldGroups(ctx, 20)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, r, http.StatusOK, "overview", "Outbox", "overview",
		overviewData{Stats: stats, ExactLimit: producer.ExactPublishedLimit, Statuses: statuses, Chart: newChart(activity), DeadLetters: groups, Held: held})
}

// eventsData is a page of the outbox list.
type eventsData struct {
	Filter   outboxFilter
	Statuses []string
	Records  []producer.Record
	Count    int64
	// AtLeast is set when Count stopped at producer.CountLimit.
	AtLeast bool
	// Next is the query of the next page; "" on the last.
	Next template.URL
	// First is true on the first page.
	First bool
	// Requeue and Purge say whether the filter allows them.
	Requeue, Purge bool
}

// events lists the outbox's events by filter, a page at a time.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	of := readOutboxFilter(q)
	f, err := of.filter(time.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if after := q.Get("after"); after != "" {
		if f.AfterSeq, err = strconv.ParseInt(after, 10, 64); err != nil || f.AfterSeq < 0 {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("after %q: a page starts after an event's seq, a whole number", after))
			return
		}
	}
	f.Limit = pageSize + 1
	records, err := s.admin.List(r.Context(), f)
	if err != nil {
		s.listError(w, r, err)
		return
	}
	count, err := s.admin.Count(r.Context(), f)
	if err != nil {
		s.listError(w, r, err)
		return
	}
	d := eventsData{Filter: of, Statuses: statuses, Records: records, Count: count, AtLeast: count >= producer.CountLimit, First: f.AfterSeq == 0}
	if len(records) > pageSize {
		d.Records = records[:pageSize]
		next := of.values()
		next.Set("after", strconv.FormatInt(d.Records[pageSize-1].Seq, 10))
		d.Next = template.URL(next.Encode())
	}
	d.Requeue = allIn(f.Statuses, producer.StatusFailed, producer.StatusDeadLettered)
	d.Purge = allIn(f.Statuses, producer.StatusDeadLettered, producer.StatusPublished)
	s.render(w, r, http.StatusOK, "events", "Outbox events", "events", d)
}

// allIn reports whether every one of got is among allowed (true for none).
func allIn(got []string, allowed ...string) bool {
	for _, g := range got {
		if !slices.Contains(allowed, g) {
			return false
		}
	}
	return true
}

// listError shows a filter the Admin refused as the user's mistake, and
// anything else as the database's.
func (s *Server) listError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, producer.ErrInvalidFilter) {
		status = http.StatusBadRequest
	}
	s.fail(w, r, status, err)
}

// event shows one event in full.
func (s *Server) event(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not an event id (a UUID)", r.PathValue("id")))
		return
	}
	rec, err := s.admin.Get(r.Context(), id)
	switch {
	case errors.Is(err, producer.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no event %s in %s.%s (purged, or past retention)", id, s.cfg.Schema, s.cfg.Table))
		return
	case err != nil:
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, r, http.StatusOK, "event", "Event "+id.String(), "events", rec)
}

// outboxAction is requeue or purge: what it does and how it counts.
type outboxAction struct {
	Name, Verb, Explain string
	count               func(*producer.Admin, context.Context, producer.Filter) (int64, error)
	run                 func(*producer.Admin, context.Context, producer.Filter) (int64, error)
}

var outboxActions = map[string]outboxAction{
	"requeue": {Name: "requeue", Verb: "Requeue",
		Explain: "Requeue sends these failed and dead-lettered events back to the relays: pending, attempts reset, due now. Their last error stays.",
		count:   (*producer.Admin).CountRequeue, run: (*producer.Admin).Requeue},
	"purge": {Name: "purge", Verb: "Purge",
		Explain: "Purge deletes these events for good. It takes dead-lettered (and, when the filter says so, published) events only.",
		count:   (*producer.Admin).CountPurge, run: (*producer.Admin).Purge},
}

// confirmData is the confirmation of an action on the outbox.
type confirmData struct {
	Action outboxAction
	Filter outboxFilter
	Count  int64
	Sample []producer.Record
	// Changed is set when the set changed since it was shown: the action
	// did nothing.
	Changed bool
}

// confirmOutbox shows what an action would touch, with its exact count,
// and asks for confirmation.
func (s *Server) confirmOutbox(w http.ResponseWriter, r *http.Request) {
	action, ok := outboxActions[r.PathValue("action")]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no outbox action %q: use requeue or purge", r.PathValue("action")))
		return
	}
	s.showConfirm(w, r, action, readOutboxFilter(r.URL.Query()), false)
}

// showConfirm renders the confirmation of action on of.
func (s *Server) showConfirm(w http.ResponseWriter, r *http.Request, action outboxAction, of outboxFilter, changed bool) {
	f, err := of.filter(time.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	n, err := action.count(s.admin, r.Context(), f)
	if err != nil {
		s.listError(w, r, err)
		return
	}
	sample := f
	sample.Limit = 20
	if len(sample.Statuses) == 0 {
		sample.Statuses = []string{producer.StatusFailed, producer.StatusDeadLettered}
		if action.Name == "purge" {
			sample.Statuses = []string{producer.StatusDeadLettered}
		}
	}
	records, err := s.admin.List(r.Context(), sample)
	if err != nil {
		s.listError(w, r, err)
		return
	}
	status := http.StatusOK
	if changed {
		status = http.StatusConflict
	}
	d := confirmData{Action: action, Filter: of.absolute(f), Count: n, Sample: records, Changed: changed}
	if wantsJSON(r) {
		writeJSON(w, status, d.json())
		return
	}
	s.render(w, r, status, "confirm", action.Verb+" events", "events", d)
}

// outboxActionJSON is what a script gets for an outbox action: the
// confirmation (Count events match Filter; post Filter back with expect
// set to Count to run it), the action done (Count events touched), or
// the set changed (Changed: nothing was done; Count is the set now).
type outboxActionJSON struct {
	Action  string              `json:"action"`
	Filter  map[string][]string `json:"filter"`
	Count   int64               `json:"count"`
	Changed bool                `json:"changed,omitempty"`
	Sample  []sampleJSON        `json:"sample,omitempty"`
}

// sampleJSON is an event of a confirmation's sample.
type sampleJSON struct {
	ID     uuid.UUID `json:"id"`
	Seq    int64     `json:"seq"`
	Status string    `json:"status"`
	Topic  string    `json:"topic"`
	Key    *string   `json:"key"`
}

// json is d for a script.
func (d confirmData) json() outboxActionJSON {
	out := outboxActionJSON{Action: d.Action.Name, Filter: d.Filter.values(), Count: d.Count, Changed: d.Changed}
	for _, rec := range d.Sample {
		out.Sample = append(out.Sample, sampleJSON{ID: rec.ID, Seq: rec.Seq, Status: rec.Status, Topic: rec.Topic, Key: rec.Key})
	}
	return out
}

// errChanged aborts an action whose set changed since it was confirmed.
var errChanged = errors.New("the set changed")

// changeOutbox runs a confirmed requeue or purge in one transaction with
// its audit row, and only if it touches exactly the confirmed count.
func (s *Server) changeOutbox(w http.ResponseWriter, r *http.Request) {
	action, ok := outboxActions[r.PathValue("action")]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no outbox action %q: use requeue or purge", r.PathValue("action")))
		return
	}
	of := readOutboxFilter(r.PostForm)
	f, err := of.filter(time.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	expect, err := strconv.ParseInt(r.PostForm.Get("expect"), 10, 64)
	if err != nil || expect < 1 {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("expect %s: give the count the confirmation showed, 1 or more (GET /outbox/%s with the same filter shows it)",
			quote(r.PostForm.Get("expect")), action.Name))
		return
	}
	filterJSON, _ := json.Marshal(of.values())
	var n int64
	err = pgx.BeginFunc(r.Context(), s.cfg.DB, func(tx pgx.Tx) error {
		admin, err := producer.NewAdmin(tx, producer.AdminConfig{Schema: s.cfg.Schema, Table: s.cfg.Table})
		if err != nil {
			return err
		}
		if n, err = action.run(admin, r.Context(), f); err != nil {
			return err
		}
		if n != expect {
			return errChanged
		}
		return admin.Audit(r.Context(), producer.AuditEntry{Actor: current(r).actor, Remote: r.RemoteAddr,
			Action: "outbox." + action.Name, Target: s.cfg.Schema + "." + s.cfg.Table, Filter: filterJSON, Count: n})
	})
	switch {
	case errors.Is(err, errChanged):
		s.showConfirm(w, r, action, of, true)
		return
	case errors.Is(err, producer.ErrInvalidAuditEntry):
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("nothing was done: the audit cannot record this filter: %w", err))
		return
	case err != nil:
		s.listError(w, r, err)
		return
	}
	s.log.Info("console: "+action.Name, "actor", current(r).actor, "events", n)
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, outboxActionJSON{Action: action.Name, Filter: of.values(), Count: n})
		return
	}
	back := of.values()
	back.Set("done", action.Name)
	back.Set("n", strconv.FormatInt(n, 10))
	http.Redirect(w, r, "/outbox/events?"+back.Encode(), http.StatusSeeOther)
}

// notice is the status line a page shows after an action sent the browser
// there with ?done=<action>&n=<count>. Its words are the console's own:
// a link cannot put other text in that line.
func notice(q url.Values) string {
	action, ok := outboxActions[q.Get("done")]
	n, err := strconv.ParseInt(q.Get("n"), 10, 64)
	if !ok || err != nil || n < 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d event(s).", action.Verb, n)
}

// absolute returns f with its since and until as the times they named at
// now (RFC 3339): a confirmation carries them so, and the action selects
// what it showed, however long the operator looked at it.
func (f outboxFilter) absolute(pf producer.Filter) outboxFilter {
	f.Since, f.Until = rfc3339(pf.Since), rfc3339(pf.Until)
	return f
}

// rfc3339 formats t, "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
