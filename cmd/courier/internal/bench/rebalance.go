package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/handled"
)

// Defaults of RebalanceConfig.
const (
	DefaultRebalancePartitions = 24
	DefaultRebalanceRate       = 2_000
	DefaultRebalancePhase      = 15 * time.Second
)

// rebalanceDrainWait is how long a run waits, once the producer stops, for
// every record to be handled and committed.
const rebalanceDrainWait = time.Minute

// RebalanceConfig says where and how Rebalance runs. Brokers is required.
type RebalanceConfig struct {
	// Brokers are the Kafka bootstrap addresses; each run creates (and
	// deletes) a topic named courier.bench.* there.
	Brokers []string
	// Sarama returns the client config of the members (the run sets their
	// strategy and heartbeat interval), the producer and the admin.
	// Defaults to sarama.NewConfig() with acks from all in-sync replicas.
	Sarama func() *sarama.Config
	// Partitions is the topic's partition count. Defaults to 24.
	Partitions int
	// Rate is how many records per second the producer writes, spread
	// evenly over the partitions. Defaults to 2,000.
	Rate int
	// Phase is how long the group keeps each size: 2 members, then 4, then
	// 2 again. Defaults to 15s.
	Phase time.Duration
	// Heartbeat is the members' Consumer.Group.Heartbeat.Interval, which
	// is how soon a member learns of a rebalance. Defaults to Sarama's.
	Heartbeat time.Duration
	// Logger receives the members' logs. Defaults to a logger that formats
	// warnings and discards them.
	Logger *slog.Logger
	// Progress receives a line as each run starts; nil for none.
	Progress io.Writer
}

// RebalanceReport is what Rebalance measured: a run with each strategy.
type RebalanceReport struct {
	Partitions int           `json:"partitions"`
	Rate       int           `json:"rate"`
	Phase      time.Duration `json:"phase_ns"`
	Heartbeat  time.Duration `json:"heartbeat_ns"`
	// FetchWait is the members' Consumer.MaxWaitTime: how long a fetch
	// waits for records, the goal a kept partition's stall is held to.
	FetchWait time.Duration  `json:"fetch_wait_ns"`
	Runs      []RebalanceRun `json:"runs"`
}

// RebalanceRun is one strategy's run.
type RebalanceRun struct {
	// Strategy names the balance strategy: eager or cooperative sticky.
	Strategy string `json:"strategy"`
	// Steady is the longest gap between handled records of a partition
	// during the first phase, before any change: the stall to compare
	// with.
	Steady time.Duration `json:"steady_ns"`
	// Changes are the stalls across each change of the group, in order.
	Changes []RebalanceChange `json:"changes"`
	handled.Counts
}

// RebalanceChange is the stall of the partitions across one change.
type RebalanceChange struct {
	// Change says what changed, e.g. "2 to 4 members".
	Change string `json:"change"`
	handled.Stall
}

// Rebalance measures what a change of a consumer group costs its
// partitions, once rebalancing eagerly (Sarama's sticky strategy) and once
// cooperatively (its cooperative sticky strategy): a group of 2 members
// consumes a topic a producer writes to at a steady rate, grows to 4
// members and shrinks back to 2, each size kept for Phase (4 members until
// the new ones handle records, too). It reports,
// per change, the longest stall of a partition that kept its owner and of
// one that moved, and the records handled, lost and handled twice. It
// returns an error if a record was lost.
func Rebalance(ctx context.Context, cfg RebalanceConfig) (RebalanceReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return RebalanceReport{}, err
	}
	report := RebalanceReport{Partitions: cfg.Partitions, Rate: cfg.Rate, Phase: cfg.Phase, Heartbeat: cfg.Heartbeat, FetchWait: cfg.Sarama().Consumer.MaxWaitTime}
	for _, s := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
	}{
		{"eager (sticky)", sarama.NewBalanceStrategySticky},
		{"cooperative (cooperative-sticky)", sarama.NewBalanceStrategyCooperativeSticky},
	} {
		progress(cfg.Progress, "bench rebalance: %s, %d partitions, 2 members to 4 and back, %v each", s.name, cfg.Partitions, cfg.Phase)
		run, err := rebalanceRun(ctx, &cfg, s.strategy)
		run.Strategy = s.name
		report.Runs = append(report.Runs, run)
		if err != nil {
			return report, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return report, nil
}

func (c *RebalanceConfig) setDefaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("bench: RebalanceConfig.Brokers is empty")
	}
	if c.Sarama == nil {
		c.Sarama = defaultSarama
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	if c.Phase == 0 {
		c.Phase = DefaultRebalancePhase
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Sarama().Consumer.Group.Heartbeat.Interval
	}
	if c.Phase < 0 || c.Heartbeat < 0 {
		return fmt.Errorf("bench: RebalanceConfig.Phase %v or Heartbeat %v is negative", c.Phase, c.Heartbeat)
	}
	return applyCounts(count{&c.Partitions, DefaultRebalancePartitions}, count{&c.Rate, DefaultRebalanceRate})
}

// rebalanceRun runs the group through its changes with strategy.
func rebalanceRun(ctx context.Context, cfg *RebalanceConfig, strategy func() sarama.BalanceStrategy) (RebalanceRun, error) {
	var run RebalanceRun
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, cfg.Sarama())
	if err != nil {
		return run, err
	}
	defer admin.Close()
	name := randomName()
	topic, group := "courier.bench."+name, "courier.bench."+name
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(cfg.Partitions), ReplicationFactor: 1}, false); err != nil {
		return run, fmt.Errorf("create topic %s: %w", topic, err)
	}
	defer func() { _ = admin.DeleteTopic(topic) }()

	var (
		log     handled.Log
		members sync.WaitGroup
		errs    = make(chan error, 4)
	)
	defer members.Wait() // after cancel, which stops them
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	member := func(name string) (stop func(), err error) {
		sc := cfg.Sarama()
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy()}
		sc.Consumer.Group.Heartbeat.Interval = cfg.Heartbeat
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest // the records written before the group first joined too
		c, err := consumer.New(consumer.Config{
			Brokers: cfg.Brokers, Sarama: sc, Group: group, Topics: []string{topic}, Logger: cfg.Logger.With("member", name),
			Handler: consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) error {
				log.Add(name, m.Partition, m.Offset)
				return nil
			}),
		})
		if err != nil {
			return nil, err
		}
		mctx, cancelMember := context.WithCancel(ctx)
		done := make(chan struct{})
		members.Go(func() {
			defer close(done)
			if err := c.Run(mctx); err != nil {
				errs <- err
			}
		})
		return func() { cancelMember(); <-done }, nil
	}
	// wait waits d, or until every member named handled a record since
	// from when d is 0, and reports an error when ctx ends or a member
	// failed first.
	wait := func(d time.Duration, from time.Time, names ...string) error {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		deadline := time.Now().Add(d)
		if d == 0 {
			deadline = time.Now().Add(rebalanceDrainWait)
		}
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-errs:
				return err
			case now := <-t.C:
				switch {
				case d > 0 && !now.Before(deadline):
					return nil
				case d == 0 && log.HandledSince(from, names...):
					return nil
				case d == 0 && !now.Before(deadline):
					return fmt.Errorf("members %s handled nothing within %v", strings.Join(names, ", "), rebalanceDrainWait)
				}
			}
		}
	}
	for _, n := range []string{"a", "b"} {
		if _, err := member(n); err != nil {
			return run, err
		}
	}
	stopProducing, err := produceSteadily(cfg, topic)
	if err != nil {
		return run, err
	}
	defer stopProducing()
	start := time.Now()
	if err := wait(0, start, "a", "b"); err != nil {
		return run, err
	}
	steadyFrom := time.Now()
	if err := wait(cfg.Phase, steadyFrom); err != nil {
		return run, err
	}
	grown := time.Now()
	stopC, err := member("c")
	if err != nil {
		return run, err
	}
	stopD, err := member("d")
	if err != nil {
		return run, err
	}
	// The grown group lasts until its new members handle records (a
	// cooperative rebalance takes two rounds of heartbeats), and Phase.
	if err := wait(0, grown, "c", "d"); err != nil {
		return run, err
	}
	if err := wait(cfg.Phase, grown); err != nil {
		return run, err
	}
	shrunk := time.Now()
	stopC()
	stopD()
	if err := wait(cfg.Phase, shrunk); err != nil {
		return run, err
	}
	end := time.Now()
	last, err := stopProducing()
	if err != nil {
		return run, err
	}
	run.Steady = log.Stalls(steadyFrom, grown).Kept
	run.Changes = []RebalanceChange{
		{Change: "2 to 4 members", Stall: log.Stalls(grown, shrunk)},
		{Change: "4 to 2 members", Stall: log.Stalls(shrunk, end)},
	}
	deadline := time.Now().Add(rebalanceDrainWait)
	for run.Counts = log.Count(last); run.Lost > 0 || !committedAll(admin, group, topic, last); run.Counts = log.Count(last) {
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%d records not handled, or offsets not committed, %v after the producer stopped", run.Lost, rebalanceDrainWait)
		}
		if err := wait(100*time.Millisecond, end); err != nil {
			return run, err
		}
	}
	return run, nil
}

// committedAll reports whether the group committed every partition of
// topic past its last offset.
func committedAll(admin sarama.ClusterAdmin, group, topic string, last []int64) bool {
	partitions := make([]int32, len(last))
	for p := range partitions {
		partitions[p] = int32(p)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		return false
	}
	for p, l := range last {
		if b := resp.GetBlock(topic, int32(p)); b == nil || b.Offset != l+1 {
			return false
		}
	}
	return true
}

// produceSteadily starts writing cfg.Rate records per second to topic, to
// each partition in turn, in a batch every 10ms. stop stops it and returns
// the last offset written to each partition (-1 for none).
func produceSteadily(cfg *RebalanceConfig, topic string) (stop func() (last []int64, err error), err error) {
	sc := cfg.Sarama()
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(cfg.Brokers, sc)
	if err != nil {
		return nil, err
	}
	last := make([]int64, cfg.Partitions)
	for i := range last {
		last[i] = -1
	}
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		perTick := max(cfg.Rate*int(tick)/int(time.Second), 1)
		for n := 0; ; {
			select {
			case <-quit:
				done <- nil
				return
			case <-t.C:
			}
			batch := make([]*sarama.ProducerMessage, perTick)
			for i := range batch {
				batch[i] = &sarama.ProducerMessage{Topic: topic, Partition: int32(n % cfg.Partitions), Value: sarama.StringEncoder("steady")}
				n++
			}
			if err := p.SendMessages(batch); err != nil {
				done <- err
				return
			}
			for _, m := range batch {
				last[m.Partition] = max(last[m.Partition], m.Offset)
			}
		}
	}()
	var (
		once    sync.Once
		stopErr error
	)
	return func() ([]int64, error) {
		once.Do(func() {
			close(quit)
			stopErr = errors.Join(<-done, p.Close())
		})
		return last, stopErr
	}, nil
}

// rebalanceColumns head the text and Markdown tables.
var rebalanceColumns = []string{"strategy", "change", "kept: partitions", "kept: longest stall", "moved: partitions", "moved: longest stall"}

// WriteText writes the report as a table per run.
func (r RebalanceReport) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString(r.description() + "\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(rebalanceColumns, "\t"))
	for _, row := range r.rows() {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	b.WriteByte('\n')
	for _, line := range r.countLines() {
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r RebalanceReport) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## Rebalancing\n\n" + r.description() + "\n\n")
	b.WriteString("| " + strings.Join(rebalanceColumns, " | ") + " |\n| --- | --- |" + strings.Repeat(" ---: |", len(rebalanceColumns)-2) + "\n")
	for _, row := range r.rows() {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteByte('\n')
	for _, line := range r.countLines() {
		b.WriteString("- " + line + "\n")
	}
}

func (r RebalanceReport) description() string {
	return fmt.Sprintf("A group of 2 consumers on %d partitions, written to at %d records/s, grows to 4 members and shrinks back to 2, "+
		"%v at each size (heartbeat interval %v, fetch wait %v). A stall is the longest gap between two handled records of a partition "+
		"across a change; kept partitions kept their owner, moved ones changed it.", r.Partitions, r.Rate, r.Phase, r.Heartbeat, r.FetchWait)
}

func (r RebalanceReport) rows() [][]string {
	var rows [][]string
	for _, run := range r.Runs {
		rows = append(rows, []string{run.Strategy, "none (steady)", "all", fmtStall(run.Steady), "", ""})
		for _, c := range run.Changes {
			rows = append(rows, []string{run.Strategy, c.Change, fmt.Sprint(c.KeptPartitions), fmtStall(c.Kept), fmt.Sprint(c.MovedPartitions), fmtStall(c.Moved)})
		}
	}
	return rows
}

func (r RebalanceReport) countLines() []string {
	var lines []string
	for _, run := range r.Runs {
		lines = append(lines, fmt.Sprintf("%s: %d records handled, %d lost, %d handled twice or more", run.Strategy, run.Records, run.Lost, run.Duplicates))
	}
	return lines
}

func fmtStall(d time.Duration) string { return d.Round(time.Millisecond).String() }
