package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestOrdersAndTheirEventsCommitTogether runs the service on a fresh
// schema and Kafka topic, places orders over HTTP and checks that each
// order row is there and its OrderCreated event reached Kafka with the
// CloudEvents headers and the JSON payload; that an order with a taken id
// answers 409 and publishes nothing; that the relay's probes answer 200
// once it has published; and that stopping the service ends run with nil
// and leaves no goroutine behind.
func TestOrdersAndTheirEventsCommitTogether(t *testing.T) {
	pg := testkit.Postgres(t)
	k := testkit.NewKafka(t)
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DatabaseURL = pg.URL
	cfg.Brokers = k.Brokers
	cfg.Schema = pg.FreshSchema(t)
	cfg.Topic = k.Topic(t, 2)
	cfg.Logger = testkit.Logger(t)
	if cfg.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + cfg.Listener.Addr().String()

	before := goleak.IgnoreCurrent()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	stopped := false
	stopRun := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("run returned %v after its context ended, want nil", err)
			}
		}
	}
	t.Cleanup(stopRun)

	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	post := func(body string) (int, map[string]string) {
		t.Helper()
		resp, err := client.Post(base+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			select {
			case runErr := <-done:
				t.Fatalf("POST /orders: %v; run ended: %v", err, runErr)
			default:
				t.Fatalf("POST /orders: %v", err)
			}
		}
		defer resp.Body.Close()
		var out map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("POST /orders %s: %d with a body that is not JSON: %v", body, resp.StatusCode, err)
		}
		return resp.StatusCode, out
	}

	// Three orders; the second gets its id from the service.
	placed := []orderRequest{
		{OrderID: "order-1", CustomerID: "c-1", AmountCents: 1999, Currency: "EUR"},
		{CustomerID: "c-2", AmountCents: 500, Currency: "USD"},
		{OrderID: "order-3", CustomerID: "c-1", AmountCents: 42, Currency: "EUR"},
	}
	eventIDs := map[string]string{} // order id → event id
	for i, o := range placed {
		body, _ := json.Marshal(o)
		code, out := post(string(body))
		if code != http.StatusCreated || out["order_id"] == "" || out["event_id"] == "" {
			t.Fatalf("POST /orders %s: %d %v, want 201 with the order and event ids", body, code, out)
		}
		if o.OrderID != "" && out["order_id"] != o.OrderID {
			t.Fatalf("POST /orders %s: order_id %q, want the one sent", body, out["order_id"])
		}
		placed[i].OrderID = out["order_id"]
		eventIDs[out["order_id"]] = out["event_id"]
	}

	// A second order-1: its insert fails after its event was enqueued, and
	// the rollback removes the event. Bad input writes nothing either.
	if code, out := post(`{"order_id":"order-1","customer_id":"c-9","amount_cents":1,"currency":"EUR"}`); code != http.StatusConflict {
		t.Errorf("a second order-1: %d %v, want 409", code, out)
	}
	for _, body := range []string{
		`{"customer_id":"c-1","amount_cents":0,"currency":"EUR"}`,
		`{"customer_id":"c-1","amount_cents":100,"currency":"euro"}`,
		`{"amount_cents":100,"currency":"EUR"}`,
		`not json`,
	} {
		if code, out := post(body); code != http.StatusBadRequest || out["error"] == "" {
			t.Errorf("POST /orders %s: %d %v, want 400 with an error", body, code, out)
		}
	}

	// Every order row is there, as sent.
	orders := pgx.Identifier{cfg.Schema, "orders"}.Sanitize()
	admin, err := producer.NewAdmin(pg.Pool, producer.AdminConfig{Schema: cfg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range placed {
		var got orderRequest
		err := pg.Pool.QueryRow(context.Background(), "SELECT id, customer_id, amount_cents, currency FROM "+orders+" WHERE id = $1", o.OrderID).
			Scan(&got.OrderID, &got.CustomerID, &got.AmountCents, &got.Currency)
		if err != nil || got != o {
			t.Errorf("order row %s: %+v, %v; want %+v", o.OrderID, got, err, o)
		}
	}
	var rows int
	if err := pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+orders).Scan(&rows); err != nil || rows != len(placed) {
		t.Errorf("%d order rows (%v), want %d", rows, err, len(placed))
	}

	// The relay publishes the three events, and only those.
	testkit.WaitFor(t, 30*time.Second, "the outbox to hold three events, all published", func() bool {
		stats, err := admin.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var all int64
		for _, n := range stats.Counts {
			all += n
		}
		published := stats.Counts[producer.StatusPublished]
		if all > int64(len(placed)) {
			t.Fatalf("the outbox holds %d events for %d orders: the rolled-back order left its event", all, len(placed))
		}
		return published == int64(len(placed))
	})
	// The relay's probes: live, and ready once it has published.
	for path, want := range map[string]string{"/relay/livez": `"status":"live"`, "/relay/readyz": `"status":"ready"`} {
		var code int
		var body []byte
		testkit.WaitFor(t, 30*time.Second, "GET "+path+" to answer 200", func() bool {
			resp, err := client.Get(base + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			code = resp.StatusCode
			body, _ = io.ReadAll(resp.Body)
			return code == http.StatusOK
		})
		if !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %s, want %s", path, code, body, want)
		}
		resp, err := client.Post(base+path, "application/json", nil)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", path, resp.StatusCode)
		}
	}

	records := k.ReadAll(t, cfg.Topic)
	if len(records) != len(placed) {
		t.Fatalf("%d records on %s, want %d (one per order, none for the rolled-back one)", len(records), cfg.Topic, len(placed))
	}
	for _, o := range placed {
		i := slices.IndexFunc(records, func(m *sarama.ConsumerMessage) bool { return string(m.Key) == o.OrderID })
		if i < 0 {
			t.Errorf("no record with key %s on %s", o.OrderID, cfg.Topic)
			continue
		}
		m := records[i]
		wantValue := fmt.Sprintf(`{"order_id":%q,"amount_cents":%d,"currency":%q}`, o.OrderID, o.AmountCents, o.Currency)
		if string(m.Value) != wantValue {
			t.Errorf("%s: value %s, want %s", o.OrderID, m.Value, wantValue)
		}
		headers := map[string]string{}
		for _, h := range m.Headers {
			headers[string(h.Key)] = string(h.Value)
		}
		for name, want := range map[string]string{
			producer.HeaderSpecVersion:   "1.0",
			producer.HeaderID:            eventIDs[o.OrderID],
			producer.HeaderType:          "OrderCreated",
			producer.HeaderSource:        "orders-service",
			producer.HeaderContentType:   "application/json",
			producer.HeaderAggregateType: "Order",
			producer.HeaderAggregateID:   o.OrderID,
		} {
			if headers[name] != want {
				t.Errorf("%s: header %s = %q, want %q", o.OrderID, name, headers[name], want)
			}
		}
	}

	stopRun()
	client.CloseIdleConnections()
	// kfake serves the connections the test's own clients opened.
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
}

// TestRunReportsWhatToFix: a service that cannot start says why.
func TestRunReportsWhatToFix(t *testing.T) {
	cfg, err := parseConfig([]string{"--addr", "127.0.0.1:0", "--schema", "Not-A-Schema"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DatabaseURL = testkit.DatabaseURL()
	cfg.Logger = testkit.Logger(t)
	err = run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "Not-A-Schema") {
		t.Errorf("run with --schema Not-A-Schema: %v, want an error naming the schema", err)
	}
}

// TestParseConfig: the defaults, the environment and flags, and the usage
// on an unknown flag.
func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != ":8080" || cfg.DatabaseURL != "postgres://postgres@127.0.0.1:5432/test" ||
		!slices.Equal(cfg.Brokers, []string{"127.0.0.1:9092"}) || cfg.Schema != "orders_example" || cfg.Topic != "orders" {
		t.Errorf("defaults: %+v", cfg)
	}
	env := map[string]string{"COURIER_DATABASE_URL": "postgres://app@db:5432/shop", "COURIER_BROKERS": "k1:9092,k2:9092"}
	cfg, err = parseConfig([]string{"--addr", "127.0.0.1:9000", "--schema", "shop"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9000" || cfg.DatabaseURL != env["COURIER_DATABASE_URL"] ||
		!slices.Equal(cfg.Brokers, []string{"k1:9092", "k2:9092"}) || cfg.Schema != "shop" {
		t.Errorf("from flags and env: %+v", cfg)
	}
	if _, err := parseConfig([]string{"--no-such-flag"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "usage of orders") {
		t.Errorf("an unknown flag: %v, want an error with the usage", err)
	}
}
