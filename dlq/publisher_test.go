package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"

	"github.com/courierkit/courier/dlq"
)

// sent checks a dead-letter message against the record the envelope makes
// in format.
func sent(t *testing.T, env dlq.Envelope, topic, format string) mocks.MessageChecker {
	return func(msg *sarama.ProducerMessage) error {
		rec, err := env.Record()
		if format == dlq.FormatRaw {
			rec, err = env.RawRecord()
		}
		if err != nil {
			return err
		}
		key, _ := msg.Key.Encode()
		value, _ := msg.Value.Encode()
		if msg.Topic != topic || !sameBytes(key, rec.Key) || !sameBytes(value, rec.Value) || len(msg.Headers) != len(rec.Headers) {
			t.Errorf("sent %s %q=%q with %d headers, want %s %q=%q with %d", msg.Topic, key, value, len(msg.Headers), topic, rec.Key, rec.Value, len(rec.Headers))
		}
		for i, h := range rec.Headers {
			if i < len(msg.Headers) && (!sameBytes(msg.Headers[i].Key, h.Key) || !sameBytes(msg.Headers[i].Value, h.Value)) {
				t.Errorf("header %d = %q:%q, want %q:%q", i, msg.Headers[i].Key, msg.Headers[i].Value, h.Key, h.Value)
			}
		}
		return nil
	}
}

func TestPublisher(t *testing.T) {
	t.Parallel()
	env, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true

	t.Run("envelope", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageWithMessageCheckerFunctionAndSucceed(sent(t, env, "payouts.dlq", dlq.FormatEnvelope))
		pub, err := dlq.NewPublisher(p, dlq.PublisherConfig{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := pub.Publish(ctx, env)
		if err != nil || w.Topic != "payouts.dlq" || w.Format != dlq.FormatEnvelope {
			t.Errorf("Publish = %+v, %v", w, err)
		}
	})
	t.Run("raw with a suffix", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageWithMessageCheckerFunctionAndSucceed(sent(t, env, "payouts-dead", dlq.FormatRaw))
		pub, err := dlq.NewPublisher(p, dlq.PublisherConfig{Suffix: "-dead", Raw: true})
		if err != nil {
			t.Fatal(err)
		}
		if w, err := pub.Publish(ctx, env); err != nil || w.Format != dlq.FormatRaw {
			t.Errorf("Publish = %+v, %v", w, err)
		}
	})
	t.Run("too large falls back to raw", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		p.ExpectSendMessageWithMessageCheckerFunctionAndSucceed(sent(t, env, "payouts.dlq", dlq.FormatRaw))
		pub, _ := dlq.NewPublisher(p, dlq.PublisherConfig{})
		if w, err := pub.Publish(ctx, env); err != nil || w.Format != dlq.FormatRaw {
			t.Errorf("Publish = %+v, %v; want the raw record after the envelope was too large", w, err)
		}
	})
	t.Run("too large even raw", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		pub, _ := dlq.NewPublisher(p, dlq.PublisherConfig{})
		_, err := pub.Publish(ctx, env)
		if !errors.Is(err, dlq.ErrTooLarge) || !errors.Is(err, sarama.ErrMessageSizeTooLarge) || !strings.Contains(err.Error(), "max.message.bytes") {
			t.Errorf("Publish = %v, want ErrTooLarge naming the topic setting to raise, wrapping the broker's error", err)
		}
	})
	t.Run("broker error", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrNotEnoughReplicas)
		pub, _ := dlq.NewPublisher(p, dlq.PublisherConfig{})
		if _, err := pub.Publish(ctx, env); !errors.Is(err, sarama.ErrNotEnoughReplicas) {
			t.Errorf("Publish = %v, want the broker's error", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg) // no send expected
		defer p.Close()
		pub, _ := dlq.NewPublisher(p, dlq.PublisherConfig{})
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := pub.Publish(cancelled, env); !errors.Is(err, context.Canceled) {
			t.Errorf("Publish = %v, want context.Canceled", err)
		}
	})
}

func TestNewPublisherRejects(t *testing.T) {
	t.Parallel()
	if _, err := dlq.NewPublisher(nil, dlq.PublisherConfig{}); !errors.Is(err, dlq.ErrInvalidPublisherConfig) {
		t.Errorf("nil producer: %v", err)
	}
	if err := (dlq.PublisherConfig{Suffix: ".dead letters"}).Validate(); !errors.Is(err, dlq.ErrInvalidPublisherConfig) {
		t.Errorf("suffix with a space: %v", err)
	}
}
