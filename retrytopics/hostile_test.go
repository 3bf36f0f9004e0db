package retrytopics_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// validRetryHeaders are the retry headers the consumer writes for a
// record of orders/2@17 in its first tier.
func validRetryHeaders() []*record.Header {
	return ptrs(retrytopics.Headers([]*record.Header{{Key: []byte("ce_id"), Value: []byte("id-1")}}, retrytopics.Info{
		Round: 1, FailedAttempts: 3, OriginalTopic: "orders", OriginalPartition: 2, OriginalOffset: 17,
		OriginalTimestamp: time.UnixMilli(1_700_000_000_000), NotBefore: time.UnixMilli(1_700_000_005_000),
		FirstFailedAt: time.UnixMilli(1_700_000_001_000), LastError: "psp 503", ConsumerGroup: "payouts",
	}))
}

// with returns the valid headers with name's value set to value (added
// when absent), or removed when remove is set.
func with(name, value string, remove bool) []*record.Header {
	var out []*record.Header
	found := false
	for _, h := range validRetryHeaders() {
		if string(h.Key) == name {
			found = true
			if remove {
				continue
			}
			h = &record.Header{Key: h.Key, Value: []byte(value)}
		}
		out = append(out, h)
	}
	if !found && !remove {
		out = append(out, &record.Header{Key: []byte(name), Value: []byte(value)})
	}
	return out
}

// TestHostileRetryTopics: retry headers as a hostile or broken writer
// sends them, and configs whose derived topic names Kafka refuses. Each
// is refused with an error naming the header (a *HeaderError matching
// ErrMalformedHeaders) or the config field, never a panic; the error text
// is valid UTF-8 and quotes a bounded part of the value.
func TestHostileRetryTopics(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("9", 1<<20)
	for _, tc := range []struct {
		name    string
		headers []*record.Header
		header  string
	}{
		{"negative offset", with(retrytopics.HeaderOriginalOffset, "-1", false), retrytopics.HeaderOriginalOffset},
		{"offset beyond int64", with(retrytopics.HeaderOriginalOffset, "9223372036854775808", false), retrytopics.HeaderOriginalOffset},
		{"offset with a sign", with(retrytopics.HeaderOriginalOffset, "+17", false), retrytopics.HeaderOriginalOffset},
		{"offset with leading zeros", with(retrytopics.HeaderOriginalOffset, "0017", false), retrytopics.HeaderOriginalOffset},
		{"offset of 1 MiB of digits", with(retrytopics.HeaderOriginalOffset, huge, false), retrytopics.HeaderOriginalOffset},
		{"negative partition", with(retrytopics.HeaderOriginalPartition, "-1", false), retrytopics.HeaderOriginalPartition},
		{"partition beyond int32", with(retrytopics.HeaderOriginalPartition, "2147483648", false), retrytopics.HeaderOriginalPartition},
		{"topic with a space and !", with(retrytopics.HeaderOriginalTopic, "bad topic!", false), retrytopics.HeaderOriginalTopic},
		{"topic with a slash", with(retrytopics.HeaderOriginalTopic, "orders/eu", false), retrytopics.HeaderOriginalTopic},
		{"topic ..", with(retrytopics.HeaderOriginalTopic, "..", false), retrytopics.HeaderOriginalTopic},
		{"topic of 250 characters", with(retrytopics.HeaderOriginalTopic, strings.Repeat("t", 250), false), retrytopics.HeaderOriginalTopic},
		{"topic not utf-8", with(retrytopics.HeaderOriginalTopic, "orders\xff", false), retrytopics.HeaderOriginalTopic},
		{"empty topic", with(retrytopics.HeaderOriginalTopic, "", false), retrytopics.HeaderOriginalTopic},
		{"negative round", with(retrytopics.HeaderAttempt, "-1", false), retrytopics.HeaderAttempt},
		{"round beyond MaxCount", with(retrytopics.HeaderAttempt, "1000001", false), retrytopics.HeaderAttempt},
		{"failed attempts beyond int", with(retrytopics.HeaderFailedAttempts, "99999999999999999999", false), retrytopics.HeaderFailedAttempts},
		{"not before not a number", with(retrytopics.HeaderNotBefore, "soon", false), retrytopics.HeaderNotBefore},
		{"not before before 1970", with(retrytopics.HeaderNotBefore, "-5", false), retrytopics.HeaderNotBefore},
		{"not before after 9999", with(retrytopics.HeaderNotBefore, "253402300800000", false), retrytopics.HeaderNotBefore},
		{"first failed at after 9999", with(retrytopics.HeaderFirstFailedAt, "99999999999999999", false), retrytopics.HeaderFirstFailedAt},
		{"original timestamp negative", with(retrytopics.HeaderOriginalTimestamp, "-62135596800000", false), retrytopics.HeaderOriginalTimestamp},
		{"group not utf-8", with(retrytopics.HeaderConsumerGroup, "pay\xffouts", false), retrytopics.HeaderConsumerGroup},
		{"group with an escape sequence", with(retrytopics.HeaderConsumerGroup, "payouts\x1b[2J", false), retrytopics.HeaderConsumerGroup},
		{"group of 256 bytes", with(retrytopics.HeaderConsumerGroup, strings.Repeat("g", 256), false), retrytopics.HeaderConsumerGroup},
		{"missing not before", with(retrytopics.HeaderNotBefore, "", true), retrytopics.HeaderNotBefore},
		{"missing original offset", with(retrytopics.HeaderOriginalOffset, "", true), retrytopics.HeaderOriginalOffset},
		{"attempt twice", append(validRetryHeaders(), &record.Header{Key: []byte(retrytopics.HeaderAttempt), Value: []byte("2")}), retrytopics.HeaderAttempt},
		{"original topic twice", append(validRetryHeaders(), &record.Header{Key: []byte(retrytopics.HeaderOriginalTopic), Value: []byte("payments")}), retrytopics.HeaderOriginalTopic},
		{"null offset value", append(with(retrytopics.HeaderOriginalOffset, "", true), &record.Header{Key: []byte(retrytopics.HeaderOriginalOffset)}), retrytopics.HeaderOriginalOffset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, found, err := retrytopics.Parse(tc.headers)
			var he *retrytopics.HeaderError
			if !found || !errors.As(err, &he) || !errors.Is(err, retrytopics.ErrMalformedHeaders) {
				t.Fatalf("Parse = %+v, %v, %v; want a *HeaderError", info, found, err)
			}
			if he.Header != tc.header || !strings.Contains(err.Error(), tc.header) {
				t.Errorf("error %q names %s, want %s", err, he.Header, tc.header)
			}
			if msg := err.Error(); !utf8.ValidString(msg) || len(msg) > 600 {
				t.Errorf("error of %d bytes, valid UTF-8 %v: %q", len(msg), utf8.ValidString(msg), msg)
			}
		})
	}

	// Free text is kept, made valid and bounded rather than refused.
	t.Run("last error not utf-8 and 1 MiB", func(t *testing.T) {
		t.Parallel()
		info, _, err := retrytopics.Parse(with(retrytopics.HeaderLastError, "boom \xff"+strings.Repeat("é", 1<<19), false))
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(info.LastError) || len(info.LastError) > 1024 || !strings.HasPrefix(info.LastError, "boom \uFFFD") {
			t.Errorf("last error of %d bytes, valid %v, starts %q", len(info.LastError), utf8.ValidString(info.LastError), info.LastError[:10])
		}
	})

	for _, tc := range []struct {
		name  string
		topic string
		cfg   retrytopics.Config
		field string
	}{
		{"topic bad topic!", "bad topic!", retrytopics.Config{}, "topic"},
		{"topic orders/eu", "orders/eu", retrytopics.Config{}, "topic"},
		{"topic ..", "..", retrytopics.Config{}, "topic"},
		{"topic .", ".", retrytopics.Config{}, "topic"},
		{"empty topic", "", retrytopics.Config{}, "topic"},
		{"dead-letter name over 249", strings.Repeat("o", 246), retrytopics.Config{}, "DeadLetterSuffix"},
		{"retry name over 249", strings.Repeat("o", 242), retrytopics.Config{Delays: []time.Duration{time.Second}}, "Suffix"},
		{"delay above MaxDelay", "orders", retrytopics.Config{Delays: []time.Duration{retrytopics.MaxDelay + time.Hour}}, "Delays[0]"},
		{"negative delay", "orders", retrytopics.Config{Delays: []time.Duration{-time.Second}}, "Delays[0]"},
		{"too many tiers", "orders", retrytopics.Config{Delays: make([]time.Duration, retrytopics.MaxTiers+1)}, "Delays"},
		{"suffix with a space", "orders", retrytopics.Config{Delays: []time.Duration{time.Second}, Suffix: ".re try"}, "Suffix"},
	} {
		t.Run("config/"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := retrytopics.New(tc.topic, tc.cfg, "")
			if !errors.Is(err, retrytopics.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New(%q) = %v, want ErrInvalidConfig naming %s", tc.topic, err, tc.field)
			}
		})
	}

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	t.Cleanup(func() { client.Close() })
	for _, tc := range []struct {
		name  string
		cfg   retrytopics.RedisKeyOrderConfig
		field string
	}{
		{"TTL of a year", retrytopics.RedisKeyOrderConfig{Scope: "payouts", TTL: 365 * 24 * time.Hour}, "TTL"},
		{"scope with an escape", retrytopics.RedisKeyOrderConfig{Scope: "pay\x1b[2Jouts"}, "Scope"},
		{"prefix not utf-8", retrytopics.RedisKeyOrderConfig{Scope: "payouts", Prefix: "\xff:"}, "Prefix"},
	} {
		t.Run("key order/"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := retrytopics.NewRedisKeyOrder(client, tc.cfg)
			if !errors.Is(err, retrytopics.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewRedisKeyOrder = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
