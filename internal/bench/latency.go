package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/producer"
)

// latencyConfig is a relay configuration whose latency LatencyRun measures.
type latencyConfig struct {
	name  string
	label string // in schema and topic names
	relay producer.RelayConfig
}

// latencyConfigs are the latency configurations, in the order Relay runs
// them.
var latencyConfigs = []latencyConfig{
	{name: LatencyNotify, label: "notify", relay: producer.RelayConfig{}},
	{name: LatencyPollOnly, label: "poll", relay: producer.RelayConfig{PollOnly: true, PollInterval: 100 * time.Millisecond}},
}

// LatencyConfigurations names the configurations NewLatencyRun measures:
// LatencyNotify, then its baseline LatencyPollOnly.
func LatencyConfigurations() []string {
	names := make([]string, len(latencyConfigs))
	for i, c := range latencyConfigs {
		names[i] = c.name
	}
	return names
}

// LatencyRun measures enqueue-to-arrival latency through one relay
// configuration, one paced phase at a time, for a caller that counts the
// phases itself (a benchmark's b.Loop); Relay runs RelayConfig.Rounds
// phases of each configuration.
//
// One relay runs with Run while 16 goroutines enqueue one event per
// transaction at RelayConfig.LatencyRate events/s for
// RelayConfig.LatencyDuration, and a Sarama consumer reads the topic. An
// event's latency is the time it arrived at the consumer minus the time its
// enqueue returned (its commit). LatencyNotify keeps the default
// PollInterval of 1s, so latencies well under 1s come from NOTIFY;
// LatencyPollOnly polls every 100ms, for contrast. The table starts as one
// in service does: RelayConfig.Events events already published and planner
// statistics gathered while nothing waited.
type LatencyRun struct {
	cfg     RelayConfig
	svc     *relayServices
	table   *outboxTable
	enqueue *pgxpool.Pool // enqueuers connections
	arrived *arrivals
	stop    func() error // stops the relay and returns what Run returned

	latencies []time.Duration
	rates     []float64 // each phase's enqueue rate
	unarrived int
	name      string
}

// NewLatencyRun validates cfg, applies its defaults, and starts the relay
// of the latency configuration name (see LatencyConfigurations) on a table
// of its own, with a consumer of its topic, and warms them up. Close stops
// and drops them.
func NewLatencyRun(ctx context.Context, cfg RelayConfig, name string) (*LatencyRun, error) {
	i := slices.IndexFunc(latencyConfigs, func(c latencyConfig) bool { return c.name == name })
	if i < 0 {
		return nil, fmt.Errorf("bench: no latency configuration %q; use one of %q", name, LatencyConfigurations())
	}
	lc := latencyConfigs[i]
	svc, err := openRelayServices(ctx, cfg, lc.label)
	if err != nil {
		return nil, err
	}
	run := &LatencyRun{cfg: svc.cfg, svc: svc, name: name}
	if err := run.start(ctx, lc.relay); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", name, err), run.Close())
	}
	return run, nil
}

// start makes the table, starts the consumer and the relay, and sends
// warm-up events through them: connections, metadata, the consumer's first
// fetch.
func (r *LatencyRun) start(ctx context.Context, rc producer.RelayConfig) error {
	var err error
	if r.table, err = r.svc.table(ctx); err != nil {
		return err
	}
	if err := r.table.history(ctx, r.cfg.Events); err != nil {
		return err
	}
	if r.enqueue, err = r.svc.pool(ctx, r.table.schema, enqueuers); err != nil {
		return err
	}
	if r.arrived, err = consumeArrivals(r.cfg, r.table.topic); err != nil {
		return err
	}
	r.svc.closers = append(r.svc.closers, func() error { r.arrived.stop(); return nil })

	rc.Schema, rc.Brokers, rc.Logger = r.table.schema, r.cfg.Brokers, r.cfg.Logger
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

	warm := make([]uuid.UUID, 0, warmUpEvents)
	for i := range warmUpEvents {
		res, err := r.table.out.Enqueue(ctx, r.enqueue, orderEvent(r.table.topic, i, fmt.Sprintf("warm-%d", i)))
		if err != nil {
			return err
		}
		warm = append(warm, res.ID)
	}
	if _, missing, err := r.arrived.collect(ctx, warm, 30*time.Second); err != nil {
		return err
	} else if missing > 0 {
		return fmt.Errorf("%d of %d warm-up events had not arrived after 30s: is the relay publishing?", missing, len(warm))
	}
	return nil
}

// Phase enqueues LatencyRate·LatencyDuration events, one per transaction,
// paced on a 1ms ticker (several per tick when ticks run late), and waits
// up to 20s for all of them at the consumer. An event that never arrives
// counts as that wait.
func (r *LatencyRun) Phase(ctx context.Context) error {
	n := max(1, int(float64(r.cfg.LatencyRate)*r.cfg.LatencyDuration.Seconds()))
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	committed := make([]time.Time, n)
	errs := make([]error, enqueuers)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	for w := range enqueuers {
		wg.Go(func() {
			for i := range jobs {
				ev := orderEvent(r.table.topic, i, fmt.Sprintf("order-%d", rand.IntN(keys)))
				ev.ID = ids[i]
				if _, err := r.table.out.Enqueue(ctx, r.enqueue, ev); err != nil && errs[w] == nil {
					errs[w] = err
				}
				committed[i] = time.Now()
			}
		})
	}
	interval := time.Second / time.Duration(r.cfg.LatencyRate)
	ticker := time.NewTicker(time.Millisecond)
	start := time.Now()
	for sent := 0; sent < n && ctx.Err() == nil; {
		due := min(n, int(time.Since(start)/interval)+1)
		for ; sent < due; sent++ {
			jobs <- sent
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
	rate := float64(n) / slices.MaxFunc(committed, time.Time.Compare).Sub(start).Seconds()
	arrived, missing, err := r.arrived.collect(ctx, ids, arrivalWait)
	if err != nil {
		return err
	}
	gaveUp := time.Now()
	for i := range ids {
		if arrived[i].IsZero() {
			arrived[i] = gaveUp
		}
		r.latencies = append(r.latencies, arrived[i].Sub(committed[i]))
	}
	r.rates = append(r.rates, rate)
	r.unarrived += missing
	return nil
}

// Result is the figures of the phases so far; the zero result, but for
// its name, before the first.
func (r *LatencyRun) Result() LatencyResult {
	res := LatencyResult{Name: r.name, Phases: len(r.rates), Events: len(r.latencies), Unarrived: r.unarrived}
	if len(r.latencies) == 0 {
		return res
	}
	sorted := slices.Sorted(slices.Values(r.latencies))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res.P50, res.P99, res.Max = ms(percentile(sorted, 0.50)), ms(percentile(sorted, 0.99)), ms(sorted[len(sorted)-1])
	res.EnqueueRate = slices.Min(r.rates)
	if r.unarrived > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d events had not arrived %v after the last enqueue of their phase: the relay fell behind; their latencies count as that wait, so the figures are lower bounds",
			r.unarrived, arrivalWait))
	}
	if res.EnqueueRate < 0.95*float64(r.cfg.LatencyRate) {
		res.Notes = append(res.Notes, fmt.Sprintf("enqueued only %.0f events/s of the %d asked for: PostgreSQL or the CPU is saturated (is something else running?), so the latencies are not at that rate",
			res.EnqueueRate, r.cfg.LatencyRate))
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
