package dlq_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
)

// tenantLetter is the envelope of a record of orders with headers, each
// given as name and value.
func tenantLetter(t *testing.T, headers ...string) dlq.Envelope {
	t.Helper()
	o := dlq.Original{Topic: "orders", Partition: 0, Offset: 7, Key: []byte("k"), Value: []byte(`{"id":1}`)}
	for i := 0; i+1 < len(headers); i += 2 {
		o.Headers = append(o.Headers, dlq.Header{Key: []byte(headers[i]), Value: []byte(headers[i+1])})
	}
	env, err := dlq.New(o, dlq.Failure{Error: "boom", Kind: dlq.KindPermanent, Attempts: 1, FailedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestFilterMatchesTenantOfTheOriginalRecord: TenantID selects the dead
// letters whose original ce_tenantid is exactly it (the last one when the
// header repeats), in an envelope, after an encoding round trip and in raw
// mode; one without the header, with another tenant, with a tenant that is
// not UTF-8, and a corrupt one never match.
func TestFilterMatchesTenantOfTheOriginalRecord(t *testing.T) {
	t.Parallel()
	acme := tenantLetter(t, "ce_id", "1", "ce_tenantid", "acme")
	data, err := dlq.Encode(acme)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := dlq.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := acme.RawRecord()
	if err != nil {
		t.Fatal(err)
	}
	fromRaw, err := dlq.Read(raw.Key, raw.Value, raw.Headers)
	if err != nil {
		t.Fatal(err)
	}
	match := map[string]dlq.Envelope{
		"envelope": acme, "decoded": decoded, "raw": fromRaw,
		"last of two": tenantLetter(t, "ce_tenantid", "globex", "ce_tenantid", "acme"),
	}
	miss := map[string]dlq.Envelope{
		"no tenant":      tenantLetter(t, "ce_id", "1"),
		"other tenant":   tenantLetter(t, "ce_tenantid", "acme-eu"),
		"case differs":   tenantLetter(t, "ce_tenantid", "ACME"),
		"not the last":   tenantLetter(t, "ce_tenantid", "acme", "ce_tenantid", "globex"),
		"header name":    tenantLetter(t, "Ce_TenantID", "acme"),
		"not UTF-8":      tenantLetter(t, "ce_tenantid", "acme\xff"),
		"in another key": tenantLetter(t, "tenant", "acme"),
	}
	f := dlq.Filter{TenantID: "acme"}
	for name, env := range match {
		if got := env.TenantID(); got != "acme" {
			t.Errorf("%s: TenantID %q, want acme", name, got)
		}
		if !f.Match(dlq.Entry{Envelope: env}) {
			t.Errorf("%s: the filter of tenant acme does not match it", name)
		}
	}
	for name, env := range miss {
		if f.Match(dlq.Entry{Envelope: env}) {
			t.Errorf("%s: the filter of tenant acme matches it (TenantID %q)", name, env.TenantID())
		}
		if !(dlq.Filter{}).Match(dlq.Entry{Envelope: env}) {
			t.Errorf("%s: the empty filter does not match it", name)
		}
	}
	if f.Match(dlq.Entry{Err: errors.New("not an envelope")}) {
		t.Error("the filter of a tenant matches a corrupt entry")
	}
}

// TestReplayedRecordKeepsItsTenant: the record a replay writes, the
// original restored from the envelope, carries the ce_tenantid header
// byte for byte, in its place among the other headers.
func TestReplayedRecordKeepsItsTenant(t *testing.T) {
	t.Parallel()
	env := tenantLetter(t, "ce_id", "1", "ce_tenantid", "acme", "trace", "x")
	o, err := env.Original()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Headers) != 3 || string(o.Headers[1].Key) != "ce_tenantid" || !bytes.Equal(o.Headers[1].Value, []byte("acme")) {
		t.Errorf("restored headers %q, want ce_tenantid: acme second of three", o.Headers)
	}
}

// TestFilterRefusesATenantThatIsNotUTF8: no envelope holds such a tenant,
// so Validate says so rather than let a scan find nothing.
func TestFilterRefusesATenantThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	err := dlq.Filter{TenantID: "acme\xff"}.Validate()
	if err == nil || !strings.Contains(err.Error(), `TenantID "acme\xff" is not valid UTF-8`) {
		t.Errorf("Validate: %v, want TenantID named as not UTF-8", err)
	}
	if err := (dlq.Filter{TenantID: "acme-ü"}).Validate(); err != nil {
		t.Errorf("Validate of a UTF-8 tenant: %v", err)
	}
}
