// Package ceheader names the Kafka record headers of courier's wire contract
// (ARCHITECTURE.md, "Wire contracts"): the CloudEvents Kafka protocol
// binding in binary mode, its extensions, and the W3C trace context. The producer writes them and the
// consumer reads them; both take the names from here, so neither imports
// the other. Package producer exports them as its Header* constants.
package ceheader

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CloudEvents attributes and extensions, binary mode.
const (
	SpecVersion   = "ce_specversion"
	ID            = "ce_id"
	Type          = "ce_type"
	Source        = "ce_source"
	Time          = "ce_time"
	ContentType   = "content-type"
	CorrelationID = "ce_correlationid"
	CausationID   = "ce_causationid"
	TenantID      = "ce_tenantid"
	AggregateType = "ce_aggregatetype"
	AggregateID   = "ce_aggregateid"
)

// MaxAttributeBytes bounds the value of an attribute header such as
// ce_tenantid (producer.MaxAttributeBytes is it).
const MaxAttributeBytes = 2048

// ValidTenant reports whether a ce_tenantid value can be a tenant: at most
// MaxAttributeBytes of UTF-8 without control characters. The tenant ends
// up in logs, metric labels and indexes, so a value from Kafka that could
// not be one counts as none; the consumer and the dead-letter envelope
// both take this check.
func ValidTenant(v string) bool {
	return len(v) <= MaxAttributeBytes && utf8.ValidString(v) && !strings.ContainsFunc(v, unicode.IsControl)
}

// ValidTenantBytes is ValidTenant of a header value as Kafka hands it
// over, without copying it into a string.
func ValidTenantBytes(v []byte) bool {
	return len(v) <= MaxAttributeBytes && utf8.Valid(v) && !bytes.ContainsFunc(v, unicode.IsControl)
}

// The W3C trace context headers.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
)
