package producer

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// The relay's produce requests are idempotent, as Kafka's own producer's
// are by default (enable.idempotence): each record batch carries a producer
// id, an epoch and the sequence number of its first record on its
// partition, so that a broker which already appended a batch drops it when
// it comes again, answering with the offset it was given the first time.
// A produce request whose answer was lost (a dropped connection, a timeout
// after the leader appended) can then be sent again without writing its
// events twice.
//
// A producer session is one producer id and epoch, from Kafka's
// InitProducerId request, and the next sequence number of each partition
// it wrote to. One write uses a session at a time, so that a partition
// never has two batches of one session in flight; concurrent Publish calls
// use different sessions, which Kafka tells apart as different producers.
// Sessions are kept for the next write when done. A session in which a
// batch's fate stayed unknown (the write gave up on it, so the broker may
// or may not hold it) is dropped: its next batch on that partition could be
// taken for that one.

// producerSession is one idempotent producer identity.
type producerSession struct {
	id    int64
	epoch int16
	next  map[topicPartition]int32 // the next batch's first sequence number
	// broken: a batch's fate is unknown, or the broker lost this session's
	// sequence on a partition; it is not used again.
	broken bool
}

// topicPartition names a partition.
type topicPartition struct {
	topic     string
	partition int32
}

// sessionPool keeps the sessions no write is using.
type sessionPool struct {
	mu   sync.Mutex
	idle []*producerSession
}

// take returns an idle session, or nil when there is none.
func (sp *sessionPool) take() *producerSession {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := len(sp.idle)
	if n == 0 {
		return nil
	}
	s := sp.idle[n-1]
	sp.idle = sp.idle[:n-1]
	return s
}

// put keeps the sessions of a finished write that are not broken.
func (sp *sessionPool) put(sessions []*producerSession) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, s := range sessions {
		if !s.broken {
			sp.idle = append(sp.idle, s)
		}
	}
}

// ErrIdempotenceRefused is matched by the error of a publish that could not
// start an idempotent producer session because the cluster refused it a
// producer id (before Kafka 2.8, writing idempotently needs the
// IdempotentWrite permission on the cluster). Grant the permission, or turn
// idempotence off (RelayConfig.DisableIdempotence, WithoutIdempotence).
// The relay counts no attempt for it: its circuit breaker opens, as for an
// unreachable Kafka, and no event is dead-lettered.
var ErrIdempotenceRefused = errors.New("producer: Kafka refused the relay a producer id for idempotent writes; grant the principal IdempotentWrite on the cluster (needed before Kafka 2.8) or turn idempotence off with RelayConfig.DisableIdempotence (courier relay --no-idempotence)")

// sessionError is an error of starting a session: it says nothing of the
// events, so the relay counts no attempt for them (failUnavailable).
type sessionError struct{ error }

func (e sessionError) Unwrap() error { return e.error }

// newSession asks broker for a new producer id.
func (p *batchPublisher) newSession(broker *sarama.Broker) (*producerSession, error) {
	resp, err := broker.InitProducerID(&sarama.InitProducerIDRequest{
		Version: initProducerIDVersion(p.cfg.Version),
		// A producer without a transactional id has no transactions to
		// time out; Kafka's own producer sends the largest timeout too.
		TransactionTimeout: math.MaxInt32 * time.Millisecond,
		ProducerID:         -1, ProducerEpoch: -1,
	})
	switch {
	case err != nil:
		if !errors.As(err, new(sarama.PacketEncodingError)) {
			_ = broker.Close() // out of step: connect again next time
		}
		return nil, sessionError{fmt.Errorf("start an idempotent producer session: %w", err)}
	case resp.Err == sarama.ErrClusterAuthorizationFailed:
		return nil, sessionError{fmt.Errorf("%w (%w)", ErrIdempotenceRefused, resp.Err)}
	case resp.Err != sarama.ErrNoError:
		return nil, sessionError{fmt.Errorf("start an idempotent producer session: %w", resp.Err)}
	}
	return &producerSession{id: resp.ProducerID, epoch: resp.ProducerEpoch, next: map[topicPartition]int32{}}, nil
}

// initProducerIDVersion is the InitProducerId version for Kafka version v,
// as Sarama's own client chooses it.
func initProducerIDVersion(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 4
	case v.IsAtLeast(sarama.V2_5_0_0):
		return 3
	case v.IsAtLeast(sarama.V2_4_0_0):
		return 2
	}
	return 1 // Kafka 2.1, the oldest NewSaramaPublisher accepts
}

// addSequence is seq advanced by n records; Kafka's sequence numbers wrap
// from math.MaxInt32 to 0.
func addSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

// sequenceLost reports whether a broker refused a batch because it does not
// know the session's sequence on the partition (it lost or expired the
// producer's state, or another write of the session's got ahead): the
// batch was not appended and goes again in a new session.
func sequenceLost(err error) bool {
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case sarama.ErrOutOfOrderSequenceNumber, sarama.ErrUnknownProducerID,
		sarama.ErrInvalidProducerEpoch, sarama.ErrProducerFenced:
		return true
	}
	return false
}

// refusedUnwritten reports whether err is a broker's answer that it did not
// append the batch: a batch refused so can take its sequence numbers to a
// later try. Any other failure of a sent request (no answer, a timeout, too
// few replicas after the append, an unknown error) may hide an append.
func refusedUnwritten(err error) bool {
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case sarama.ErrRequestTimedOut, sarama.ErrNotEnoughReplicasAfterAppend,
		sarama.ErrKafkaStorageError, sarama.ErrUnknown:
		return false
	}
	return true
}

// unsentError is the error of a batch that was never sent: no leader was
// known, or its request could not be encoded or had no connection.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// deliveryTimeout bounds how long a write keeps sending a batch whose fate
// is unknown, when neither its context nor Close ends it first: Kafka's own
// producer's delivery.timeout.ms.
const deliveryTimeout = 2 * time.Minute
