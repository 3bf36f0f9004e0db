package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// writeDeadLetter writes an envelope for a record of original that group
// failed ("" for one the relay dead-lettered) to dlqTopic; the record has
// headers.
func writeDeadLetter(t *testing.T, r *rig, dlqTopic, original, group string, headers ...dlq.Header) {
	t.Helper()
	o := dlq.Original{Topic: original, Partition: 0, Offset: 7, Key: []byte("payout-9"), Value: []byte(`{"amount":900}`), Headers: headers}
	if group == "" {
		o.Partition, o.Offset = dlq.NoPartition, dlq.NoOffset
	}
	env, err := dlq.New(o, dlq.Failure{Error: "psp: timeout", Kind: dlq.KindRetriesExhausted, Attempts: 5, FailedAt: time.Now(), ConsumerGroup: group})
	if err != nil {
		t.Fatal(err)
	}
	value, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.kafka.Producer(t).SendMessage(&sarama.ProducerMessage{Topic: dlqTopic, Key: sarama.StringEncoder("payout-9"), Value: sarama.ByteEncoder(value)}); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunToTheFailedGroupOnly: with the groups' retry delays, a dry run
// "only to the consumer group that failed each record" would send a
// consumer's dead letter to the first retry tier of its topic, and skips
// the relay's (which no group failed) saying why; the job's page and its
// progress say so, and nothing is written.
func TestDryRunToTheFailedGroupOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *console.Config) { c.RetryDelays = []time.Duration{time.Second, time.Minute} })
	topic := r.kafka.Topic(t, 1)
	dlqTopic, tier := topic+dlq.DefaultSuffix, topic+".retry.1s"
	r.kafka.CreateTopic(t, dlqTopic, 1)
	r.kafka.CreateTopic(t, tier, 1)
	writeDeadLetter(t, r, dlqTopic, topic, "payouts")
	writeDeadLetter(t, r, dlqTopic, topic, "")

	c := newClient(t, r.url)
	if _, body := c.get("/dlq/" + dlqTopic); !strings.Contains(body, `id="to-group"`) {
		t.Fatalf("the dead-letter page offers no replay to the failed group:\n%.2000s", body)
	}
	status, body, h := c.do(http.MethodPost, "/dlq/"+dlqTopic+"/dry-run", url.Values{"csrf": {c.csrf}, "to_group": {"on"}}, nil)
	if status != http.StatusSeeOther {
		t.Fatalf("dry run: %d %.500s", status, body)
	}
	job := h.Get("Location")
	testkit.WaitFor(t, 30*time.Second, "the dry run to end", func() bool {
		_, progress := c.get(job + "/progress")
		return strings.Contains(progress, `"done":true`)
	})
	_, page := c.get(job)
	wouldMove := regexp.MustCompile(`<td>0/0</td><td>` + regexp.QuoteMeta(topic) + `</td><td>` + regexp.QuoteMeta(tier) + ``)
	if !wouldMove.MatchString(page) || !strings.Contains(page, `id="moved">1<`) || !strings.Contains(page, `id="skipped">1<`) ||
		!strings.Contains(page, "relay dead-lettered it") {
		t.Errorf("the dry run's page does not show 1 record to %s and the relay's skipped with its reason:\n%s", tier, page)
	}
	if n := len(r.kafka.ReadAll(t, tier)); n != 0 {
		t.Errorf("a dry run wrote %d records to %s", n, tier)
	}
	if !strings.Contains(page, `name="to_group" value="on"`) {
		t.Errorf("the replay the dry run offers does not keep the choice of the failed group")
	}
}
