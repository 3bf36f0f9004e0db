package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
)

// Publisher sends records to Kafka; it is the relay's only view of the
// broker. Publish returns one error per record, nil for a record the broker
// acknowledged.
//
// The relay passes all the events of a batch in one call, several of a key
// among them, in the order they must reach Kafka, so a Publisher must keep
// that order: it writes the records of one topic and key in the order given,
// and never acknowledges a record after it failed an earlier one of the same
// topic and key. The Publisher of NewSaramaPublisher does so by writing the
// records of a partition as one record batch, which the broker appends whole
// or not at all.
type Publisher interface {
	Publish(ctx context.Context, records []*sarama.ProducerMessage) []error
	Close() error
}

// DefaultMaxMessageBytes is Kafka's default message.max.bytes.
const DefaultMaxMessageBytes = 1048588

// NewSaramaConfig returns the Sarama configuration the relay uses when
// RelayConfig.Sarama is nil: acknowledgement by all in-sync replicas, the
// Java client's murmur2 partitioner (so courier and Java producers put a key
// on the same partition), and Producer.MaxMessageBytes at Kafka's default
// message.max.bytes. Start from it to add TLS or SASL.
func NewSaramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "courier-relay"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	cfg.Producer.MaxMessageBytes = DefaultMaxMessageBytes
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	return cfg
}

// batchPublisher writes the records of a Publish call with one produce
// request per broker, the records of each partition as one record batch in
// the order given. The broker appends a record batch whole or not at all, so
// the events of a key (always on one partition) succeed or fail together and
// in order, with one round trip for the whole call. A partition whose
// records exceed Producer.MaxMessageBytes gets several batches, sent one
// after the other, each only once the one before it was acknowledged.
//
// It uses Sarama's client for metadata and connections, and the configured
// partitioner (Producer.Partitioner; a new one per call and topic, since
// Sarama's partitioners are not safe for concurrent use). It retries what
// Kafka may accept on a second try (a leader moved, a broker restarted) up
// to Producer.Retry.Max times after Producer.Retry.Backoff, and connects on
// first use and again after a failure, so a relay can start while Kafka is
// down.
type batchPublisher struct {
	brokers []string
	cfg     *sarama.Config
	version int16 // of the produce requests

	mu       sync.Mutex
	client   sarama.Client
	inflight sync.WaitGroup
	closed   chan struct{}
}

// NewSaramaPublisher returns the Publisher the relay uses by default, on
// brokers with cfg (nil means NewSaramaConfig()). cfg.Version must be 0.11
// or later (record headers), RequiredAcks must ask for an acknowledgement,
// and the idempotent and transactional producers are not supported: the
// relay orders and retries events itself.
func NewSaramaPublisher(brokers []string, cfg *sarama.Config) (Publisher, error) {
	if len(brokers) == 0 {
		return nil, errors.New("producer: no Kafka brokers given; set RelayConfig.Brokers, e.g. []string{\"localhost:9092\"}")
	}
	if cfg == nil {
		cfg = NewSaramaConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("producer: Sarama config: %w", err)
	}
	switch {
	case !cfg.Version.IsAtLeast(sarama.V0_11_0_0):
		return nil, fmt.Errorf("producer: Sarama config: Version %s is older than 0.11, which record headers need; leave Version at Sarama's default", cfg.Version)
	case cfg.Producer.RequiredAcks == sarama.NoResponse:
		return nil, errors.New("producer: Sarama config: Producer.RequiredAcks is NoResponse, so the relay could not know an event arrived; use sarama.WaitForAll (the default) or WaitForLocal")
	case cfg.Producer.Idempotent || cfg.Producer.Transaction.ID != "":
		return nil, errors.New("producer: Sarama config: Producer.Idempotent and Producer.Transaction are not supported; the relay keeps each key's order and retries itself")
	}
	return &batchPublisher{brokers: brokers, cfg: cfg, version: produceVersion(cfg.Version), closed: make(chan struct{})}, nil
}

// produceVersion is the newest produce request version that Kafka version v
// understands, as Sarama's own producer chooses it.
func produceVersion(v sarama.KafkaVersion) int16 {
	for _, c := range []struct {
		since   sarama.KafkaVersion
		version int16
	}{
		{sarama.V3_7_0_0, 10}, {sarama.V2_8_0_0, 9}, {sarama.V2_4_0_0, 8}, {sarama.V2_1_0_0, 7},
		{sarama.V2_0_0_0, 6}, {sarama.V1_0_0_0, 5},
	} {
		if v.IsAtLeast(c.since) {
			return c.version
		}
	}
	return 3
}

func (p *batchPublisher) connect() (sarama.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		client, err := sarama.NewClient(p.brokers, p.cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to Kafka at %v: %w", p.brokers, err)
		}
		p.client = client
	}
	return p.client, nil
}

// Publish writes records and waits for every acknowledgement, or for ctx.
// When ctx ends first, the records not yet answered get ctx's error; the
// broker may still write them (a duplicate, never a loss, when retried).
func (p *batchPublisher) Publish(ctx context.Context, records []*sarama.ProducerMessage) []error {
	if err := ctx.Err(); err != nil {
		return fill(make([]error, len(records)), err)
	}
	client, err := p.connect()
	if err != nil {
		return fill(make([]error, len(records)), err)
	}
	done := make(chan []error, 1)
	p.inflight.Go(func() { done <- p.write(ctx, client, records) })
	select {
	case errs := <-done:
		return errs
	case <-ctx.Done():
		return fill(make([]error, len(records)), ctx.Err())
	}
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// partitionBatches are the records of one partition, split into record
// batches that each fit in Producer.MaxMessageBytes.
type partitionBatches struct {
	topic     string
	partition int32
	batches   [][]int // indexes into the records of the call
	next      int     // the first batch not yet acknowledged
	tries     int     // failed tries of batches[next]
}

// write sorts records into partitions and writes them in rounds: each round
// sends, for every partition that has one left, its next batch, one produce
// request per leader. A partition stops at its first batch that fails for
// good, and its later batches fail with the same error unsent.
func (p *batchPublisher) write(ctx context.Context, client sarama.Client, records []*sarama.ProducerMessage) []error {
	errs := make([]error, len(records))
	parts := p.partition(client, records, errs)
	for len(parts) > 0 {
		if err := p.stopped(ctx); err != nil {
			giveUp(parts, errs, err)
			return errs
		}
		results := p.round(client, records, parts)
		var retry bool
		live := parts[:0]
		for i, pb := range parts {
			err := results[i]
			switch {
			case err == nil:
				pb.next, pb.tries = pb.next+1, 0
			case pb.tries < p.cfg.Producer.Retry.Max && retriable(err):
				pb.tries++
				retry = true
			default:
				giveUp([]*partitionBatches{pb}, errs, err)
			}
			if pb.next < len(pb.batches) {
				live = append(live, pb)
			}
		}
		parts = live
		if retry {
			_ = client.RefreshMetadata(topics(parts)...)
			p.wait(ctx, p.cfg.Producer.Retry.Backoff)
		}
	}
	return errs
}

// giveUp fails the records of parts not yet acknowledged with err.
func giveUp(parts []*partitionBatches, errs []error, err error) {
	for _, pb := range parts {
		for _, batch := range pb.batches[pb.next:] {
			for _, j := range batch {
				errs[j] = err
			}
		}
		pb.next = len(pb.batches)
	}
}

// stopped returns why the write must stop: ctx ended or the publisher
// closed; nil while neither happened.
func (p *batchPublisher) stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-p.closed:
		return fmt.Errorf("producer: the publisher is closed: %w", sarama.ErrShuttingDown)
	default:
		return nil
	}
}

// topics lists the topics of parts, once each.
func topics(parts []*partitionBatches) []string {
	var out []string
	for _, pb := range parts {
		if !slices.Contains(out, pb.topic) {
			out = append(out, pb.topic)
		}
	}
	return out
}

// wait waits d unless ctx ends or the publisher closes first.
func (p *batchPublisher) wait(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	case <-p.closed:
	}
}

// partition runs Producer.Interceptors on every record, assigns it its
// partition and splits each partition's records into batches. A record larger than Producer.MaxMessageBytes, or
// for which no partition can be found, gets its error in errs.
func (p *batchPublisher) partition(client sarama.Client, records []*sarama.ProducerMessage, errs []error) []*partitionBatches {
	type tp struct {
		topic     string
		partition int32
	}
	index := map[tp]*partitionBatches{}
	partitioners := map[string]sarama.Partitioner{}
	var parts []*partitionBatches
	sizes := map[*partitionBatches]int{}
	limit := p.cfg.Producer.MaxMessageBytes
	for i, m := range records {
		for _, ic := range p.cfg.Producer.Interceptors {
			intercept(ic, m)
		}
		size := m.ByteSize(2)
		if size+recordBatchOverhead > limit {
			errs[i] = fmt.Errorf("a record of %d bytes is larger than Producer.MaxMessageBytes (%d): %w", size, limit, sarama.ErrMessageSizeTooLarge)
			continue
		}
		partitioner := partitioners[m.Topic]
		if partitioner == nil {
			partitioner = p.cfg.Producer.Partitioner(m.Topic)
			partitioners[m.Topic] = partitioner
		}
		partitions, err := client.Partitions(m.Topic)
		if !partitioner.RequiresConsistency() {
			partitions, err = client.WritablePartitions(m.Topic)
		}
		if err == nil && len(partitions) == 0 {
			err = sarama.ErrLeaderNotAvailable
		}
		if err != nil {
			errs[i] = err
			continue
		}
		choice, err := partitioner.Partition(m, int32(len(partitions)))
		if err != nil {
			errs[i] = permanentError{fmt.Errorf("partitioner: %w", err)}
			continue
		}
		m.Partition = partitions[choice]
		key := tp{m.Topic, m.Partition}
		pb := index[key]
		if pb == nil {
			pb = &partitionBatches{topic: m.Topic, partition: m.Partition}
			index[key] = pb
			parts = append(parts, pb)
		}
		if n := len(pb.batches); n == 0 || sizes[pb]+size > limit {
			pb.batches = append(pb.batches, nil)
			sizes[pb] = recordBatchOverhead
		}
		last := len(pb.batches) - 1
		pb.batches[last] = append(pb.batches[last], i)
		sizes[pb] += size
	}
	return parts
}

// intercept runs one of Producer.Interceptors on m, as Sarama's own
// producer does, and like it carries on when the interceptor panics.
func intercept(ic sarama.ProducerInterceptor, m *sarama.ProducerMessage) {
	defer func() { _ = recover() }()
	ic.OnSend(m)
}

// recordBatchOverhead is the size of a record batch's header.
const recordBatchOverhead = 61

// round sends the next batch of every partition of parts, one request per
// leader, all at once, and returns each partition's outcome.
func (p *batchPublisher) round(client sarama.Client, records []*sarama.ProducerMessage, parts []*partitionBatches) []error {
	results := make([]error, len(parts))
	type request struct {
		broker *sarama.Broker
		req    *sarama.ProduceRequest
		parts  []int // indexes into parts
	}
	var requests []*request
	byBroker := map[*sarama.Broker]*request{}
	now := time.Now()
	for i, pb := range parts {
		broker, err := client.Leader(pb.topic, pb.partition)
		if err != nil {
			results[i] = err
			continue
		}
		r := byBroker[broker]
		if r == nil {
			r = &request{broker: broker, req: &sarama.ProduceRequest{
				Version: p.version, RequiredAcks: p.cfg.Producer.RequiredAcks,
				Timeout: int32(p.cfg.Producer.Timeout / time.Millisecond),
			}}
			byBroker[broker] = r
			requests = append(requests, r)
		}
		batch, err := p.recordBatch(records, pb.batches[pb.next], now)
		if err != nil {
			results[i] = permanentError{err}
			continue
		}
		r.req.AddBatch(pb.topic, pb.partition, batch)
		r.parts = append(r.parts, i)
	}
	var wg sync.WaitGroup
	for _, r := range requests {
		if len(r.parts) == 0 {
			continue
		}
		wg.Go(func() {
			resp, err := r.broker.Produce(r.req)
			if err != nil {
				// The connection is broken or out of step: drop it, so that
				// the next round connects again.
				_ = r.broker.Close()
			}
			for _, i := range r.parts {
				pb := parts[i]
				results[i] = blockError(resp, err, pb.topic, pb.partition)
				if results[i] == nil {
					base := resp.GetBlock(pb.topic, pb.partition).Offset
					for n, j := range pb.batches[pb.next] {
						records[j].Offset = base + int64(n)
					}
				}
			}
		})
	}
	wg.Wait()
	return results
}

// recordBatch encodes the records at idx as one record batch.
func (p *batchPublisher) recordBatch(records []*sarama.ProducerMessage, idx []int, now time.Time) (*sarama.RecordBatch, error) {
	batch := &sarama.RecordBatch{
		Version: 2, Codec: p.cfg.Producer.Compression, CompressionLevel: p.cfg.Producer.CompressionLevel,
		FirstTimestamp: now.Truncate(time.Millisecond), MaxTimestamp: now.Truncate(time.Millisecond),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		LastOffsetDelta: int32(len(idx) - 1),
		Records:         make([]*sarama.Record, len(idx)),
	}
	headers := 0
	for _, j := range idx {
		headers += len(records[j].Headers)
	}
	hs := make([]sarama.RecordHeader, 0, headers)
	for n, j := range idx {
		m := records[j]
		rec := &sarama.Record{OffsetDelta: int64(n), Headers: make([]*sarama.RecordHeader, len(m.Headers))}
		var err error
		if m.Key != nil {
			if rec.Key, err = m.Key.Encode(); err != nil {
				return nil, fmt.Errorf("encode the key: %w", err)
			}
		}
		if m.Value != nil {
			if rec.Value, err = m.Value.Encode(); err != nil {
				return nil, fmt.Errorf("encode the value: %w", err)
			}
		}
		for h := range m.Headers {
			hs = append(hs, m.Headers[h])
			rec.Headers[h] = &hs[len(hs)-1]
		}
		batch.Records[n] = rec
	}
	return batch, nil
}

// blockError is the outcome of one partition of a produce request.
func blockError(resp *sarama.ProduceResponse, err error, topic string, partition int32) error {
	if err != nil {
		return err
	}
	block := resp.GetBlock(topic, partition)
	switch {
	case block == nil:
		return sarama.ErrIncompleteResponse
	case block.Err == sarama.ErrNoError:
		return nil
	case block.ErrorMessage != nil && *block.ErrorMessage != "":
		return fmt.Errorf("%w: %s", block.Err, *block.ErrorMessage)
	default:
		return block.Err
	}
}

// retriable reports whether Kafka may accept a batch that failed with err
// on a second try.
func retriable(err error) bool {
	if classify(err) == failPermanent {
		return false
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrUnknownTopicOrPartition, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
			sarama.ErrRequestTimedOut, sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend,
			sarama.ErrKafkaStorageError, sarama.ErrBrokerNotAvailable, sarama.ErrNetworkException:
			return true
		}
		return false
	}
	return true // a broken connection, no leader known, an incomplete response
}

// closeWait bounds how long Close waits for writes a cancelled Publish left
// in flight before it closes the client under them.
const closeWait = 10 * time.Second

// Close waits for writes in flight (at most closeWait) and closes the
// client.
func (p *batchPublisher) Close() error {
	p.mu.Lock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() { p.inflight.Wait(); close(drained) }()
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client = nil
	return err
}

// failureClass says what a publish error means for the event.
type failureClass int

const (
	// failRetriable: count an attempt and retry after a backoff.
	failRetriable failureClass = iota
	// failUnavailable: Kafka could not be reached; count no attempt, feed
	// the breaker, try again soon.
	failUnavailable
	// failPermanent: no retry can fix it; dead-letter at once.
	failPermanent
)

func (c failureClass) String() string {
	switch c {
	case failUnavailable:
		return "broker_unavailable"
	case failPermanent:
		return "permanent"
	default:
		return "retriable"
	}
}

// permanentError marks an error no retry can fix that Kafka did not report,
// e.g. a record that cannot be built.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// classify sorts a publish error.
func classify(err error) failureClass {
	var perm permanentError
	if errors.As(err, &perm) {
		return failPermanent
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidTopic, sarama.ErrMessageSetSizeTooLarge,
			sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed,
			sarama.ErrInvalidRecord, sarama.ErrPolicyViolation, sarama.ErrUnsupportedForMessageFormat:
			return failPermanent
		case sarama.ErrBrokerNotAvailable, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
			sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
			sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrKafkaStorageError, sarama.ErrNotController:
			return failUnavailable
		}
		return failRetriable
	}
	var configErr sarama.ConfigurationError
	if errors.As(err, &configErr) {
		return failPermanent // e.g. larger than Producer.MaxMessageBytes
	}
	var netErr net.Error
	switch {
	case errors.Is(err, breaker.ErrBreakerOpen), // Sarama's own per-partition breaker
		errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected),
		errors.Is(err, sarama.ErrClosedClient), errors.Is(err, sarama.ErrShuttingDown),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return failUnavailable
	}
	return failRetriable
}
