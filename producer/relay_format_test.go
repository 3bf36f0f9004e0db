package producer_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

func TestStructuredModeCarriesTheEventInTheValue(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	jsonEv := orderCreated("o-1")
	jsonEv.Topic, jsonEv.TenantID, jsonEv.Headers = topic, "t-1", map[string]string{"x-region": "eu"}
	jsonID := enqueue(t, pg, out, jsonEv)
	binEv := producer.Event{Topic: topic, Key: "o-2", Type: "Blob", ContentType: "application/octet-stream", Payload: []byte{0, 1, 0xff}}
	binID := enqueue(t, pg, out, binEv)

	relay := newRelay(t, pg, k, producer.RelayConfig{Structured: true, Source: "shop"})
	runOnce(t, relay)
	c := consume(t, k, topic)
	var msgs []*sarama.ConsumerMessage
	testkit.WaitFor(t, 10*time.Second, "two records", func() bool { msgs = c.messages(); return len(msgs) == 2 })

	for _, m := range msgs {
		if ct := headerValue(m, "content-type"); ct != "application/cloudevents+json; charset=UTF-8" {
			t.Errorf("content-type %q", ct)
		}
		if headerValue(m, "ce_id") != "" {
			t.Errorf("structured record carries binary-mode ce_ headers: %v", m.Headers)
		}
		var doc map[string]any
		if err := json.Unmarshal(m.Value, &doc); err != nil {
			t.Fatalf("value is not a JSON CloudEvent: %v\n%s", err, m.Value)
		}
		if doc["specversion"] != "1.0" || doc["source"] != "shop" {
			t.Errorf("attributes %v", doc)
		}
		switch doc["id"] {
		case jsonID.String():
			data, _ := json.Marshal(doc["data"])
			if string(data) != string(jsonEv.Payload) || doc["tenantid"] != "t-1" || doc["type"] != "OrderCreated" ||
				headerValue(m, "x-region") != "eu" || string(m.Key) != "o-1" {
				t.Errorf("JSON event in structured mode: %s (headers %v)", m.Value, m.Headers)
			}
		case binID.String():
			raw, err := base64.StdEncoding.DecodeString(doc["data_base64"].(string))
			if err != nil || string(raw) != string(binEv.Payload) || doc["data"] != nil {
				t.Errorf("binary event in structured mode: %s", m.Value)
			}
		default:
			t.Errorf("unexpected event %v", doc["id"])
		}
	}
}
