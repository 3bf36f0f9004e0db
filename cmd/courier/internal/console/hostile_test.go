package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestHostileRequestsGetClearErrors: filters, ids, places and cursors no
// real page gives are refused with a 4xx naming the field, never a 5xx or
// a panic, and the page quotes the bad value escaped.
func TestHostileRequestsGetClearErrors(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	dlqTopic := r.kafka.Topic(t, 1) + ".dlq"
	r.kafka.CreateTopic(t, dlqTopic, 1)
	c := newClient(t, r.url)
	long := strings.Repeat("k", 3000)
	for path, want := range map[string]string{
		"/outbox/events?topic=a%00b":                              "NUL",
		"/outbox/events?key=" + long:                              "bytes long",
		"/outbox/events?tenant=%ff%fe":                            "UTF-8",
		"/outbox/events?status=gone":                              "status",
		"/outbox/events?status=%1b%5b2J":                          `\x1b[2J`,
		"/outbox/events?since=yesterday":                          "since",
		"/outbox/events?since=1h&until=2h":                        "not after",
		"/outbox/events?after=-4":                                 "after",
		"/outbox/events?after=x":                                  "after",
		"/outbox/events/not-a-uuid":                               "UUID",
		"/outbox/events/00000000-0000-0000-0000-000000000000":     "no event",
		"/outbox/requeue?status=pending":                          "not allowed",
		"/outbox/purge?status=failed":                             "not allowed",
		"/outbox/requeue?id=%3Cscript%3E":                         "UUID",
		"/outbox/drop":                                            "no outbox action",
		"/dlq/" + dlqTopic + "?kind=fatal":                        "kind",
		"/dlq/" + dlqTopic + "?partition=-1":                      "partition",
		"/dlq/" + dlqTopic + "?offset=3":                          "offset",
		"/dlq/" + dlqTopic + "?after=zz":                          "cursor",
		"/dlq/" + dlqTopic + "?group=%00":                         "NUL",
		"/dlq/" + dlqTopic + "?tenant=%ff%fe":                     "UTF-8",
		"/dlq/" + dlqTopic + "?group=" + strings.Repeat("g", 300): "has 300 bytes",
		"/dlq/" + dlqTopic + "/0/99":                              "no record",
		"/dlq/" + dlqTopic + "/x/1":                               "partition and offset",
		"/dlq/" + dlqTopic + "/0/9223372036854775807":             "partition and offset",
		"/dlq/orders":                                             "not a dead-letter topic",
		"/dlq/bad%20topic!.dlq":                                   "not a topic name",
		"/dlq/t.nope.dlq":                                         "does not exist",
		"/jobs/nope":                                              "no such replay job",
		"/audit?before=-1":                                        "before",
	} {
		status, body := c.get(path)
		if status < 400 || status >= 500 || !strings.Contains(body, want) {
			t.Errorf("GET %.80s: %d, want a 4xx saying %q (%.300s)", path, status, want, body)
		}
		if strings.ContainsAny(body, "\x00\x1b") {
			t.Errorf("GET %.80s: the page holds a raw control character", path)
		}
	}
	c.get("/")
	for path, form := range map[string]url.Values{
		"/outbox/requeue":               {"status": {"dead_lettered"}},
		"/dlq/" + dlqTopic + "/dry-run": {"rate": {"-1"}},
		"/dlq/" + dlqTopic + "/replay":  {"rate": {"NaN"}},
		"/jobs/nope/cancel":             {},
	} {
		form.Set("csrf", c.csrf)
		status, body, _ := c.do(http.MethodPost, path, form, nil)
		if status < 400 || status >= 500 {
			t.Errorf("POST %s %v: %d, want a 4xx (%.300s)", path, form, status, body)
		}
	}
}

// TestActionsNeedTheAuditTable: without the audit table the console shows
// its pages, says which command creates the table, and refuses every
// action, so that nothing is done unrecorded.
func TestActionsNeedTheAuditTable(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	if _, err := r.pg.Pool.Exec(context.Background(), "DROP TABLE "+r.pg.Schema+".courier_outbox_audit"); err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(context.Background(), console.Config{DB: r.pg.Pool, Schema: r.pg.Schema, Kafka: r.client, Brokers: r.kafka.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := httptestServe(t, srv)
	c := newClient(t, rec)
	status, body := c.get("/outbox/events")
	if status != http.StatusOK || !strings.Contains(body, "courier migrate up") || strings.Contains(body, "requeue-matching") {
		t.Errorf("without the audit table the list is %d; it must name the migrate command and offer no action", status)
	}
	dlqTopic := r.kafka.Topic(t, 1) + ".dlq"
	r.kafka.CreateTopic(t, dlqTopic, 1)
	c.get("/dlq/" + dlqTopic) // a dry run needs no audit: its form gives the anti-forgery token
	status, body, _ = c.do(http.MethodPost, "/outbox/requeue", url.Values{"csrf": {c.csrf}, "status": {"dead_lettered"}, "expect": {"0"}}, nil)
	if status != http.StatusConflict || !strings.Contains(body, "audit table") {
		t.Errorf("an action without the audit table: %d (%.300s)", status, body)
	}
}

// TestActionsRefuseWhatTheyCannotReadWhole: through a session and
// through a Bearer token, an action whose fields are not all read as
// sent (a JSON body, fields in the query string, a field the action does
// not take, a field given twice, a file, a to_group that is not "on")
// is refused with a 4xx saying why, and changes nothing: the events stay
// dead-lettered, no replay writes, no audit row is written.
func TestActionsRefuseWhatTheyCannotReadWhole(t *testing.T) {
	t.Parallel()
	r := newDoorRig(t)
	ids := r.deadLettered(t, producer.Event{Topic: "t.none-" + testkit.UniqueName(t, 60), Key: "k", Type: "T", Payload: []byte(`{}`)})
	f := newReplayFixture(t, r)
	deadLetterOf(t, r, f.dlqTopic, f.topic, "k", "psp timeout", time.Now())
	purge := url.Values{"status": {"dead_lettered"}, "key": {"k"}, "expect": {"1"}}
	for _, d := range doors(t, r) {
		d.get(t, "/") // the session's anti-forgery token
		for _, tc := range []struct {
			name, path, contentType, body, want string
			status                              int
		}{
			{"a JSON body", "/outbox/purge", "application/json", `{"key":"k","status":"dead_lettered","expect":1}`, "reads forms only", http.StatusUnsupportedMediaType},
			{"a body without a type", "/outbox/purge", "", purge.Encode(), "names no Content-Type", http.StatusUnsupportedMediaType},
			{"the filter in the query", "/outbox/purge?key=k&status=dead_lettered", "", "expect=1", "query string", http.StatusBadRequest},
			{"an unknown field", "/outbox/purge", "", "status=dead_lettered&tenant_id=acme&expect=1", `no field "tenant_id"`, http.StatusBadRequest},
			{"a key given twice", "/outbox/purge", "", "status=dead_lettered&key=k&key=other&expect=1", `"key" is given 2 times`, http.StatusBadRequest},
			{"no count", "/outbox/purge", "", "status=dead_lettered&key=k", "expect", http.StatusBadRequest},
			{"a count of 0", "/outbox/purge", "", "status=dead_lettered&key=k&expect=0", "expect", http.StatusBadRequest},
			{"a replay's unknown field", "/dlq/" + f.dlqTopic + "/replay", "", "keys=k&expect=1", `no field "keys"`, http.StatusBadRequest},
			{"a replay's filter in the query", "/dlq/" + f.dlqTopic + "/replay?key=k", "", "expect=1", "query string", http.StatusBadRequest},
			{"a replay without a count", "/dlq/" + f.dlqTopic + "/replay", "", "key=k", "dry-run the replay first", http.StatusBadRequest},
			{"a replay without a set", "/dlq/" + f.dlqTopic + "/replay", "", "key=k&expect=1", "give the set of the dry run", http.StatusBadRequest},
			{"a replay to_group of true", "/dlq/" + f.dlqTopic + "/replay", "", "key=k&expect=1&to_group=true", "to_group", http.StatusBadRequest},
			{"a file", "/outbox/purge", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"key\"; filename=\"k.txt\"\r\n\r\nk\r\n--b--\r\n", "file", http.StatusBadRequest},
		} {
			headers := d.headers()
			if headers == nil {
				headers = map[string]string{}
			}
			headers["Content-Type"] = tc.contentType
			if tc.contentType == "" && !strings.HasPrefix(tc.name, "a body without") {
				headers["Content-Type"] = "application/x-www-form-urlencoded"
			}
			body := tc.body
			if !d.bearer && !strings.HasPrefix(tc.contentType, "multipart") && tc.contentType != "application/json" {
				body += "&csrf=" + url.QueryEscape(d.c.csrf)
			}
			status, page := d.c.raw(http.MethodPost, tc.path, body, headers)
			if d.bearer {
				var answer struct{ Error string }
				if err := json.Unmarshal([]byte(page), &answer); err != nil {
					t.Errorf("%s, %s: the answer is no JSON error: %.300s", d.name, tc.name, page)
				}
				page = answer.Error
			}
			if status != tc.status || !strings.Contains(html.UnescapeString(page), tc.want) {
				t.Errorf("%s, %s: %d, want %d saying %q (%.400s)", d.name, tc.name, status, tc.status, tc.want, page)
			}
		}
	}
	for _, d := range doors(t, r) {
		for path, want := range map[string]string{
			"/outbox/purge?status=dead_lettered&tennant=acme": `no field "tennant"`,
			"/outbox/requeue?key=k&key=other":                 `"key" is given 2 times`,
			"/outbox/events?tennant=acme":                     `no field "tennant"`,
			"/dlq/" + f.dlqTopic + "?keys=k":                  `no field "keys"`,
		} {
			status, page := d.get(t, path)
			if d.bearer {
				var answer struct{ Error string }
				_ = json.Unmarshal([]byte(page), &answer)
				page = answer.Error
			}
			if status != http.StatusBadRequest || !strings.Contains(html.UnescapeString(page), want) {
				t.Errorf("%s, GET %s: %d, want 400 saying %q (%.300s)", d.name, path, status, want, page)
			}
		}
		for path, form := range map[string]string{
			"/dlq/t.nope-" + testkit.UniqueName(t, 40) + ".dlq/replay": "key=k&expect=1&set=" + strings.Repeat("0", 32),
			"/dlq/" + f.dlqTopic + "/dry-run":                          "rate=1e-10",
		} {
			headers := d.headers()
			if headers == nil {
				headers = map[string]string{}
				form += "&csrf=" + url.QueryEscape(d.c.csrf)
			}
			headers["Content-Type"] = "application/x-www-form-urlencoded"
			if status, page := d.c.raw(http.MethodPost, path, form, headers); status != http.StatusNotFound && status != http.StatusBadRequest {
				t.Errorf("%s, POST %s %s: %d, want a 4xx (%.300s)", d.name, path, form, status, page)
			}
		}
	}
	if got := r.status(t, ids[0]); got != producer.StatusDeadLettered {
		t.Errorf("after the refused actions the event is %s, want dead_lettered", got)
	}
	if got := keysOn(t, r, f.topic); len(got) != 0 {
		t.Errorf("a refused replay wrote %v", got)
	}
	if entries, err := r.admin.AuditLog(context.Background(), 0, 10); err != nil || len(entries) != 0 {
		t.Errorf("audit %+v, %v: want no row", entries, err)
	}
}
