package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/producer"
)

// latencyConfig is a configuration whose latency LatencyRun measures: a
// relay's, or none for DirectProduce.
type latencyConfig struct {
	name  string
	label string // in schema and topic names
	relay *producer.RelayConfig
}

// latencyConfigs are the latency configurations, in the order Relay runs
// them.
var latencyConfigs = []latencyConfig{
	{name: RelayDefaults, label: "relay", relay: &producer.RelayConfig{}},
	{name: DirectProduce, label: "direct"},
}

// latencyHistory is how many published events a latency run's outbox
// holds from the start, as one in service does.
const latencyHistory = 20_000

// LatencyConfigurations names the configurations NewLatencyRun measures:
// RelayDefaults, then its baseline DirectProduce.
func LatencyConfigurations() []string {
	names := make([]string, len(latencyConfigs))
	for i, c := range latencyConfigs {
		names[i] = c.name
	}
	return names
}

// enqueuersFor is how many goroutines enqueue at rate events/s, one event
// per transaction each: enough that commits waiting for the disk do not
// hold the pace back.
func enqueuersFor(rate int) int { return min(max(rate/100, 16), 64) }

// LatencyRun measures enqueue-to-arrival latency through one configuration
// at one rate, one paced phase at a time, for a caller that counts the
// phases itself (a benchmark's b.Loop); Relay runs RelayConfig.Rounds
// phases of each configuration and rate.
//
// Goroutines (enqueuersFor the rate) send one event each at a time, paced
// at rate events/s for RelayConfig.LatencyDuration, and a Sarama consumer
// reads the topic. With RelayDefaults an event is enqueued in a
// transaction of its own and a relay with the default configuration runs
// (no NOTIFY: it finds new events by probing the outbox's sequence), and
// an event's latency is the time it arrived at the consumer minus the time
// its enqueue returned (its commit). With DirectProduce each event is sent
// to Kafka by a Sarama SyncProducer instead, and its latency counts from
// the send. The outbox starts as one in service does: 20,000 events already
// published.
type LatencyRun struct {
	cfg     RelayConfig
	rate    int
	svc     *relayServices
	table   *outboxTable
	enqueue *pgxpool.Pool       // one connection per enqueuer
	direct  sarama.SyncProducer // DirectProduce's
	arrived *arrivals
	stop    func() error // stops the relay and returns what Run returned

	counter   *drainCounter // the relay's claims; nil for DirectProduce
	claims    int64         // the relay's claims during the phases
	stages    stageSums     // the stages of the relay's batches during the phases
	measuring atomic.Bool   // a phase runs: its batches count in stages
	latencies []time.Duration
	rates     []float64 // each phase's enqueue rate
	unarrived int
	name      string
}

// NewLatencyRun validates cfg, applies its defaults, and starts the
// latency configuration name (see LatencyConfigurations) at rate events/s
// on a table and topic of its own, with a consumer of its topic, and warms
// them up. Close stops and drops them.
func NewLatencyRun(ctx context.Context, cfg RelayConfig, name string, rate int) (*LatencyRun, error) {
	i := slices.IndexFunc(latencyConfigs, func(c latencyConfig) bool { return c.name == name })
	if i < 0 {
		return nil, fmt.Errorf("bench: no latency configuration %q; use one of %q", name, LatencyConfigurations())
	}
	if rate < 1 {
		return nil, fmt.Errorf("bench: a latency rate of %d events/s; use 1 or more", rate)
	}
	lc := latencyConfigs[i]
	svc, err := openRelayServices(ctx, cfg, lc.label)
	if err != nil {
		return nil, err
	}
	run := &LatencyRun{cfg: svc.cfg, rate: rate, svc: svc, name: name}
	if err := run.start(ctx, lc.relay); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", name, err), run.Close())
	}
	return run, nil
}

// start makes the table, starts the consumer and the relay (or the
// producer), and sends warm-up events through them: connections,
// metadata, the consumer's first fetch.
func (r *LatencyRun) start(ctx context.Context, rc *producer.RelayConfig) error {
	var err error
	if r.table, err = r.svc.table(ctx); err != nil {
		return err
	}
	if r.arrived, err = consumeArrivals(r.cfg, r.table.topic); err != nil {
		return err
	}
	r.svc.closers = append(r.svc.closers, func() error { r.arrived.stop(); return nil })
	if rc == nil {
		if r.direct, err = sarama.NewSyncProducer(r.cfg.Brokers, producer.NewSaramaConfig()); err != nil {
			return err
		}
		r.svc.closers = append(r.svc.closers, r.direct.Close)
	} else if err := r.startRelay(ctx, *rc); err != nil {
		return err
	}
	// Flush what the runs before this one wrote (gigabytes after the
	// throughput runs), so that the checkpoint their writes call for does
	// not fall in a phase. A role that may not checkpoint measures without.
	if _, err := r.svc.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		progress(r.cfg.Progress, "relay latency %s: no checkpoint before the phases: %v", r.name, err)
	}
	warm := make([]uuid.UUID, warmUpEvents)
	for i := range warm {
		var err error
		if _, warm[i], err = r.send(ctx, i); err != nil {
			return err
		}
	}
	if _, missing, err := r.arrived.collect(ctx, warm, 30*time.Second); err != nil {
		return err
	} else if missing > 0 {
		return fmt.Errorf("%d of %d warm-up events had not arrived after 30s: is the relay publishing?", missing, len(warm))
	}
	return nil
}

// startRelay gives the outbox its history and starts a relay on it.
func (r *LatencyRun) startRelay(ctx context.Context, rc producer.RelayConfig) error {
	if err := r.table.keepHistory(ctx, latencyHistory); err != nil {
		return err
	}
	var err error
	if r.enqueue, err = r.svc.pool(ctx, r.table.schema, int32(enqueuersFor(r.rate))); err != nil {
		return err
	}
	r.counter = &drainCounter{done: make(chan struct{})}
	rc.Schema, rc.Brokers, rc.Logger, rc.Hooks = r.table.schema, r.cfg.Brokers, r.cfg.Logger, []producer.Hook{r.counter, phaseStages{r}}
	relay, err := producer.NewRelay(r.table.pool, rc)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(runCtx) }()
	r.stop = func() error {
		cancel()
		if err := <-runDone; err != nil {
			return fmt.Errorf("the relay's Run returned %w", err)
		}
		return nil
	}
	return nil
}

// send enqueues (or, for DirectProduce, produces) the i-th event, and
// returns when its way to the consumer started (when the enqueue
// committed, or when the send began) and its id. The enqueue leaves the id
// to Enqueue, as a service does: an id of the caller's own costs a row in
// the keys table, which would measure that option's price, not the relay.
func (r *LatencyRun) send(ctx context.Context, i int) (time.Time, uuid.UUID, error) {
	ev := orderEvent(r.table.topic, i, fmt.Sprintf("order-%d", rand.IntN(keys)))
	if r.direct == nil {
		res, err := r.table.out.Enqueue(ctx, r.enqueue, ev)
		return time.Now(), res.ID, err
	}
	id := uuid.Must(uuid.NewV7())
	start := time.Now()
	_, _, err := r.direct.SendMessage(&sarama.ProducerMessage{Topic: ev.Topic, Key: sarama.StringEncoder(ev.Key),
		Value: sarama.ByteEncoder(ev.Payload), Headers: cloudEventHeaders(id, ev.Type, "application/json", start)})
	return start, id, err
}

// Phase sends rate·LatencyDuration events, paced on a 1ms ticker (several
// per tick when ticks run late), and waits up to 20s for all of them at the
// consumer. An event that never arrives counts as that wait.
func (r *LatencyRun) Phase(ctx context.Context) error {
	n := max(1, int(float64(r.rate)*r.cfg.LatencyDuration.Seconds()))
	ids := make([]uuid.UUID, n)
	sent := make([]time.Time, n)
	workers := enqueuersFor(r.rate)
	errs := make([]error, workers)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range jobs {
				var err error
				if sent[i], ids[i], err = r.send(ctx, i); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	var claimsBefore int64
	if r.counter != nil {
		claimsBefore = r.counter.claims.Load()
	}
	r.measuring.Store(true)
	interval := time.Second / time.Duration(r.rate)
	ticker := time.NewTicker(time.Millisecond)
	start := time.Now()
	for queued := 0; queued < n && ctx.Err() == nil; {
		due := min(n, int(time.Since(start)/interval)+1)
		for ; queued < due; queued++ {
			jobs <- queued
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return err
	}
	rate := float64(n) / slices.MaxFunc(sent, time.Time.Compare).Sub(start).Seconds()
	arrived, missing, err := r.arrived.collect(ctx, ids, arrivalWait)
	if err != nil {
		return err
	}
	r.measuring.Store(false)
	if r.counter != nil {
		r.claims += r.counter.claims.Load() - claimsBefore
	}
	gaveUp := time.Now()
	for i := range ids {
		if arrived[i].IsZero() {
			arrived[i] = gaveUp
		}
		r.latencies = append(r.latencies, arrived[i].Sub(sent[i]))
	}
	r.rates = append(r.rates, rate)
	r.unarrived += missing
	return nil
}

// Result is the figures of the phases so far; the zero result, but for
// its name, before the first.
func (r *LatencyRun) Result() LatencyResult {
	res := LatencyResult{Name: r.name, Rate: r.rate, Phases: len(r.rates), Events: len(r.latencies), Unarrived: r.unarrived}
	if len(r.latencies) == 0 {
		return res
	}
	sorted := slices.Sorted(slices.Values(r.latencies))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res.P50, res.P99, res.Max = ms(percentile(sorted, 0.50)), ms(percentile(sorted, 0.99)), ms(sorted[len(sorted)-1])
	res.EnqueueRate = slices.Min(r.rates)
	res.ClaimsPerEvent = float64(r.claims) / float64(len(r.latencies))
	res.Stages = r.stages.means()
	if r.unarrived > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d events had not arrived %v after the last enqueue of their phase: the relay fell behind; their latencies count as that wait, so the figures are lower bounds",
			r.unarrived, arrivalWait))
	}
	if res.EnqueueRate < 0.95*float64(r.rate) {
		res.Notes = append(res.Notes, fmt.Sprintf("sent only %.0f events/s of the %d asked for: PostgreSQL or the CPU is saturated (is something else running?), so the latencies are not at that rate",
			res.EnqueueRate, r.rate))
	}
	return res
}

// Close stops the relay and the consumer, closes the pools and drops the
// schema and topic.
func (r *LatencyRun) Close() error {
	var err error
	if r.stop != nil {
		err = r.stop()
	}
	return errors.Join(err, r.svc.close())
}

// phaseStages is the latency run's BatchHook: it adds the batches of its
// phases to its stages, not those of the warm-up or between phases.
type phaseStages struct{ r *LatencyRun }

func (p phaseStages) Batch(events int, st producer.BatchStages) {
	if p.r.measuring.Load() {
		p.r.stages.Batch(events, st)
	}
}

// percentile is the q-quantile of sorted, by the nearest-rank method.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// arrivals records when each event, by ce_id, first arrives at a consumer
// of every partition of a topic.
type arrivals struct {
	client   sarama.Client
	consumer sarama.Consumer
	pcs      []sarama.PartitionConsumer
	wg       sync.WaitGroup

	mu      sync.Mutex
	arrived map[uuid.UUID]time.Time
}

// consumeArrivals starts consuming topic from its oldest offsets.
func consumeArrivals(cfg RelayConfig, topic string) (*arrivals, error) {
	client, err := sarama.NewClient(cfg.Brokers, cfg.Sarama())
	if err != nil {
		return nil, err
	}
	a := &arrivals{client: client, arrived: map[uuid.UUID]time.Time{}}
	if a.consumer, err = sarama.NewConsumerFromClient(client); err != nil {
		a.stop()
		return nil, err
	}
	partitions, err := a.consumer.Partitions(topic)
	if err != nil {
		a.stop()
		return nil, err
	}
	for _, p := range partitions {
		pc, err := a.consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			a.stop()
			return nil, err
		}
		a.pcs = append(a.pcs, pc)
		a.wg.Go(func() {
			for m := range pc.Messages() {
				now := time.Now()
				for _, h := range m.Headers {
					if string(h.Key) != producer.HeaderID {
						continue
					}
					if id, err := uuid.ParseBytes(h.Value); err == nil {
						a.mu.Lock()
						if _, seen := a.arrived[id]; !seen {
							a.arrived[id] = now
						}
						a.mu.Unlock()
					}
				}
			}
		})
	}
	return a, nil
}

// collect waits up to timeout for every id to arrive and returns their
// arrival times (zero for those that did not) and how many did not. It
// fails only when ctx ends.
func (a *arrivals) collect(ctx context.Context, ids []uuid.UUID, timeout time.Duration) ([]time.Time, int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		a.mu.Lock()
		times := make([]time.Time, len(ids))
		missing := 0
		for i, id := range ids {
			t, ok := a.arrived[id]
			if !ok {
				missing++
			}
			times[i] = t
		}
		a.mu.Unlock()
		if missing == 0 {
			return times, 0, nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return times, missing, nil
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// stop closes the partition consumers, the consumer and the client.
func (a *arrivals) stop() {
	for _, pc := range a.pcs {
		pc.AsyncClose() // closes its Messages channel
	}
	a.wg.Wait()
	if a.consumer != nil {
		_ = a.consumer.Close()
	}
	_ = a.client.Close()
}
