package producer_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestHostileRelayConfig: NewRelay refuses every value that could only
// fail, overflow, spin or stall the relay later, with an error naming the
// field and saying what to use instead.
func TestHostileRelayConfig(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	brokers := []string{"localhost:9092"}
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name  string
		cfg   producer.RelayConfig
		field string // the field the error names
		says  string // and what it says to do
	}{
		{"no brokers", producer.RelayConfig{}, "Brokers is empty", `[]string{"localhost:9092"}`},
		{"schema upper case", producer.RelayConfig{Brokers: brokers, Schema: "Bad"}, "Schema", ""},
		{"batch size negative", producer.RelayConfig{Brokers: brokers, BatchSize: -1}, "BatchSize", "or 0 for the default of 1000"},
		{"workers negative", producer.RelayConfig{Brokers: brokers, Workers: -1}, "Workers", "use 1 to 64"},
		{"workers 65", producer.RelayConfig{Brokers: brokers, Workers: 65}, "Workers", "use 1 to 64"},
		{"poll interval negative", producer.RelayConfig{Brokers: brokers, PollInterval: -time.Second}, "PollInterval", "or 0 for the default of 1s"},
		{"max retries negative", producer.RelayConfig{Brokers: brokers, MaxAttempts: -2}, "MaxAttempts", "or 0 for the default of 10"},
		{"factor below 1", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Factor: 0.5}}, "Backoff.Factor", "from 1 to 100"},
		{"jitter above 1", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Jitter: 1.5}}, "Backoff.Jitter", "from 0 to 1"},
		{"backoff max below base", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Base: time.Minute, Max: time.Second}}, "Backoff.Max", "raise Max"},
		{"breaker failures negative", producer.RelayConfig{Brokers: brokers, Breaker: producer.BreakerConfig{ConsecutiveFailures: -1}}, "Breaker.ConsecutiveFailures", "or 0 for the default of 5"},
		{"dead-letter suffix slash", producer.RelayConfig{Brokers: brokers, DeadLetterSuffix: "/dlq"}, "DeadLetterSuffix", ""},
		{"source too long", producer.RelayConfig{Brokers: brokers, Source: strings.Repeat("s", producer.MaxSourceBytes+1)}, "Source: text is longer than courier allows: 257 bytes", ""},
		{"source NUL", producer.RelayConfig{Brokers: brokers, Source: "orders\x00"}, `Source: text must be valid UTF-8 without NUL bytes: "orders\x00"`, ""},
		{"broker without port", producer.RelayConfig{Brokers: []string{"bad host"}}, `Brokers[0] "bad host"`, "host:port"},
		{"broker port out of range", producer.RelayConfig{Brokers: []string{"127.0.0.1:99999"}}, "Brokers[0]", "1-65535"},
		{"broker port zero", producer.RelayConfig{Brokers: []string{"kafka-1:0"}}, "Brokers[0]", "1-65535"},
		{"broker empty", producer.RelayConfig{Brokers: []string{""}}, "Brokers[0]", "host:port"},
		{"second broker bad", producer.RelayConfig{Brokers: []string{"localhost:9092", "kafka\n1:9092"}}, "Brokers[1]", "host:port"},
		{"broker without host", producer.RelayConfig{Brokers: []string{":9092"}}, "Brokers[0]", "host:port"},
		{"factor NaN", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Factor: nan}}, "Backoff.Factor", "from 1 to 100"},
		{"factor +Inf", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Factor: inf}}, "Backoff.Factor", "from 1 to 100"},
		{"factor huge", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Factor: 1e6}}, "Backoff.Factor", "from 1 to 100"},
		{"jitter NaN", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Jitter: nan}}, "Backoff.Jitter", "from 0 to 1"},
		{"jitter +Inf", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Jitter: inf}}, "Backoff.Jitter", "from 0 to 1"},
		{"batch size 1<<50", producer.RelayConfig{Brokers: brokers, BatchSize: 1 << 50}, "BatchSize", "use 1 to 100000"},
		{"batch size above bound", producer.RelayConfig{Brokers: brokers, BatchSize: producer.MaxBatchSize + 1}, "BatchSize", "use 1 to 100000"},
		{"workers 1<<40", producer.RelayConfig{Brokers: brokers, Workers: 1 << 40}, "Workers", "use 1 to 64"},
		{"cleanup batch 1<<50", producer.RelayConfig{Brokers: brokers, CleanupBatch: 1 << 50}, "CleanupBatch", "use 1 to 1000000"},
		{"cleanup batch negative", producer.RelayConfig{Brokers: brokers, CleanupBatch: -5}, "CleanupBatch", "or 0 for the default of 1000"},
		{"max retries 1<<40", producer.RelayConfig{Brokers: brokers, MaxAttempts: 1 << 40}, "MaxAttempts", "use 1 to 2147483647"},
		{"max retries past int32", producer.RelayConfig{Brokers: brokers, MaxAttempts: math.MaxInt32 + 1}, "MaxAttempts", "use 1 to 2147483647"},
		{"breaker failures 1<<32", producer.RelayConfig{Brokers: brokers, Breaker: producer.BreakerConfig{ConsecutiveFailures: 1 << 32}}, "Breaker.ConsecutiveFailures", "use 1 to 10000"},
		{"breaker probes 1<<32", producer.RelayConfig{Brokers: brokers, Breaker: producer.BreakerConfig{HalfOpenProbes: 1 << 32}}, "Breaker.HalfOpenProbes", "use 1 to 10000"},
		{"breaker probes negative", producer.RelayConfig{Brokers: brokers, Breaker: producer.BreakerConfig{HalfOpenProbes: -1}}, "Breaker.HalfOpenProbes", "or 0 for the default of 1"},
		{"breaker open for a year", producer.RelayConfig{Brokers: brokers, Breaker: producer.BreakerConfig{OpenFor: 365 * 24 * time.Hour}}, "Breaker.OpenFor", "to 24h0m0s"},
		{"poll interval 1ns", producer.RelayConfig{Brokers: brokers, PollInterval: time.Nanosecond}, "PollInterval", "use 1ms to 1h0m0s"},
		{"poll interval 2h", producer.RelayConfig{Brokers: brokers, PollInterval: 2 * time.Hour}, "PollInterval", "use 1ms to 1h0m0s"},
		{"probe interval 1ns", producer.RelayConfig{Brokers: brokers, ProbeInterval: time.Nanosecond}, "ProbeInterval", "use 1ms to 1h0m0s"},
		{"probe interval max duration", producer.RelayConfig{Brokers: brokers, ProbeInterval: math.MaxInt64}, "ProbeInterval", "use 1ms to 1h0m0s"},
		{"backoff base 1ns", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Base: time.Nanosecond}}, "Backoff.Base", "use 1ms to 1h0m0s"},
		{"backoff max 2h", producer.RelayConfig{Brokers: brokers, Backoff: backoff.Backoff{Max: 2 * time.Hour}}, "Backoff.Max", "use 1ms to 1h0m0s"},
		{"publish timeout 1ms", producer.RelayConfig{Brokers: brokers, PublishTimeout: time.Millisecond}, "PublishTimeout", "use 100ms to 24h0m0s"},
		{"publish timeout 1<<62", producer.RelayConfig{Brokers: brokers, PublishTimeout: 1 << 62}, "PublishTimeout", "use 100ms to 24h0m0s"},
		{"shutdown timeout 1<<62", producer.RelayConfig{Brokers: brokers, ShutdownTimeout: 1 << 62}, "ShutdownTimeout", "to 24h0m0s"},
		{"shutdown timeout negative", producer.RelayConfig{Brokers: brokers, ShutdownTimeout: -time.Second}, "ShutdownTimeout", "or 0 for the default of 10s"},
		{"cleanup interval 1ns", producer.RelayConfig{Brokers: brokers, CleanupInterval: time.Nanosecond}, "CleanupInterval", "use 1ms to 24h0m0s"},
		{"cleanup interval 48h", producer.RelayConfig{Brokers: brokers, CleanupInterval: 48 * time.Hour}, "CleanupInterval", "use 1ms to 24h0m0s"},
		{"stats interval 1ns", producer.RelayConfig{Brokers: brokers, StatsInterval: time.Nanosecond}, "StatsInterval", "use 1ms to 24h0m0s"},
		{"retention 1<<62", producer.RelayConfig{Brokers: brokers, Retention: 1 << 62}, "Retention", "a negative duration to keep published events forever"},
		{"dead-letter suffix NUL", producer.RelayConfig{Brokers: brokers, DeadLetterSuffix: ".dlq\x00"}, "DeadLetterSuffix", ""},
		{"readiness grace negative", producer.RelayConfig{Brokers: brokers, ReadinessGrace: -time.Second}, "ReadinessGrace is -1s", "use more than PollInterval"},
		{"readiness grace not above the poll interval", producer.RelayConfig{Brokers: brokers, PollInterval: time.Minute, ReadinessGrace: time.Minute}, "ReadinessGrace is 1m0s", "use more than PollInterval (1m0s"},
		{"readiness grace 48h", producer.RelayConfig{Brokers: brokers, ReadinessGrace: 48 * time.Hour}, "ReadinessGrace", "at most 24h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay, err := producer.NewRelay(pg.Pool, tc.cfg)
			if relay != nil || !errors.Is(err, producer.ErrInvalidConfig) {
				t.Fatalf("NewRelay = %v, %v; want ErrInvalidConfig", relay, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.says) {
				t.Errorf("NewRelay: %q; want it to name %s and say %q", msg, tc.field, tc.says)
			}
		})
	}
	t.Run("nil pool", func(t *testing.T) {
		if _, err := producer.NewRelay(nil, producer.RelayConfig{Brokers: brokers}); !errors.Is(err, producer.ErrInvalidConfig) || !strings.Contains(err.Error(), "pgxpool.Pool is nil") {
			t.Errorf("NewRelay(nil pool) = %v, want ErrInvalidConfig naming the pool", err)
		}
	})
}

// TestRelayConfigBounds: NewRelay accepts each field at its bounds, and a
// relay with all of them at once publishes an event and stops on cancel.
func TestRelayConfigBounds(t *testing.T) {
	t.Parallel()
	lowest := producer.RelayConfig{
		BatchSize: 1, Workers: 1, MaxAttempts: 1, CleanupBatch: 1,
		PollInterval: producer.MinInterval, ProbeInterval: producer.MinInterval,
		CleanupInterval: producer.MinInterval, StatsInterval: producer.MinInterval,
		Backoff:        backoff.Backoff{Base: producer.MinInterval, Max: producer.MinInterval, Factor: 1, Jitter: 0},
		Breaker:        producer.BreakerConfig{ConsecutiveFailures: 1, HalfOpenProbes: 1, OpenFor: time.Nanosecond},
		PublishTimeout: producer.MinPublishTimeout, ShutdownTimeout: time.Nanosecond, Retention: time.Nanosecond,
		ReadinessGrace: 2 * producer.MinInterval,
		Hooks:          []producer.Hook{&recordedMetrics{}},
	}
	highest := producer.RelayConfig{
		BatchSize: producer.MaxBatchSize, Workers: producer.MaxWorkers, MaxAttempts: producer.MaxMaxAttempts,
		CleanupBatch: producer.MaxCleanupBatch,
		PollInterval: producer.MaxInterval, ProbeInterval: producer.MaxInterval,
		CleanupInterval: producer.MaxTimeout, StatsInterval: producer.MaxTimeout,
		Backoff:        backoff.Backoff{Base: producer.MaxInterval, Max: producer.MaxInterval, Factor: 100, Jitter: 1},
		Breaker:        producer.BreakerConfig{ConsecutiveFailures: producer.MaxBreakerCount, HalfOpenProbes: producer.MaxBreakerCount, OpenFor: producer.MaxTimeout},
		PublishTimeout: producer.MaxTimeout, ShutdownTimeout: producer.MaxTimeout, Retention: producer.MaxRetention,
		ReadinessGrace: producer.MaxTimeout,
		Hooks:          []producer.Hook{&recordedMetrics{}},
	}
	forever := producer.RelayConfig{Retention: -1}
	brokers := producer.RelayConfig{Brokers: []string{"kafka-1:1", "[::1]:65535", "127.0.0.1:9092"}}
	for name, cfg := range map[string]producer.RelayConfig{"lowest": lowest, "highest": highest, "retention forever": forever, "brokers": brokers} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			pub := &fakePublisher{}
			if cfg.Brokers == nil {
				cfg.Publisher = pub
			}
			cfg.Schema, cfg.Logger = pg.Schema, testkit.Logger(t)
			relay, err := producer.NewRelay(pg.Pool, cfg)
			if err != nil {
				t.Fatalf("NewRelay at the bounds = %v", err)
			}
			if cfg.Publisher == nil {
				return // the publisher dials at Run; NewRelay accepting the addresses is the case
			}
			id := enqueue(t, pg, out, orderCreated("o-1"))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- relay.Run(ctx) }()
			testkit.WaitFor(t, time.Minute, "the event published", func() bool {
				return len(pub.ackedIDs("orders")) == 1
			})
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Run did not return within a minute of its context ending")
			}
			if got := pub.ackedIDs("orders"); got[0] != id.String() {
				t.Fatalf("acked %v, want %v", got, id)
			}
		})
	}
}
