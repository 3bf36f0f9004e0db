package retrytopics_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/retrytopics"
)

func TestEnsure(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	main := k.Topic(t, 6)
	topo, err := retrytopics.New(main, retrytopics.Config{Delays: []time.Duration{time.Second, time.Second, time.Minute}}, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()

	_, err = retrytopics.Ensure(ctx, admin, false, topo)
	if !errors.Is(err, retrytopics.ErrMissingTopics) || !strings.Contains(err.Error(), main+".retry.1s, "+main+".retry.1m, "+main+".dlq") {
		t.Fatalf("Ensure without create: %v; want ErrMissingTopics naming the three", err)
	}
	created, err := retrytopics.Ensure(ctx, admin, true, topo)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{main + ".retry.1s", main + ".retry.1m", main + ".dlq"}; !slices.Equal(created, want) {
		t.Errorf("created %q, want %q", created, want)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range created {
		if topics[name].NumPartitions != 6 {
			t.Errorf("%s has %d partitions, want the main topic's 6", name, topics[name].NumPartitions)
		}
	}
	if created, err := retrytopics.Ensure(ctx, admin, false, topo); err != nil || len(created) != 0 {
		t.Errorf("Ensure once they exist: created %q, %v", created, err)
	}
	orphan, _ := retrytopics.New("no-such-topic", retrytopics.Config{Delays: []time.Duration{time.Second}}, "")
	if _, err := retrytopics.Ensure(ctx, admin, true, orphan); !errors.Is(err, retrytopics.ErrMissingTopics) || !strings.Contains(err.Error(), "main topic no-such-topic") {
		t.Errorf("Ensure of a missing main topic: %v", err)
	}
}
