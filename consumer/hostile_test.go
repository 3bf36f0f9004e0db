package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/retrytopics"
)

// hostileRetry is a record on a retry topic with hostile retry headers:
// edit changes the headers of a well-formed record of the main topic.
type hostileRetry struct {
	name string
	edit func(info *retrytopics.Info, h []sarama.RecordHeader) []sarama.RecordHeader
	// header is the header the dead letter's error must name; "" for a
	// record that must be handled, not dead-lettered.
	header string
	// timestamp, when set, is the record's own timestamp.
	timestamp time.Time
}

// set replaces the value of the header name, or adds it.
func set(name, value string) func(*retrytopics.Info, []sarama.RecordHeader) []sarama.RecordHeader {
	return func(_ *retrytopics.Info, hs []sarama.RecordHeader) []sarama.RecordHeader {
		for i := range hs {
			if string(hs[i].Key) == name {
				hs[i].Value = []byte(value)
				return hs
			}
		}
		return append(hs, sarama.RecordHeader{Key: []byte(name), Value: []byte(value)})
	}
}

// drop removes the header name.
func drop(name string) func(*retrytopics.Info, []sarama.RecordHeader) []sarama.RecordHeader {
	return func(_ *retrytopics.Info, hs []sarama.RecordHeader) []sarama.RecordHeader {
		out := hs[:0]
		for _, h := range hs {
			if string(h.Key) != name {
				out = append(out, h)
			}
		}
		return out
	}
}

// repeat adds a second header name with value.
func repeat(name, value string) func(*retrytopics.Info, []sarama.RecordHeader) []sarama.RecordHeader {
	return func(_ *retrytopics.Info, hs []sarama.RecordHeader) []sarama.RecordHeader {
		return append(hs, sarama.RecordHeader{Key: []byte(name), Value: []byte(value)})
	}
}

// TestHostileConsumer: records on a retry topic whose retry headers are
// forged, out of range, repeated, huge or not UTF-8. Each bad record goes
// to the main topic's dead-letter topic (whatever topic its headers name)
// as a permanent failure whose error names the header; the well-formed
// record after it on the same partition, and records of the main topic,
// are handled; handled + dead-lettered = produced; within a deadline. A
// forged due time far ahead waits at most the tier's delay.
func TestHostileConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	other := f.topic + "-other"
	f.k.CreateTopic(t, other, 1)
	f.k.CreateTopic(t, dlq.Topic(other, dlq.DefaultSuffix), 1)
	var seen calls
	cfg := f.recording(t, &seen)
	const tier = 200 * time.Millisecond
	f.withRetry(t, &cfg, tier)
	retryTopic := f.topic + ".retry.200ms"
	farFuture := strconv.FormatInt(time.Now().Add(10*365*24*time.Hour).UnixMilli(), 10)

	cases := []hostileRetry{
		{name: "negative original offset", edit: set(retrytopics.HeaderOriginalOffset, "-1"), header: retrytopics.HeaderOriginalOffset},
		{name: "offset not a number", edit: set(retrytopics.HeaderOriginalOffset, "seventeen"), header: retrytopics.HeaderOriginalOffset},
		{name: "offset beyond int64", edit: set(retrytopics.HeaderOriginalOffset, "92233720368547758070"), header: retrytopics.HeaderOriginalOffset},
		{name: "negative original partition", edit: set(retrytopics.HeaderOriginalPartition, "-7"), header: retrytopics.HeaderOriginalPartition},
		{name: "partition beyond int32", edit: set(retrytopics.HeaderOriginalPartition, "4294967296"), header: retrytopics.HeaderOriginalPartition},
		{name: "original topic invalid", edit: set(retrytopics.HeaderOriginalTopic, "bad topic!"), header: retrytopics.HeaderOriginalTopic},
		{name: "original topic names another topic", edit: set(retrytopics.HeaderOriginalTopic, other), header: retrytopics.HeaderOriginalTopic},
		{name: "original topic ..", edit: set(retrytopics.HeaderOriginalTopic, ".."), header: retrytopics.HeaderOriginalTopic},
		{name: "original topic of 100 KiB", edit: set(retrytopics.HeaderOriginalTopic, strings.Repeat("t", 100<<10)), header: retrytopics.HeaderOriginalTopic},
		{name: "original topic not utf-8", edit: set(retrytopics.HeaderOriginalTopic, "\xff\xfe"), header: retrytopics.HeaderOriginalTopic},
		{name: "negative round", edit: set(retrytopics.HeaderAttempt, "-1"), header: retrytopics.HeaderAttempt},
		{name: "round above the tiers", edit: set(retrytopics.HeaderAttempt, "7"), header: retrytopics.HeaderAttempt},
		{name: "round beyond int", edit: set(retrytopics.HeaderAttempt, "100000000000000000000"), header: retrytopics.HeaderAttempt},
		{name: "negative failed attempts", edit: set(retrytopics.HeaderFailedAttempts, "-3"), header: retrytopics.HeaderFailedAttempts},
		{name: "failed attempts huge", edit: set(retrytopics.HeaderFailedAttempts, "9223372036854775807"), header: retrytopics.HeaderFailedAttempts},
		{name: "not before not a number", edit: set(retrytopics.HeaderNotBefore, "soon"), header: retrytopics.HeaderNotBefore},
		{name: "not before negative", edit: set(retrytopics.HeaderNotBefore, "-1"), header: retrytopics.HeaderNotBefore},
		{name: "not before after the year 9999", edit: set(retrytopics.HeaderNotBefore, "9223372036854775807"), header: retrytopics.HeaderNotBefore},
		{name: "first failed at after the year 9999", edit: set(retrytopics.HeaderFirstFailedAt, "300000000000000"), header: retrytopics.HeaderFirstFailedAt},
		{name: "original timestamp negative", edit: set(retrytopics.HeaderOriginalTimestamp, "-99999999999999"), header: retrytopics.HeaderOriginalTimestamp},
		{name: "retry attempt twice", edit: repeat(retrytopics.HeaderAttempt, "1"), header: retrytopics.HeaderAttempt},
		{name: "original topic twice", edit: repeat(retrytopics.HeaderOriginalTopic, other), header: retrytopics.HeaderOriginalTopic},
		{name: "consumer group not utf-8", edit: set(retrytopics.HeaderConsumerGroup, "g\xff"), header: retrytopics.HeaderConsumerGroup},
		{name: "consumer group with control characters", edit: set(retrytopics.HeaderConsumerGroup, "g\x1b]0;pwned\x07"), header: retrytopics.HeaderConsumerGroup},
		{name: "missing not before", edit: drop(retrytopics.HeaderNotBefore), header: retrytopics.HeaderNotBefore},
		{name: "missing original topic", edit: drop(retrytopics.HeaderOriginalTopic), header: retrytopics.HeaderOriginalTopic},
		{name: "no retry headers at all", edit: func(_ *retrytopics.Info, hs []sarama.RecordHeader) []sarama.RecordHeader {
			return hs[:1]
		}, header: "retry_attempt"},
		// Well-formed but hostile: handled, within the tier's delay.
		{name: "not before ten years ahead", edit: set(retrytopics.HeaderNotBefore, farFuture)},
		{name: "record timestamp and not before ten years ahead", edit: set(retrytopics.HeaderNotBefore, farFuture),
			timestamp: time.Now().Add(10 * 365 * 24 * time.Hour)},
		{name: "last error of 900 KiB not utf-8", edit: set(retrytopics.HeaderLastError, strings.Repeat("\xff\xfe", 450<<10))},
	}

	var records []*sarama.ProducerMessage
	for _, tc := range cases {
		info := retrytopics.Info{Round: 1, FailedAttempts: 1, OriginalTopic: f.topic, OriginalPartition: 0, OriginalOffset: 3,
			NotBefore: time.Now(), ConsumerGroup: f.group}
		bad := retryRecord("bad/"+tc.name, info)
		bad.Headers = tc.edit(&info, bad.Headers)
		bad.Timestamp = tc.timestamp
		good := retryRecord("good/"+tc.name, retrytopics.Info{Round: 1, FailedAttempts: 1, OriginalTopic: f.topic, NotBefore: time.Now(), ConsumerGroup: f.group})
		records = append(records, bad, good)
	}
	f.produce(t, retryTopic, records...)
	f.produce(t, f.topic, record("main-key", "main/1"), record("other-key", "main/2"))

	dead := 0
	for _, tc := range cases {
		if tc.header != "" {
			dead++
		}
	}
	handledWant := len(records) - dead + 2
	start := time.Now()
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 60*time.Second, "every record handled or dead-lettered", func() bool {
		return len(seen.all()) >= handledWant && len(f.readAll(t, f.dlq)) >= dead
	})
	took := time.Since(start)
	stop()

	letters := f.lettersByValue(t)
	handled := map[string]int{}
	for _, c := range seen.all() {
		handled[c.value]++
	}
	if got, want := len(seen.all())+len(letters), len(records)+2; got != want || len(letters) != dead {
		t.Errorf("%d handled + %d dead-lettered = %d, want %d produced (%d dead letters)", len(seen.all()), len(letters), got, want, dead)
	}
	if n := len(f.readAll(t, dlq.Topic(other, dlq.DefaultSuffix))); n != 0 {
		t.Errorf("%d records in %s; a record of %s's retry topic belongs to %s whatever its headers claim", n, dlq.Topic(other, dlq.DefaultSuffix), f.topic, f.topic)
	}
	if handled["main/1"] != 1 || handled["main/2"] != 1 {
		t.Errorf("main topic records handled %d and %d times, want once each", handled["main/1"], handled["main/2"])
	}
	// Two records wait at most the tier's delay each, not ten years.
	if took > 45*time.Second {
		t.Errorf("took %v", took)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if handled["good/"+tc.name] != 1 {
				t.Errorf("the well-formed record after it handled %d times, want once", handled["good/"+tc.name])
			}
			env, lettered := letters["bad/"+tc.name]
			if tc.header == "" {
				if lettered || handled["bad/"+tc.name] != 1 {
					t.Errorf("dead-lettered %v, handled %d times; want handled once", lettered, handled["bad/"+tc.name])
				}
				return
			}
			if !lettered {
				t.Fatalf("not dead-lettered (handled %d times)", handled["bad/"+tc.name])
			}
			if env.ErrorKind != dlq.KindPermanent || env.OriginalTopic != f.topic || !strings.Contains(env.Error, tc.header) {
				t.Errorf("dead letter kind %s, original topic %s, error %q; want permanent, %s, naming %s",
					env.ErrorKind, env.OriginalTopic, env.Error, f.topic, tc.header)
			}
			if len(env.Error) > 2048 {
				t.Errorf("error of %d bytes quotes too much of the header", len(env.Error))
			}
		})
	}
}

// idRecord is a main-topic record with the ce_id id and the value value.
func idRecord(id, value string) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Key: sarama.StringEncoder("k-" + value), Value: sarama.StringEncoder(value),
		Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte(id)}}}
}

// hostileIDs are ce_id values a store cannot hold as they are.
var hostileIDs = []struct{ name, id string }{
	{"nul byte", "evt\x00nul"},
	{"invalid utf-8", "evt\xff\xfe"},
	{"64 KiB", strings.Repeat("i", 64<<10)},
	{"control characters", "evt\x1b[2J\r"},
}

// refusingStore is a dedupe store that refuses the ids starting with
// "refuse", as a store refuses a value it cannot hold.
type refusingStore struct{ dedupe.Store }

func (s refusingStore) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]dedupe.Status, error) {
	for _, id := range ids {
		if strings.HasPrefix(id, "refuse") {
			return nil, fmt.Errorf("%w: the store cannot hold %q", dedupe.ErrInvalidID, id)
		}
	}
	return s.Store.Claim(ctx, owner, ids, lease)
}

// TestHostileConsumerIDs: messages whose ce_id a store cannot hold as it
// is (NUL, invalid UTF-8, 64 KiB) are deduplicated like any other with
// the PostgreSQL inbox and with Redis, instead of stopping the partition
// ("is the store up?"); a second copy is skipped. An id a store refuses is
// that message's permanent failure: dead-lettered, naming the id, while
// the messages around it are handled.
func TestHostileConsumerIDs(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"inbox", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1)
			var handled counter
			var cfg consumer.Config
			switch store {
			case "inbox":
				db := inboxDB(t)
				inbox, err := dedupe.NewInbox(db.Pool, dedupe.InboxConfig{Schema: db.Schema, Scope: f.group})
				if err != nil {
					t.Fatal(err)
				}
				cfg = f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
					return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
						first, err := inbox.Record(ctx, tx, m.ID)
						if err == nil && first {
							handled.add(string(m.Value))
						}
						return err
					})
				}))
				cfg.Dedupe = consumer.DedupeConfig{Store: inbox, BusyWait: 20 * time.Millisecond}
			case "redis":
				r := testkit.NewRedis(t)
				cfg = f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
					handled.add(string(m.Value))
					return nil
				}))
				cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, r.Client, r.Prefix), BusyWait: 20 * time.Millisecond}
			}
			var records []*sarama.ProducerMessage
			for _, tc := range hostileIDs {
				records = append(records, idRecord(tc.id, tc.name), idRecord("fine-"+tc.name, "after "+tc.name))
			}
			for _, tc := range hostileIDs {
				records = append(records, idRecord(tc.id, "copy of "+tc.name))
			}
			f.produce(t, f.topic, records...)
			stop := run(t, newConsumer(t, cfg))
			testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == int64(len(records)) })
			stop()
			if n := len(f.readAll(t, f.dlq)); n != 0 {
				t.Errorf("%d dead letters, want none", n)
			}
			for _, tc := range hostileIDs {
				t.Run(tc.name, func(t *testing.T) {
					if handled.get(tc.name) != 1 || handled.get("after "+tc.name) != 1 {
						t.Errorf("handled %d times, the message after it %d times; want once each", handled.get(tc.name), handled.get("after "+tc.name))
					}
					if n := handled.get("copy of " + tc.name); n != 0 {
						t.Errorf("its copy (same ce_id) handled %d times, want skipped", n)
					}
				})
			}
		})
	}
	// An id the store refuses, or whose Redis key holds another program's
	// value without expiry (waiting on it would stop the partition for
	// good): its message is dead-lettered, the others are handled.
	for _, tc := range []struct {
		name, id string
		store    func(*dedupe.Redis) dedupe.Store
		prepare  func(*testing.T, *dedupe.Redis, *testkit.Redis)
		want     string
	}{
		{"store refuses an id", "refuse-me", func(s *dedupe.Redis) dedupe.Store { return refusingStore{s} }, nil,
			`refuses the message's id "refuse-me"`},
		{"a foreign value in an id's Redis key", "foreign-2", func(s *dedupe.Redis) dedupe.Store { return s },
			func(t *testing.T, s *dedupe.Redis, r *testkit.Redis) {
				if err := r.Client.Set(context.Background(), s.Key("foreign-2"), "not courier's", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}, "which courier does not write; delete the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1)
			r := testkit.NewRedis(t)
			var handled counter
			cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
				handled.add(string(m.Value))
				return nil
			}))
			store := f.redisDedupe(t, r.Client, r.Prefix)
			if tc.prepare != nil {
				tc.prepare(t, store, r)
			}
			cfg.Dedupe = consumer.DedupeConfig{Store: tc.store(store), BusyWait: 20 * time.Millisecond}
			f.produce(t, f.topic, idRecord("ok-1", "v1"), idRecord(tc.id, "v2"), idRecord("ok-3", "v3"))
			f.consumeAll(t, cfg, 3)
			letters := f.deadLetters(t)
			if handled.get("v1") != 1 || handled.get("v3") != 1 || handled.get("v2") != 0 || len(letters) != 1 {
				t.Fatalf("handled v1 %d, v2 %d, v3 %d times, %d dead letters; want 1, 0, 1 and 1",
					handled.get("v1"), handled.get("v2"), handled.get("v3"), len(letters))
			}
			if env := letters[0]; env.ErrorKind != dlq.KindPermanent || !strings.Contains(env.Error, tc.want) {
				t.Errorf("dead letter %s: %q, want permanent, saying %q", env.ErrorKind, env.Error, tc.want)
			}
		})
	}
}

// TestHostileConsumerConfig goes through every field of Config (and the
// names derived from Topics): each value out of range is refused by New
// with an error matching ErrInvalidConfig that names the field, so that
// nothing New accepts can panic, hang or block a partition later.
func TestHostileConsumerConfig(t *testing.T) {
	t.Parallel()
	valid := minimalConfig
	breaker := func(failures int) *consumer.Breaker {
		b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: failures})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	nan, inf := math.NaN(), math.Inf(1)
	long := strings.Repeat("t", 250)
	for _, tc := range []struct {
		name   string
		mutate func(*consumer.Config)
		field  string
	}{
		{"broker empty", func(c *consumer.Config) { c.Brokers = []string{""} }, "Brokers[0]"},
		{"broker without port", func(c *consumer.Config) { c.Brokers = []string{"localhost:9092", "kafka-2"} }, "Brokers[1]"},
		{"broker port 0", func(c *consumer.Config) { c.Brokers = []string{"kafka:0"} }, "Brokers[0]"},
		{"broker port 99999", func(c *consumer.Config) { c.Brokers = []string{"kafka:99999"} }, "Brokers[0]"},
		{"broker with a space", func(c *consumer.Config) { c.Brokers = []string{"kaf ka:9092"} }, "Brokers[0]"},
		{"group with nul", func(c *consumer.Config) { c.Group = "pay\x00outs" }, "Group"},
		{"group not utf-8", func(c *consumer.Config) { c.Group = "pay\xffouts" }, "Group"},
		{"group of 256 bytes", func(c *consumer.Config) { c.Group = strings.Repeat("g", 256) }, "Group"},
		{"topic bad topic!", func(c *consumer.Config) { c.Topics = []string{"bad topic!"} }, "Topics[0]"},
		{"topic orders/eu", func(c *consumer.Config) { c.Topics = []string{"payouts", "orders/eu"} }, "Topics[1]"},
		{"topic ..", func(c *consumer.Config) { c.Topics = []string{".."} }, "Topics[0]"},
		{"topic .", func(c *consumer.Config) { c.Topics = []string{"."} }, "Topics[0]"},
		{"topic empty", func(c *consumer.Config) { c.Topics = []string{""} }, "Topics[0]"},
		{"topic of 250 characters", func(c *consumer.Config) { c.Topics = []string{long} }, "Topics[0]"},
		{"topic listed twice", func(c *consumer.Config) { c.Topics = []string{"payouts", "payouts"} }, "Topics[1]"},
		{"dead-letter topic over 249", func(c *consumer.Config) { c.Topics = []string{long[:246]} }, "DeadLetterSuffix"},
		{"retry topic over 249", func(c *consumer.Config) {
			c.Topics = []string{long[:242]}
			c.RetryTopics.Delays = []time.Duration{time.Second}
		}, "retry topic"},
		{"dead-letter suffix makes a name over 249", func(c *consumer.Config) { c.DeadLetterSuffix = "." + long[:248] }, "DeadLetterSuffix"},
		{"max attempts huge", func(c *consumer.Config) { c.MaxAttempts = 1 << 40 }, "MaxAttempts"},
		{"backoff base huge", func(c *consumer.Config) { c.Backoff.Base = 1000 * time.Hour }, "Backoff.Base"},
		{"backoff max huge", func(c *consumer.Config) { c.Backoff.Max = math.MaxInt64 }, "Backoff.Max"},
		{"backoff factor NaN", func(c *consumer.Config) { c.Backoff.Factor = nan }, "Backoff.Factor"},
		{"backoff factor +Inf", func(c *consumer.Config) { c.Backoff.Factor = inf }, "Backoff.Factor"},
		{"backoff factor -Inf", func(c *consumer.Config) { c.Backoff.Factor = -inf }, "Backoff.Factor"},
		{"backoff factor 1e6", func(c *consumer.Config) { c.Backoff.Factor = 1e6 }, "Backoff.Factor"},
		{"backoff jitter NaN", func(c *consumer.Config) { c.Backoff.Jitter = nan }, "Backoff.Jitter"},
		{"backoff jitter +Inf", func(c *consumer.Config) { c.Backoff.Jitter = inf }, "Backoff.Jitter"},
		{"backoff jitter negative", func(c *consumer.Config) { c.Backoff.Jitter = -0.5 }, "Backoff.Jitter"},
		{"attempt timeout huge", func(c *consumer.Config) { c.AttemptTimeout = math.MaxInt64 }, "AttemptTimeout"},
		{"breaker wait huge", func(c *consumer.Config) { c.BreakerWait = 365 * 24 * time.Hour }, "BreakerWait"},
		{"breaker nil", func(c *consumer.Config) { c.Breakers = []*consumer.Breaker{nil} }, "Breakers[0]"},
		{"breaker needing more attempts", func(c *consumer.Config) { c.Breakers = []*consumer.Breaker{breaker(10)} }, "ConsecutiveFailures"},
		{"breaker beyond attempts of tiers", func(c *consumer.Config) {
			c.MaxAttempts, c.RetryTopics.Delays = 2, []time.Duration{time.Second}
			c.Breakers = []*consumer.Breaker{breaker(5)}
		}, "raise MaxAttempts to 3"},
		{"workers huge", func(c *consumer.Config) { c.Workers = 1 << 40 }, "Workers"},
		{"dead letters in flight huge", func(c *consumer.Config) { c.MaxWritesInFlight = 1 << 50 }, "MaxWritesInFlight"},
		{"retry delay of 30 days", func(c *consumer.Config) { c.RetryTopics.Delays = []time.Duration{30 * 24 * time.Hour} }, "Delays[0]"},
		{"retry delay negative", func(c *consumer.Config) { c.RetryTopics.Delays = []time.Duration{-time.Second} }, "Delays[0]"},
		{"retry delay below 1ms", func(c *consumer.Config) { c.RetryTopics.Delays = []time.Duration{time.Microsecond} }, "Delays[0]"},
		{"retry tiers 101", func(c *consumer.Config) { c.RetryTopics.Delays = slices.Repeat([]time.Duration{time.Second}, 101) }, "Delays"},
		{"retry suffix with a slash", func(c *consumer.Config) {
			c.RetryTopics = retrytopics.Config{Delays: []time.Duration{time.Second}, Suffix: "/retry"}
		}, "Suffix"},
		{"dedupe batch 1<<50", func(c *consumer.Config) { c.TakeBatch = 1 << 50 }, "TakeBatch"},
		{"dedupe batch 1<<50 with a store", func(c *consumer.Config) { c.Dedupe, c.TakeBatch = consumer.DedupeConfig{Store: nopStore{}}, 1<<50 }, "TakeBatch"},
		{"dedupe lease huge", func(c *consumer.Config) { c.Dedupe = consumer.DedupeConfig{Store: nopStore{}, Lease: math.MaxInt64} }, "Dedupe.Lease"},
		{"dedupe lease negative", func(c *consumer.Config) { c.Dedupe = consumer.DedupeConfig{Store: nopStore{}, Lease: -time.Minute} }, "Dedupe.Lease"},
		{"dedupe busy wait huge", func(c *consumer.Config) {
			c.Dedupe = consumer.DedupeConfig{Store: nopStore{}, BusyWait: 1000 * time.Hour}
		}, "Dedupe.BusyWait"},
		{"shutdown timeout huge", func(c *consumer.Config) { c.ShutdownTimeout = math.MaxInt64 }, "ShutdownTimeout"},
		{"sarama channel buffer 1<<50", func(c *consumer.Config) {
			c.Sarama = consumer.NewSaramaConfig()
			c.Sarama.ChannelBufferSize = 1 << 50
		}, "Sarama.ChannelBufferSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tc.mutate(&cfg)
			var c *consumer.Consumer
			var err error
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("New panicked: %v", v)
					}
				}()
				c, err = consumer.New(cfg)
			}()
			if !errors.Is(err, consumer.ErrInvalidConfig) || c != nil {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// TestConfigAtItsBoundsRuns: a consumer with every count at its bound
// (Workers, TakeBatch, MaxWritesInFlight, MaxAttempts) and every
// wait at its longest, as New accepts it, is assigned a partition and
// handles its messages without a panic.
func TestConfigAtItsBoundsRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	var handled atomic.Int32
	cfg := f.config(t, counting(&handled))
	cfg.Workers = consumer.MaxWorkers
	cfg.MaxAttempts = consumer.MaxMaxAttempts
	cfg.MaxWritesInFlight = consumer.MaxMaxWritesInFlight
	cfg.Backoff = backoff.Backoff{Base: consumer.MaxBackoff, Max: consumer.MaxBackoff, Factor: backoff.MaxFactor, Jitter: 1}
	cfg.BreakerWait = consumer.MaxBackoff
	cfg.TakeBatch = consumer.MaxTakeBatch
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, r.Client, r.Prefix),
		Lease: consumer.MaxTimeout, BusyWait: consumer.MaxBackoff}
	cfg.AttemptTimeout = consumer.MaxTimeout - consumer.MaxBackoff - time.Hour
	f.produce(t, f.topic, record("a", "1"), record("b", "2"), record("c", "3"))
	f.consumeAll(t, cfg, 3)
	if n := handled.Load(); n != 3 {
		t.Errorf("handled %d, want 3", n)
	}
}

// TestDefaultsOpenTheBreakerBeforeDeadLettering: with the default consumer
// config and the default breaker, a downstream outage (every call is
// refused a connection) opens the breaker before any message runs out
// of attempts: nothing is dead-lettered, before or after, and the
// messages wait. New refuses the old mismatch (3 attempts, 5 failures)
// when the breaker is listed.
func TestDefaultsOpenTheBreakerBeforeDeadLettering(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	breaker, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var calls, letters atomic.Int32
	cfg := consumer.Config{
		Brokers: f.k.Brokers,
		Sarama:  f.saramaConfig(),
		Group:   f.group,
		Topics:  []string{f.topic},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			return breaker.Do(ctx, func(ctx context.Context) error {
				calls.Add(1)
				return httpRefused(ctx, string(m.Value))
			})
		}),
		Breakers:     []*consumer.Breaker{breaker},
		OnDeadLetter: func(context.Context, consumer.DeadLetter) { letters.Add(1) },
		Logger:       testkit.Logger(t),
	}
	old := cfg
	old.MaxAttempts = 3
	if _, err := consumer.New(old); !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "raise MaxAttempts to 5") {
		t.Errorf("New(3 attempts, a breaker of 5 failures) = %v, want it refused", err)
	}
	var msgs []*sarama.ProducerMessage
	for i := range 8 {
		msgs = append(msgs, record("k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
	}
	f.produce(t, f.topic, msgs...)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 30*time.Second, "the breaker to open", func() bool { return breaker.State() == gobreaker.StateOpen })
	if n := letters.Load(); n != 0 {
		t.Errorf("%d messages dead-lettered before the breaker opened", n)
	}
	// Open for 30s: the messages wait, the downstream is not called. Stop
	// drains the dead-letter writes that may have started.
	stop()
	if n := letters.Load(); n != 0 || len(f.readAll(t, f.dlq)) != 0 {
		t.Errorf("%d messages dead-lettered (%d records in %s); want none", n, len(f.readAll(t, f.dlq)), f.dlq)
	}
	if n := calls.Load(); n != consumer.DefaultBreakerFailures {
		t.Errorf("the downstream was called %d times, want the %d failures that open the breaker", n, consumer.DefaultBreakerFailures)
	}
}

// TestHostileConsumerHeaders: main-topic records whose ce_ and replay
// headers are repeated, huge, not UTF-8 or out of range, and that the
// handler fails for good. Each is dead-lettered (the envelope keeps every
// header; a replay_count out of range counts as 0), the record after it
// is handled, and handled + dead-lettered = produced.
func TestHostileConsumerHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var handled counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if strings.HasPrefix(string(m.Value), "fail/") {
			return consumer.Permanent(errors.New("the payload is refused"))
		}
		handled.add(string(m.Value))
		return nil
	}))
	h := func(name, value string) sarama.RecordHeader {
		return sarama.RecordHeader{Key: []byte(name), Value: []byte(value)}
	}
	cases := []struct {
		name    string
		headers []sarama.RecordHeader
	}{
		{"ce_id twice", []sarama.RecordHeader{h("ce_id", "a"), h("ce_id", "b")}},
		{"correlation id 200 KiB not utf-8", []sarama.RecordHeader{h("ce_id", "c"), h("ce_correlationid", strings.Repeat("\xff", 200<<10))}},
		{"replay_count negative", []sarama.RecordHeader{h("ce_id", "d"), h(dlq.ReplayCountHeader, "-5")}},
		{"replay_count beyond int64", []sarama.RecordHeader{h("ce_id", "e"), h(dlq.ReplayCountHeader, "99999999999999999999")}},
		{"header name not utf-8 with a 300 KiB value", []sarama.RecordHeader{h("ce_id", "f"), h("\xff\x00name", strings.Repeat("v", 300<<10))}},
		{"ce_time not a time", []sarama.RecordHeader{h("ce_id", "g"), h("ce_time", "yesterday\x00")}},
	}
	var records []*sarama.ProducerMessage
	for _, tc := range cases {
		records = append(records,
			&sarama.ProducerMessage{Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("fail/" + tc.name), Headers: tc.headers},
			record("k", "after "+tc.name))
	}
	f.produce(t, f.topic, records...)
	f.consumeAll(t, cfg, int64(len(records)))
	letters := f.accountFor(t, &handled, len(records))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, ok := letters["fail/"+tc.name]
			if !ok || env.ErrorKind != dlq.KindPermanent || env.ReplayCount != 0 {
				t.Errorf("dead letter %v: kind %s, replay count %d; want a permanent one, replay count 0", ok, env.ErrorKind, env.ReplayCount)
			}
			if o, err := env.Original(); err != nil || len(o.Headers) != len(tc.headers) {
				t.Errorf("dead letter keeps %d headers (%v), want all %d", len(o.Headers), err, len(tc.headers))
			}
			if handled.get("after "+tc.name) != 1 {
				t.Errorf("the record after it handled %d times, want once", handled.get("after "+tc.name))
			}
		})
	}
}
