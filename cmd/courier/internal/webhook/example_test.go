package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/producer"
)

// A Notifier sends the relay's breaker opening to a webhook; Redacted is
// how logs and errors show its URL.
func ExampleNotifier() {
	got := make(chan webhook.Notification, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var note webhook.Notification
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &note)
		got <- note
	}))
	defer srv.Close()

	n, err := webhook.New(webhook.Config{URL: srv.URL + "/services/T0K3N", Relay: "orders-service", Host: "relay-1",
		Header: http.Header{"Authorization": {"Bearer s3cret"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()

	n.BreakerChanged(producer.BreakerOpen) // as the relay calls its hooks
	note := <-got
	cancel()
	<-done
	fmt.Println(note.Kind, note.Breaker.From, "->", note.Breaker.To)
	fmt.Println(note.Text)

	u, _ := url.Parse("https://app:s3cret@hooks.example.com/services/T0K3N")
	fmt.Println(webhook.Redacted(u))
	// Output:
	// breaker closed -> open
	// courier relay orders-service on relay-1: Kafka circuit breaker open: the relay stopped publishing until Kafka answers
	// https://app:xxxxx@hooks.example.com/…
}
