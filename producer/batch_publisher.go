package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/record"
)

// batchPublisher writes the records of a Publish call with one produce
// request per broker, the records of each partition as one record batch in
// the order given. The broker appends a record batch whole or not at all, so
// the events of a key (always on one partition) succeed or fail together and
// in order, with one round trip for the whole call. A partition whose
// records exceed Producer.MaxMessageBytes gets several batches, sent one
// after the other, each only once the one before it was acknowledged; a
// broker whose batches exceed sarama.MaxRequestSize gets several requests.
//
// Each write in flight has a Sarama client of its own, and so connections
// of its own: a broker handles one request of a connection at a time, and a
// produce with acks=all holds its connection until the replicas have the
// records, so writes sharing a connection would each wait for the others'
// replication (with 5 ms of it, 8 relay workers took 46 ms a write instead
// of 6). A client is kept for the next write once its write is done; there
// are at most as many as writes ever ran at once (the relay's Workers).
//
// It uses Sarama's clients for metadata and connections, and the configured
// partitioner (Producer.Partitioner; a new one per call and topic, since
// Sarama's partitioners are not safe for concurrent use). It retries what
// Kafka may accept on a second try (a leader moved, a broker restarted) up
// to Producer.Retry.Max times after Producer.Retry.Backoff, and connects on
// first use and again after a failure, so a relay can start while Kafka is
// down. Its batches are idempotent unless turned off (see producerSession):
// a batch whose fate is unknown (sent, and no answer came, or one that may
// hide an append) is sent again with the same sequence numbers, beyond
// Retry.Max, until it is answered or deliveryTimeout passes, so that the
// broker keeps one copy.
type batchPublisher struct {
	brokers    []string
	cfg        *sarama.Config
	version    int16 // of the produce requests
	idempotent bool
	sessions   sessionPool
	holds      *holds // the relay's held partitions, failed unsent; nil for none

	mu       sync.Mutex      // guards idle and clients, and closed against new writes
	idle     []sarama.Client // connected, and no write uses them
	clients  []sarama.Client // every client made, for Close
	inflight sync.WaitGroup
	closed   chan struct{}
}

// PublisherOption changes how NewSaramaPublisher writes.
type PublisherOption func(*batchPublisher)

// WithoutIdempotence makes a publisher's produce requests plain ones, with
// no producer id: a request sent again after its answer was lost may then
// write its records twice. It is for clusters that refuse idempotent
// writes (before Kafka 2.8 they need the IdempotentWrite permission on the
// cluster; see ErrIdempotenceRefused), and it allows RequiredAcks
// WaitForLocal.
func WithoutIdempotence() PublisherOption {
	return func(p *batchPublisher) { p.idempotent = false }
}

// withHolds makes a publisher fail the records of the partitions h holds
// at once, unsent (see holds).
func withHolds(h *holds) PublisherOption {
	return func(p *batchPublisher) { p.holds = h }
}

// NewSaramaPublisher returns the record.Publisher the relay uses by default,
// on brokers with cfg (nil means NewSaramaConfig()). It keeps the order
// record.Publisher promises by writing the records of a partition as one
// record batch, which the broker appends whole or not at all; it sets the
// Partition and Offset of each record the broker acknowledged (an offset of
// -1 for a batch an older broker reports as a duplicate without its
// offset), and never otherwise changes a record.
//
// Its produce requests are idempotent, as Kafka's own producer's are by
// default: a request sent again because its answer was lost does not write
// its records twice (WithoutIdempotence turns this off). It asks Kafka for
// producer ids with InitProducerId; a cluster that refuses one fails the
// records with ErrIdempotenceRefused.
//
// cfg.Version must be sarama.V2_1_0_0 or later (Kafka 4.0 refuses older
// requests); RequiredAcks must be WaitForAll (WaitForLocal too without
// idempotence: an idempotent write acknowledged by the leader alone could
// still be lost); the partitioner must put a key always on the same
// partition; and Sarama's own idempotent and transactional producers
// (Producer.Idempotent, Producer.Transaction) are not used: the publisher
// numbers its batches itself, and the relay orders and retries events.
func NewSaramaPublisher(brokers []string, cfg *sarama.Config, opts ...PublisherOption) (record.Publisher, error) {
	if len(brokers) == 0 {
		return nil, errors.New("producer: no Kafka brokers given; set RelayConfig.Brokers, e.g. []string{\"localhost:9092\"}")
	}
	if cfg == nil {
		cfg = NewSaramaConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("producer: Sarama config: %w", err)
	}
	if err := kafkafloor.Check(cfg.Version); err != nil {
		return nil, fmt.Errorf("producer: Sarama config: %w", err)
	}
	p := &batchPublisher{brokers: brokers, cfg: cfg, version: produceVersion(cfg.Version), idempotent: true, closed: make(chan struct{})}
	for _, opt := range opts {
		opt(p)
	}
	switch {
	case cfg.Producer.RequiredAcks == sarama.NoResponse:
		return nil, errors.New("producer: Sarama config: Producer.RequiredAcks is NoResponse, so the relay could not know an event arrived; use sarama.WaitForAll (the default)")
	case p.idempotent && cfg.Producer.RequiredAcks != sarama.WaitForAll:
		return nil, errors.New("producer: Sarama config: idempotent writes need Producer.RequiredAcks WaitForAll (the default): a write only the leader acknowledged is lost when the leader fails; use WaitForAll, or turn idempotence off (RelayConfig.DisableIdempotence, courier relay --no-idempotence)")
	case cfg.Producer.Idempotent || cfg.Producer.Transaction.ID != "":
		return nil, errors.New("producer: Sarama config: Producer.Idempotent and Producer.Transaction are not used: the relay's own produce requests are idempotent (unless RelayConfig.DisableIdempotence), and it keeps each key's order and retries itself; leave them unset")
	case !cfg.Producer.Partitioner("").RequiresConsistency():
		return nil, errors.New("producer: Sarama config: Producer.Partitioner does not put a key always on the same partition, so per-key order could not hold; use sarama.NewMurmur2Partitioner (the default), NewHashPartitioner or NewReferenceHashPartitioner")
	}
	return p, nil
}

// produceVersion is the newest produce request version that Kafka version v
// understands, as Sarama's own producer chooses it.
func produceVersion(v sarama.KafkaVersion) int16 {
	for _, c := range []struct {
		since   sarama.KafkaVersion
		version int16
	}{
		{sarama.V3_7_0_0, 10}, {sarama.V2_8_0_0, 9}, {sarama.V2_4_0_0, 8},
	} {
		if v.IsAtLeast(c.since) {
			return c.version
		}
	}
	return 7 // Kafka 2.1, the oldest NewSaramaPublisher accepts
}

// errPublisherClosed is the error of records a closed publisher will not
// write (an unavailable Kafka, for the relay).
var errPublisherClosed = fmt.Errorf("producer: the publisher is closed: %w", sarama.ErrShuttingDown)

// start registers a write in flight and gives it a client no other write
// uses: an idle one, else a new one (which connects); it fails once the
// publisher is closed, so that Close's wait covers every write. Give the
// client back with finish.
func (p *batchPublisher) start() (sarama.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return nil, errPublisherClosed
	default:
	}
	var client sarama.Client
	if n := len(p.idle); n > 0 {
		client, p.idle = p.idle[n-1], p.idle[:n-1]
	} else {
		var err error
		if client, err = sarama.NewClient(p.brokers, p.cfg); err != nil {
			return nil, fmt.Errorf("connect to Kafka at %v: %w", p.brokers, err)
		}
		p.clients = append(p.clients, client)
	}
	p.inflight.Add(1)
	return client, nil
}

// finish ends a write that start began, keeping its client for the next.
func (p *batchPublisher) finish(client sarama.Client) {
	p.mu.Lock()
	p.idle = append(p.idle, client)
	p.mu.Unlock()
	p.inflight.Done()
}

// Publish writes records and waits for every acknowledgement, or for ctx.
// When ctx ends first, the records already answered keep their outcome and
// the others get ctx's error; the broker may still write those (a
// duplicate, never a loss, when retried).
func (p *batchPublisher) Publish(ctx context.Context, records []*record.Record) []error {
	out := newOutcome(records)
	if err := ctx.Err(); err != nil {
		return out.rest(err)
	}
	client, err := p.start()
	if err != nil {
		return out.rest(err)
	}
	done := make(chan struct{})
	go func() {
		defer p.finish(client)
		defer close(done)
		p.write(ctx, client, records, out)
	}()
	select {
	case <-done:
		return out.rest(nil)
	case <-ctx.Done():
		return out.rest(ctx.Err())
	}
}

// outcome collects the results of a write as they come, so that a Publish
// cut short still reports those it has. It sets the place of the records
// acknowledged before Publish returned, and of none after: the records are
// the caller's again.
type outcome struct {
	mu       sync.Mutex
	records  []*record.Record
	errs     []error
	answered []bool
	returned bool
}

func newOutcome(records []*record.Record) *outcome {
	return &outcome{records: records, errs: make([]error, len(records)), answered: make([]bool, len(records))}
}

// ack records the acknowledgement of the records at idx, written in that
// order to partition from offset base.
func (o *outcome) ack(idx []int, partition int32, base int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.returned {
		return
	}
	for n, i := range idx {
		o.records[i].Partition, o.records[i].Offset = partition, base+int64(n)
		if base < 0 { // a duplicate an older broker did not place
			o.records[i].Offset = -1
		}
		o.errs[i], o.answered[i] = nil, true
	}
}

// set records err (nil: acknowledged) for the records at idx.
func (o *outcome) set(idx []int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, i := range idx {
		o.errs[i], o.answered[i] = err, true
	}
}

// rest returns a copy of the outcomes, with err for the records not
// answered; it is what Publish returns.
func (o *outcome) rest(err error) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.returned = true
	errs := slices.Clone(o.errs)
	for i, answered := range o.answered {
		if !answered {
			errs[i] = err
		}
	}
	return errs
}

// partitionBatches are the records of one partition, split into record
// batches that each fit in Producer.MaxMessageBytes.
type partitionBatches struct {
	topicPartition
	batches [][]int // indexes into the records of the call
	sizes   []int   // of each batch, in bytes
	next    int     // the first batch not yet acknowledged
	tries   int     // failed tries of batches[next]

	// Idempotent writes: the session the batches are numbered in (its
	// next sequence number on the partition is that of batches[next]:
	// only this write uses it); since when the fate of batches[next] is
	// unknown (zero: it is known not to be on the log); and how often the
	// broker had lost the session's sequence.
	session *producerSession
	unknown time.Time
	resets  int
}

// maxSessionResets bounds how often a batch moves to a new session because
// the broker lost the sequence of the one before.
const maxSessionResets = 3

// acked moves pb to its next batch once batches[next] was acknowledged.
func (pb *partitionBatches) acked() {
	if s := pb.session; s != nil {
		s.next[pb.topicPartition] = addSequence(s.next[pb.topicPartition], len(pb.batches[pb.next]))
	}
	pb.next, pb.tries, pb.unknown = pb.next+1, 0, time.Time{}
}

// failed records a failed try of batches[next], and reports whether to try
// it again: a broker might accept it on a second try, and either tries are
// left or (idempotent writes) its fate is unknown, deliveryTimeout has not
// passed and neither has resendUntil (zero: no bound): another try with
// the same sequence numbers settles it.
func (pb *partitionBatches) failed(err error, maxTries int, now, resendUntil time.Time) bool {
	if pb.session != nil && pb.unknown.IsZero() && !refusedUnwritten(err) && !errors.As(err, new(unsentError)) {
		pb.unknown = now
	}
	if !retriable(err) {
		return false
	}
	pb.tries++
	resend := !pb.unknown.IsZero() && now.Sub(pb.unknown) < deliveryTimeout && (resendUntil.IsZero() || now.Before(resendUntil))
	return pb.tries <= maxTries || resend
}

// renumber moves pb to a new session after the broker lost the sequence of
// its session on the partition (which appended nothing), and reports
// whether it may: a batch that keeps losing it fails.
func (pb *partitionBatches) renumber() bool {
	if pb.session == nil || pb.resets == maxSessionResets {
		return false
	}
	pb.session.broken = true
	pb.session, pb.resets = nil, pb.resets+1
	return true
}

// giveUp fails the records of pb not yet acknowledged with err. A batch
// whose fate is unknown leaves its session broken: the broker may hold it,
// and the session's next batch on the partition could be taken for it.
//
// Each record's error names its partition (placedError); that of the
// batch whose fate is unknown says so (fateUnknownError), so that the relay
// publishes it again rather than dead-letter it.
func (pb *partitionBatches) giveUp(out *outcome, err error) {
	placed := placedError{pb.topicPartition, err}
	if !pb.unknown.IsZero() {
		if pb.session != nil {
			pb.session.broken = true
		}
		out.set(pb.batches[pb.next], placedError{pb.topicPartition, fateUnknownError{err}})
		pb.next++
	}
	for _, batch := range pb.batches[pb.next:] {
		out.set(batch, placed)
	}
	pb.next = len(pb.batches)
}

// placedError is the error of records a write gave up on, with the
// partition they were for.
type placedError struct {
	topicPartition
	err error
}

func (e placedError) Error() string { return e.topicPartition.String() + ": " + e.err.Error() }
func (e placedError) Unwrap() error { return e.err }

// fateUnknownError is the error of a batch that may have been appended: it
// was sent, and its last answer (or none) does not say it was not. The
// relay publishes it again and never dead-letters it.
type fateUnknownError struct{ error }

func (e fateUnknownError) Error() string {
	return "it may have been appended (no answer said otherwise): " + e.error.Error()
}

func (e fateUnknownError) Unwrap() error { return e.error }

// write sorts records into partitions and writes them in rounds: each round
// sends, for every partition that has one left, its next batch, one produce
// request per leader. A partition stops at its first batch that fails for
// good, and its later batches fail with the same error unsent. Every record
// gets its outcome in out. Idempotent writes number their batches in
// sessions, which go back to the pool when the write is done.
func (p *batchPublisher) write(ctx context.Context, client sarama.Client, records []*record.Record, out *outcome) {
	parts, wire := p.partition(ctx, client, records, out)
	// A batch of unknown fate is sent again until one try's answer can
	// still come before ctx ends, so that the write gives it up itself,
	// saying where and that its fate is unknown, rather than leave ctx's
	// error alone.
	var resendUntil time.Time
	if deadline, ok := ctx.Deadline(); ok {
		resendUntil = deadline.Add(-p.cfg.Producer.Timeout)
	}
	var sessions []*producerSession // those this write used
	defer func() { p.sessions.put(sessions) }()
	for len(parts) > 0 {
		if err := p.stopped(ctx); err != nil {
			for _, pb := range parts {
				pb.giveUp(out, err)
			}
			return
		}
		results := p.round(client, wire, parts, out, &sessions)
		var retry bool
		now := time.Now()
		live := parts[:0]
		for i, pb := range parts {
			switch err := results[i]; {
			case err == nil:
				pb.acked()
			case sequenceLost(err) && pb.renumber():
				retry = true
			case pb.failed(err, p.retries(pb.topicPartition), now, resendUntil):
				retry = true
			default:
				pb.giveUp(out, err)
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
}

// retries is how often a write sends a batch of tp again after a refusal:
// Producer.Retry.Max, or none while the relay holds tp, whose refusal is
// then a hold's try, answered by the relay's backoff rather than by this
// write's. A batch of unknown fate is sent again either way (see failed).
func (p *batchPublisher) retries(tp topicPartition) int {
	if p.holds != nil && p.holds.has(tp) {
		return 0
	}
	return p.cfg.Producer.Retry.Max
}

// session is the session for a partition of a write that has none: the
// write's last one while it is sound, else an idle one, else a new one
// from broker. It adds a session it did not have to sessions.
func (p *batchPublisher) session(broker *sarama.Broker, sessions *[]*producerSession) (*producerSession, error) {
	if n := len(*sessions); n > 0 && !(*sessions)[n-1].broken {
		return (*sessions)[n-1], nil
	}
	s := p.sessions.take()
	if s == nil {
		var err error
		if s, err = p.newSession(broker); err != nil {
			return nil, err
		}
	}
	*sessions = append(*sessions, s)
	return s, nil
}

// stopped returns why the write must stop: ctx ended or the publisher
// closed; nil while neither happened.
func (p *batchPublisher) stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-p.closed:
		return errPublisherClosed
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

// route is where the records of a topic go, looked up once per call.
type route struct {
	partitioner sarama.Partitioner
	partitions  []int32
	err         error
}

// partition runs Producer.Interceptors on every record, assigns it its
// partition and splits each partition's records into batches; it returns
// them and the records to write (as the interceptors left them). A record
// larger than Producer.MaxMessageBytes, or whose topic has no partitions to
// be found, fails at once; so do the later records of its key (with
// errHeldBack), which must not overtake it.
func (p *batchPublisher) partition(ctx context.Context, client sarama.Client, records []*record.Record, out *outcome) ([]*partitionBatches, []*record.Record) {
	index := map[topicPartition]*partitionBatches{}
	routes := map[string]*route{}
	held := map[topicKey]bool{} // keys with a record failed here
	var parts []*partitionBatches
	limit := p.cfg.Producer.MaxMessageBytes
	wire := records
	if len(p.cfg.Producer.Interceptors) > 0 {
		wire = make([]*record.Record, len(records))
	}
	view := new(partitionerView)
	for i, r := range records {
		var key topicKey
		keyed := r.Key != nil
		if keyed {
			key = topicKey{r.Topic, string(r.Key)}
		}
		fail := func(err error) {
			out.set([]int{i}, err)
			held[key] = keyed
		}
		if keyed && held[key] {
			out.set([]int{i}, errHeldBack)
			continue
		}
		if len(p.cfg.Producer.Interceptors) > 0 {
			var err error
			if r, err = p.intercepted(r); err != nil {
				fail(permanentError{err})
				continue
			}
			wire[i] = r
		}
		size := recordSize(r)
		if size+recordBatchOverhead > limit {
			// Refused here, unsent: permanent, and no answer of Kafka's.
			fail(permanentError{fmt.Errorf("a record of %d bytes is larger than Producer.MaxMessageBytes (%d): %w", size, limit, sarama.ErrMessageSizeTooLarge)})
			continue
		}
		if p.holds != nil {
			// A topic held whole (one not found) is not looked up again.
			if err := p.holds.check(topicPartition{r.Topic, anyPartition}); err != nil {
				fail(err)
				continue
			}
		}
		rt := routes[r.Topic]
		if rt == nil {
			rt = p.route(ctx, client, r.Topic)
			routes[r.Topic] = rt
		}
		if rt.err != nil {
			fail(rt.err)
			continue
		}
		choice, err := rt.partitioner.Partition(view.of(r), int32(len(rt.partitions)))
		if err != nil {
			fail(permanentError{fmt.Errorf("partitioner: %w", err)})
			continue
		}
		partition := rt.partitions[choice]
		at := topicPartition{r.Topic, partition}
		if p.holds != nil {
			if err := p.holds.check(at); err != nil {
				fail(err) // held: unsent, it waits with its partition
				continue
			}
		}
		pb := index[at]
		if pb == nil {
			pb = &partitionBatches{topicPartition: at}
			index[at] = pb
			parts = append(parts, pb)
		}
		if n := len(pb.batches); n == 0 || pb.sizes[n-1]+size > limit {
			pb.batches = append(pb.batches, nil)
			pb.sizes = append(pb.sizes, recordBatchOverhead)
		}
		last := len(pb.batches) - 1
		pb.batches[last] = append(pb.batches[last], i)
		pb.sizes[last] += size
	}
	return parts, wire
}

// partitionerView shows records to a sarama.Partitioner as the messages
// Sarama's own producer would pass it, without building one per record:
// it is one message, made to show each record in turn, its key and value
// encoders and headers reading the record's bytes.
type partitionerView struct {
	msg        sarama.ProducerMessage
	key, value bytesEncoder
}

// of shows r, until the next call.
func (v *partitionerView) of(r *record.Record) *sarama.ProducerMessage {
	v.msg = sarama.ProducerMessage{Topic: r.Topic, Partition: r.Partition, Timestamp: r.Timestamp, Headers: saramaHeaders(r.Headers)}
	if r.Key != nil {
		v.key.b = r.Key
		v.msg.Key = &v.key
	}
	if r.Value != nil {
		v.value.b = r.Value
		v.msg.Value = &v.value
	}
	return &v.msg
}

// bytesEncoder is a sarama.Encoder of bytes, used by pointer so that
// setting one is no allocation (a sarama.ByteEncoder in an interface is).
type bytesEncoder struct{ b []byte }

func (e *bytesEncoder) Encode() ([]byte, error) { return e.b, nil }
func (e *bytesEncoder) Length() int             { return len(e.b) }

// record.Header and sarama.RecordHeader are the same struct (this
// conversion compiles only while they are), so a slice of one can be read
// as a slice of the other.
var _ = sarama.RecordHeader(record.Header{})

// saramaHeaders is hs read as Sarama headers, without copying them.
func saramaHeaders(hs []record.Header) []sarama.RecordHeader {
	return unsafe.Slice((*sarama.RecordHeader)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// intercepted runs Producer.Interceptors on the Sarama message of r, as
// Sarama's own producer does, and returns the record they made of it: a
// new one, r stays as the caller gave it.
func (p *batchPublisher) intercepted(r *record.Record) (*record.Record, error) {
	m := record.Message(r)
	for _, ic := range p.cfg.Producer.Interceptors {
		intercept(ic, m)
	}
	out := &record.Record{Topic: m.Topic, Partition: m.Partition, Timestamp: m.Timestamp, Headers: make([]record.Header, len(m.Headers))}
	for i, h := range m.Headers {
		out.Headers[i] = record.Header(h)
	}
	var err error
	if m.Key != nil {
		if out.Key, err = m.Key.Encode(); err != nil {
			return nil, fmt.Errorf("encode the key: %w", err)
		}
	}
	if m.Value != nil {
		if out.Value, err = m.Value.Encode(); err != nil {
			return nil, fmt.Errorf("encode the value: %w", err)
		}
	}
	return out, nil
}

// route looks up the partitions of topic, unless the write must stop.
func (p *batchPublisher) route(ctx context.Context, client sarama.Client, topic string) *route {
	r := &route{partitioner: p.cfg.Producer.Partitioner(topic)}
	if r.err = p.stopped(ctx); r.err != nil {
		return r
	}
	r.partitions, r.err = client.Partitions(topic)
	if r.err == nil && len(r.partitions) == 0 {
		r.err = sarama.ErrLeaderNotAvailable
	}
	if r.err != nil {
		r.err = fmt.Errorf("look up topic %q: %w", topic, r.err)
	}
	return r
}

// intercept runs one of Producer.Interceptors on m, as Sarama's own
// producer does, and like it carries on when the interceptor panics.
func intercept(ic sarama.ProducerInterceptor, m *sarama.ProducerMessage) {
	defer func() { _ = recover() }()
	ic.OnSend(m)
}

// recordBatchOverhead is the size of a record batch's header.
const recordBatchOverhead = 61

// requestHeadroom is kept free under sarama.MaxRequestSize for the
// request's own fields, as Sarama's producer does.
const requestHeadroom = 10 * 1024

// produceRequest is one request of a round and the partitions it carries
// (indexes into the round's parts).
type produceRequest struct {
	broker *sarama.Broker
	req    *sarama.ProduceRequest
	size   int
	parts  []int
}

// round sends the next batch of every partition of parts, one request per
// leader (more when they would exceed sarama.MaxRequestSize), all at once,
// and returns each partition's outcome; acknowledged records get theirs in
// out at once. Idempotent writes give a partition without a session one
// (see session), asking for a producer id at most once a round.
func (p *batchPublisher) round(client sarama.Client, records []*record.Record, parts []*partitionBatches, out *outcome, sessions *[]*producerSession) []error {
	results := make([]error, len(parts))
	var requests []*produceRequest
	open := map[*sarama.Broker]*produceRequest{}
	maxSize := int(sarama.MaxRequestSize) - requestHeadroom
	now := time.Now().Truncate(time.Millisecond)
	var sessionErr error // this round's failure to start a session
	for i, pb := range parts {
		broker, err := client.Leader(pb.topic, pb.partition)
		if err != nil {
			results[i] = unsentError{err}
			continue
		}
		if p.idempotent && pb.session == nil {
			if sessionErr == nil {
				pb.session, sessionErr = p.session(broker, sessions)
			}
			if pb.session == nil {
				results[i] = sessionErr
				continue
			}
		}
		batch := recordBatch(records, pb.batches[pb.next], now, p.cfg)
		if s := pb.session; s != nil {
			batch.ProducerID, batch.ProducerEpoch, batch.FirstSequence = s.id, s.epoch, s.next[pb.topicPartition]
		}
		size := pb.sizes[pb.next]
		r := open[broker]
		if r == nil || r.size+size > maxSize {
			r = &produceRequest{broker: broker, req: &sarama.ProduceRequest{
				Version: p.version, RequiredAcks: p.cfg.Producer.RequiredAcks,
				Timeout: int32(p.cfg.Producer.Timeout / time.Millisecond),
			}}
			open[broker] = r
			requests = append(requests, r)
		}
		r.req.AddBatch(pb.topic, pb.partition, batch)
		r.size += size
		r.parts = append(r.parts, i)
	}
	var wg sync.WaitGroup
	for _, r := range requests {
		wg.Go(func() {
			resp, err := r.broker.Produce(r.req)
			switch {
			case err == nil:
			case errors.As(err, new(sarama.PacketEncodingError)), errors.Is(err, sarama.ErrNotConnected):
				err = unsentError{err}
			default:
				// The connection is broken or out of step: drop it, so
				// that the next round connects again.
				_ = r.broker.Close()
			}
			for _, i := range r.parts {
				pb := parts[i]
				if results[i] = blockError(resp, err, pb.topic, pb.partition); results[i] == nil {
					out.ack(pb.batches[pb.next], pb.partition, resp.GetBlock(pb.topic, pb.partition).Offset)
				}
			}
		})
	}
	wg.Wait()
	return results
}

// recordBatch encodes the records at idx as one record batch, compressed as
// cfg says.
func recordBatch(records []*record.Record, idx []int, now time.Time, cfg *sarama.Config) *sarama.RecordBatch {
	batch := &sarama.RecordBatch{
		Version: 2, Codec: cfg.Producer.Compression, CompressionLevel: cfg.Producer.CompressionLevel,
		FirstTimestamp: now, MaxTimestamp: now,
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
		r := records[j]
		rec := &sarama.Record{OffsetDelta: int64(n), Key: r.Key, Value: r.Value, Headers: make([]*sarama.RecordHeader, len(r.Headers))}
		for h := range r.Headers {
			hs = append(hs, sarama.RecordHeader(r.Headers[h]))
			rec.Headers[h] = &hs[len(hs)-1]
		}
		batch.Records[n] = rec
	}
	return batch
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
	case block.Err == sarama.ErrNoError, block.Err == sarama.ErrDuplicateSequenceNumber:
		return nil // a duplicate: the broker had appended the batch before
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
// in flight before it closes their clients under them.
const closeWait = 10 * time.Second

// Close stops the writes in flight from starting new requests, waits for
// them (at most closeWait) and closes the clients. Publish fails after it.
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
	var errs []error
	for _, client := range p.clients {
		errs = append(errs, client.Close())
	}
	p.idle, p.clients = nil, nil
	return errors.Join(errs...)
}
