package consumer

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestSetMessage: ce_id and ce_correlationid come from the last header of
// their name, each on its own when the other is missing; a traceparent
// header is noticed; nil headers are dropped.
func TestSetMessage(t *testing.T) {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	for _, tc := range []struct {
		name           string
		headers        []*sarama.RecordHeader
		id, corr       string
		traced         bool
		headersWritten int
	}{
		{"none", nil, "", "", false, 0},
		{"both", []*sarama.RecordHeader{h("ce_id", "id-1"), h("ce_correlationid", "corr-1")}, "id-1", "corr-1", false, 2},
		{"id only", []*sarama.RecordHeader{h("ce_id", "id-1")}, "id-1", "", false, 1},
		{"correlation only", []*sarama.RecordHeader{h("ce_correlationid", "corr-1")}, "", "corr-1", false, 1},
		{"last wins", []*sarama.RecordHeader{h("ce_id", "a"), h("ce_correlationid", "x"), h("ce_id", "b"), h("ce_correlationid", "y")}, "b", "y", false, 4},
		{"nil header", []*sarama.RecordHeader{nil, h("ce_id", "id-1"), nil}, "id-1", "", false, 1},
		{"traceparent", []*sarama.RecordHeader{h("traceparent", "00-x"), h("ce_id", "id-1")}, "id-1", "", true, 2},
		{"traceparent is case-sensitive", []*sarama.RecordHeader{h("Traceparent", "00-x")}, "", "", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			traced := setMessage(&m, &sarama.ConsumerMessage{Topic: "orders", Offset: 7, Headers: tc.headers})
			if m.ID != tc.id || m.CorrelationID != tc.corr || traced != tc.traced || len(m.Headers) != tc.headersWritten {
				t.Errorf("ID %q, CorrelationID %q, traced %t, %d headers; want %q, %q, %t, %d",
					m.ID, m.CorrelationID, traced, len(m.Headers), tc.id, tc.corr, tc.traced, tc.headersWritten)
			}
			if m.Topic != "orders" || m.Offset != 7 || m.Headers == nil {
				t.Errorf("message %+v", m)
			}
		})
	}
}
