package dlq

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/record"
)

// ReplayCountHeader is the header a replayed record carries: how many
// times it has been replayed, in decimal. Replay sets it (replacing an
// older one) and the consumer copies it into the replay_count of the next
// envelope (and HeaderReplayCount), so MaxReplays can stop a record that
// fails again and again.
const ReplayCountHeader = "replay_count"

// ReplayCount returns the count in headers' replay_count header: 0 when
// there is none or it is not a decimal count.
func ReplayCount(headers []Header) int {
	count := 0
	for _, h := range headers {
		if string(h.Key) == ReplayCountHeader {
			if n, err := strconv.Atoi(string(h.Value)); err == nil && n >= 0 {
				count = n
			}
		}
	}
	return count
}

// Defaults of ReplayConfig.
const (
	DefaultReplayGroup = "courier-replay"
	DefaultMaxReplays  = 3
	DefaultReplayBatch = 1000
	// DefaultReplayConcurrency is how many partitions a replay goes
	// through at once by default.
	DefaultReplayConcurrency = 16
	// MaxReplayConcurrency caps ReplayConfig.Concurrency: each partition
	// replayed at once holds a batch in memory.
	MaxReplayConcurrency = 256
	// MaxReplayBatch caps ReplayConfig.BatchSize: a batch is held in
	// memory and written at once.
	MaxReplayBatch = 10000
	// MinReplayRate is the smallest ReplayConfig.Rate but 0: a record
	// every 1,000 seconds.
	MinReplayRate = 0.001
)

// ReplayConfig configures Replay. Topic and Brokers are required.
type ReplayConfig struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Sarama configures the connection (TLS, SASL, version, client id).
	// Replay works on a copy and sets the producer options it needs.
	// Defaults to sarama.NewConfig().
	Sarama *sarama.Config
	// Topic is the dead-letter topic to replay, e.g. "orders.dlq". Required.
	Topic string
	// Group is the consumer group whose committed offsets keep the replay's
	// position in Topic: a record is replayed once per group, and records
	// the filters leave out stay for a later run. Replay joins no group, so
	// run one replay per group at a time. Kafka forgets the offsets of a
	// group offsets.retention.minutes (7 days by default) after its last
	// commit; every run (not a dry run) commits the position again, so a job
	// that runs more often keeps it. Defaults to "courier-replay".
	Group string
	// To sends every record to this topic instead of its original topic
	// (and then partitions by key, since the original partition belongs to
	// another topic). Defaults to each record's original topic.
	To string
	// Route, when set, says where each selected record goes instead of its
	// original topic, and what it looks like there: Replay writes the
	// Topic, Key, Value and Headers of the record Route returns (Route's
	// Partition, Offset and Timestamp are not used). As for every replay,
	// Replay sets the replay_count header to one more than the envelope's
	// (replacing any Route left), and writes to the original partition
	// when the target topic has it, else by key (murmur2). A record Route
	// returns an error for is reported as ActionSkipped with the error as
	// its Reason and stays for a later run; the run goes on. A dry run
	// reports the target Route names as would_move. Route is called once
	// per selected record, one call at a time; it must not return nil
	// with a nil error. retrytopics.ReplayRoute is one: it sends each dead
	// letter to the first retry tier of the consumer group that failed it,
	// so that only that group handles it again. Route and To cannot be set
	// together.
	Route func(Envelope) (*record.Record, error)
	// Filter selects the records to replay; the others stay unsettled.
	Filter Filter
	// DryRun reads and decides as a replay would, reporting "would_move"
	// records, and writes and commits nothing.
	DryRun bool
	// Rate caps the records written per second; 0 sets no cap.
	Rate float64
	// Max stops the run after this many records moved; 0 sets no cap.
	Max int
	// MaxReplays refuses records replayed this many times already
	// (replay_count), so a record that keeps failing does not loop between
	// the topic and its dead-letter topic; refused records are reported
	// and stay. Negative sets no cap. Defaults to 3.
	MaxReplays int
	// BatchSize is how many records of a partition are written before its
	// position is committed: a run killed mid-batch writes at most this
	// many records of each partition it was in again when it is run again.
	// A partition reads its next batch while one is written, and writes
	// the next once that one is acknowledged and committed, so a batch's
	// round trips (the write's acks=all, the commit's) are paid once per
	// BatchSize records. Defaults to 1000.
	BatchSize int
	// Concurrency is how many partitions are replayed at once, each in
	// offset order with its own batches and position: while one partition's
	// batch waits for its acknowledgement, the others read and write, so a
	// replay is not one round trip per batch. 1 goes through the partitions
	// one after the other in partition order, as a run with Max always does
	// (so that it moves the first Max records its dry run showed). Defaults
	// to 16.
	Concurrency int
	// OnRecord, if set, is called for every record refused or corrupt as
	// it is read, and for every record moved (or that would move) once its
	// batch is written. OnRecord, OnProgress and Route are called one at a
	// time, never at once; the records of the partitions replayed at once
	// interleave.
	OnRecord func(ReplayedRecord)
	// OnProgress, if set, is called after every batch with the counts so
	// far.
	OnProgress func(ReplayReport)
	// Expect, when positive, is how many records the run must move: the
	// Moved of the dry run an operator confirmed; ExpectSet, when set, is
	// that dry run's Set, which names the very records and where they go.
	// With either, Replay reads its set first as a dry run does (up to the
	// high-water marks at its start), and when it would move another
	// number of records, or other records, or to other places, it writes
	// and commits nothing and returns a *SetChangedError (matching
	// ErrSetChanged) beside that check's report. Otherwise it moves those
	// records and no other: a record that could not move at the check
	// (its target topic missing, say) but could now is reported as
	// ActionSkipped and stays, so a run never moves more than it checked.
	// Records that fail to be written, or that retention deletes between
	// the check and the write, can make it move fewer. 0 and "" check
	// nothing; a dry run ignores them.
	Expect    int
	ExpectSet string
	// OnChecked, if set, is called once the check of Expect and ExpectSet
	// passed, with the check's report, before the first write; an error
	// it returns ends the run with nothing written or committed. It is not
	// called without a check, nor for a dry run.
	OnChecked func(ReplayReport) error
	// TracerProvider makes a span per record written back (OpenTelemetry,
	// tracer "github.com/courierkit/courier/dlq"): "send <target topic>",
	// kind producer, with courier.operation=replay, a child of the span of
	// Replay's context and linked to the dead letter's span (the one the
	// dead-letter record's traceparent names, else the original's); the
	// record written carries the replay span's traceparent and tracestate
	// in place of the original's. A dry run makes none. Defaults to nil: no
	// spans (the global provider is not used), and the headers are
	// restored as they were.
	TracerProvider trace.TracerProvider
}

// ReplayAction says what Replay did with a record.
type ReplayAction string

// Actions reported to ReplayConfig.OnRecord.
const (
	// ActionMoved: written to the target topic and settled.
	ActionMoved ReplayAction = "moved"
	// ActionWouldMove: a dry run would have moved it.
	ActionWouldMove ReplayAction = "would_move"
	// ActionRefused: replayed MaxReplays times already; it stays.
	ActionRefused ReplayAction = "refused"
	// ActionCorrupt: not a readable dead letter; it is reported once and
	// passed (it stays in the topic, where Scan still reads it).
	ActionCorrupt ReplayAction = "corrupt"
	// ActionSkipped: a readable dead letter that cannot go where it would
	// go: its target topic does not exist, is the dead-letter topic being
	// replayed (a loop), or is a retry topic (without Route), or Route
	// returned an error for it. It is reported, stays unsettled (a later
	// run, once the cause is fixed or with --to, moves it) and the run goes
	// on with the records after it.
	ActionSkipped ReplayAction = "skipped"
)

// ReplayedRecord is one record Replay acted on.
type ReplayedRecord struct {
	// Entry is the dead-letter record; Entry.Err is set when corrupt.
	Entry Entry
	// Action is what Replay did.
	Action ReplayAction
	// To, ToPartition and ToOffset are where the record was written
	// (ToOffset is -1 for a dry run); empty for refused and corrupt ones.
	To          string
	ToPartition int32
	ToOffset    int64
	// Reason says why a record was refused or is corrupt.
	Reason string
}

// ReplayReport counts what a replay did.
type ReplayReport struct {
	// Total is how many records the run had to read: from the group's
	// position to the high-water marks when it started.
	Total int64
	// Read is how many of them it read.
	Read int64
	// Moved counts the records written back (for a dry run: that would
	// be).
	Moved int
	// AlreadyReplayed counts records an earlier run of the group settled
	// (above a record it left behind).
	AlreadyReplayed int
	// NotSelected counts the records the filters left out; they stay.
	NotSelected int
	// Refused counts records over MaxReplays; they stay.
	Refused int
	// Corrupt counts records that are not readable dead letters, reported
	// once and passed.
	Corrupt int
	// Skipped counts records whose target topic is missing, is the
	// dead-letter topic itself or is a retry topic, or that Route refused;
	// they stay for a later run.
	Skipped int
	// StoppedAtMax is true when the run stopped because Max records moved.
	StoppedAtMax bool
	// Set names the records moved (for a dry run: that would be), each by
	// its place in the dead-letter topic and where it goes (topic and
	// partition): a digest, equal for two runs only when they move the
	// same records to the same places. A replay given a dry run's Set as
	// ReplayConfig.ExpectSet moves exactly what that dry run showed.
	Set string
	// DryRun is true for a dry run.
	DryRun bool
	// Elapsed is the time since the run started.
	Elapsed time.Duration
}

// WithDefaults returns c as Replay runs it: each zero field set to its
// default (Group DefaultReplayGroup, MaxReplays DefaultMaxReplays,
// BatchSize DefaultReplayBatch, Concurrency DefaultReplayConcurrency), and Sarama set to a copy of itself (or of
// sarama.NewConfig()) with the producer options Replay needs. Replay calls
// it; calling it first does no harm.
func (c ReplayConfig) WithDefaults() ReplayConfig {
	if c.Group == "" {
		c.Group = DefaultReplayGroup
	}
	if c.MaxReplays == 0 {
		c.MaxReplays = DefaultMaxReplays
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultReplayBatch
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultReplayConcurrency
	}
	sc := sarama.NewConfig()
	if c.Sarama != nil {
		copied := *c.Sarama
		sc = &copied
	}
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	// A target topic that does not exist is reported and skipped, never
	// created by asking for its metadata.
	sc.Metadata.AllowAutoTopicCreation = false
	// No duplicates from the producer's own retries.
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	c.Sarama = sc
	return c
}

// validate refuses what c, its defaults applied, cannot run with, naming
// the field and the fix. Its errors match ErrInvalidReplayConfig (and so
// ErrInvalidConfig).
func (c ReplayConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidReplayConfig}, args...)...)
	}
	switch {
	case len(c.Brokers) == 0:
		return bad("Brokers is empty; name at least one Kafka broker")
	case c.Topic == "":
		return bad("Topic is empty; name the dead-letter topic, e.g. orders.dlq")
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return bad("Rate is %v; use 0 (no cap) or a finite number of records per second", c.Rate)
	case c.Rate < 0:
		return bad("Rate is %v; use 0 (no cap) or a positive number of records per second", c.Rate)
	case c.Max < 0:
		return bad("Max is %d; use 0 (no cap) or a positive count", c.Max)
	case c.Rate > 0 && c.Rate < MinReplayRate:
		return bad("Rate is %v; use 0 (no cap) or at least %v records per second", c.Rate, MinReplayRate)
	case c.Expect < 0:
		return bad("Expect is %d; use 0 (no check) or the count of records the dry run would move", c.Expect)
	case c.ExpectSet != "" && !validSet(c.ExpectSet):
		return bad("ExpectSet %q is not the Set of a dry run (%d hex digits)", textcut.Cut(c.ExpectSet, 80, "…"), 2*setBytes)
	case c.BatchSize < 0 || c.BatchSize > MaxReplayBatch:
		return bad("BatchSize is %d; use 1 to %d", c.BatchSize, MaxReplayBatch)
	case c.Concurrency < 0 || c.Concurrency > MaxReplayConcurrency:
		return bad("Concurrency is %d; use 1 to %d partitions at once", c.Concurrency, MaxReplayConcurrency)
	case c.To == c.Topic:
		return bad("To is the dead-letter topic itself; a replay would feed it back into itself")
	case c.To != "" && c.Route != nil:
		return bad("To and Route are both set; Route says where each record goes, so leave To empty")
	}
	for _, name := range []string{c.Topic, c.To} {
		if name == "" {
			continue
		}
		if err := topicname.Validate(name); err != nil {
			return bad("%v", err)
		}
	}
	if err := c.Filter.Validate(); err != nil {
		return bad("%v", err)
	}
	if err := c.Sarama.Validate(); err != nil {
		return bad("Sarama: %v", err)
	}
	if err := kafkafloor.Check(c.Sarama.Version); err != nil {
		return bad("%v", err)
	}
	return nil
}

// Replay moves the dead letters of cfg.Topic that cfg.Filter selects back
// to their original topic (or cfg.To, or where cfg.Route says), restoring each record's key, value
// and headers byte for byte and setting its replay_count header to one
// more than the envelope's replay_count. It goes through the records from
// cfg.Group's position to the high-water marks at its start, each
// partition in offset order (cfg.Concurrency partitions at once), and
// writes them in batches: a partition's position moves only after the
// target topic acknowledged its batch, so a replay
// killed mid-run loses nothing and, run again, writes at most the last
// batch of each partition it was in a second time (the ones written but
// not yet committed). Records
// over MaxReplays are reported and stay, as do records the filters leave
// out; the position records which ones were replayed, so a later run (with
// other filters) finds the rest and never replays a record twice. Corrupt
// records are reported once and passed. Records whose target topic does
// not exist, is cfg.Topic itself (a loop) or is a retry topic
// ("<t>.retry.<delay>", unless cfg.Route sends it there), and records
// cfg.Route refuses, are reported as ActionSkipped, counted in Skipped,
// and stay for a later run; the run goes on. Offsets that hold no record
// (transaction markers, records removed by compaction) are passed too.
//
// Run one replay per group at a time: a second run of the group that
// finds the position moved under it stops with ErrConcurrentReplay, and
// the two may have written one batch twice.
//
// With cfg.Expect or cfg.ExpectSet, the count or the set an operator
// confirmed from a dry run, Replay checks its set first and writes
// nothing when it is not that one (see Expect).
//
// A record whose original partition exists in its original topic goes back
// to that partition; other records (dead-lettered by the relay before they
// reached Kafka, or sent with To) are partitioned by key like the relay's
// (murmur2); with cfg.Route, the same holds in the topic Route names. The report counts what was done, also when Replay returns an
// error (such as ctx's) part way.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return ReplayReport{}, err
	}
	client, err := sarama.NewClient(cfg.Brokers, cfg.Sarama)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("dlq: connect to Kafka: %w", err)
	}
	defer client.Close()
	// The position's reads and commits get connections of their own: the
	// producer's take one request at a time (for its idempotence), so a
	// commit would wait there behind the other partitions' writes.
	coordinated := *cfg.Sarama
	coordinated.Producer.Idempotent = false
	coordinated.Net.MaxOpenRequests = sarama.NewConfig().Net.MaxOpenRequests
	coordinator, err := sarama.NewClient(cfg.Brokers, &coordinated)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("dlq: connect to Kafka: %w", err)
	}
	defer coordinator.Close()
	r := &replayer{cfg: cfg, client: client, start: time.Now(), positions: positions{client: coordinator, group: cfg.Group, topic: cfg.Topic}}
	if !cfg.DryRun {
		r.tracer = newTracer(cfg.TracerProvider)
	}
	r.report.DryRun = cfg.DryRun
	err = r.run(ctx)
	if r.report.Set == "" { // a refused check's report has its dry run's
		r.report.Set = r.setDigest()
	}
	r.report.Elapsed = time.Since(r.start)
	return r.report, err
}

// replayer is one run of Replay.
type replayer struct {
	cfg      ReplayConfig
	client   sarama.Client
	producer sarama.SyncProducer
	// tracer makes the spans; nil without ReplayConfig.TracerProvider,
	// and for a dry run.
	tracer    trace.Tracer
	positions positions
	start     time.Time
	// writing is when the reads that may write began (after the check
	// of Expect): Rate spaces the writes from then.
	writing time.Time
	// startAt is, per partition, the position as the run read it at its
	// start; each partition's run keeps its own from then on.
	startAt map[int32]string
	// chosen holds, per partition in offset order, the offsets the check
	// of Expect found would move: the only ones a checked run moves. Nil
	// without a check; read only once the run writes.
	chosen map[int32][]int64

	// mu guards what the partitions replayed at once share, and makes
	// the callbacks (OnRecord, OnProgress, Route) one call at a time.
	mu     sync.Mutex
	report ReplayReport
	// taken counts the records put in a batch so far, written or not:
	// Max stops at it, and Rate spaces the writes by it.
	taken int
	// partitionCounts caches the partition count of each target topic.
	partitionCounts map[string]int32
	// sets holds, per partition that moved records, the digest of their
	// places, for ReplayReport.Set.
	sets map[int32][]byte
}

// setBytes is the length of a ReplayReport.Set in bytes.
const setBytes = 16

// setDigest is the run's Set: the digest of the digests of the
// partitions that moved records, in partition order, so that it does not
// depend on how the partitions replayed at once interleaved. It is read
// once the partitions' runs are over.
func (r *replayer) setDigest() string {
	h := sha256.New()
	for _, partition := range slices.Sorted(maps.Keys(r.sets)) {
		fmt.Fprintf(h, "%d %x\n", partition, r.sets[partition])
	}
	return hex.EncodeToString(h.Sum(nil)[:setBytes])
}

// validSet reports whether s can be a ReplayReport.Set.
func validSet(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == setBytes
}

// pending is a record of the batch.
type pending struct {
	entry Entry
	msg   *sarama.ProducerMessage
	span  trace.Span // its replay span; nil without a tracer
}

// errStop ends the run early without an error (Max reached).
var errStop = errors.New("stop")

func (r *replayer) run(ctx context.Context) error {
	list, places, err := r.plan(ctx)
	if err != nil {
		return err
	}
	if (r.cfg.Expect > 0 || r.cfg.ExpectSet != "") && !r.cfg.DryRun {
		if err := r.check(ctx, list, places); err != nil {
			return err
		}
	}
	return r.replay(ctx, list, places)
}

// plan returns the spans the run goes through, each from the group's
// position to the partition's high-water mark now, and the positions,
// and counts the records to read in the report's Total.
func (r *replayer) plan(ctx context.Context) ([]span, map[int32]*position, error) {
	list, err := spans(r.client, r.cfg.Topic, r.cfg.Filter)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]int32, len(list))
	for i, s := range list {
		ids[i] = s.partition
	}
	places, err := r.positions.fetch(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	r.startAt = make(map[int32]string, len(list))
	run := newRunID()
	for i, s := range list {
		pos := places[s.partition]
		r.startAt[s.partition] = pos.String()
		pos.run = run        // this run's commits say so
		pos.skipTo(s.oldest) // retention deleted what was left behind
		list[i].from = max(s.from, pos.next)
		r.report.Total += max(0, s.end-list[i].from)
	}
	return list, places, nil
}

// check reads the planned spans as a dry run does and fails with a
// *SetChangedError, leaving the check's report as the run's, when they
// would move another count than Expect or another set than ExpectSet;
// else it keeps the offsets that would move, the only ones the run may
// move, and calls OnChecked.
func (r *replayer) check(ctx context.Context, list []span, places map[int32]*position) error {
	cfg := r.cfg
	chosen := map[int32][]int64{}
	cfg.DryRun, cfg.Rate, cfg.Expect, cfg.ExpectSet, cfg.OnProgress, cfg.TracerProvider = true, 0, 0, "", nil, nil
	cfg.OnRecord = func(rec ReplayedRecord) {
		if rec.Action == ActionWouldMove {
			chosen[rec.Entry.Partition] = append(chosen[rec.Entry.Partition], rec.Entry.Offset)
		}
	}
	dry := &replayer{cfg: cfg, client: r.client, start: r.start, positions: r.positions, startAt: r.startAt,
		report: ReplayReport{DryRun: true, Total: r.report.Total}}
	copies := make(map[int32]*position, len(places))
	for p, pos := range places {
		c := pos.clone()
		copies[p] = &c
	}
	if err := dry.replay(ctx, list, copies); err != nil {
		return fmt.Errorf("dlq: check the set of the replay against its dry run's: %w", err)
	}
	dry.report.Elapsed, dry.report.Set = time.Since(r.start), dry.setDigest()
	countChanged := r.cfg.Expect > 0 && dry.report.Moved != r.cfg.Expect
	if countChanged || r.cfg.ExpectSet != "" && dry.report.Set != r.cfg.ExpectSet {
		r.report = dry.report
		return &SetChangedError{Topic: r.cfg.Topic, Expected: r.cfg.Expect, Found: dry.report.Moved, OtherRecords: !countChanged}
	}
	for _, offsets := range chosen {
		slices.Sort(offsets) // in offset order already; sorting costs nothing then
	}
	r.chosen = chosen
	if r.cfg.OnChecked != nil {
		if err := r.cfg.OnChecked(dry.report); err != nil {
			return err
		}
	}
	return nil
}

// ErrSetChanged is matched by the error of a Replay whose Expect or
// ExpectSet is not the count or the set of records it would move now.
var ErrSetChanged = errors.New("dlq: the replay's set changed since its dry run")

// SetChangedError is the error of a Replay whose set is not the one its
// dry run showed: it would move Found records, not the Expected count
// (0 when only ExpectSet was given), or, with OtherRecords, other records
// or to other places than ExpectSet names. It wrote and committed nothing.
type SetChangedError struct {
	Topic           string
	Expected, Found int
	OtherRecords    bool
}

func (e *SetChangedError) Error() string {
	what := fmt.Sprintf("would move %d record(s), not the %d its dry run showed", e.Found, e.Expected)
	if e.OtherRecords {
		what = fmt.Sprintf("would move %d record(s), but not the ones its dry run showed, or not to the same places", e.Found)
	}
	return fmt.Sprintf("dlq: the replay of %s %s: the set changed since; nothing was written or committed; dry-run it again and confirm what it shows",
		e.Topic, what)
}

// Is makes a SetChangedError match ErrSetChanged.
func (e *SetChangedError) Is(target error) bool { return target == ErrSetChanged }

// chosenAt reports whether a checked run may move the record of partition
// at offset: true without a check.
func (r *replayer) chosenAt(partition int32, offset int64) bool {
	if r.chosen == nil {
		return true
	}
	_, found := slices.BinarySearch(r.chosen[partition], offset)
	return found
}

// replay goes through the planned spans, cfg.Concurrency partitions at
// once (one after the other with Max), and returns the first error of
// one of them, which stops the others.
func (r *replayer) replay(ctx context.Context, list []span, places map[int32]*position) error {
	r.writing = time.Now()
	var err error
	if !r.cfg.DryRun {
		if r.producer, err = sarama.NewSyncProducerFromClient(r.client); err != nil {
			return fmt.Errorf("dlq: %w", err)
		}
		defer r.producer.Close()
	}
	// The reads get their own connections: a broker answers a connection's
	// requests in order, so a fetch waiting for new records would hold up
	// the writes and commits behind it. Each partition's reads buffer a
	// batch: a reader waiting for its writer then leaves the fetches of
	// the other partitions (which Sarama makes together) going.
	reads := *r.cfg.Sarama
	reads.ChannelBufferSize = max(reads.ChannelBufferSize, r.cfg.BatchSize)
	consumer, err := sarama.NewConsumer(r.cfg.Brokers, &reads)
	if err != nil {
		return fmt.Errorf("dlq: connect to Kafka: %w", err)
	}
	defer consumer.Close()
	read := reader{client: r.client, consumer: consumer, topic: r.cfg.Topic}
	g, gctx := errgroup.WithContext(ctx)
	if r.cfg.Max > 0 { // the first Max records, in partition order, as the dry run found them
		g.SetLimit(1)
	} else {
		g.SetLimit(r.cfg.Concurrency)
	}
	for _, s := range list {
		g.Go(func() error { return r.replayPartition(ctx, gctx, read, s, places[s.partition]) })
	}
	return g.Wait()
}

// partitionRun is the replay of one partition of the dead-letter topic:
// a reader deciding about its records and making batches, and a writer
// writing them one after the other, each followed by the commit of the
// position, so that the reads go on while a batch waits for its
// acknowledgement, and at most one batch is written but not committed.
type partitionRun struct {
	*replayer
	partition int32
	// posMu guards pos, which the reader settles records and gaps in and
	// the writer settles batches in and commits.
	posMu sync.Mutex
	pos   *position
	// committed is the position as this run last read or committed it:
	// another run of the group changing it stops this one.
	committed string
	// batch is the records the reader has for the next batch.
	batch []pending
	// batches carries the reader's batches to the writer.
	batches chan []pending
	// set hashes the places of the records moved (or that would be).
	set   hash.Hash
	moved int
}

// replayPartition replays the span s, whose position is pos. The writes
// and commits go on under ctx; stop, done when another partition's run
// failed, stops the reads and the writes not begun.
func (r *replayer) replayPartition(ctx, stop context.Context, read reader, s span, pos *position) (err error) {
	if r.stoppedAtMax() {
		return nil
	}
	if err := stop.Err(); err != nil { // stopped, or another partition's run failed (Wait returns its error)
		return err
	}
	p := &partitionRun{replayer: r, partition: s.partition, pos: pos, committed: r.startAt[s.partition], set: sha256.New(),
		batches: make(chan []pending, 1)}
	defer func() { p.finish(err) }()
	// Commit the position even when nothing moves: Kafka forgets the
	// offsets of a group without members offsets.retention.minutes (7
	// days by default) after its last commit, and a forgotten position
	// would replay everything again.
	if err := p.commit(ctx); err != nil {
		return err
	}
	g, gstop := errgroup.WithContext(stop)
	g.Go(func() error { return p.writeBatches(ctx, gstop) })
	g.Go(func() error {
		defer close(p.batches)
		err := read.read(gstop, s, func(m *sarama.ConsumerMessage) error { return p.consider(gstop, m) },
			func(from, to int64) { p.settle(from, to) }) // no records there: nothing to replay
		if err == nil || errors.Is(err, errStop) {
			err = p.flush(gstop)
		}
		return err
	})
	if err = g.Wait(); err == nil {
		err = p.commit(ctx) // the gaps and corrupt records at the end settle too
	}
	r.progress()
	return err
}

// settle settles the offsets [from, to), which hold no record to write.
func (p *partitionRun) settle(from, to int64) {
	p.posMu.Lock()
	defer p.posMu.Unlock()
	p.pos.settleRange(from, to)
}

// writeBatches writes the reader's batches in order until it closes
// them, and stops at the first that fails, or once stop is done.
func (p *partitionRun) writeBatches(ctx, stop context.Context) error {
	for batch := range p.batches {
		if err := stop.Err(); err != nil {
			return p.notWritten(batch, err)
		}
		if err := p.write(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the spans of the records the run read but did not write
// (it stopped for err), and keeps the digest of what it moved.
func (p *partitionRun) finish(err error) {
	stopped := fmt.Errorf("dlq: replay stopped before writing the record: %w", err)
	endSpans(p.batch, stopped, nil)
	select { // a batch the writer did not take: the channel holds at most one
	case batch := <-p.batches: // nil once closed
		endSpans(batch, stopped, nil)
	default: // never used: the run stopped before reading
	}
	if p.moved > 0 {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.sets == nil {
			p.sets = map[int32][]byte{}
		}
		p.sets[p.partition] = p.set.Sum(nil)
	}
}

// stoppedAtMax reports whether the run moved Max records.
func (r *replayer) stoppedAtMax() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report.StoppedAtMax
}

// tally counts into the report under the lock, and reports rec (when not
// nil) to OnRecord.
func (r *replayer) tally(count func(*ReplayReport), rec *ReplayedRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	count(&r.report)
	if rec != nil && r.cfg.OnRecord != nil {
		r.cfg.OnRecord(*rec)
	}
}

// consider decides about one record of the partition.
func (p *partitionRun) consider(ctx context.Context, m *sarama.ConsumerMessage) error {
	p.posMu.Lock()
	settled := p.pos.has(m.Offset)
	p.posMu.Unlock()
	if settled {
		p.tally(func(rep *ReplayReport) { rep.Read++; rep.AlreadyReplayed++ }, nil)
		return nil
	}
	e := entry(m)
	switch {
	case e.Err != nil: // whatever the filters: no run can replay it, so it is reported once and settled
		p.tally(func(rep *ReplayReport) { rep.Read++; rep.Corrupt++ }, &ReplayedRecord{Entry: e, Action: ActionCorrupt, Reason: e.Err.Error()})
		p.settle(m.Offset, m.Offset+1)
		return nil
	case !p.cfg.Filter.Match(e):
		p.tally(func(rep *ReplayReport) { rep.Read++; rep.NotSelected++ }, nil)
		return nil
	case p.cfg.MaxReplays > 0 && e.Envelope.ReplayCount >= p.cfg.MaxReplays:
		p.tally(func(rep *ReplayReport) { rep.Read++; rep.Refused++ }, &ReplayedRecord{Entry: e, Action: ActionRefused,
			Reason: fmt.Sprintf("replayed %d times already (MaxReplays %d); fix the cause, then raise MaxReplays to move it", e.Envelope.ReplayCount, p.cfg.MaxReplays)})
		return nil
	}
	atMax := false
	p.tally(func(rep *ReplayReport) {
		rep.Read++
		if atMax = p.cfg.Max > 0 && p.taken >= p.cfg.Max; atMax {
			rep.StoppedAtMax = true
		}
	}, nil)
	if atMax {
		return errStop
	}
	p.mu.Lock()
	msg, skip, err := p.message(e)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if skip == "" && !p.chosenAt(e.Partition, e.Offset) {
		skip = "it could not move when the replay checked its set (Expect, ExpectSet), so this run leaves it; replay again to move it"
	}
	if skip != "" {
		p.tally(func(rep *ReplayReport) { rep.Skipped++ }, &ReplayedRecord{Entry: e, Action: ActionSkipped, To: msg.Topic, Reason: skip})
		return nil
	}
	p.mu.Lock()
	index := p.taken
	p.taken++
	p.mu.Unlock()
	if err := p.pace(ctx, index); err != nil {
		return err
	}
	pend := pending{entry: e, msg: msg}
	if p.tracer != nil {
		pend.span = p.startReplay(ctx, m, msg)
	}
	p.batch = append(p.batch, pend)
	if len(p.batch) >= p.cfg.BatchSize {
		return p.flush(ctx)
	}
	return nil
}

// message builds the record that restores e's original, where it goes
// (its original topic, To, or where Route says). A record that cannot go
// there comes back with skip saying why (and msg.Topic naming the target,
// when there is one); err is for the run as a whole (Kafka unreachable).
func (r *replayer) message(e Entry) (msg *sarama.ProducerMessage, skip string, err error) {
	o, err := e.Envelope.original() // Read validated it, so an error here is a bug
	if err != nil {
		return nil, "", fmt.Errorf("dlq: restore the original of %s/%d offset %d: %w", r.cfg.Topic, e.Partition, e.Offset, err)
	}
	rec := &record.Record{Topic: o.Topic, Key: o.Key, Value: o.Value, Headers: o.Headers}
	switch {
	case r.cfg.Route != nil:
		routed, err := r.cfg.Route(e.Envelope)
		switch {
		case err != nil:
			return &sarama.ProducerMessage{}, err.Error(), nil
		case routed == nil:
			return nil, "", fmt.Errorf("dlq: ReplayConfig.Route returned neither a record nor an error for %s/%d offset %d; return one of them",
				r.cfg.Topic, e.Partition, e.Offset)
		}
		if err := topicname.Validate(routed.Topic); err != nil {
			return &sarama.ProducerMessage{}, fmt.Sprintf("Route's target topic %v", err), nil
		}
		if routed.Topic == r.cfg.Topic {
			return &sarama.ProducerMessage{Topic: routed.Topic}, fmt.Sprintf("Route sends it to %q, the dead-letter topic being replayed: writing it there would loop", routed.Topic), nil
		}
		rec = routed
	case r.cfg.To != "":
		rec.Topic = r.cfg.To
	default:
		if skip := loopTarget(r.cfg.Topic, o.Topic); skip != "" {
			return &sarama.ProducerMessage{Topic: o.Topic}, skip, nil
		}
	}
	count, err := r.partitionCount(rec.Topic)
	if errors.Is(err, ErrNoTargetTopic) {
		return &sarama.ProducerMessage{Topic: rec.Topic}, err.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	headers := make([]Header, 0, len(rec.Headers)+1)
	for _, h := range rec.Headers {
		if string(h.Key) != ReplayCountHeader {
			headers = append(headers, h)
		}
	}
	headers = append(headers, Header{Key: []byte(ReplayCountHeader), Value: []byte(strconv.Itoa(e.Envelope.ReplayCount + 1))})
	msg = record.Message(&record.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: headers})
	if r.cfg.To == "" && o.Partition >= 0 && o.Partition < count {
		msg.Partition = o.Partition
	} else if msg.Partition, err = sarama.NewMurmur2Partitioner(msg.Topic).Partition(msg, count); err != nil {
		return nil, "", fmt.Errorf("dlq: partition a record for %s: %w", msg.Topic, err)
	}
	return msg, "", nil
}

// retryTopic matches the names of package retrytopics' tiers with their
// default suffix, e.g. "orders.retry.5s" or "orders.retry.500ms".
var retryTopic = regexp.MustCompile(`\.retry\.[0-9]+(ms|s|m|h)$`)

// loopTarget says why original, the original_topic of a dead letter of
// source, is no topic to replay into, or "". The dead-letter topic itself
// would take the record back and a replay would read it again (a loop); a
// retry topic's consumer expects the retry_* headers only it writes, and
// dead-letters what it reads under its base topic.
func loopTarget(source, original string) string {
	switch {
	case original == source:
		return fmt.Sprintf("its original_topic is %q, the dead-letter topic being replayed: writing it there would loop; replay it with To/--to naming the topic it belongs to", original)
	case retryTopic.MatchString(original):
		return fmt.Sprintf("its original_topic %q is a retry topic, whose records need the retry headers its consumer writes; replay it with To/--to naming the base topic", original)
	}
	return ""
}

// partitionCount returns the partition count of topic; ErrNoTargetTopic
// when it does not exist (remembered for the rest of the run, so a batch of
// records for a deleted topic costs one metadata request).
func (r *replayer) partitionCount(topic string) (int32, error) {
	if n, ok := r.partitionCounts[topic]; ok {
		if n == 0 {
			return 0, r.noTarget(topic)
		}
		return n, nil
	}
	if r.partitionCounts == nil {
		r.partitionCounts = map[string]int32{}
	}
	partitions, err := r.client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) || err == nil && len(partitions) == 0 {
		r.partitionCounts[topic] = 0
		return 0, r.noTarget(topic)
	}
	if err != nil {
		return 0, fmt.Errorf("dlq: partitions of %q: %w", topic, err)
	}
	r.partitionCounts[topic] = int32(len(partitions))
	return int32(len(partitions)), nil
}

// noTarget is the error for a target topic that does not exist.
func (r *replayer) noTarget(topic string) error {
	if r.cfg.Route != nil {
		return fmt.Errorf("%w: %q (create it, or check where Route sends records)", ErrNoTargetTopic, topic)
	}
	return fmt.Errorf("%w: %q (create it, or pick another with To/--to)", ErrNoTargetTopic, topic)
}

// pace waits, under Rate, until the run's record number index may be
// written, writing the batch first so that no record waits in it.
func (p *partitionRun) pace(ctx context.Context, index int) error {
	if p.cfg.Rate == 0 {
		return nil
	}
	due := p.writing.Add(time.Duration(float64(index) / p.cfg.Rate * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// flush hands the batch to the writer.
func (p *partitionRun) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	select {
	case p.batches <- p.batch:
		p.batch = nil
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes batch, waits for every acknowledgement, then settles its
// records and commits the partition's position. When some records of the
// batch fail, the others are settled and committed, and the failed ones
// are written again by a later run.
func (p *partitionRun) write(ctx context.Context, batch []pending) error {
	if p.cfg.DryRun {
		p.moveAll(batch, nil, ActionWouldMove)
		return nil
	}
	// The position after the batch must fit in the commit metadata; find
	// out before writing, so nothing is written twice for it.
	p.posMu.Lock()
	next, n := p.pos.next, len(settled(p.pos, batch, nil).metadata())
	p.posMu.Unlock()
	if n > maxMetadataBytes {
		return p.notWritten(batch, fmt.Errorf("dlq: partition %d: the records this run leaves behind (below the ones it replays, from offset %d on) "+
			"would need %d bytes of commit metadata, over %d: the filters leave out too many records between selected ones; "+
			"replay with fewer filters, or over a narrower --partition/--from-offset/--until-offset range", p.partition, next, n, maxMetadataBytes))
	}
	// Another run of the group moving the position means both could write
	// the same records: stop before writing.
	if err := p.checkOwn(ctx); err != nil {
		return p.notWritten(batch, err)
	}
	msgs := make([]*sarama.ProducerMessage, len(batch))
	for i, pend := range batch {
		msgs[i] = pend.msg
	}
	sendErr := p.producer.SendMessages(msgs)
	failed, named := failedRecords(sendErr)
	endSpans(batch, sendErr, failed)
	if !named {
		return fmt.Errorf("dlq: write %d replayed records (from %s/%d offset %d on; their position is not committed, so the next run writes them again): %w",
			len(msgs), p.cfg.Topic, p.partition, batch[0].entry.Offset, sendErr)
	}
	p.posMu.Lock()
	*p.pos = *settled(p.pos, batch, failed)
	p.posMu.Unlock()
	if err := p.commit(ctx); err != nil {
		return errors.Join(err, sendErr)
	}
	p.moveAll(batch, failed, ActionMoved)
	if sendErr != nil {
		return fmt.Errorf("dlq: %d of %d replayed records from %s/%d were not written (the others were, and are committed; the next run writes these again): %w",
			len(failed), len(msgs), p.cfg.Topic, p.partition, sendErr)
	}
	return nil
}

// moveAll counts the records of batch but the failed ones as moved (or,
// for a dry run, that would move), adds them to the set and reports them.
func (p *partitionRun) moveAll(batch []pending, failed map[*sarama.ProducerMessage]error, action ReplayAction) {
	for _, pend := range batch {
		if failed[pend.msg] != nil {
			continue
		}
		fmt.Fprintf(p.set, "%d>%s/%d\n", pend.entry.Offset, pend.msg.Topic, pend.msg.Partition)
		p.moved++
		rec := ReplayedRecord{Entry: pend.entry, Action: action, To: pend.msg.Topic, ToPartition: pend.msg.Partition, ToOffset: pend.msg.Offset}
		if action == ActionWouldMove {
			rec.ToOffset = -1
		}
		p.tally(func(rep *ReplayReport) { rep.Moved++ }, &rec)
	}
	p.progress()
}

// notWritten ends the spans of batch, which was not written for err, and
// returns err.
func (r *replayer) notWritten(batch []pending, err error) error {
	endSpans(batch, err, nil)
	return err
}

// settled returns pos with the records of batch settled, but for those
// that failed.
func settled(pos *position, batch []pending, failed map[*sarama.ProducerMessage]error) *position {
	after := pos.clone()
	for _, p := range batch {
		if failed[p.msg] == nil {
			after.settle(p.entry.Offset)
		}
	}
	return &after
}

// ErrNoTargetTopic is the cause in the Reason of a record Replay skipped
// because its target topic (its original topic, or To) does not exist.
// Replay does not return it: it reports the record as ActionSkipped, leaves
// it and goes on.
var ErrNoTargetTopic = errors.New("dlq: the replay's target topic does not exist")

// newRunID names a run in its commits.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrConcurrentReplay is matched by the error of Replay when another run of
// the same group moved the position while this one ran. At most one batch
// per partition was written by both.
var ErrConcurrentReplay = errors.New("dlq: another replay of the same group is running")

// checkOwn fails with ErrConcurrentReplay when the committed position of
// the partition is no longer the one this run last read or committed.
func (p *partitionRun) checkOwn(ctx context.Context) error {
	now, err := p.positions.fetch(ctx, []int32{p.partition})
	if err != nil {
		return err
	}
	if got := now[p.partition].String(); got != p.committed {
		return fmt.Errorf("%w (group %q, partition %d: the position moved from %s to %s); let one run finish, or give each its own group",
			ErrConcurrentReplay, p.cfg.Group, p.partition, p.committed, got)
	}
	return nil
}

// commit stores the position unless this is a dry run or this run
// committed it already, after checking that no other run of the group
// moved it.
func (p *partitionRun) commit(ctx context.Context) error {
	// The position names this run: equal to the last committed, this run
	// committed it already.
	p.posMu.Lock()
	pos := p.pos.clone()
	p.posMu.Unlock()
	if p.cfg.DryRun || pos.String() == p.committed {
		return nil
	}
	if err := p.checkOwn(ctx); err != nil {
		return err
	}
	if err := p.positions.commit(ctx, p.partition, &pos); err != nil {
		return err
	}
	p.committed = pos.String()
	return nil
}

// progress reports the counts so far to OnProgress.
func (r *replayer) progress() {
	if r.cfg.OnProgress == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	report := r.report
	report.Elapsed = time.Since(r.start)
	r.cfg.OnProgress(report)
}
