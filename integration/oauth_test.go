package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/kfakeoauth"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/kafkaauth"
	"github.com/courierkit/courier/producer"
)

// oauthStack is a stack on an in-process broker that signs clients in
// with OAUTHBEARER tokens of issuer, with sessions of reauth, and the
// Sarama configs of courier's clients signed in with tokens.
type oauthStack struct {
	*stack
	broker *kfakeoauth.Broker
	issuer *kfakeoauth.Issuer
	tokens *kafkaauth.Tokens
}

func newOAuthStack(t *testing.T, lifetime, reauth time.Duration) *oauthStack {
	t.Helper()
	issuer := kfakeoauth.NewIssuer(t, "courier", "integration-s3cret", lifetime)
	broker := kfakeoauth.New(issuer)
	topic := "t." + testkit.UniqueName(t, 100)
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(append(broker.Options(reauth), kfake.SeedTopics(3, topic, dlq.Topic(topic, "")))...))
	broker.Install(k.Cluster)
	tokens, err := kafkaauth.ClientCredentials{TokenURL: issuer.URL, ClientID: "courier", ClientSecret: "integration-s3cret", Timeout: time.Second}.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{k: k, topic: topic, deadLetter: dlq.Topic(topic, ""), group: "g." + testkit.UniqueName(t, 100), partitions: 3}
	return &oauthStack{stack: s, broker: broker, issuer: issuer, tokens: tokens}
}

// signed applies the stack's OAUTHBEARER sign-in to cfg.
func (s *oauthStack) signed(t *testing.T, cfg *sarama.Config) *sarama.Config {
	t.Helper()
	if err := (kafkaauth.Connection{SASL: kafkaauth.OAuthBearer(s.tokens)}).Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// enqueue writes n events with ids prefix-0 … in one transaction.
func enqueue(t *testing.T, pg *testkit.PG, out *producer.Outbox, topic, prefix string, n int) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pg.Pool, func(tx pgx.Tx) error {
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := out.Enqueue(context.Background(), tx, producer.Event{Topic: topic, Key: id, Type: "OrderCreated", Payload: []byte(`{}`), CorrelationID: id}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRelayAndConsumerKeepGoingAcrossTokenRefreshes: tokens that live 3s,
// broker sessions of 1s; the relay and a consumer group run through
// several tokens each, and every event is handled once, with no token
// refused and no reconnection.
func TestRelayAndConsumerKeepGoingAcrossTokenRefreshes(t *testing.T) {
	s := newOAuthStack(t, 3*time.Second, time.Second)
	pg, out := outbox(t)
	rc := producer.NewSaramaConfig()
	s.signed(t, rc)
	relay := s.relay(t, pg, producer.RelayConfig{Sarama: rc, PollInterval: 20 * time.Millisecond})
	start(t, relay.Run)

	var mu sync.Mutex
	handled := map[string]int{}
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		handled[string(m.Key)]++
		mu.Unlock()
		return nil
	}))
	s.signed(t, cfg.Sarama)
	runConsumer(t, cfg)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}

	const rounds, perRound = 4, 50
	var connected int
	for round := range rounds {
		enqueue(t, pg, out, s.topic, fmt.Sprintf("r%d", round), perRound)
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d's events handled", round), func() bool { return count() == (round+1)*perRound })
		if round == 0 {
			connected = s.broker.Counts().Connections // every client is connected now
		}
		issued := s.issuer.Issued()
		testkit.WaitFor(t, 30*time.Second, "the next token", func() bool { return s.issuer.Issued() > issued })
	}
	c := s.broker.Counts()
	if len(c.Refusals) > 0 {
		t.Errorf("the broker refused %q", c.Refusals)
	}
	mu.Lock()
	for key, n := range handled {
		if n != 1 {
			t.Errorf("event %s handled %d times", key, n)
		}
	}
	mu.Unlock()
	// The consumer may open a connection to its group's coordinator, or
	// the relay one to a partition's leader, after the first round; more
	// than that is reconnecting.
	if opened := c.Connections - connected; opened > 2 {
		t.Errorf("%d connections opened across %d tokens; want the connections reauthenticated, not reopened", opened, s.issuer.Issued())
	}
	if c.Handshakes <= c.Connections {
		t.Errorf("%d OAUTHBEARER handshakes on %d connections: no reauthentication", c.Handshakes, c.Connections)
	}
	t.Logf("%d events, %d tokens, %d connections, %d handshakes", count(), s.issuer.Issued(), c.Connections, c.Handshakes)
}

// TestRelayHoldsEventsWhileTheTokenEndpointIsDown: with the token
// endpoint failing (an error page, then no answer), the relay publishes
// nothing, spends no event's attempts and dead-letters nothing; once the
// endpoint is back every event is published.
func TestRelayHoldsEventsWhileTheTokenEndpointIsDown(t *testing.T) {
	s := newOAuthStack(t, time.Hour, 0)
	s.issuer.Answer(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	})
	pg, out := outbox(t)
	rc := producer.NewSaramaConfig()
	s.signed(t, rc)
	relay := s.relay(t, pg, producer.RelayConfig{Sarama: rc, PollInterval: 20 * time.Millisecond, MaxAttempts: 2, Breaker: producer.BreakerConfig{OpenFor: time.Second}})
	enqueue(t, pg, out, s.topic, "held", 20)
	start(t, relay.Run)

	admin, err := producer.NewAdmin(pg.Pool, producer.AdminConfig{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the relay to ask the endpoint for tokens", func() bool { return s.issuer.Requests() >= 5 })
	block := make(chan struct{})
	s.issuer.Answer(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server sees the client give up
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	requests := s.issuer.Requests()
	testkit.WaitFor(t, 60*time.Second, "the relay to ask the silent endpoint", func() bool { return s.issuer.Requests() > requests })
	stats, err := admin.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := stats.Counts; c[producer.StatusPending] != 20 || c[producer.StatusFailed] != 0 || c[producer.StatusDeadLettered] != 0 {
		t.Fatalf("with the token endpoint down: %v; want 20 pending, none failed or dead-lettered", c)
	}
	records, err := admin.List(context.Background(), producer.Filter{Statuses: []string{producer.StatusPending}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if r.Attempts != 0 {
			t.Errorf("event %s: %d attempts spent while no token could be had", r.ID, r.Attempts)
		}
	}

	close(block)
	s.issuer.Answer(nil)
	testkit.WaitFor(t, 60*time.Second, "every event published once the endpoint is back", func() bool {
		st, err := admin.Stats(context.Background())
		return err == nil && st.Counts[producer.StatusPending] == 0
	})
	cfg := s.broker.Admin(s.k.Config())
	client, err := sarama.NewClient(s.k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var total int64
	for p := range int32(3) {
		end, err := client.GetOffset(s.topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		total += end
	}
	if total != 20 {
		t.Errorf("%d records on %s; want the 20 events", total, s.topic)
	}
	if dl, _ := client.GetOffset(s.deadLetter, 0, sarama.OffsetNewest); dl != 0 {
		t.Errorf("%d dead letters", dl)
	}
}

// TestRelayHoldsEventsWhenTheTokenEndpointFailsMidRun: the relay runs
// with tokens of 2s and sessions of 500ms; the endpoint then fails, so the
// reauthentication of its open connections fails on the way of a produce.
// The events wait with no attempt spent, and go out once it is back.
func TestRelayHoldsEventsWhenTheTokenEndpointFailsMidRun(t *testing.T) {
	s := newOAuthStack(t, 2*time.Second, 500*time.Millisecond)
	pg, out := outbox(t)
	rc := producer.NewSaramaConfig()
	s.signed(t, rc)
	relay := s.relay(t, pg, producer.RelayConfig{Sarama: rc, PollInterval: 20 * time.Millisecond, MaxAttempts: 2, Breaker: producer.BreakerConfig{OpenFor: time.Second}})
	start(t, relay.Run)
	admin, err := producer.NewAdmin(pg.Pool, producer.AdminConfig{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	pending := func() int64 {
		st, err := admin.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Counts[producer.StatusPending]
	}
	enqueue(t, pg, out, s.topic, "before", 10)
	testkit.WaitFor(t, 30*time.Second, "the first events published", func() bool { return pending() == 0 })

	issued := s.issuer.Issued()
	s.issuer.Answer(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	expired := time.Now().Add(2500 * time.Millisecond) // every token issued so far has expired by then
	testkit.WaitFor(t, 30*time.Second, "the relay's tokens to expire", func() bool { return time.Now().After(expired) })
	enqueue(t, pg, out, s.topic, "during", 10)
	asked := s.issuer.Requests()
	testkit.WaitFor(t, 30*time.Second, "the relay to ask for a token for the new events", func() bool { return s.issuer.Requests() > asked+2 })
	records, err := admin.List(context.Background(), producer.Filter{Statuses: []string{producer.StatusPending, producer.StatusFailed, producer.StatusDeadLettered}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if r.Attempts != 0 || r.Status != producer.StatusPending {
			t.Errorf("event %s: %s after %d attempts while no token could be had (%v)", r.ID, r.Status, r.Attempts, r.LastError)
		}
	}
	s.issuer.Answer(nil)
	testkit.WaitFor(t, 60*time.Second, "every event published once the endpoint is back", func() bool { return pending() == 0 })
	if s.issuer.Issued() <= issued {
		t.Errorf("no token issued after the endpoint came back")
	}
}
