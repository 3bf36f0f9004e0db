package consumer

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/IBM/sarama"
)

// TestSetMessage: ce_id and ce_correlationid come from the last header of
// their name, each on its own when the other is missing; a traceparent
// header is noticed; nil headers are skipped; Headers are the record's own.
func TestSetMessage(t *testing.T) {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	for _, tc := range []struct {
		name     string
		headers  []*sarama.RecordHeader
		id, corr string
		traced   bool
	}{
		{"none", nil, "", "", false},
		{"both", []*sarama.RecordHeader{h("ce_id", "id-1"), h("ce_correlationid", "corr-1")}, "id-1", "corr-1", false},
		{"id only", []*sarama.RecordHeader{h("ce_id", "id-1")}, "id-1", "", false},
		{"correlation only", []*sarama.RecordHeader{h("ce_correlationid", "corr-1")}, "", "corr-1", false},
		{"last wins", []*sarama.RecordHeader{h("ce_id", "a"), h("ce_correlationid", "x"), h("ce_id", "b"), h("ce_correlationid", "y")}, "b", "y", false},
		{"nil header", []*sarama.RecordHeader{nil, h("ce_id", "id-1"), nil}, "id-1", "", false},
		{"traceparent", []*sarama.RecordHeader{h("traceparent", "00-x"), h("ce_id", "id-1")}, "id-1", "", true},
		{"traceparent is case-sensitive", []*sarama.RecordHeader{h("Traceparent", "00-x")}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			traced := setMessage(&m, &sarama.ConsumerMessage{Topic: "orders", Offset: 7, Headers: tc.headers})
			if m.ID != tc.id || m.CorrelationID != tc.corr || traced != tc.traced {
				t.Errorf("ID %q, CorrelationID %q, traced %t; want %q, %q, %t", m.ID, m.CorrelationID, traced, tc.id, tc.corr, tc.traced)
			}
			if m.Topic != "orders" || m.Offset != 7 || len(m.Headers) != len(tc.headers) || (len(tc.headers) > 0 && unsafe.Pointer(&m.Headers[0]) != unsafe.Pointer(&tc.headers[0])) {
				t.Errorf("message %+v: want the record's topic, offset and own headers", m)
			}
			if _, ok := m.Headers.Lookup("missing"); ok {
				t.Error("Lookup found a header that is not there")
			}
		})
	}
}

// TestSetMessageTenant: TenantID is the last ce_tenantid header, beside
// ce_id and ce_correlationid; a value that is not UTF-8, holds a control
// character or is longer than 2048 bytes counts as none, while Headers
// keep it.
func TestSetMessageTenant(t *testing.T) {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	long := strings.Repeat("t", 2048)
	for _, tc := range []struct {
		name               string
		headers            []*sarama.RecordHeader
		id, corr, tenantID string
	}{
		{"missing", []*sarama.RecordHeader{h("ce_id", "id-1")}, "id-1", "", ""},
		{"alone", []*sarama.RecordHeader{h("ce_tenantid", "acme")}, "", "", "acme"},
		{"with the others", []*sarama.RecordHeader{h("ce_tenantid", "acme"), h("ce_id", "id-1"), h("ce_correlationid", "corr-1")}, "id-1", "corr-1", "acme"},
		{"last wins", []*sarama.RecordHeader{h("ce_tenantid", "globex"), h("ce_id", "id-1"), h("ce_tenantid", "acme")}, "id-1", "", "acme"},
		{"UTF-8", []*sarama.RecordHeader{h("ce_tenantid", "müller-gmbh")}, "", "", "müller-gmbh"},
		{"2048 bytes", []*sarama.RecordHeader{h("ce_tenantid", long)}, "", "", long},
		{"2049 bytes", []*sarama.RecordHeader{h("ce_id", "id-1"), h("ce_tenantid", long+"t")}, "id-1", "", ""},
		{"not UTF-8", []*sarama.RecordHeader{h("ce_correlationid", "corr-1"), h("ce_tenantid", "acme\xff")}, "", "corr-1", ""},
		{"escape sequence", []*sarama.RecordHeader{h("ce_tenantid", "acme\x1b[31m")}, "", "", ""},
		{"NUL", []*sarama.RecordHeader{h("ce_tenantid", "acme\x00")}, "", "", ""},
		{"C1 control", []*sarama.RecordHeader{h("ce_tenantid", "acme\u0085")}, "", "", ""},
		{"null value", []*sarama.RecordHeader{{Key: []byte("ce_tenantid")}}, "", "", ""},
		{"name is case-sensitive", []*sarama.RecordHeader{h("Ce_TenantID", "acme")}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			setMessage(&m, &sarama.ConsumerMessage{Topic: "orders", Headers: tc.headers})
			if m.ID != tc.id || m.CorrelationID != tc.corr || m.TenantID != tc.tenantID {
				t.Errorf("ID %q, CorrelationID %q, TenantID %.80q; want %q, %q, %.80q", m.ID, m.CorrelationID, m.TenantID, tc.id, tc.corr, tc.tenantID)
			}
			if len(m.Headers) != len(tc.headers) {
				t.Errorf("%d headers, want the record's %d", len(m.Headers), len(tc.headers))
			}
		})
	}
}
