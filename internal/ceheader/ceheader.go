// Package ceheader names the Kafka record headers of courier's wire contract
// (ARCHITECTURE.md, "Wire contracts"): the CloudEvents Kafka protocol
// binding in binary mode, its extensions, and the W3C trace context. The producer writes them and the
// consumer reads them; both take the names from here, so neither imports
// the other. Package producer exports them as its Header* constants.
package ceheader

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

// TraceParent is the W3C trace context header.
const TraceParent = "traceparent"
