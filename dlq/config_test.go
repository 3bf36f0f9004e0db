package dlq_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
)

// TestReplayConfigWithDefaults: WithDefaults sets each zero field to its
// Default* constant, keeps the fields already set, and gives Replay a copy
// of Sarama with the producer options it needs, leaving the caller's alone.
func TestReplayConfigWithDefaults(t *testing.T) {
	t.Parallel()
	own := sarama.NewConfig()
	own.ClientID = "mine"
	for _, c := range []struct {
		name              string
		in                dlq.ReplayConfig
		group             string
		maxReplays, batch int
		clientID          string
	}{
		{"zero", dlq.ReplayConfig{}, dlq.DefaultReplayGroup, dlq.DefaultMaxReplays, dlq.DefaultReplayBatch, sarama.NewConfig().ClientID},
		{"set", dlq.ReplayConfig{Group: "g", MaxReplays: -1, BatchSize: 7, Sarama: own}, "g", -1, 7, "mine"},
	} {
		got := c.in.WithDefaults()
		if got.Concurrency != dlq.DefaultReplayConcurrency {
			t.Errorf("%s: Concurrency %d; want %d", c.name, got.Concurrency, dlq.DefaultReplayConcurrency)
		}
		if got.Group != c.group || got.MaxReplays != c.maxReplays || got.BatchSize != c.batch {
			t.Errorf("%s: Group %q MaxReplays %d BatchSize %d; want %q %d %d", c.name, got.Group, got.MaxReplays, got.BatchSize, c.group, c.maxReplays, c.batch)
		}
		if got.Sarama == nil || got.Sarama == c.in.Sarama || got.Sarama.ClientID != c.clientID {
			t.Fatalf("%s: Sarama %p (caller's %p); want a copy of the caller's or of sarama.NewConfig()", c.name, got.Sarama, c.in.Sarama)
		}
		if p := got.Sarama.Producer; p.RequiredAcks != sarama.WaitForAll || !p.Return.Successes || !p.Return.Errors || got.Sarama.Metadata.AllowAutoTopicCreation {
			t.Errorf("%s: Sarama lacks the producer options Replay needs: %+v", c.name, p)
		}
	}
	if own.Producer.Return.Successes || !own.Metadata.AllowAutoTopicCreation {
		t.Error("WithDefaults changed the caller's Sarama config")
	}
}

// TestWriterConfigWithDefaults: WithDefaults sets an empty Suffix to
// DefaultSuffix and keeps the fields already set.
func TestWriterConfigWithDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want dlq.WriterConfig }{
		{dlq.WriterConfig{}, dlq.WriterConfig{Suffix: dlq.DefaultSuffix}},
		{dlq.WriterConfig{Suffix: ".dead", Raw: true}, dlq.WriterConfig{Suffix: ".dead", Raw: true}},
	} {
		if got := c.in.WithDefaults(); got != c.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestInvalidConfigIsOneError: every config error of the package matches
// ErrInvalidConfig and its config's own sentinel, and names the field.
func TestInvalidConfigIsOneError(t *testing.T) {
	t.Parallel()
	brokers := []string{"127.0.0.1:1"}
	replay := func(cfg dlq.ReplayConfig) error {
		_, err := dlq.Replay(context.Background(), cfg)
		return err
	}
	badSarama := sarama.NewConfig()
	badSarama.ChannelBufferSize = -1
	oldSarama := sarama.NewConfig()
	oldSarama.Version = sarama.V2_0_0_0
	_, nilPublisher := dlq.NewWriter(nil, dlq.WriterConfig{})
	_, badSuffix := dlq.NewWriter(publisherFunc(nil), dlq.WriterConfig{Suffix: ".dead letters"})
	for _, c := range []struct {
		name     string
		err      error
		sentinel error
		says     string
	}{
		{"no brokers", replay(dlq.ReplayConfig{Topic: "orders.dlq"}), dlq.ErrInvalidReplayConfig, "Brokers"},
		{"no topic", replay(dlq.ReplayConfig{Brokers: brokers}), dlq.ErrInvalidReplayConfig, "Topic"},
		{"NaN rate", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Rate: math.NaN()}), dlq.ErrInvalidReplayConfig, "Rate"},
		{"negative max", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Max: -1}), dlq.ErrInvalidReplayConfig, "Max"},
		{"batch too big", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", BatchSize: dlq.MaxReplayBatch + 1}), dlq.ErrInvalidReplayConfig, "BatchSize"},
		{"negative concurrency", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Concurrency: -1}), dlq.ErrInvalidReplayConfig, "Concurrency is -1"},
		{"concurrency too big", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Concurrency: dlq.MaxReplayConcurrency + 1}), dlq.ErrInvalidReplayConfig, "Concurrency"},
		{"to itself", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", To: "orders.dlq"}), dlq.ErrInvalidReplayConfig, "To"},
		{"bad sarama", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Sarama: badSarama}), dlq.ErrInvalidReplayConfig, "Sarama"},
		{"Sarama below Kafka 4.0's floor", replay(dlq.ReplayConfig{Brokers: brokers, Topic: "orders.dlq", Sarama: oldSarama}), dlq.ErrInvalidReplayConfig, "Version 2.0.0 is older than 2.1.0"},
		{"nil publisher", nilPublisher, dlq.ErrInvalidWriterConfig, "publisher is nil"},
		{"bad suffix", badSuffix, dlq.ErrInvalidWriterConfig, "Suffix"},
		{"Validate bad suffix", dlq.WriterConfig{Suffix: ".dead letters"}.Validate(), dlq.ErrInvalidWriterConfig, "Suffix"},
	} {
		if !errors.Is(c.err, dlq.ErrInvalidConfig) || !errors.Is(c.err, c.sentinel) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: %v; want ErrInvalidConfig and %v, naming %s", c.name, c.err, c.sentinel, c.says)
		}
	}
	if errors.Is(dlq.ErrInvalidReplayConfig, dlq.ErrInvalidWriterConfig) || errors.Is(dlq.ErrInvalidConfig, dlq.ErrInvalidReplayConfig) {
		t.Error("the two configs' sentinels match each other, or ErrInvalidConfig matches one of them")
	}
	if err := (dlq.WriterConfig{}).Validate(); err != nil {
		t.Errorf("WriterConfig{}.Validate() = %v, want nil: the default suffix is valid", err)
	}
}
