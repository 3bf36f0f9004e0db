package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestWebhookRelayBreakerOpensAndCloses: a real relay whose broker is
// down opens its breaker, probes while it stays down, and closes it once
// the broker is back: the Notifier, one of its hooks, sends two POSTs,
// closed to open and then back to closed, and nothing for the probes.
func TestWebhookRelayBreakerOpensAndCloses(t *testing.T) {
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	k := testkit.NewKafka(t, testkit.InProcess()) // the test takes the broker down
	topic := k.Topic(t, 1)
	var down, probed atomic.Bool
	down.Store(true)
	k.Cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		k.Cluster.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	for i := range 5 {
		if _, err := out.Enqueue(context.Background(), pg.Pool, producer.Event{Topic: topic, Key: fmt.Sprint("order-", i),
			Type: "OrderCreated", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}

	srv := newHookServer(t, nil)
	var logs testkit.Buffer
	n := newNotifier(t, config(srv.URL, &logs))
	notifier := start(t, n)
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Metadata.Retry.Max = 0
	saramaCfg.Producer.Retry.Max = 0
	relay, err := producer.NewRelay(pg.Pool, producer.RelayConfig{Schema: pg.Schema, Brokers: k.Brokers, Sarama: saramaCfg,
		Workers: 1, PollInterval: 20 * time.Millisecond, Breaker: producer.BreakerConfig{OpenFor: 200 * time.Millisecond},
		Logger: testkit.Logger(t), OnDeadLetter: n.OnDeadLetter,
		Hooks: []producer.Hook{n, probeWatch{&probed}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- relay.Run(ctx) }()
	stopRelay := sync.OnceValue(func() error { cancel(); return <-ran })
	t.Cleanup(func() { _ = stopRelay() })

	srv.waitRequests(t, 1)
	testkit.WaitFor(t, 30*time.Second, "the breaker to reopen after a probe", func() bool { return probed.Load() && relay.Breaker() == producer.BreakerOpen })
	down.Store(false)
	srv.waitRequests(t, 2)
	testkit.WaitFor(t, 30*time.Second, "the events to be published", func() bool {
		var n int
		err := pg.Pool.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM %s.courier_outbox", pg.Schema)).Scan(&n)
		return err == nil && n == 0
	})
	if err := stopRelay(); err != nil {
		t.Errorf("relay Run: %v", err)
	}
	notifier.stop(t)

	notes := srv.notes(t)
	if len(notes) != 2 {
		t.Fatalf("%d POSTs, want 2 (open, closed): %+v", len(notes), notes)
	}
	want := []webhook.Breaker{{From: "closed", To: "open"}, {From: "half-open", To: "closed"}}
	for i, note := range notes {
		if b := note.Breaker; note.Kind != webhook.KindBreaker || b == nil || b.From != want[i].From || b.To != want[i].To {
			t.Errorf("POST %d: %+v %+v, want %+v", i, note, b, want[i])
		}
	}
}

// probeWatch notes that the breaker went half-open, a probe.
type probeWatch struct{ probed *atomic.Bool }

func (p probeWatch) BreakerChanged(s producer.BreakerState) {
	if s == producer.BreakerHalfOpen {
		p.probed.Store(true)
	}
}
