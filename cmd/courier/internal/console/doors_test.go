package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// The token the doors' tests sign in with, and its holder.
const (
	doorToken = "token-of-the-operators-script-7"
	doorActor = "ops"
)

// door is one way into the console's actions: a browser's session (it
// signs in, reads each confirmation page and posts its form, as Chromium
// would) or a script's Bearer token (it asks for JSON, and posts the
// filter and count the JSON gave).
type door struct {
	name   string
	c      *client
	bearer bool
}

// doors signs a browser in at r, and names a script with the token.
func doors(t *testing.T, r *rig) []door {
	t.Helper()
	browser := newClient(t, r.url)
	if status, body, _ := browser.do(http.MethodPost, "/login", url.Values{"token": {doorToken}}, nil); status != http.StatusSeeOther {
		t.Fatalf("sign in: %d %.300s", status, body)
	}
	return []door{{name: "session", c: browser}, {name: "bearer", c: newClient(t, r.url), bearer: true}}
}

// eachDoor runs test, in parallel, once through each door of a console
// of its own.
func eachDoor(t *testing.T, test func(t *testing.T, r *rig, d door)) {
	t.Helper()
	for i, name := range []string{"session", "bearer"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newDoorRig(t)
			test(t, r, doors(t, r)[i])
		})
	}
}

// newDoorRig is a console with the doors' token.
func newDoorRig(t *testing.T) *rig {
	return newRig(t, func(c *console.Config) { c.Tokens = map[string]string{doorActor: doorToken} })
}

// get sends a GET through d.
func (d door) get(t *testing.T, path string) (int, string) {
	t.Helper()
	status, body, _ := d.c.do(http.MethodGet, path, nil, d.headers())
	return status, body
}

// post sends a POST of form through d: with the session's anti-forgery
// token, or with the Bearer token and none.
func (d door) post(t *testing.T, path string, form url.Values) (int, string, http.Header) {
	t.Helper()
	if !d.bearer && !form.Has("csrf") {
		form.Set("csrf", d.c.csrf)
	}
	return d.c.do(http.MethodPost, path, form, d.headers())
}

// headers are what a script sends: its token, JSON wanted, and no
// Origin or Sec-Fetch-Site (it is no browser).
func (d door) headers() map[string]string {
	if !d.bearer {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + doorToken, "Accept": "application/json", "Origin": "", "Sec-Fetch-Site": ""}
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formOf reads the hidden fields of the form of page whose opening tag
// holds marker, as a browser submits them.
func formOf(t *testing.T, page, marker string) url.Values {
	t.Helper()
	start := strings.Index(page, marker)
	if start < 0 {
		t.Fatalf("the page has no form %s:\n%.3000s", marker, page)
	}
	end := strings.Index(page[start:], "</form>")
	form := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(page[start:start+end], -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return form
}

var confirmCount = regexp.MustCompile(`id="confirm-count">([0-9,]+)<`)

// confirmOutbox asks d for the confirmation of action on filter and
// returns the form that runs it on exactly what it showed, and the count.
func (d door) confirmOutbox(t *testing.T, action string, filter url.Values) (url.Values, int64) {
	t.Helper()
	status, body := d.get(t, "/outbox/"+action+"?"+filter.Encode())
	if status != http.StatusOK {
		t.Fatalf("%s: confirmation of %s %v: %d %.500s", d.name, action, filter, status, body)
	}
	if d.bearer {
		var got struct {
			Filter url.Values `json:"filter"`
			Count  int64      `json:"count"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: confirmation JSON %q: %v", d.name, body, err)
		}
		got.Filter.Set("expect", strconv.FormatInt(got.Count, 10))
		return got.Filter, got.Count
	}
	m := confirmCount.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("%s: the confirmation shows no count:\n%.2000s", d.name, body)
	}
	n, _ := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
	form := formOf(t, body, `class="confirm"`)
	if form.Get("expect") != strconv.FormatInt(n, 10) {
		t.Fatalf("%s: the confirmation's form expects %q, its page counts %d", d.name, form.Get("expect"), n)
	}
	return form, n
}

// outboxCase is a filter that selects one event of a set no other filter
// of its table selects.
type outboxCase struct {
	by     string
	filter url.Values
}

// outboxSet dead-letters one event per case (each the only one its case
// selects: its own key, topic, error, tenant or last attempt 3h ago) and
// two bystanders no case selects; it returns the events of the cases in
// order, then the bystanders.
func outboxSet(t *testing.T, r *rig) ([]outboxCase, []uuid.UUID) {
	t.Helper()
	topic, other := "t.none-"+testkit.UniqueName(t, 40), "t.other-"+testkit.UniqueName(t, 40)
	event := func(topic, key, tenant string) producer.Event {
		return producer.Event{Topic: topic, Key: key, TenantID: tenant, Type: "PayoutRequested", Payload: []byte(`{"key":"` + key + `"}`)}
	}
	ids := r.deadLettered(t, event(topic, "k-key", ""), event(other, "k-topic", ""), event(topic, "k-error", ""),
		event(topic, "k-tenant", "acme"), event(topic, "k-time", ""), event(topic, "k-bystander-1", ""), event(topic, "k-bystander-2", "globex"))
	dead := r.pg.Schema + ".courier_outbox_dead"
	if _, err := r.pg.Pool.Exec(context.Background(), "UPDATE "+dead+" SET last_error = 'psp declined: card expired' WHERE id = $1", ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pg.Pool.Exec(context.Background(), "UPDATE "+dead+" SET last_attempt_at = now() - interval '3 hours' WHERE id = $1", ids[4]); err != nil {
		t.Fatal(err)
	}
	dl := func(kv ...string) url.Values {
		v := url.Values{"status": {producer.StatusDeadLettered}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	return []outboxCase{
		{"key", dl("key", "k-key")},
		{"topic", dl("topic", other)},
		{"error", dl("error", "card expired")},
		{"tenant", dl("tenant", "acme")},
		{"time", dl("since", "5h", "until", "2h")},
	}, ids
}

// TestOutboxActionsTouchExactlyTheirFilterThroughEveryDoor: requeue and
// purge, through a signed-in session and through a Bearer token, each
// filtered by key, topic, error, tenant and time, change exactly the one
// event the filter selects (requeued: pending; purged: gone) and no other,
// and write one audit row naming the token's holder and the count.
func TestOutboxActionsTouchExactlyTheirFilterThroughEveryDoor(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"requeue", "purge"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			eachDoor(t, func(t *testing.T, r *rig, d door) {
				cases, ids := outboxSet(t, r)
				touched := map[uuid.UUID]bool{}
				for n, tc := range cases {
					form, count := d.confirmOutbox(t, action, tc.filter)
					if count != 1 {
						t.Fatalf("%s by %s: the confirmation counts %d, want 1", action, tc.by, count)
					}
					status, body, _ := d.post(t, "/outbox/"+action, form)
					if want := map[bool]int{false: http.StatusSeeOther, true: http.StatusOK}[d.bearer]; status != want {
						t.Fatalf("%s by %s: %d, want %d (%.500s)", action, tc.by, status, want, body)
					}
					touched[ids[n]] = true
					for j, id := range ids {
						want := producer.StatusDeadLettered
						if touched[id] {
							want = map[string]string{"requeue": producer.StatusPending, "purge": "gone"}[action]
						}
						if got := r.statusOrGone(t, id); got != want {
							t.Errorf("after the %s by %s, event %d is %s, want %s", action, tc.by, j, got, want)
						}
					}
					entries, err := r.admin.AuditLog(context.Background(), 0, 1)
					if err != nil || len(entries) != 1 || entries[0].Actor != doorActor || entries[0].Action != "outbox."+action || entries[0].Count != 1 {
						t.Errorf("after the %s by %s the last audit row is %+v, %v; want the %s of 1 event by %s", action, tc.by, entries, err, action, doorActor)
					}
				}
			})
		})
	}
}

// statusOrGone is an event's status, "gone" when it was purged.
func (r *rig) statusOrGone(t *testing.T, id uuid.UUID) string {
	t.Helper()
	rec, err := r.admin.Get(context.Background(), id)
	if errors.Is(err, producer.ErrNotFound) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

// deadLetterOf writes to dlqTopic the dead letter of a record with key
// of original, that failed with errText at failedAt, with headers.
func deadLetterOf(t *testing.T, r *rig, dlqTopic, original, key, errText string, failedAt time.Time, headers ...dlq.Header) {
	t.Helper()
	o := dlq.Original{Topic: original, Partition: 0, Offset: 7, Key: []byte(key), Value: []byte(`{"payout":"` + key + `"}`), Headers: headers}
	env, err := dlq.New(o, dlq.Failure{Error: errText, Kind: dlq.KindRetriesExhausted, Attempts: 5, FailedAt: failedAt, ConsumerGroup: "payouts"})
	if err != nil {
		t.Fatal(err)
	}
	value, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.kafka.Producer(t).SendMessage(&sarama.ProducerMessage{Topic: dlqTopic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)}); err != nil {
		t.Fatal(err)
	}
}

// replayFixture is a dead-letter topic whose records go back to two
// original topics.
type replayFixture struct {
	dlqTopic, topic, other string
}

// newReplayFixture makes the topics of a replay test: dlqTopic, and the
// two topics its dead letters came from.
func newReplayFixture(t *testing.T, r *rig) replayFixture {
	t.Helper()
	f := replayFixture{topic: r.kafka.Topic(t, 1)}
	f.dlqTopic, f.other = f.topic+dlq.DefaultSuffix, f.topic+".other"
	r.kafka.CreateTopic(t, f.dlqTopic, 1)
	r.kafka.CreateTopic(t, f.other, 1)
	return f
}

// keysOn are the keys of the records on topics, in order.
func keysOn(t *testing.T, r *rig, topics ...string) []string {
	t.Helper()
	var keys []string
	for _, topic := range topics {
		for _, m := range r.kafka.ReadAll(t, topic) {
			keys = append(keys, string(m.Key))
		}
	}
	slices.Sort(keys)
	return keys
}

// jobAnswer is what the doors' tests read of a job.
type jobAnswer struct {
	// url is the job's page; page its HTML (for a session).
	url, page string
	moved     int
	// replay is the form a finished dry run offers, as its door reads it.
	replay url.Values
	// body is the answer to the POST that started the job.
	body string
}

var movedCell = regexp.MustCompile(`id="moved">([0-9]+)<`)

// startJob posts form to path through d and follows the job it leads to
// (the one started, or the new dry run of a refused replay) to its end. A
// script wants wantStatus and the job's JSON; a browser is sent to the
// job's page.
func (d door) startJob(t *testing.T, path string, form url.Values, wantStatus int) jobAnswer {
	t.Helper()
	status, body, h := d.post(t, path, form)
	var page string
	if d.bearer {
		var got struct{ URL string }
		if status != wantStatus || json.Unmarshal([]byte(body), &got) != nil || got.URL == "" || h.Get("Location") != got.URL {
			t.Fatalf("%s: POST %s %v: %d %.500s; want %d with the job's JSON", d.name, path, form, status, body, wantStatus)
		}
		page = got.URL
	} else {
		if status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/jobs/") {
			t.Fatalf("%s: POST %s %v: %d to %q %.500s; want a redirect to the job's page", d.name, path, form, status, h.Get("Location"), body)
		}
		page = h.Get("Location")
	}
	a := d.waitJob(t, page)
	a.body = body
	return a
}

// waitJob waits for the job of page to end and reads it.
func (d door) waitJob(t *testing.T, page string) jobAnswer {
	t.Helper()
	var p struct {
		Done   bool       `json:"done"`
		Moved  int        `json:"moved"`
		Error  string     `json:"error"`
		Replay url.Values `json:"replay"`
	}
	testkit.WaitFor(t, 30*time.Second, "the job "+page+" to end", func() bool {
		_, body := d.get(t, page+"/progress")
		return json.Unmarshal([]byte(body), &p) == nil && p.Done
	})
	if p.Error != "" {
		t.Fatalf("%s: the job %s stopped: %s", d.name, page, p.Error)
	}
	a := jobAnswer{url: page, moved: p.Moved, replay: p.Replay}
	if !d.bearer {
		_, a.page = d.get(t, page)
		m := movedCell.FindStringSubmatch(a.page)
		if m == nil || m[1] != strconv.Itoa(p.Moved) {
			t.Fatalf("%s: the page of %s shows %v moved, its progress %d", d.name, page, m, p.Moved)
		}
		if a.replay = nil; p.Moved > 0 && strings.Contains(a.page, `id="replay-confirm"`) {
			a.replay = formOf(t, a.page, `id="replay-confirm"`)
			a.replay.Set("rate", "") // the form's text field, left empty
		}
	}
	return a
}

// dryRun runs a dry run of filter on f's dead-letter topic through d and
// returns what it would move, and the form that replays exactly that.
func (d door) dryRun(t *testing.T, f replayFixture, filter url.Values) (int, url.Values) {
	t.Helper()
	form := filter
	if !d.bearer { // the browser posts the dead-letter page's form, filtered
		_, page := d.get(t, "/dlq/"+f.dlqTopic+"?"+filter.Encode())
		form = formOf(t, page, `id="replay-form"`)
	}
	a := d.startJob(t, "/dlq/"+f.dlqTopic+"/dry-run", form, http.StatusAccepted)
	if a.moved > 0 && (a.replay.Get("expect") != strconv.Itoa(a.moved) || len(a.replay.Get("set")) != 32) {
		t.Fatalf("%s: the dry run of %d offers the replay %v, want its count and set", d.name, a.moved, a.replay)
	}
	return a.moved, a.replay
}

// TestReplaysMoveExactlyTheirFilterThroughEveryDoor: a dry run and then
// the replay it offers, through a signed-in session and through a Bearer
// token, each filtered by key, original topic, error, tenant and failure
// time, write back exactly the one dead letter the filter selects, and
// nothing else, with an audit row naming the token's holder.
func TestReplaysMoveExactlyTheirFilterThroughEveryDoor(t *testing.T) {
	t.Parallel()
	eachDoor(t, func(t *testing.T, r *rig, d door) {
		f := newReplayFixture(t, r)
		now := time.Now()
		tenant := dlq.Header{Key: []byte("ce_tenantid"), Value: []byte("acme")}
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-key", "psp timeout", now)
		deadLetterOf(t, r, f.dlqTopic, f.other, "k-topic", "psp timeout", now)
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-error", "psp declined: card expired", now)
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-tenant", "psp timeout", now, tenant)
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-time", "psp timeout", now.Add(-3*time.Hour))
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-bystander-1", "psp timeout", now)
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-bystander-2", "psp timeout", now, dlq.Header{Key: []byte("ce_tenantid"), Value: []byte("globex")})
		var want []string
		for _, tc := range []struct {
			by, key string
			filter  url.Values
		}{
			{"key", "k-key", url.Values{"key": {"k-key"}}},
			{"original topic", "k-topic", url.Values{"original_topic": {f.other}}},
			{"error", "k-error", url.Values{"error": {"card expired"}}},
			{"tenant", "k-tenant", url.Values{"tenant": {"acme"}}},
			{"time", "k-time", url.Values{"since": {"5h"}, "until": {"2h"}}},
		} {
			n, replay := d.dryRun(t, f, tc.filter)
			if n != 1 {
				t.Fatalf("dry run by %s: would move %d, want 1", tc.by, n)
			}
			if a := d.startJob(t, "/dlq/"+f.dlqTopic+"/replay", replay, http.StatusAccepted); a.moved != 1 {
				t.Fatalf("replay by %s: moved %d, want 1", tc.by, a.moved)
			}
			want = append(want, tc.key)
			slices.Sort(want)
			if got := keysOn(t, r, f.topic, f.other); !slices.Equal(got, want) {
				t.Fatalf("after the replay by %s the topics hold %v, want %v", tc.by, got, want)
			}
			r.waitAudit(t, "dlq.replay.done", len(want))
			for _, e := range r.auditOf(t, "dlq.replay") {
				if e.Actor != doorActor || e.Count != 1 || e.Target != f.dlqTopic {
					t.Errorf("after the replay by %s the audit holds %+v; want each replay by %s, of 1 record of %s", tc.by, e, doorActor, f.dlqTopic)
				}
			}
		}
	})
}

// TestAReplayRefusesASetThatChangedSinceItsDryRun: through either door, a
// replay of the 2 dead letters its dry run showed, posted after a third
// matching one arrived, writes nothing and no audit row, answers 409 with
// the counts and a new dry run, which offers the replay of 3; that one
// moves the 3.
func TestAReplayRefusesASetThatChangedSinceItsDryRun(t *testing.T) {
	t.Parallel()
	eachDoor(t, func(t *testing.T, r *rig, d door) {
		f := newReplayFixture(t, r)
		for _, key := range []string{"k-1", "k-2"} {
			deadLetterOf(t, r, f.dlqTopic, f.topic, key, "psp timeout", time.Now())
		}
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-other", "invalid iban", time.Now())
		filter := url.Values{"error": {"timeout"}}
		n, replay := d.dryRun(t, f, filter)
		if n != 2 {
			t.Fatalf("dry run: would move %d, want 2", n)
		}
		deadLetterOf(t, r, f.dlqTopic, f.topic, "k-3", "psp timeout", time.Now())

		a := d.startJob(t, "/dlq/"+f.dlqTopic+"/replay", replay, http.StatusConflict)
		if d.bearer {
			var got struct {
				Changed struct{ Expected, Found int } `json:"changed"`
				Job     struct {
					DryRun bool `json:"dry_run"`
				} `json:"job"`
			}
			if err := json.Unmarshal([]byte(a.body), &got); err != nil || got.Changed.Expected != 2 || got.Changed.Found != 3 || !got.Job.DryRun {
				t.Errorf("the 409's JSON %s: want changed 2 → 3 and a new dry run", a.body)
			}
		} else if !strings.Contains(a.page, `id="changed"`) || !strings.Contains(a.page, "it showed 2 record(s), the replay found 3") {
			t.Errorf("the new dry run's page does not say the set changed from 2 to 3:\n%.2000s", a.page)
		}
		if a.moved != 3 {
			t.Errorf("the new dry run would move %d, want 3", a.moved)
		}
		if got := keysOn(t, r, f.topic); len(got) != 0 {
			t.Fatalf("a refused replay wrote %v", got)
		}
		if entries, err := r.admin.AuditLog(context.Background(), 0, 10); err != nil || len(entries) != 0 {
			t.Errorf("audit %+v, %v: want no row for a replay that did not start", entries, err)
		}

		if moved := d.startJob(t, "/dlq/"+f.dlqTopic+"/replay", a.replay, http.StatusAccepted).moved; moved != 3 {
			t.Fatalf("the replay of the new count moved %d, want 3", moved)
		}
		if got := keysOn(t, r, f.topic); !slices.Equal(got, []string{"k-1", "k-2", "k-3"}) {
			t.Errorf("the topic holds %v, want k-1, k-2 and k-3", got)
		}
	})
}

// TestStopEndsExactlyItsReplayThroughEveryDoor: through either door, a
// stop of one of two running replays ends that one after its batch in
// flight (what it moved is on the topic, the rest stays for a later run,
// and the audit names who stopped it), and the other replay moves all of
// its records.
func TestStopEndsExactlyItsReplayThroughEveryDoor(t *testing.T) {
	t.Parallel()
	eachDoor(t, func(t *testing.T, r *rig, d door) {
		stopped, other := newReplayFixture(t, r), newReplayFixture(t, r)
		for k := range 6 {
			deadLetterOf(t, r, stopped.dlqTopic, stopped.topic, fmt.Sprint("s-", k), "psp timeout", time.Now())
		}
		for k := range 3 {
			deadLetterOf(t, r, other.dlqTopic, other.topic, fmt.Sprint("o-", k), "psp timeout", time.Now())
		}
		start := func(f replayFixture) string {
			n, replay := d.dryRun(t, f, url.Values{})
			replay.Set("rate", "2")
			status, body, h := d.post(t, "/dlq/"+f.dlqTopic+"/replay", replay)
			if d.bearer {
				var got struct{ URL string }
				if status != http.StatusAccepted || json.Unmarshal([]byte(body), &got) != nil {
					t.Fatalf("replay of %d: %d %.300s", n, status, body)
				}
				return got.URL
			}
			if status != http.StatusSeeOther {
				t.Fatalf("replay of %d: %d %.300s", n, status, body)
			}
			return h.Get("Location")
		}
		stopPage, otherPage := start(stopped), start(other)
		testkit.WaitFor(t, 30*time.Second, "the replay to move its first record", func() bool { return len(keysOn(t, r, stopped.topic)) > 0 })
		if !d.bearer {
			d.get(t, stopPage) // the page with the stop button's form
		}
		if status, body, _ := d.post(t, stopPage+"/cancel", url.Values{}); status != map[bool]int{false: http.StatusSeeOther, true: http.StatusOK}[d.bearer] {
			t.Fatalf("stop: %d %.300s", status, body)
		}
		var p struct {
			Done  bool
			Moved int
			Error string
		}
		testkit.WaitFor(t, 30*time.Second, "the stopped replay to end", func() bool {
			_, body := d.get(t, stopPage+"/progress")
			return json.Unmarshal([]byte(body), &p) == nil && p.Done
		})
		if p.Moved >= 6 || p.Error == "" {
			t.Errorf("the stopped replay: %+v, want it ended before its 6 records, saying why", p)
		}
		if n := len(keysOn(t, r, stopped.topic)); n != p.Moved {
			t.Errorf("the stopped replay moved %d, and %d records are on its topic", p.Moved, n)
		}
		if got := d.waitJob(t, otherPage).moved; got != 3 || len(keysOn(t, r, other.topic)) != 3 {
			t.Errorf("the replay not stopped moved %d, want its 3", got)
		}
		entries, err := r.admin.AuditLog(context.Background(), 0, 20)
		if err != nil || !slices.ContainsFunc(entries, func(e producer.AuditEntry) bool {
			return e.Action == "dlq.replay.cancel" && e.Target == stopped.dlqTopic && e.Actor == doorActor
		}) || slices.ContainsFunc(entries, func(e producer.AuditEntry) bool { return e.Action == "dlq.replay.cancel" && e.Target == other.dlqTopic }) {
			t.Errorf("audit %+v, %v: want the stop of %s by %s, and no other", entries, err, stopped.dlqTopic, doorActor)
		}
	})
}

// auditOf are the audit rows of action, newest first.
func (r *rig) auditOf(t *testing.T, action string) []producer.AuditEntry {
	t.Helper()
	entries, err := r.admin.AuditLog(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(entries, func(e producer.AuditEntry) bool { return e.Action != action })
}

// waitAudit waits for n audit rows of action (a replay writes its end's
// after its job ended).
func (r *rig) waitAudit(t *testing.T, action string, n int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d audit rows of %s", n, action), func() bool { return len(r.auditOf(t, action)) == n })
}

// TestAReplayGoesWhereItsDryRunShowed: through either door, a dry run
// "only to the consumer group that failed each record" offers a replay that
// sends the records to the group's first retry tier, and that replay does
// so, writing nothing to the topic every group reads. The same count and
// set posted without to_group (the records would go to the main topic)
// is refused, and writes nothing.
func TestAReplayGoesWhereItsDryRunShowed(t *testing.T) {
	t.Parallel()
	for i, name := range []string{"session", "bearer"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, func(c *console.Config) {
				c.Tokens, c.RetryDelays = map[string]string{doorActor: doorToken}, []time.Duration{time.Second}
			})
			d := doors(t, r)[i]
			f := newReplayFixture(t, r)
			tier := f.topic + ".retry.1s"
			r.kafka.CreateTopic(t, tier, 1)
			deadLetterOf(t, r, f.dlqTopic, f.topic, "k-1", "psp timeout", time.Now())
			form := url.Values{"to_group": {"on"}}
			if !d.bearer {
				_, page := d.get(t, "/dlq/"+f.dlqTopic)
				form = formOf(t, page, `id="replay-form"`)
				form.Set("to_group", "on") // the checkbox, ticked
			}
			a := d.startJob(t, "/dlq/"+f.dlqTopic+"/dry-run", form, http.StatusAccepted)
			if a.moved != 1 || a.replay.Get("to_group") != "on" {
				t.Fatalf("the dry run to the group: would move %d, offers %v; want 1, to the group", a.moved, a.replay)
			}
			elsewhere := url.Values{}
			for k, v := range a.replay {
				if k != "to_group" {
					elsewhere[k] = v
				}
			}
			if !d.bearer {
				elsewhere.Set("csrf", d.c.csrf)
			}
			status, body, _ := d.post(t, "/dlq/"+f.dlqTopic+"/replay", elsewhere)
			if want := map[bool]int{false: http.StatusSeeOther, true: http.StatusConflict}[d.bearer]; status != want {
				t.Errorf("the set posted without to_group: %d, want %d (%.300s)", status, want, body)
			}
			if got := keysOn(t, r, f.topic, tier); len(got) != 0 {
				t.Fatalf("the replay to another place than its dry run showed wrote %v", got)
			}
			if moved := d.startJob(t, "/dlq/"+f.dlqTopic+"/replay", a.replay, http.StatusAccepted).moved; moved != 1 {
				t.Fatalf("the replay to the group moved %d, want 1", moved)
			}
			if main, retry := keysOn(t, r, f.topic), keysOn(t, r, tier); len(main) != 0 || !slices.Equal(retry, []string{"k-1"}) {
				t.Errorf("the replay to the group wrote %v to %s and %v to the tier; want nothing to the main topic, k-1 to the tier", main, f.topic, retry)
			}
		})
	}
}

// TestAScriptGetsJSONErrors: a script that asks for JSON gets a 401 in
// JSON without a token, or with a wrong one, never the sign-in page; a
// signed-in browser opening the sign-in page goes on to its next page.
func TestAScriptGetsJSONErrors(t *testing.T) {
	t.Parallel()
	r := newDoorRig(t)
	c := newClient(t, r.url)
	for _, token := range []string{"", "Bearer wrong-token-of-nobody-00"} {
		status, body, _ := c.do(http.MethodGet, "/outbox/purge?status=dead_lettered", nil, map[string]string{"Accept": "application/json", "Authorization": token})
		var answer struct{ Error string }
		if status != http.StatusUnauthorized || json.Unmarshal([]byte(body), &answer) != nil || !strings.Contains(answer.Error, "sign in first") {
			t.Errorf("a script with token %q: %d %.300s, want 401 in JSON", token, status, body)
		}
	}
	browser := doors(t, r)[0].c
	if status, _, h := browser.do(http.MethodGet, "/login?next=%2Faudit", nil, nil); status != http.StatusSeeOther || h.Get("Location") != "/audit" {
		t.Errorf("a signed-in browser on /login: %d to %q, want to go on to /audit", status, h.Get("Location"))
	}
}
