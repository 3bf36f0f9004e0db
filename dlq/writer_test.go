package dlq_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
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

func TestWriter(t *testing.T) {
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
		writer, err := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := writer.Write(ctx, env)
		if err != nil || w.Topic != "payouts.dlq" || w.Format != dlq.FormatEnvelope {
			t.Errorf("Write = %+v, %v", w, err)
		}
	})
	t.Run("raw with a suffix", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageWithMessageCheckerFunctionAndSucceed(sent(t, env, "payouts-dead", dlq.FormatRaw))
		writer, err := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{Suffix: "-dead", Raw: true})
		if err != nil {
			t.Fatal(err)
		}
		if w, err := writer.Write(ctx, env); err != nil || w.Format != dlq.FormatRaw {
			t.Errorf("Write = %+v, %v", w, err)
		}
	})
	t.Run("too large falls back to raw", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		p.ExpectSendMessageWithMessageCheckerFunctionAndSucceed(sent(t, env, "payouts.dlq", dlq.FormatRaw))
		writer, _ := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
		if w, err := writer.Write(ctx, env); err != nil || w.Format != dlq.FormatRaw {
			t.Errorf("Write = %+v, %v; want the raw record after the envelope was too large", w, err)
		}
	})
	t.Run("too large even raw", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
		writer, _ := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
		_, err := writer.Write(ctx, env)
		if !errors.Is(err, dlq.ErrTooLarge) || !errors.Is(err, sarama.ErrMessageSizeTooLarge) || !strings.Contains(err.Error(), "max.message.bytes") {
			t.Errorf("Write = %v, want ErrTooLarge naming the topic setting to raise, wrapping the broker's error", err)
		}
	})
	t.Run("broker error", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg)
		defer p.Close()
		p.ExpectSendMessageAndFail(sarama.ErrNotEnoughReplicas)
		writer, _ := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
		if _, err := writer.Write(ctx, env); !errors.Is(err, sarama.ErrNotEnoughReplicas) {
			t.Errorf("Write = %v, want the broker's error", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		p := mocks.NewSyncProducer(t, cfg) // no send expected
		defer p.Close()
		writer, _ := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := writer.Write(cancelled, env); !errors.Is(err, context.Canceled) {
			t.Errorf("Write = %v, want context.Canceled", err)
		}
	})
}

func TestNewWriterRejects(t *testing.T) {
	t.Parallel()
	if _, err := dlq.NewWriter(nil, dlq.WriterConfig{}); !errors.Is(err, dlq.ErrInvalidWriterConfig) {
		t.Errorf("nil publisher: %v", err)
	}
	if err := (dlq.WriterConfig{Suffix: ".dead letters"}).Validate(); !errors.Is(err, dlq.ErrInvalidWriterConfig) {
		t.Errorf("suffix with a space: %v", err)
	}
}

// publisherFunc is a record.Publisher answering with its function.
type publisherFunc func(records []*record.Record) []error

func (f publisherFunc) Publish(_ context.Context, records []*record.Record) []error {
	return f(records)
}
func (f publisherFunc) Close() error { return nil }

func TestWriterRecord(t *testing.T) {
	t.Parallel()
	env, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dlq.NewWriter(publisherFunc(func([]*record.Record) []error { return nil }), dlq.WriterConfig{Suffix: "-dead"})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{dlq.FormatEnvelope, dlq.FormatRaw} {
		want, err := env.Record()
		if format == dlq.FormatRaw {
			want, err = env.RawRecord()
		}
		if err != nil {
			t.Fatal(err)
		}
		want.Topic = "payouts-dead"
		got, err := writer.Record(env, format)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Record(%s) = %+v, %v\nwant %+v", format, got, err, want)
		}
	}
	if _, err := writer.Record(env, "json"); err == nil || !strings.Contains(err.Error(), dlq.FormatEnvelope) {
		t.Errorf("Record(json) = %v, want an error naming the formats", err)
	}
}

// TestWriterRefusesAnInvalidDeadLetterTopic: an original topic too long
// for the suffix has no dead-letter topic; Record and Write refuse it
// with ErrInvalidTopic, naming the length, and publish nothing.
func TestWriterRefusesAnInvalidDeadLetterTopic(t *testing.T) {
	t.Parallel()
	o := original()
	o.Topic = strings.Repeat("t", 247) // valid; .dlq makes 251
	env, err := dlq.New(o, failure())
	if err != nil {
		t.Fatal(err)
	}
	published := 0
	writer, err := dlq.NewWriter(publisherFunc(func(records []*record.Record) []error {
		published += len(records)
		return make([]error, len(records))
	}), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{dlq.FormatEnvelope, dlq.FormatRaw} {
		if rec, err := writer.Record(env, format); !errors.Is(err, dlq.ErrInvalidTopic) || !strings.Contains(err.Error(), "251 characters") {
			t.Errorf("Record(%s) = %+v, %v; want ErrInvalidTopic naming 251 characters", format, rec, err)
		}
	}
	if w, err := writer.Write(context.Background(), env); !errors.Is(err, dlq.ErrInvalidTopic) || published != 0 {
		t.Errorf("Write = %+v, %v with %d records published; want ErrInvalidTopic and none", w, err, published)
	}
}

func TestWriterWritesThroughAnyPublisher(t *testing.T) {
	t.Parallel()
	env, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	var got []*record.Record
	writer, err := dlq.NewWriter(publisherFunc(func(records []*record.Record) []error {
		got = records
		records[0].Partition, records[0].Offset = 4, 9
		return []error{nil}
	}), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := writer.Write(context.Background(), env)
	want := dlq.Written{Topic: "payouts.dlq", Partition: 4, Offset: 9, Format: dlq.FormatEnvelope}
	if err != nil || w != want || len(got) != 1 || got[0].Topic != want.Topic {
		t.Errorf("Write = %+v, %v after publishing %d records; want %+v", w, err, len(got), want)
	}

	broken, _ := dlq.NewWriter(publisherFunc(func([]*record.Record) []error { return nil }), dlq.WriterConfig{})
	if _, err := broken.Write(context.Background(), env); err == nil {
		t.Error("Write through a publisher that answered nothing succeeded")
	}
}
