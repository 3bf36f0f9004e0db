package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// keyedPayload is the payload of the ordering tests: the n-th event of a key.
type keyedPayload struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// enqueueKeyed enqueues perKey events for each of keys keys on topic, the
// keys interleaved, in batches; event n of a key is enqueued after n-1.
func enqueueKeyed(t *testing.T, pg *testkit.PG, out *producer.Outbox, topic string, keys, perKey int) int {
	t.Helper()
	var batch []producer.Event
	flush := func() {
		if _, err := out.EnqueueBatch(context.Background(), pg.Pool, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%03d", k)
			payload, _ := json.Marshal(keyedPayload{Key: key, N: n})
			batch = append(batch, producer.Event{Topic: topic, Key: key, Type: "Counted", Payload: payload})
			if len(batch) == 1000 {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return keys * perKey
}

// checkKeyOrder fails the test when a key's events, first copies only, do
// not arrive in enqueue order (in partition order).
func checkKeyOrder(t *testing.T, msgs []*sarama.ConsumerMessage) (duplicates int) {
	t.Helper()
	byPartition := map[int32][]*sarama.ConsumerMessage{}
	for _, m := range msgs {
		byPartition[m.Partition] = append(byPartition[m.Partition], m)
	}
	seen := map[string]bool{}
	last := map[string]int{}
	for _, part := range byPartition {
		// Messages of a partition arrive in offset order from one consumer.
		for _, m := range part {
			var p keyedPayload
			if err := json.Unmarshal(m.Value, &p); err != nil {
				t.Fatalf("offset %d: %v", m.Offset, err)
			}
			if string(m.Key) != p.Key {
				t.Fatalf("record key %q carries payload of key %q", m.Key, p.Key)
			}
			id := headerValue(m, producer.HeaderID)
			if seen[id] {
				// A duplicate replays events Kafka already had; order is
				// the order of first copies, as a consumer deduplicating on
				// ce_id sees it.
				duplicates++
				continue
			}
			seen[id] = true
			if prev, ok := last[p.Key]; ok && p.N < prev {
				t.Fatalf("key %s: event %d arrived after event %d (partition %d offset %d)", p.Key, p.N, prev, m.Partition, m.Offset)
			}
			last[p.Key] = p.N
		}
	}
	return duplicates
}

// TestThreeRelaysUnderProduceFaults drains 20,000 events over 500 keys
// with three relays while the broker fails about one produce partition in
// five: refusals before the append (NOT_LEADER_FOR_PARTITION,
// LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS), answers after it
// (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT: the records are on
// the log, the relay is told they failed), and one request in twenty loses
// its connection. Every event arrives, each key's in enqueue order, and
// none counts an attempt: with MaxAttempts 1, one counted attempt would
// dead-letter it. With idempotent writes (the default) not one is written
// twice, although no relay died; without them, the answers after an append
// leave duplicates.
func TestThreeRelaysUnderProduceFaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		noIdempotence bool
	}{{"idempotent", false}, {"without idempotence", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			k := testkit.NewKafka(t, testkit.Brokers(3), testkit.InProcess()) // the test injects faults
			topic := k.Topic(t, 6)
			total := enqueueKeyed(t, pg, out, topic, 500, 40)
			faults, afterAppend := injectProduceFaults(k)

			metrics := &recordedMetrics{}
			for range 3 {
				saramaCfg := producer.NewSaramaConfig()
				saramaCfg.Producer.Retry.Max = 0 // let the faults reach the relay
				relay := newRelay(t, pg, k, producer.RelayConfig{
					Sarama: saramaCfg, DisableIdempotence: c.noIdempotence,
					PollInterval: 50 * time.Millisecond, Hooks: []producer.Hook{metrics},
					MaxAttempts: 1, Backoff: backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
					Breaker: producer.BreakerConfig{OpenFor: 100 * time.Millisecond},
				})
				runRelay(t, relay)
			}
			testkit.WaitFor(t, 3*time.Minute, "every event published or dead-lettered", func() bool {
				return countRows(t, pg.Pool, "status NOT IN ('published', 'dead_lettered')") == 0
			})
			if n := countRows(t, pg.Pool, "status = 'dead_lettered' OR retry_count > 0"); n != 0 {
				t.Fatalf("%d events counted an attempt or were dead-lettered for the cluster's condition, want none", n)
			}
			faults.Remove()
			msgs := waitFaultRecords(t, k, consume(t, k, topic), topic, total)
			if n := len(distinctIDs(msgs)); n != total {
				t.Fatalf("%d distinct events on Kafka, want all %d", n, total)
			}
			dups := checkKeyOrder(t, msgs)
			metrics.mu.Lock()
			defer metrics.mu.Unlock()
			t.Logf("%d events, %d duplicates (%.2f %%), %d answers after an append, failures by reason %v",
				total, dups, 100*float64(dups)/float64(total), afterAppend.Hits(), metrics.failures)
			if metrics.failures["held"] == 0 || afterAppend.Hits() == 0 {
				t.Fatalf("the faults did not reach the relay (%v, %d answers after an append): the test proves nothing", metrics.failures, afterAppend.Hits())
			}
			switch {
			case !c.noIdempotence && dups != 0:
				t.Errorf("%d duplicates with idempotent writes and no relay dying, want none", dups)
			case c.noIdempotence && dups == 0:
				t.Errorf("no duplicates without idempotence after %d answers after an append: the fault mix proves nothing", afterAppend.Hits())
			}
		})
	}
}

// injectProduceFaults makes k fail about one produce partition in five,
// with the five error codes of a broker in trouble, and drop the
// connection of one produce request in twenty. It returns the faults, and
// those answered after the records were appended.
func injectProduceFaults(k *testkit.Kafka) (all faultHandles, afterAppend faultHandles) {
	sometimes := func(kmsg.Request) bool { return rand.Float64() < 0.045 } // per partition; five codes: about 20 %
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.NotEnoughReplicas,
		kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut} {
		h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: code, Count: -1, When: sometimes})
		all = append(all, h)
		if code == kerr.NotEnoughReplicasAfterAppend || code == kerr.RequestTimedOut {
			afterAppend = append(afterAppend, h)
		}
	}
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		if rand.IntN(20) != 0 {
			return nil, nil, false
		}
		return nil, errors.New("connection dropped"), true // closes the connection
	})
	return all, afterAppend
}

// faultHandles are several faults, counted and removed together.
type faultHandles []*kfake.FaultHandle

// Hits is how many requests the faults answered.
func (hs faultHandles) Hits() int {
	n := 0
	for _, h := range hs {
		n += h.Hits()
	}
	return n
}

// Remove uninstalls the faults.
func (hs faultHandles) Remove() {
	for _, h := range hs {
		h.Remove()
	}
}

// TestRelayPublishesAHotKeyInOneRequest: a batch of 500 events of one key
// leaves in one produce request and arrives in enqueue order. (A relay that
// waited for each event's acknowledgement before sending the next of its
// key would need 500 round trips.)
func TestRelayPublishesAHotKeyInOneRequest(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test counts requests
	topic := k.Topic(t, 3)
	total := enqueueKeyed(t, pg, out, topic, 1, 500)
	relay := newRelay(t, pg, k, producer.RelayConfig{})
	requests := observeProduce(k)

	if res := runOnce(t, relay); res.Published != total {
		t.Fatalf("batch %+v, want all %d published", res, total)
	}
	if n := requests.Hits(); n != 1 {
		t.Fatalf("%d produce requests for one batch of one key, want 1", n)
	}
	checkKeyOrder(t, consume(t, k, topic).waitDistinct(total, 30*time.Second))
}
