package grouplag_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/cmd/courier/internal/grouplag"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// marking is a consumer group handler that marks the records of each
// partition below upTo[partition] and leaves the rest unmarked.
type marking struct {
	upTo map[int32]int64
}

func (marking) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (marking) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h marking) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		if m.Offset < h.upTo[m.Partition] {
			s.MarkMessage(m, "")
		}
	}
	return nil
}

// committed returns group's committed offsets of topic's partitions
// (-1: none).
func committed(t *testing.T, k *testkit.Kafka, group, topic string, partitions ...int32) []int64 {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	out := make([]int64, len(partitions))
	for i := range out {
		out[i] = -1
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return out // the group has not joined yet
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range partitions {
		if b := resp.GetBlock(topic, p); b != nil {
			out[i] = b.Offset
		}
	}
	return out
}

// TestReadReportsEachGroupsLag: a consumer group that committed part of a
// topic (3 of 5 records of partition 0, both of partition 1, none of
// partition 2) and courier's replay group, without members, that replayed
// one of two dead letters: Read reports both, sorted by name, with their
// exact committed offsets, high-water marks and lags, asking each group's
// offsets once and each partition's high-water mark once.
func TestReadReportsEachGroupsLag(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess()) // its own cluster: the groups are the test's alone
	topic := k.Topic(t, 3)
	producer := k.Producer(t)
	for partition, n := range map[int32]int{0: 5, 1: 2, 2: 3} {
		for range n {
			if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: partition, Value: sarama.StringEncoder("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// courier's replay group, as a replay leaves it: no members, one of two
	// dead letters replayed.
	deadLetters := dlq.Topic(k.Topic(t, 1), "")
	k.CreateTopic(t, deadLetters, 1)
	writer, err := dlq.NewWriter(record.NewSyncPublisher(producer), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		env, err := dlq.New(dlq.Original{Topic: strings.TrimSuffix(deadLetters, dlq.DefaultSuffix), Partition: 0, Offset: 0},
			dlq.Failure{Error: "boom", Kind: dlq.KindPermanent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writer.Write(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	if report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: k.Brokers, Sarama: k.Config(), Topic: deadLetters, Max: 1}); err != nil || report.Moved != 1 {
		t.Fatalf("Replay: %+v, %v; want 1 moved", report, err)
	}

	// The consumers: one member, Stable, partway through the topic; they read
	// the dead letters too (both), so two groups share that partition.
	group := "lag." + testkit.UniqueName(t, 100)
	gcfg := k.Config()
	gcfg.Consumer.Offsets.AutoCommit.Interval = 50 * time.Millisecond
	cg, err := sarama.NewConsumerGroup(k.Brokers, group, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic, deadLetters}, marking{upTo: map[int32]int64{0: 3, 1: 2}}); err != nil && ctx.Err() == nil {
				t.Errorf("Consume: %v", err)
				return
			}
		}
	})
	t.Cleanup(func() {
		stop()
		wg.Wait()
		_ = cg.Close()
	})
	testkit.WaitFor(t, 30*time.Second, "the group commits 3 on partition 0, 2 on partition 1 and 2 on the dead letters", func() bool {
		got := committed(t, k, group, topic, 0, 1)
		return got[0] == 3 && got[1] == 2 && committed(t, k, group, deadLetters, 0)[0] == 2
	})

	// Count what Read asks for.
	var counting atomic.Bool
	var offsetFetches, highWaterAsks atomic.Int32
	k.Cluster.ControlKey(int16(kmsg.OffsetFetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if counting.Load() {
			offsetFetches.Add(1)
		}
		return nil, nil, false
	})
	k.Cluster.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if counting.Load() {
			for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
				highWaterAsks.Add(int32(len(tp.Partitions)))
			}
		}
		return nil, nil, false
	})

	client := mustClient(t, k, k.Config())
	testkit.WaitFor(t, 30*time.Second, "the group Stable with one member", func() bool {
		groups, err := grouplag.Read(context.Background(), client)
		return err == nil && len(groups) == 2 && groups[1].State == "Stable" && groups[1].Members == 1
	})
	counting.Store(true)
	groups, err := grouplag.Read(context.Background(), client)
	counting.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	want := []grouplag.Group{
		{Name: dlq.DefaultReplayGroup, State: "Empty", Members: 0, Lag: 1, Partitions: []grouplag.Partition{
			{Topic: deadLetters, Partition: 0, Committed: 1, HighWater: 2, Lag: 1},
		}},
		{Name: group, State: "Stable", Members: 1, Lag: 5, Partitions: []grouplag.Partition{
			{Topic: topic, Partition: 0, Committed: 3, HighWater: 5, Lag: 2},
			{Topic: topic, Partition: 1, Committed: 2, HighWater: 2, Lag: 0},
			{Topic: topic, Partition: 2, Committed: -1, HighWater: 3, Lag: 3},
			{Topic: deadLetters, Partition: 0, Committed: 2, HighWater: 2, Lag: 0},
		}},
	}
	slices.SortStableFunc(want[1].Partitions, func(a, b grouplag.Partition) int { return strings.Compare(a.Topic, b.Topic) })
	if !reflect.DeepEqual(groups, want) {
		t.Errorf("Read:\n got %+v\nwant %+v", groups, want)
	}
	if n := offsetFetches.Load(); n != 2 {
		t.Errorf("Read sent %d offset fetches, want 2: one per group", n)
	}
	if n := highWaterAsks.Load(); n != 4 {
		t.Errorf("Read asked for %d high-water marks, want 4: one per topic-partition, though both groups read the dead letters", n)
	}
}

// TestReadGivesUpWhenTheContextIsDone: a context already done, or done
// while a request is under way, ends Read with its error.
func TestReadGivesUpWhenTheContextIsDone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	client := mustClient(t, k, k.Config())
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := grouplag.Read(done, client); !errors.Is(err, context.Canceled) {
		t.Errorf("Read with a cancelled context: %v, want context.Canceled", err)
	}

	// The broker holds the listing of groups until the test ends: Read
	// returns at the deadline all the same.
	release := make(chan struct{})
	k.Cluster.ControlKey(int16(kmsg.ListGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	defer close(release)
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if _, err := grouplag.Read(short, client); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read while the broker holds its request: %v, want context.DeadlineExceeded", err)
	}
}

// TestReadRefusesAnOldProtocolVersion: a client older than courier's
// floor (Kafka 2.1, which Kafka 4.0 still accepts) is refused.
func TestReadRefusesAnOldProtocolVersion(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	cfg := k.Config()
	cfg.Version = sarama.V2_0_0_0
	if _, err := grouplag.Read(context.Background(), mustClient(t, k, cfg)); err == nil {
		t.Error("Read with Kafka 2.0: nil error, want the version refused")
	}
}

func mustClient(t *testing.T, k *testkit.Kafka, cfg *sarama.Config) sarama.Client {
	t.Helper()
	client, err := sarama.NewClient(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}
