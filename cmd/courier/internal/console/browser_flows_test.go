package console_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/chromedp/chromedp"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestBrowserRequeuesADeadLetteredEvent: in Chromium, an operator filters
// the outbox down to an event the relay dead-lettered (its topic did not
// exist), requeues it after the confirmation page gave the exact count,
// and sees the relay publish it once the topic exists; the audit page
// shows who did it.
func TestBrowserRequeuesADeadLetteredEvent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	good := r.kafka.Topic(t, 1)
	missing := "t.later-" + testkit.UniqueName(t, 60)
	ids := r.enqueue(t,
		producer.Event{Topic: good, Key: "order-1", Type: "OrderPlaced", Payload: []byte(`{"order":1}`)},
		producer.Event{Topic: missing, Key: "order-2", Type: "OrderPlaced", Payload: []byte(`{"order":2}`), MaxAttempts: 1})
	r.relay(t, nil)
	testkit.WaitFor(t, 30*time.Second, "the event of the missing topic to be dead-lettered", func() bool {
		return r.status(t, ids[1]) == producer.StatusDeadLettered && r.status(t, ids[0]) == producer.StatusPublished
	})

	b := newBrowser(t, r.url)
	b.open("/")
	if got := b.text("#count-dead_lettered"); got != "1" {
		t.Errorf("overview counts %q dead-lettered events, want 1", got)
	}
	b.keep("overview")
	b.open("/outbox/events")
	b.do("filter by topic and status",
		chromedp.SetValue(chromedp.CSS(`input[name=topic]`), missing),
		chromedp.Click(chromedp.CSS(`input[name=status][value=dead_lettered]`)))
	b.click(`#filters button[type=submit]`)
	if got := b.text("#match-count"); !strings.HasPrefix(got, "1 event(s) match") {
		t.Fatalf("the filtered list says %q, want 1 event", got)
	}
	if got := b.text("#events tbody"); !strings.Contains(got, "order-2") || strings.Contains(got, "order-1") {
		t.Fatalf("the filtered list shows %q, want order-2 only", got)
	}
	b.keep("events")
	b.click("#requeue-matching")
	if got := b.text("#confirm-count"); got != "1" {
		t.Fatalf("the confirmation counts %q events, want 1", got)
	}
	if got := r.status(t, ids[1]); got != producer.StatusDeadLettered {
		t.Fatalf("the confirmation page changed the event to %s", got)
	}
	r.kafka.CreateTopic(t, missing, 1)
	b.click("#confirm")
	if got := b.text(".notice"); !strings.Contains(got, "Requeue: 1 event(s).") {
		t.Errorf("after the requeue the page says %q", got)
	}
	b.open("/outbox/events/" + ids[1].String())
	b.waitText("#event-status", producer.StatusPublished, true)
	if n := len(r.kafka.ReadAll(t, missing)); n != 1 {
		t.Errorf("the requeued event's topic holds %d records, want 1", n)
	}
	b.open("/audit")
	audit := b.text("#audit tbody")
	if !strings.Contains(audit, "outbox.requeue") || !strings.Contains(audit, "local") || !strings.Contains(audit, missing) {
		t.Errorf("the audit page shows %q, want the requeue of 1 event with its filter and who", audit)
	}
}

// TestBrowserReplaysADeadLetterToTheConsumer: a consumer dead-letters a
// message while its handler is broken; with the handler fixed, an
// operator opens the dead-letter topic in Chromium, dry-runs a replay
// (1 would move), replays it, watches the job to its end, and the
// consumer handles the message.
func TestBrowserReplaysADeadLetterToTheConsumer(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	topic := r.kafka.Topic(t, 1)
	r.kafka.CreateTopic(t, topic+dlq.DefaultSuffix, 1)
	var mu sync.Mutex
	broken, handled := true, map[string]int{}
	cfg := consumer.NewSaramaConfig()
	cfg.Consumer.Offsets.AutoCommit.Interval = 10 * time.Millisecond
	c, err := consumer.New(consumer.Config{Brokers: r.kafka.Brokers, Sarama: cfg, Group: "g-" + testkit.UniqueName(t, 40), Topics: []string{topic},
		Logger: testkit.Logger(t),
		Handler: consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if broken {
				return consumer.Permanent(errors.New("payout service rejected the account"))
			}
			handled[string(m.Key)]++
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	p := r.kafka.Producer(t)
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("payout-7"), Value: sarama.StringEncoder(`{"amount":700}`)}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the dead letter", func() bool { return len(r.kafka.ReadAll(t, topic+dlq.DefaultSuffix)) == 1 })
	mu.Lock()
	broken = false
	mu.Unlock()

	b := newBrowser(t, r.url)
	b.open("/dlq")
	b.click(fmt.Sprintf(`#dlq-topics a[href="/dlq/%s%s"]`, topic, dlq.DefaultSuffix))
	if got := b.text("#match-count"); !strings.HasPrefix(got, "1 of 1 record(s) match") {
		t.Fatalf("the dead-letter topic's page says %q", got)
	}
	if got := b.text("#dead-letters tbody"); !strings.Contains(got, "payout-7") || !strings.Contains(got, "payout service rejected the account") {
		t.Fatalf("the dead-letter list shows %q", got)
	}
	b.keep("dlq")
	b.click("#dry-run")
	b.waitText("#state", "done", false)
	if got := b.text("#moved"); got != "1" {
		t.Fatalf("the dry run would move %q records, want 1", got)
	}
	mu.Lock()
	if handled["payout-7"] != 0 {
		t.Errorf("the dry run replayed the record")
	}
	mu.Unlock()
	b.click("#replay")
	b.waitText("#state", "done", false)
	if got := b.text("#moved"); got != "1" {
		t.Fatalf("the replay moved %q records, want 1", got)
	}
	b.keep("replay")
	testkit.WaitFor(t, 30*time.Second, "the consumer to handle the replayed record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["payout-7"] == 1
	})
	b.open("/audit")
	if audit := b.text("#audit tbody"); !strings.Contains(audit, "dlq.replay.done") || !strings.Contains(audit, "moved 1") {
		t.Errorf("the audit page shows %q, want the replay and its end", audit)
	}
}

// hostile is a payload, key and header value that would run script or
// move a terminal if shown raw.
const hostile = `<script>window.courierPwned=1</script><img src=x onerror="window.courierPwned=2">` + "\x1b[31m\u202e"

// TestBrowserShowsHostileContentAsText: an event and a dead letter whose
// key, headers and payload hold script, an image with an onerror handler,
// an escape sequence and a bidi override are shown as text in Chromium:
// no script of theirs runs, no element of theirs exists, and the control
// characters are shown escaped.
func TestBrowserShowsHostileContentAsText(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	topic := r.kafka.Topic(t, 1)
	ids := r.enqueue(t, producer.Event{Topic: topic, Key: hostile, Type: "Hostile", ContentType: "text/plain",
		Payload: []byte(hostile), Headers: map[string]string{"note": hostile}})
	dlqTopic := topic + dlq.DefaultSuffix
	r.kafka.CreateTopic(t, dlqTopic, 1)
	env, err := dlq.New(dlq.Original{Topic: topic, Partition: 0, Offset: 3, Key: []byte(hostile), Value: append([]byte(hostile), 0xff, 0x00),
		Headers: []dlq.Header{{Key: []byte("note"), Value: []byte(hostile)}}}, dlq.Failure{Error: hostile, Kind: dlq.KindPermanent, Attempts: 1, FailedAt: time.Now(), ConsumerGroup: "g"})
	if err != nil {
		t.Fatal(err)
	}
	value, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.kafka.Producer(t).SendMessage(&sarama.ProducerMessage{Topic: dlqTopic, Key: sarama.ByteEncoder(hostile), Value: sarama.ByteEncoder(value)}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, r.url)
	check := func(page string, shown ...string) {
		t.Helper()
		b.open(page)
		pwned := eval[bool](b, `window.courierPwned !== undefined`)
		scripts := eval[int](b, `document.scripts.length`)
		images := eval[int](b, `document.images.length`)
		if pwned || scripts != 1 || images != 0 {
			t.Errorf("%s: script of the record ran (%v), or the page holds %d scripts (want the console's 1) and %d images (want 0)", page, pwned, scripts, images)
		}
		body := b.text("main")
		for _, s := range shown {
			if !strings.Contains(body, s) {
				t.Errorf("%s does not show %q as text", page, s)
			}
		}
	}
	escaped := `<script>window.courierPwned=1</script><img src=x onerror=\"window.courierPwned=2\">\x1b[31m\u202e`
	check("/outbox/events/"+ids[0].String(), escaped)
	check("/outbox/events?status=pending", escaped)
	check("/dlq/"+dlqTopic, escaped)
	check("/dlq/"+dlqTopic+"/0/0", escaped, "hex")
	b.keep("hostile")
}

// TestBrowserReplayOfAChangedSetShowsANewDryRun: in Chromium, an operator
// dry-runs a replay of 2 dead letters; a third arrives; the replay button
// then writes nothing and leads to a new dry run's page, which says why and
// stays that page (it follows the dry run by GETs, never posting the
// replay again); its replay of the 3 moves them.
func TestBrowserReplayOfAChangedSetShowsANewDryRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	f := newReplayFixture(t, r)
	deadLetterOf(t, r, f.dlqTopic, f.topic, "k-1", "psp timeout", time.Now())
	deadLetterOf(t, r, f.dlqTopic, f.topic, "k-2", "psp timeout", time.Now())

	b := newBrowser(t, r.url)
	b.open("/dlq/" + f.dlqTopic)
	b.waitText("#match-count", "2 of 2", true)
	b.click("#dry-run")
	b.waitText("#state", "done", false)
	if got := b.text("#moved"); got != "2" {
		t.Fatalf("the dry run would move %q records, want 2", got)
	}
	deadLetterOf(t, r, f.dlqTopic, f.topic, "k-3", "psp timeout", time.Now())
	b.click("#replay")
	b.waitText("#changed", "the replay found 3", false) // the page the refused replay leads to
	job := eval[string](b, `document.getElementById("job").dataset.progress`)
	if got := b.text("#changed"); !strings.Contains(got, "it showed 2 record(s), the replay found 3") {
		t.Errorf("the page after the refused replay says %q, want why it was refused", got)
	}
	b.waitText("#state", "done", false)
	b.keep("changed")
	if got := eval[string](b, `document.getElementById("job").dataset.progress`); got != job || !strings.HasPrefix(eval[string](b, `location.pathname`), "/jobs/") {
		t.Errorf("the new dry run's page became %s at %s, want it to stay %s", got, eval[string](b, `location.pathname`), job)
	}
	if got := b.text("#moved"); got != "3" {
		t.Fatalf("the new dry run would move %q records, want 3", got)
	}
	if got := keysOn(t, r, f.topic); len(got) != 0 {
		t.Fatalf("the refused replay wrote %v", got)
	}
	b.click("#replay")
	b.waitText("#state", "done", false)
	if got := keysOn(t, r, f.topic); !slices.Equal(got, []string{"k-1", "k-2", "k-3"}) {
		t.Errorf("the replay of the new dry run wrote %v, want k-1, k-2 and k-3", got)
	}
}
