package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
)

// A scheduled replay job: once the PSP is back, move the dead letters that
// timed out back to their topic, a hundred per second at most, and leave
// the others for a person to look at. The example runs on an in-process
// broker holding two dead letters.
func ExampleReplay() {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "payouts", "payouts.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	deadLetter(broker.ListenAddrs(), "p-1", "psp timeout after 30s")
	deadLetter(broker.ListenAddrs(), "p-2", "account closed")

	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{
		Brokers: broker.ListenAddrs(),
		Topic:   "payouts.dlq",
		Group:   "payouts-replay-job",
		Filter:  dlq.Filter{ErrorContains: "timeout"},
		Rate:    100,
		OnRecord: func(r dlq.ReplayedRecord) {
			fmt.Printf("%s %s to %s\n", r.Action, *r.Entry.Envelope.OriginalKey, r.To)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("moved %d, left %d\n", report.Moved, report.NotSelected)
	// Output:
	// moved p-1 to payouts
	// moved 1, left 1
}

// deadLetter writes the dead letter of a payouts record, as the consumer
// does; the record had a traceparent.
func deadLetter(brokers []string, key, errText string) {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	pub := record.NewSyncPublisher(producer)
	defer pub.Close() // closes producer
	traceparent := dlq.Header{Key: []byte("traceparent"), Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}
	env, err := dlq.New(dlq.Original{Topic: "payouts", Partition: 0, Offset: 0, Key: []byte(key), Value: []byte(`{}`), Headers: []dlq.Header{traceparent}},
		dlq.Failure{Error: errText, Kind: dlq.KindRetriesExhausted})
	if err != nil {
		log.Fatal(err)
	}
	w, err := dlq.NewWriter(pub, dlq.WriterConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := w.Write(context.Background(), env); err != nil {
		log.Fatal(err)
	}
}

// A replay of what an operator confirmed: the dry run shows what would
// move (its count and its Set), the operator says yes, and the replay moves
// those records only. Had a matching dead letter arrived in between, or had
// another run replayed one of them, it would write nothing and return a
// *dlq.SetChangedError.
func ExampleReplayConfig_expectSet() {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "payouts", "payouts.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	deadLetter(broker.ListenAddrs(), "p-1", "psp timeout after 30s")
	cfg := dlq.ReplayConfig{Brokers: broker.ListenAddrs(), Topic: "payouts.dlq", Filter: dlq.Filter{ErrorContains: "timeout"}, DryRun: true}
	dry, err := dlq.Replay(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the dry run would move %d; the operator confirms\n", dry.Moved)

	cfg.DryRun, cfg.Expect, cfg.ExpectSet = false, dry.Moved, dry.Set
	cfg.OnChecked = func(dlq.ReplayReport) error {
		fmt.Println("the set is the dry run's: audit, then write")
		return nil
	}
	report, err := dlq.Replay(context.Background(), cfg)
	if errors.Is(err, dlq.ErrSetChanged) {
		fmt.Println("the set changed; nothing was written:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("moved %d, the set of the dry run: %v\n", report.Moved, report.Set == dry.Set)
	// Output:
	// the dry run would move 1; the operator confirms
	// the set is the dry run's: audit, then write
	// moved 1, the set of the dry run: true
}
