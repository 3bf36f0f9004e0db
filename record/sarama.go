package record

import (
	"context"
	"errors"

	"github.com/IBM/sarama"
)

// Message returns the Sarama message that writes r: topic, key, value,
// headers in order (duplicates kept), timestamp and partition. A nil key
// or value stays nil (no key, a tombstone), an empty one stays empty. The
// partition is read only by a producer using sarama.NewManualPartitioner;
// others pick their own.
func Message(r *Record) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: r.Topic, Partition: r.Partition, Timestamp: r.Timestamp}
	if r.Key != nil {
		msg.Key = sarama.ByteEncoder(r.Key)
	}
	if r.Value != nil {
		msg.Value = sarama.ByteEncoder(r.Value)
	}
	if len(r.Headers) > 0 {
		msg.Headers = make([]sarama.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			msg.Headers[i] = sarama.RecordHeader(h)
		}
	}
	return msg
}

// NewSyncPublisher returns a Publisher that writes through p. Its Close
// closes p: close the Publisher or p, not both.
//
// Publish sends the first record of every topic and key together (one
// SendMessages), then, once those are answered, the second of each, and so
// on, so that no record of a key is sent before the earlier one was
// acknowledged. ctx is checked before each send; a send in progress is
// bounded by the producer's Producer.Timeout and Producer.Retry settings,
// not by ctx, and records not yet sent when ctx ends get its error. An
// error from p that does not name its records (not sarama.ProducerErrors)
// fails every record of that send.
func NewSyncPublisher(p sarama.SyncProducer) Publisher {
	return &syncPublisher{producer: p}
}

type syncPublisher struct {
	producer sarama.SyncProducer
}

// keyOf is a record's place in the order Publish keeps. A nil key and an
// empty one share it, which orders more than needed and never less.
type keyOf struct{ topic, key string }

// Publish implements Publisher.
func (p *syncPublisher) Publish(ctx context.Context, records []*Record) []error {
	errs := make([]error, len(records))
	// waves[n] holds the indexes of the n-th record of each topic and key.
	var waves [][]int
	seen := make(map[keyOf]int, len(records))
	for i, r := range records {
		k := keyOf{r.Topic, string(r.Key)}
		n := seen[k]
		seen[k] = n + 1
		if n == len(waves) {
			waves = append(waves, nil)
		}
		waves[n] = append(waves[n], i)
	}
	failed := map[keyOf]error{}
	for _, wave := range waves {
		ctxErr := ctx.Err()
		send := wave[:0:0]
		for _, i := range wave {
			k := keyOf{records[i].Topic, string(records[i].Key)}
			switch {
			case failed[k] != nil:
				errs[i] = failed[k] // an earlier record of its key failed: unsent
			case ctxErr != nil:
				errs[i], failed[k] = ctxErr, ctxErr
			default:
				send = append(send, i)
			}
		}
		p.send(records, send, errs)
		for _, i := range send {
			if errs[i] != nil {
				failed[keyOf{records[i].Topic, string(records[i].Key)}] = errs[i]
			}
		}
	}
	return errs
}

// send writes the records at idx in one SendMessages, setting the error
// of each that failed and the place of each acknowledged.
func (p *syncPublisher) send(records []*Record, idx []int, errs []error) {
	if len(idx) == 0 {
		return
	}
	msgs := make([]*sarama.ProducerMessage, len(idx))
	for j, i := range idx {
		msgs[j] = Message(records[i])
	}
	err := p.producer.SendMessages(msgs)
	var perrs sarama.ProducerErrors
	failed := map[*sarama.ProducerMessage]error{}
	if errors.As(err, &perrs) {
		for _, pe := range perrs {
			failed[pe.Msg] = pe.Err // as SendMessage returns it
			if pe.Err == nil {
				failed[pe.Msg] = pe
			}
		}
	} else if err != nil {
		for _, m := range msgs {
			failed[m] = err
		}
	}
	for j, i := range idx {
		if ferr, ok := failed[msgs[j]]; ok {
			errs[i] = ferr
			continue
		}
		records[i].Partition, records[i].Offset = msgs[j].Partition, msgs[j].Offset
	}
}

// Close closes the producer.
func (p *syncPublisher) Close() error { return p.producer.Close() }
