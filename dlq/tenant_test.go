package dlq_test

import (
	"bytes"
	"errors"
	"fmt"
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

// TestFilterRefusesWhatIsNoTenant: no envelope has a tenant that is not
// UTF-8, holds a control character or is longer than 2048 bytes, so
// Validate says so rather than let a scan find nothing.
func TestFilterRefusesWhatIsNoTenant(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"acme\xff", "acme\x1b[31m", "acme\u0085", strings.Repeat("t", 2049)} {
		err := dlq.Filter{TenantID: tenant}.Validate()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("TenantID %.64q is not a tenant", tenant)) {
			t.Errorf("Validate of TenantID %.40q: %v, want it named as no tenant", tenant, err)
		}
	}
	for _, tenant := range []string{"acme-ü", strings.Repeat("t", 2048)} {
		if err := (dlq.Filter{TenantID: tenant}).Validate(); err != nil {
			t.Errorf("Validate of tenant %.40q: %v", tenant, err)
		}
	}
}

// TestEnvelopeTenantIsTheConsumers: a ce_tenantid the consumer counts as
// no tenant (a control character, more than 2048 bytes) is no tenant of
// the envelope either, while OriginalHeaders keep it; 2048 bytes are one.
func TestEnvelopeTenantIsTheConsumers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", 2048)
	for value, want := range map[string]string{
		"acme":               "acme",
		long:                 long,
		long + "t":           "",
		"acme\x1b]0;pwn\x07": "",
		"acme\x00":           "",
		"acme\u0085":         "",
		"acme\n":             "",
	} {
		env := tenantLetter(t, "ce_tenantid", value)
		if got := env.TenantID(); got != want {
			t.Errorf("ce_tenantid %.40q: TenantID %.40q, want %.40q", value, got, want)
		}
		if env.OriginalHeaders["ce_tenantid"] != value {
			t.Errorf("ce_tenantid %.40q: OriginalHeaders hold %.40q, want it kept", value, env.OriginalHeaders["ce_tenantid"])
		}
	}
}
