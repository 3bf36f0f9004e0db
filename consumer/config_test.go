package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/retrytopics"
)

// nopStore and nopKeyOrder stand in where only the config is checked.
type (
	nopStore    struct{ dedupe.Store }
	nopKeyOrder struct{ retrytopics.KeyOrder }
)

// minimalConfig is a valid config with only the required fields set.
func minimalConfig() consumer.Config {
	return consumer.Config{
		Brokers: []string{"localhost:9092"},
		Group:   "payouts",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil }),
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	valid := minimalConfig
	if _, err := consumer.New(valid()); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
	full := valid()
	full.RetryTopics.Delays = []time.Duration{time.Second, time.Minute}
	full.KeyOrder = nopKeyOrder{}
	full.Dedupe.Store = nopStore{}
	c, err := consumer.New(full)
	if err != nil {
		t.Fatalf("New(with retry topics, key order and dedupe) = %v", err)
	}
	cooperative := valid()
	cooperative.Sarama = consumer.NewSaramaConfig()
	cooperative.Sarama.Version = sarama.V2_4_0_0
	cooperative.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	if _, err := consumer.New(cooperative); err != nil {
		t.Errorf("New(cooperative rebalancing) = %v", err)
	}
	if topo := c.Topologies(); len(topo) != 1 || topo[0].DeadLetter != "payouts.dlq" || len(topo[0].Tiers) != 2 {
		t.Errorf("Topologies() = %+v", topo)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*consumer.Config)
		field  string
	}{
		{"no brokers", func(c *consumer.Config) { c.Brokers = nil }, "Brokers"},
		{"no group", func(c *consumer.Config) { c.Group = "" }, "Group"},
		{"no topics", func(c *consumer.Config) { c.Topics = nil }, "Topics"},
		{"empty topic", func(c *consumer.Config) { c.Topics = []string{"a", ""} }, "Topics[1]"},
		{"no handler", func(c *consumer.Config) { c.Handler = nil }, "Handler"},
		{"negative attempts", func(c *consumer.Config) { c.MaxAttempts = -1 }, "MaxAttempts"},
		{"negative workers", func(c *consumer.Config) { c.Workers = -2 }, "Workers"},
		{"negative dead letters in flight", func(c *consumer.Config) { c.MaxWritesInFlight = -1 }, "MaxWritesInFlight"},
		{"negative timeout", func(c *consumer.Config) { c.AttemptTimeout = -time.Second }, "AttemptTimeout"},
		{"negative shutdown", func(c *consumer.Config) { c.ShutdownTimeout = -time.Second }, "ShutdownTimeout"},
		{"negative breaker wait", func(c *consumer.Config) { c.BreakerWait = -time.Second }, "BreakerWait"},
		{"negative progress interval", func(c *consumer.Config) { c.ProgressInterval = -time.Second }, "ProgressInterval"},
		{"progress interval over an hour", func(c *consumer.Config) { c.ProgressInterval = consumer.MaxBackoff + time.Second }, "ProgressInterval"},
		{"negative readiness grace", func(c *consumer.Config) { c.ReadinessGrace = -time.Second }, "ReadinessGrace is -1s; use a positive duration"},
		{"readiness grace over a day", func(c *consumer.Config) { c.ReadinessGrace = consumer.MaxTimeout + time.Second }, "ReadinessGrace"},
		{"negative base", func(c *consumer.Config) { c.Backoff.Base = -time.Second }, "Backoff.Base"},
		{"factor below 1", func(c *consumer.Config) { c.Backoff.Factor = 0.5 }, "Backoff.Factor"},
		{"jitter above 1", func(c *consumer.Config) { c.Backoff.Jitter = 1.5 }, "Backoff.Jitter"},
		{"max below base", func(c *consumer.Config) { c.Backoff.Base, c.Backoff.Max = time.Second, time.Millisecond }, "Backoff.Max"},
		{"bad suffix", func(c *consumer.Config) { c.DeadLetterSuffix = ".dead letters" }, "DeadLetterSuffix"},
		{"bad sarama", func(c *consumer.Config) { c.Sarama = sarama.NewConfig(); c.Sarama.ChannelBufferSize = -1 }, "Sarama"},
		{"Sarama below Kafka 4.0's floor", func(c *consumer.Config) {
			c.Sarama = consumer.NewSaramaConfig()
			c.Sarama.Version = sarama.V2_0_0_0
		}, "Version 2.0.0 is older than 2.1.0"},
		{"zero retry delay", func(c *consumer.Config) { c.RetryTopics.Delays = []time.Duration{time.Second, 0} }, "Delays[1]"},
		{"bad retry suffix", func(c *consumer.Config) {
			c.RetryTopics = retrytopics.Config{Delays: []time.Duration{time.Second}, Suffix: "+r"}
		}, "Suffix"},
		{"retry topic listed", func(c *consumer.Config) {
			c.RetryTopics.Delays = []time.Duration{time.Second}
			c.Topics = []string{"payouts", "payouts.retry.1s"}
		}, "payouts.retry.1s"},
		{"key order without tiers", func(c *consumer.Config) { c.KeyOrder = nopKeyOrder{} }, "RetryTopics.Delays"},
		{"lease too short", func(c *consumer.Config) { c.Dedupe = consumer.DedupeConfig{Store: nopStore{}, Lease: 30 * time.Second} }, "Dedupe.Lease"},
		{"negative busy wait", func(c *consumer.Config) { c.Dedupe = consumer.DedupeConfig{Store: nopStore{}, BusyWait: -1} }, "Dedupe.BusyWait"},
		{"negative batch", func(c *consumer.Config) { c.Dedupe, c.TakeBatch = consumer.DedupeConfig{Store: nopStore{}}, -1 }, "TakeBatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tc.mutate(&cfg)
			_, err := consumer.New(cfg)
			if !errors.Is(err, consumer.ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestBreakerConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   consumer.BreakerConfig
		field string
	}{
		{consumer.BreakerConfig{}, "Name"},
		{consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: -1}, "ConsecutiveFailures"},
		{consumer.BreakerConfig{Name: "psp", OpenFor: -time.Second}, "OpenFor"},
		{consumer.BreakerConfig{Name: "psp", HalfOpenProbes: -1}, "HalfOpenProbes"},
		{consumer.BreakerConfig{Name: "psp", CheckTimeout: -time.Second}, "CheckTimeout"},
		{consumer.BreakerConfig{Name: "psp", CheckTimeout: consumer.MaxTimeout + time.Second}, "CheckTimeout"},
	} {
		_, err := consumer.NewBreaker(tc.cfg)
		if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewBreaker(%+v) = %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// TestWithDefaults: WithDefaults sets each zero field to its Default
// constant, keeps what is set (NoJitter included), and changes nothing when
// called again.
func TestWithDefaults(t *testing.T) {
	t.Parallel()
	cfg := minimalConfig()
	cfg.Workers = 3
	cfg.Backoff.Jitter = backoff.NoJitter
	got := cfg.WithDefaults()
	for name, pair := range map[string][2]any{
		"TakeBatch":          {got.TakeBatch, consumer.DefaultTakeBatch},
		"MaxWritesInFlight":  {got.MaxWritesInFlight, consumer.DefaultMaxWritesInFlight},
		"MaxAttempts":        {got.MaxAttempts, consumer.DefaultMaxAttempts},
		"Workers":            {got.Workers, 3},
		"Backoff.Base":       {got.Backoff.Base, consumer.DefaultBackoffBase},
		"Backoff.Jitter":     {got.Backoff.Jitter, backoff.NoJitter},
		"DeadLetterSuffix":   {got.DeadLetterSuffix, consumer.DefaultDeadLetterSuffix},
		"RetryTopics.Suffix": {got.RetryTopics.Suffix, retrytopics.DefaultSuffix},
		"Dedupe.Lease":       {got.Dedupe.Lease, consumer.DefaultDedupeLease},
	} {
		if pair[0] != pair[1] {
			t.Errorf("WithDefaults().%s = %v, want %v", name, pair[0], pair[1])
		}
	}
	if want := 2 * got.Sarama.Consumer.Group.Rebalance.Timeout; got.ReadinessGrace != want || want != 2*time.Minute {
		t.Errorf("WithDefaults().ReadinessGrace = %v, want twice Sarama's rebalance timeout, %v (2m with Sarama's default)", got.ReadinessGrace, want)
	}
	slow := minimalConfig()
	slow.Sarama = consumer.NewSaramaConfig()
	slow.Sarama.Consumer.Group.Rebalance.Timeout = 5 * time.Minute
	if g := slow.WithDefaults().ReadinessGrace; g != 10*time.Minute {
		t.Errorf("WithDefaults().ReadinessGrace with a rebalance timeout of 5m = %v, want 10m", g)
	}
	slow.ReadinessGrace = 30 * time.Second
	if g := slow.WithDefaults().ReadinessGrace; g != 30*time.Second {
		t.Errorf("WithDefaults() changed a ReadinessGrace set to 30s to %v", g)
	}
	if again := got.WithDefaults(); again.Backoff != got.Backoff || again.TakeBatch != got.TakeBatch || again.Sarama == nil {
		t.Errorf("WithDefaults twice: %+v, want %+v", again.Backoff, got.Backoff)
	}
	if _, err := consumer.New(got); err != nil {
		t.Errorf("New(WithDefaults()) = %v", err)
	}
}

// TestConsumersOwnTheirCooperativeStrategy: Sarama's cooperative sticky
// strategy keeps its group's generation, so two consumers built from one
// Sarama config each get a strategy of their own; other strategies are
// kept as given.
func TestConsumersOwnTheirCooperativeStrategy(t *testing.T) {
	t.Parallel()
	shared := consumer.NewSaramaConfig()
	shared.Version = sarama.V2_4_0_0
	sticky := sarama.NewBalanceStrategyCooperativeSticky()
	shared.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sticky}
	cfg := minimalConfig()
	cfg.Sarama = shared
	a, b := cfg.WithDefaults(), cfg.WithDefaults()
	sa, sb := a.Sarama.Consumer.Group.Rebalance.GroupStrategies[0], b.Sarama.Consumer.Group.Rebalance.GroupStrategies[0]
	if sa == sticky || sb == sticky || sa == sb {
		t.Errorf("the consumers share the cooperative sticky strategy (given %p, got %p and %p); each needs its own", sticky, sa, sb)
	}
	if sa.Name() != sarama.CooperativeStickyBalanceStrategyName {
		t.Errorf("strategy %q, want %q", sa.Name(), sarama.CooperativeStickyBalanceStrategyName)
	}
	if shared.Consumer.Group.Rebalance.GroupStrategies[0] != sticky {
		t.Error("WithDefaults changed the given Sarama config's strategies")
	}
	rng := sarama.NewBalanceStrategyRange()
	shared.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{rng}
	if got := cfg.WithDefaults().Sarama.Consumer.Group.Rebalance.GroupStrategies[0]; got != rng {
		t.Errorf("the range strategy was replaced (%p, want %p)", got, rng)
	}
}
