package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// TestWritesKeepOneCopyWhenAnswersAreLost: the broker appends about one
// write in three to the dead-letter topic and to the retry tier, then
// answers REQUEST_TIMED_OUT, as a broker whose answer was lost. The
// consumer's idempotent producer sends the batch again and the broker
// keeps it once: each of the messages dead-lettered and each moved to the
// tier is there exactly once. (Before the consumer's writes were
// idempotent, Sarama's retry of such an answer left a copy more: 13 to 23
// duplicates on the dead-letter topic and 12 to 29 on the tier, of 40
// records each, in three runs.)
func TestWritesKeepOneCopyWhenAnswersAreLost(t *testing.T) {
	t.Parallel()
	const dead, moved = 40, 40
	f := newFixture(t, 1, testkit.InProcess())
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		switch {
		case strings.HasPrefix(string(m.Value), "poison"):
			return consumer.Permanent(errors.New("cannot parse"))
		case m.RetryRound == 0:
			return errors.New("downstream timed out")
		}
		return nil // handled in the retry tier
	}))
	topo := f.withRetry(t, &cfg, 10*time.Millisecond)
	cfg.MaxWritesInFlight = 1 // one write per produce request: each may lose its answer
	tier := topo.Tiers[0].Topic
	var msgs []*sarama.ProducerMessage
	for i := range dead {
		msgs = append(msgs, record(fmt.Sprint("dead-", i), fmt.Sprint("poison-", i)))
	}
	for i := range moved {
		msgs = append(msgs, record(fmt.Sprint("moved-", i), fmt.Sprint("flaky-", i)))
	}
	f.produceTo(t, 0, msgs...)
	var faults []*kfake.FaultHandle
	for _, topic := range []string{f.dlq, tier} {
		faults = append(faults, f.k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: -1,
			When: func(kmsg.Request) bool { return rand.Float64() < 1.0/3 }}))
	}
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 30*time.Second, "every message settled", func() bool { return f.committed(t, 0) == dead+moved })

	lost := 0
	for _, h := range faults {
		lost += h.Hits()
		h.Remove()
	}
	if lost == 0 {
		t.Fatal("no answer was lost: the test proves nothing")
	}
	for _, c := range []struct {
		topic, prefix string
		want          int
	}{{f.dlq, "dead-", dead}, {tier, "moved-", moved}} {
		copies := map[string]int{}
		for _, rec := range f.readAll(t, c.topic) {
			copies[string(rec.Key)]++
		}
		dups := 0
		for key, n := range copies {
			if !strings.HasPrefix(key, c.prefix) {
				t.Errorf("%s holds a record of %s", c.topic, key)
			}
			dups += n - 1
		}
		t.Logf("%s: %d records, %d distinct, %d duplicates, after %d lost answers in all", c.topic, len(copies)+dups, len(copies), dups, lost)
		if len(copies) != c.want || dups != 0 {
			t.Errorf("%s: %d distinct records and %d duplicates, want %d and none", c.topic, len(copies), dups, c.want)
		}
	}
}

// producerIDs counts the InitProducerId requests the in-process broker
// gets from now on, answering each with refusal when it is not nil.
func (f *fixture) producerIDs(refusal *kerr.Error) *atomic.Int32 {
	asked := &atomic.Int32{}
	f.k.Cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		asked.Add(1)
		if refusal == nil {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = refusal.Code
		return resp, nil, true
	})
	return asked
}

// deadLetterAll dead-letters every message at once.
var deadLetterAll = consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
	return consumer.Permanent(errors.New("cannot parse"))
})

// TestRunNamesTheFieldWhenTheClusterRefusesIdempotentWrites: a cluster
// whose ACLs refuse producer ids (CLUSTER_AUTHORIZATION_FAILED on
// InitProducerId) makes Run fail at once with an error naming the fix;
// with WithoutIdempotentWrites the consumer asks for no producer id and
// dead-letters as before.
func TestRunNamesTheFieldWhenTheClusterRefusesIdempotentWrites(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	f.produceTo(t, 0, record("a", "poison")) // before the refusal: the test's producer is idempotent too
	asked := f.producerIDs(kerr.ClusterAuthorizationFailed)
	cfg := f.config(t, deadLetterAll)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := newConsumer(t, cfg).Run(ctx)
	if !errors.Is(err, sarama.ErrClusterAuthorizationFailed) || !strings.Contains(err.Error(), "WithoutIdempotentWrites") {
		t.Fatalf("Run = %v, want CLUSTER_AUTHORIZATION_FAILED naming WithoutIdempotentWrites", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited until its context ended")
	}

	before := asked.Load()
	cfg.WithoutIdempotentWrites = true
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "the message dead-lettered", func() bool { return f.committed(t, 0) == 1 })
	if n := len(f.readAll(t, f.dlq)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	if n := asked.Load() - before; n != 0 {
		t.Errorf("the consumer without idempotent writes asked for a producer id %d times", n)
	}
}

// TestWritesAreIdempotentOnAClientOfYourOwn: with Config.Client, the
// consumer's writes still come from an idempotent producer (it asks for a
// producer id), on a copy of the client's config, which stays as it was.
func TestWritesAreIdempotentOnAClientOfYourOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	f.produceTo(t, 0, record("a", "poison"))
	asked := f.producerIDs(nil)
	sc := f.saramaConfig()
	sc.Producer.Return.Successes = true
	client, err := sarama.NewClient(f.k.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cfg := f.config(t, deadLetterAll)
	cfg.Brokers, cfg.Sarama, cfg.Client = nil, nil, client
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "the message dead-lettered", func() bool { return f.committed(t, 0) == 1 })
	stop()
	if asked.Load() == 0 {
		t.Error("the consumer asked for no producer id: its writes are not idempotent")
	}
	if got := client.Config(); got.Producer.Idempotent || got.Net.MaxOpenRequests != sc.Net.MaxOpenRequests {
		t.Errorf("the client's config was changed: Idempotent %t, MaxOpenRequests %d", got.Producer.Idempotent, got.Net.MaxOpenRequests)
	}
}
