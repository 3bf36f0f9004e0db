package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/producer"
)

// DefaultDeadLetters is ReplayConfig.DeadLetters unless it names another.
const DefaultDeadLetters = 100_000

// Names of the replay configurations.
const (
	// RawCopyLoop names the baseline of the replay: the copy a team writes
	// by hand, a Sarama consumer reading every partition of the
	// dead-letter topic from the oldest offset to its high-water mark and
	// a Sarama AsyncProducer writing each record's original back.
	RawCopyLoop = "raw-sarama-copy-loop"
	// ReplayDefaults names dlq.Replay as `courier dlq replay` runs it by
	// default.
	ReplayDefaults = "dlq-replay/defaults"
)

// replayTarget is the ratio to RawCopyLoop the goal asks of
// ReplayDefaults.
const replayTarget = 0.8

// replayDeadline bounds one copy of the dead letters.
const replayDeadline = 5 * time.Minute

// ReplayConfig says where and how much Replay measures. Only Brokers is
// required.
type ReplayConfig struct {
	// Brokers are the Kafka bootstrap addresses; the run creates (and
	// deletes) its own topics there, named courier.bench.*.
	Brokers []string
	// Sarama returns the client config of every client of the run: the
	// seeding, the baseline's, the replay's (which sets the producer
	// options it needs on a copy) and the count's. Defaults to
	// sarama.NewConfig() with acks from all in-sync replicas.
	Sarama func() *sarama.Config
	// DeadLetters is how many dead letters each configuration copies.
	// Defaults to 100,000.
	DeadLetters int
	// Rounds is how many times each configuration copies them, taking
	// turns. Defaults to 1; use 3 or 5 for figures.
	Rounds int
	// Name makes topic names unique. Defaults to a random one.
	Name string
	// Progress, when set, receives a line as each round starts. Defaults
	// to none.
	Progress io.Writer
}

func (c *ReplayConfig) setDefaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("bench: no Kafka brokers given")
	}
	if c.Sarama == nil {
		c.Sarama = defaultSarama
	}
	if err := applyCounts(count{&c.DeadLetters, DefaultDeadLetters}, count{&c.Rounds, DefaultRounds}); err != nil {
		return err
	}
	if c.Name == "" {
		c.Name = randomName()
	}
	return nil
}

// ReplayResult is one replay configuration's figures.
type ReplayResult struct {
	Name string `json:"name"`
	// Rate is dead letters copied per second over the median copying
	// time.
	Rate float64 `json:"msgs_per_s"`
	// Baseline names the configuration Ratio compares with.
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Target is the ratio the goal asks for; 0 when it asks none.
	Target float64 `json:"target,omitempty"`
	// CPU is where the CPU went while it copied; nil where it could not be
	// read (see ReplayReport.CPUUnknown).
	CPU *CPUUse `json:"cpu,omitempty"`
}

// ReplayReport is the figures of one Replay run.
type ReplayReport struct {
	DeadLetters int            `json:"dead_letters"`
	Partitions  int            `json:"partitions"`
	Rounds      int            `json:"rounds"`
	Results     []ReplayResult `json:"results"`
	// CPUUnknown is why a round has no CPU figure (the first reason met);
	// empty when every round has one.
	CPUUnknown string `json:"cpu_unknown,omitempty"`
}

// Replay measures `courier dlq replay` (dlq.Replay with the command's
// defaults) beside the copy loop a team writes by hand with Sarama, in one
// run on one broker: the figures `courier bench replay` prints.
//
// Each configuration copies a dead-letter topic of its own, freshly
// seeded, to a fresh target topic: DeadLetters dead letters (100,000 by
// default) over 12 partitions, written as the consumer writes them
// (dlq.New, then Envelope.Record: the envelope holds the original, a
// ~200-byte JSON value with the CloudEvents headers of courier's relay,
// 1,000 keys), each of an original record of the target topic, so that
// a replay to the original topics writes them there. The configurations:
//
//   - raw-sarama-copy-loop (the baseline): a sarama.Consumer reading every
//     partition of the dead-letter topic, one goroutine each, from the
//     oldest offset to the high-water mark it read before it started;
//     each record decoded with dlq.Read and Envelope.Original, and its
//     original key, value and headers handed to a sarama.AsyncProducer
//     (acks from all in-sync replicas, its default of 5 requests in
//     flight per broker) for its original partition; done when the
//     producer has acknowledged every record. An AsyncProducer is what a
//     team that wants a copy to be fast writes: it batches the records
//     of every partition into each broker's requests and keeps several
//     in flight, where a SyncProducer waits on each batch. It keeps no
//     position: run again, it copies everything again.
//   - dlq-replay/defaults: dlq.Replay with the defaults of `courier dlq
//     replay` (its default batch, MaxReplays and Rate, no filter, each
//     record to its original topic and partition), a group of its own.
//
// Each configuration's clock runs from when it connects to when the last
// record is acknowledged (dlq.Replay returns), and over that time it reads
// this process's CPU time and the machine's. Afterwards the target
// topic must hold exactly DeadLetters records (its high-water marks), so
// a copy that lost or doubled records fails the run, and dlq.Replay must
// report every one moved. They take turns, Rounds times, each round
// starting one further along the list; a figure is the dead letters over
// the median time.
//
// It returns the report, or the first error.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	run, err := NewReplayRun(cfg)
	if err != nil {
		return ReplayReport{}, err
	}
	for i := range run.cfg.Rounds {
		progress(run.cfg.Progress, "dlq replay: round %d of %d, %d configurations copying %d dead letters each", i+1, run.cfg.Rounds, len(run.cases), run.cfg.DeadLetters)
		if err := run.Round(ctx); err != nil {
			return ReplayReport{}, err
		}
	}
	return run.Report(), nil
}

// ReplayRun is Replay one round at a time. ReplayConfig.Rounds is not
// used.
type ReplayRun struct {
	cfg    ReplayConfig
	cases  []*replayCase
	rounds int
}

// replayCase is one way of copying the dead letters to their target
// topic.
type replayCase struct {
	name     string
	baseline string
	target   float64
	// copy copies the n dead letters of dl.dlq to dl.target (their
	// original topic), returning once every one is acknowledged.
	copy  func(ctx context.Context, cfg *ReplayConfig, dl *deadLetters) error
	spent []time.Duration
	cpu   cpuUses
}

// NewReplayRun validates cfg and applies its defaults.
func NewReplayRun(cfg ReplayConfig) (*ReplayRun, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &ReplayRun{cfg: cfg, cases: []*replayCase{
		{name: RawCopyLoop, baseline: RawCopyLoop, copy: rawCopyLoop},
		{name: ReplayDefaults, baseline: RawCopyLoop, target: replayTarget, copy: replayDefaults},
	}}, nil
}

// Round copies the dead letters once with every configuration, each its
// own, starting one further along the list than the round before.
func (r *ReplayRun) Round(ctx context.Context) error {
	for i := range r.cases {
		c := r.cases[(r.rounds+i)%len(r.cases)]
		if err := c.once(ctx, &r.cfg, fmt.Sprintf("%s_replay_%d_%d", r.cfg.Name, r.rounds, i)); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	r.rounds++
	return nil
}

// Report is the figures of the rounds so far.
func (r *ReplayRun) Report() ReplayReport {
	report := ReplayReport{DeadLetters: r.cfg.DeadLetters, Partitions: partitions, Rounds: r.rounds}
	rates := map[string]float64{}
	for _, c := range r.cases {
		rates[c.name] = MedianRate(r.cfg.DeadLetters, c.spent)
	}
	for _, c := range r.cases {
		res := ReplayResult{Name: c.name, Rate: rates[c.name], Baseline: c.baseline, Target: c.target, CPU: c.cpu.median()}
		if base := rates[c.baseline]; base > 0 {
			res.Ratio = res.Rate / base
		}
		if c.cpu.err != nil && report.CPUUnknown == "" {
			report.CPUUnknown = c.cpu.err.Error()
		}
		report.Results = append(report.Results, res)
	}
	return report
}

// once seeds fresh topics named after name, copies them under the pprof
// label config=<c.name>, and checks the target topic holds every dead
// letter once.
func (c *replayCase) once(ctx context.Context, cfg *ReplayConfig, name string) error {
	dl, err := seedDeadLetters(cfg, name, cfg.DeadLetters)
	if err != nil {
		return err
	}
	defer dl.drop()
	runtime.GC() // start from the same heap: no collection owed by the seeding
	var cpu cpuWindow
	var took time.Duration
	pprof.Do(ctx, pprof.Labels("config", c.name), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, replayDeadline)
		defer cancel()
		cpu.start()
		start := time.Now()
		err = c.copy(ctx, cfg, dl)
		took = time.Since(start)
		cpu.stop()
	})
	if err != nil {
		return err
	}
	if err := dl.checkTarget(); err != nil {
		return err
	}
	c.spent = append(c.spent, took)
	c.cpu.add(cpu.use(dl.n))
	return nil
}

// deadLetters is a seeded dead-letter topic and the target topic its
// records came from (their original topic), both of partitions
// partitions.
type deadLetters struct {
	brokers []string
	admin   sarama.ClusterAdmin
	sarama  *sarama.Config
	target  string
	dlq     string
	group   string // the replay's group
	n       int
}

// seedDeadLetters creates a target topic and its dead-letter topic and
// writes n dead letters of records of the target topic to the latter, as
// the consumer writes them. Keys come from a fixed-seed generator, so
// every configuration copies the same dead letters.
func seedDeadLetters(cfg *ReplayConfig, name string, n int) (*deadLetters, error) {
	saramaCfg := cfg.Sarama()
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, saramaCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka at %v: %w", cfg.Brokers, err)
	}
	dl := &deadLetters{brokers: cfg.Brokers, admin: admin, sarama: saramaCfg, target: "courier.bench." + name, n: n}
	dl.dlq = dlq.Topic(dl.target, dlq.DefaultSuffix)
	dl.group = dl.target + ".replay"
	for _, topic := range []string{dl.target, dl.dlq} {
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
			dl.drop()
			return nil, fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	if err := dl.write(); err != nil {
		dl.drop()
		return nil, err
	}
	return dl, nil
}

// write produces the n dead letters: each of a record of the target
// topic at its key's partition, failed for good by a consumer group, as
// the consumer's dlq.Writer renders it (envelope mode), written to the
// dead-letter topic by key as the consumer's producer does.
func (dl *deadLetters) write() error {
	sc := *dl.sarama
	sc.Producer.Partitioner = sarama.NewHashPartitioner
	sp, err := sarama.NewSyncProducer(dl.brokers, &sc)
	if err != nil {
		return err
	}
	defer sp.Close()
	rng := rand.New(rand.NewPCG(17, 17))
	now := time.Now().UTC()
	created := now.Add(-time.Minute).Format(time.RFC3339Nano)
	offsets := make([]int64, partitions) // the originals' offsets, by partition
	msgs := make([]*sarama.ProducerMessage, 0, seedChunk)
	for i := range dl.n {
		key := fmt.Sprintf("order-%d", rng.IntN(keys))
		partition := int32(crc32.ChecksumIEEE([]byte(key)) % partitions)
		o := dlq.Original{
			Topic: dl.target, Partition: partition, Offset: offsets[partition], Timestamp: now.Add(-time.Minute),
			Key: []byte(key), Value: orderPayload(key, i),
			Headers: []dlq.Header{
				dlqHeader(producer.HeaderSpecVersion, "1.0"),
				dlqHeader(producer.HeaderID, uuid.Must(uuid.NewV7()).String()),
				dlqHeader(producer.HeaderType, "OrderCreated"),
				dlqHeader(producer.HeaderSource, producer.DefaultSource),
				dlqHeader(producer.HeaderTime, created),
				dlqHeader(producer.HeaderContentType, "application/json"),
				dlqHeader(producer.HeaderCorrelationID, "corr-"+key),
			},
		}
		offsets[partition]++
		env, err := dlq.New(o, dlq.Failure{Error: "bench: message fails for good", Kind: dlq.KindPermanent, Attempts: 1,
			FailedAt: now, FirstFailedAt: now, CorrelationID: "corr-" + key, ConsumerGroup: "courier.bench.payouts"})
		if err != nil {
			return err
		}
		rec, err := env.Record()
		if err != nil {
			return err
		}
		headers := make([]sarama.RecordHeader, len(rec.Headers))
		for j, h := range rec.Headers {
			headers[j] = sarama.RecordHeader{Key: h.Key, Value: h.Value}
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: dl.dlq, Key: sarama.ByteEncoder(rec.Key), Value: sarama.ByteEncoder(rec.Value), Headers: headers})
		if len(msgs) == seedChunk || i == dl.n-1 {
			if err := sp.SendMessages(msgs); err != nil {
				return fmt.Errorf("seed %s: %w", dl.dlq, err)
			}
			msgs = msgs[:0]
		}
	}
	return nil
}

// dlqHeader is a record header of package dlq.
func dlqHeader(name, value string) dlq.Header {
	return dlq.Header{Key: []byte(name), Value: []byte(value)}
}

// drop deletes the topics and closes the admin client.
func (dl *deadLetters) drop() {
	for _, topic := range []string{dl.target, dl.dlq} {
		_ = dl.admin.DeleteTopic(topic)
	}
	_ = dl.admin.Close()
}

// checkTarget fails unless the target topic holds exactly n records, by
// its high-water marks.
func (dl *deadLetters) checkTarget() error {
	client, err := sarama.NewClient(dl.brokers, dl.sarama)
	if err != nil {
		return err
	}
	defer client.Close()
	held, err := recordsIn(client, dl.target)
	if err != nil {
		return err
	}
	if held != int64(dl.n) {
		return fmt.Errorf("the target topic %s holds %d records, want the %d dead letters, each once", dl.target, held, dl.n)
	}
	return nil
}

// recordsIn is how many records topic holds: the sum over its partitions
// of the high-water mark less the oldest offset.
func recordsIn(client sarama.Client, topic string) (int64, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return 0, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	var total int64
	for _, p := range parts {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return 0, err
		}
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		total += newest - oldest
	}
	return total, nil
}

// rawCopyLoop is the baseline: see RawCopyLoop and Replay.
func rawCopyLoop(ctx context.Context, cfg *ReplayConfig, dl *deadLetters) error {
	sc := cfg.Sarama()
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes, sc.Producer.Return.Errors = true, true
	sc.Producer.Partitioner = sarama.NewManualPartitioner // each record back to its original partition
	client, err := sarama.NewClient(dl.brokers, sc)
	if err != nil {
		return err
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer consumer.Close()
	ap, err := sarama.NewAsyncProducer(dl.brokers, sc)
	if err != nil {
		return err
	}
	parts, err := client.Partitions(dl.dlq)
	if err != nil {
		return err
	}
	ends := make([]int64, len(parts))
	total := int64(0)
	for i, p := range parts {
		if ends[i], err = client.GetOffset(dl.dlq, p, sarama.OffsetNewest); err != nil {
			return errors.Join(err, ap.Close())
		}
		oldest, err := client.GetOffset(dl.dlq, p, sarama.OffsetOldest)
		if err != nil {
			return errors.Join(err, ap.Close())
		}
		total += ends[i] - oldest
	}
	// Count the acknowledgements; the first failure ends the copy.
	var acked atomic.Int64
	done, failed := make(chan struct{}), make(chan error, 1)
	var counting sync.WaitGroup
	counting.Go(func() {
		for range ap.Successes() {
			if acked.Add(1) == total {
				close(done)
			}
		}
	})
	counting.Go(func() {
		for perr := range ap.Errors() {
			select {
			case failed <- perr.Err:
			default:
			}
		}
	})
	copyCtx, stop := context.WithCancel(ctx)
	defer stop()
	var readers sync.WaitGroup
	for i, p := range parts {
		if ends[i] == 0 {
			continue
		}
		readers.Go(func() {
			if err := copyPartition(copyCtx, consumer, ap, dl.dlq, p, ends[i]); err != nil {
				select {
				case failed <- err:
				default:
				}
			}
		})
	}
	if total == 0 {
		close(done)
	}
	select {
	case <-done:
	case err = <-failed:
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop()
	readers.Wait()
	err = errors.Join(err, ap.Close())
	counting.Wait()
	if err == nil && acked.Load() != total {
		err = fmt.Errorf("the producer acknowledged %d records, want %d", acked.Load(), total)
	}
	return err
}

// copyPartition reads partition of topic from the oldest offset to end,
// handing the original of each dead letter to ap.
func copyPartition(ctx context.Context, consumer sarama.Consumer, ap sarama.AsyncProducer, topic string, partition int32, end int64) error {
	pc, err := consumer.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.AsyncClose()
	for {
		select {
		case <-ctx.Done():
			return nil
		case perr := <-pc.Errors():
			return perr
		case m := <-pc.Messages():
			headers := make([]dlq.Header, len(m.Headers))
			for i, h := range m.Headers {
				headers[i] = dlq.Header(*h)
			}
			env, err := dlq.Read(m.Key, m.Value, headers)
			if err != nil {
				return fmt.Errorf("%s/%d offset %d: %w", topic, partition, m.Offset, err)
			}
			o, err := env.Original()
			if err != nil {
				return fmt.Errorf("%s/%d offset %d: %w", topic, partition, m.Offset, err)
			}
			out := make([]sarama.RecordHeader, len(o.Headers))
			for i, h := range o.Headers {
				out[i] = sarama.RecordHeader{Key: h.Key, Value: h.Value}
			}
			msg := &sarama.ProducerMessage{Topic: o.Topic, Partition: o.Partition, Key: sarama.ByteEncoder(o.Key), Value: sarama.ByteEncoder(o.Value), Headers: out}
			select {
			case ap.Input() <- msg:
			case <-ctx.Done():
				return nil
			}
			if m.Offset+1 >= end {
				return nil
			}
		}
	}
}

// replayDefaults replays the dead letters with dlq.Replay as `courier dlq
// replay <topic>` does: the command's defaults, a group of the run's own.
// It fails unless every record moved.
func replayDefaults(ctx context.Context, cfg *ReplayConfig, dl *deadLetters) error {
	report, err := dlq.Replay(ctx, dlq.ReplayConfig{Brokers: dl.brokers, Sarama: cfg.Sarama(), Topic: dl.dlq, Group: dl.group,
		MaxReplays: dlq.DefaultMaxReplays, BatchSize: dlq.DefaultReplayBatch, Concurrency: dlq.DefaultReplayConcurrency})
	if err != nil {
		return err
	}
	if report.Moved != dl.n || report.Total != int64(dl.n) {
		return fmt.Errorf("dlq.Replay moved %d of %d records (%+v), want all %d", report.Moved, report.Total, report, dl.n)
	}
	return nil
}

// WriteText writes the report as the lines the benchmarks print.
func (r ReplayReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dead letters/s copying %d dead letters (%d partitions, %d keys) to their original topic, %d times each, taking turns, same broker:\n",
		r.DeadLetters, r.Partitions, keys, r.Rounds)
	for _, res := range r.Results {
		fmt.Fprintf(&b, "  %-36s %9.0f  %5.2fx %s", res.Name, res.Rate, res.Ratio, res.Baseline)
		if res.Target > 0 {
			b.WriteString("  " + targetNote(res.Ratio >= res.Target, res.Target))
		}
		if c := res.CPU; c != nil {
			fmt.Fprintf(&b, "  CPU %.2f us/msg, %.2f cores (machine %.2f of %d)", c.ProcessMicrosPerMessage, c.ProcessBusy, c.MachineBusy, c.MachineCPUs)
		}
		b.WriteByte('\n')
	}
	if r.CPUUnknown != "" {
		fmt.Fprintf(&b, "  (some rounds have no CPU figure: %s)\n", r.CPUUnknown)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r ReplayReport) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, `
## DLQ replay

Replaying %s dead letters (envelopes as the consumer writes them, each of a %d-byte JSON
message with CloudEvents headers, %s keys, %d partitions) to their original topic with
`+"`courier dlq replay`"+` (dlq.Replay with the command's defaults: %d partitions at once, each in
batches of %d records with its position committed after each), beside the copy a team writes by hand (`+"`%s`"+`): a Sarama consumer
reading every partition from the oldest offset to the high-water mark, each envelope decoded
(`+"`dlq.Read`, `Envelope.Original`"+`), and a Sarama AsyncProducer writing the original key, value and
headers back to its partition, keeping no position. Each configuration copies a dead-letter
topic of its own to a fresh topic, which must then hold every record once; the clock runs from
connecting to the last acknowledgement. %s each, and a figure is the dead letters over the
median time. CPU is this process's (`+"`getrusage`"+`; the in-process broker counts in it) over
that time, per dead letter, and the whole machine's cores busy (`+"`/proc/stat`"+`).

| configuration | msgs/s | baseline | baseline msgs/s | ratio | target | process µs of CPU per message | process cores busy | machine cores busy |
| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |
`, thousands(float64(r.DeadLetters)), payloadSize, thousands(keys), r.Partitions, dlq.DefaultReplayConcurrency, dlq.DefaultReplayBatch, RawCopyLoop, plural(r.Rounds, "round"))
	rates := map[string]float64{}
	for _, res := range r.Results {
		rates[res.Name] = res.Rate
	}
	for _, res := range r.Results {
		target := ""
		if res.Target > 0 {
			target = targetCell(res.Ratio >= res.Target, res.Target)
		}
		cpu := "unknown | | "
		if c := res.CPU; c != nil {
			cpu = fmt.Sprintf("%.2f | %.2f | %.2f of %d", c.ProcessMicrosPerMessage, c.ProcessBusy, c.MachineBusy, c.MachineCPUs)
		}
		fmt.Fprintf(b, "| `%s` | %s | `%s` | %s | %s | %s | %s |\n",
			res.Name, thousands(res.Rate), res.Baseline, thousands(rates[res.Baseline]), ratio(res.Ratio), target, cpu)
	}
	if r.CPUUnknown != "" {
		fmt.Fprintf(b, "\nSome rounds have no CPU figure: %s.\n", r.CPUUnknown)
	}
}
