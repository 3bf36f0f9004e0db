package producer_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/producer"
)

// TestConfigWithDefaults: each config's WithDefaults sets its zero fields
// to the documented defaults and keeps the fields already set.
func TestConfigWithDefaults(t *testing.T) {
	r := producer.RelayConfig{Workers: 3, Retention: -1}.WithDefaults()
	if r.Schema != "public" || r.Table != "courier_outbox" || r.MaxAttempts != producer.DefaultMaxAttempts ||
		r.BatchSize != producer.DefaultBatchSize || r.Workers != 3 || r.Retention != -1 ||
		r.DeadLetterSuffix != dlq.DefaultSuffix || r.Breaker.ConsecutiveFailures != producer.DefaultBreakerFailures ||
		r.Breaker.OpenFor != producer.DefaultBreakerOpenFor || r.Backoff.Base != producer.DefaultBackoffBase ||
		r.Backoff.Factor != producer.DefaultBackoffFactor || r.Source != producer.DefaultSource ||
		r.Logger != slog.Default() || r.Now == nil || r.StatsInterval != producer.DefaultStatsInterval {
		t.Errorf("RelayConfig{Workers: 3, Retention: -1}.WithDefaults() = %+v", r)
	}
	if r := (producer.RelayConfig{}).WithDefaults(); r.Retention != producer.DefaultRetention || r.Workers != producer.DefaultWorkers {
		t.Errorf("RelayConfig{}.WithDefaults(): Retention %v, Workers %d; want the defaults", r.Retention, r.Workers)
	}
	for _, c := range []struct {
		in   producer.RelayConfig
		want time.Duration
	}{
		{producer.RelayConfig{}, 62 * time.Second}, // twice PollInterval (1s) plus PublishTimeout (30s)
		{producer.RelayConfig{PollInterval: time.Minute, PublishTimeout: time.Minute}, 4 * time.Minute},
		{producer.RelayConfig{PollInterval: producer.MaxInterval, PublishTimeout: producer.MaxTimeout}, producer.MaxTimeout},
		{producer.RelayConfig{ReadinessGrace: 5 * time.Second}, 5 * time.Second},
	} {
		if got := c.in.WithDefaults().ReadinessGrace; got != c.want {
			t.Errorf("RelayConfig{PollInterval: %v, PublishTimeout: %v, ReadinessGrace: %v}.WithDefaults().ReadinessGrace = %v, want %v",
				c.in.PollInterval, c.in.PublishTimeout, c.in.ReadinessGrace, got, c.want)
		}
	}
	if c := (producer.Config{Schema: "shop"}).WithDefaults(); c.Schema != "shop" || c.Table != "courier_outbox" || c.MaxPayloadBytes != producer.DefaultMaxPayloadBytes {
		t.Errorf("Config{Schema: shop}.WithDefaults() = %+v", c)
	}
	if c := (producer.AdminConfig{Table: "events"}).WithDefaults(); c.Schema != "public" || c.Table != "events" {
		t.Errorf("AdminConfig{Table: events}.WithDefaults() = %+v", c)
	}
}

// TestInvalidConfigIsOneError: a bad Config, RelayConfig or AdminConfig,
// and a nil handle for NewAdmin, all match ErrInvalidConfig and name what
// is wrong.
func TestInvalidConfigIsOneError(t *testing.T) {
	_, outboxErr := producer.NewOutbox(producer.Config{MaxPayloadBytes: -1})
	_, adminErr := producer.NewAdmin(nil, producer.AdminConfig{})
	_, adminNameErr := producer.NewAdmin((*pgxpool.Pool)(nil), producer.AdminConfig{Table: "bad\x00name"})
	_, relayErr := producer.NewRelay(nil, producer.RelayConfig{Brokers: []string{"127.0.0.1:9092"}})
	for _, c := range []struct {
		name string
		err  error
		says string
	}{
		{"NewOutbox", outboxErr, "MaxPayloadBytes"},
		{"NewAdmin(nil)", adminErr, "database handle"},
		{"NewAdmin(bad table)", adminNameErr, "lower-case identifier"},
		{"NewRelay(nil)", relayErr, "pgxpool.Pool is nil"},
	} {
		if !errors.Is(c.err, producer.ErrInvalidConfig) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s = %v; want ErrInvalidConfig saying %q", c.name, c.err, c.says)
		}
	}
}

// TestBreakerConfigWithDefaults: BreakerConfig.WithDefaults sets each zero
// field to its DefaultBreaker* constant and keeps the fields already set,
// and RelayConfig.WithDefaults gives its Breaker the same.
func TestBreakerConfigWithDefaults(t *testing.T) {
	set := producer.BreakerConfig{ConsecutiveFailures: 7, OpenFor: time.Minute, HalfOpenProbes: 2}
	for _, c := range []struct {
		name     string
		in, want producer.BreakerConfig
	}{
		{"zero", producer.BreakerConfig{}, producer.BreakerConfig{
			ConsecutiveFailures: producer.DefaultBreakerFailures,
			OpenFor:             producer.DefaultBreakerOpenFor,
			HalfOpenProbes:      producer.DefaultBreakerProbes,
		}},
		{"all set", set, set},
		{"failures set", producer.BreakerConfig{ConsecutiveFailures: 7}, producer.BreakerConfig{
			ConsecutiveFailures: 7,
			OpenFor:             producer.DefaultBreakerOpenFor,
			HalfOpenProbes:      producer.DefaultBreakerProbes,
		}},
	} {
		if got := c.in.WithDefaults(); got != c.want {
			t.Errorf("%s: BreakerConfig.WithDefaults() = %+v, want %+v", c.name, got, c.want)
		}
		if got := (producer.RelayConfig{Breaker: c.in}).WithDefaults().Breaker; got != c.want {
			t.Errorf("%s: RelayConfig.WithDefaults().Breaker = %+v, want %+v", c.name, got, c.want)
		}
	}
}
