package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/courierkit/courier/dlq"
)

// TestDLQTenantFilter: --tenant selects the dead letters whose original
// ce_tenantid is exactly the tenant in stats, list and replay; list and
// show name the tenant; a tenant that is not UTF-8 is a usage error.
func TestDLQTenantFilter(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	tenant := func(id string) dlq.Header { return dlq.Header{Key: []byte("ce_tenantid"), Value: []byte(id)} }
	f.deadLetters(t, 2, "psp timeout", tenant("acme"))
	f.deadLetters(t, 1, "psp timeout", tenant("acme-eu"))
	f.deadLetters(t, 1, "psp timeout")

	code, out, errOut := courier(t, f.args("dlq", "list", f.dlqName, "--tenant", "acme", "--output", "json")...)
	var list struct {
		DeadLetters []dlqEntryJSON `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != exitOK {
		t.Fatalf("dlq list --tenant acme: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if len(list.DeadLetters) != 2 || list.DeadLetters[0].TenantID != "acme" || list.DeadLetters[1].TenantID != "acme" {
		t.Errorf("dlq list --tenant acme listed %+v, want the 2 dead letters of acme", list.DeadLetters)
	}
	code, out, _ = courier(t, f.args("dlq", "stats", f.dlqName, "--tenant", "acme-eu")...)
	if code != exitOK || !strings.Contains(out, "1 dead letter(s)") {
		t.Errorf("dlq stats --tenant acme-eu: exit %d\n%s", code, out)
	}
	code, out, _ = courier(t, f.args("dlq", "show", f.dlqName, "--partition", "0", "--offset", "2")...)
	if code != exitOK || !strings.Contains(out, "tenant") || !strings.Contains(out, "acme-eu") {
		t.Errorf("dlq show of acme-eu's dead letter: exit %d\n%s", code, out)
	}
	code, out, errOut = courier(t, f.args("dlq", "replay", f.dlqName, "--tenant", "acme")...)
	if code != exitOK || !strings.Contains(out, "moved 2 record(s)") {
		t.Fatalf("dlq replay --tenant acme: exit %d\n%s%s", code, out, errOut)
	}
	replayed := f.k.ReadAll(t, f.topic)
	if len(replayed) != 2 {
		t.Fatalf("the topic holds %d records after the replay, want acme's 2", len(replayed))
	}
	for _, m := range replayed {
		if h := m.Headers; len(h) < 2 || string(h[1].Key) != "ce_tenantid" || string(h[1].Value) != "acme" {
			t.Errorf("replayed record %s has %d headers, want ce_tenantid: acme kept second", m.Key, len(h))
		}
	}

	for _, tenant := range []string{"acme\xff", "acme\x1b[2J", strings.Repeat("t", 2049)} {
		code, _, errOut = courier(t, f.args("dlq", "list", f.dlqName, "--tenant", tenant)...)
		if code != exitUsage || !strings.Contains(errOut, "--tenant: dlq: TenantID") || !strings.Contains(errOut, "is not a tenant") {
			t.Errorf("dlq list --tenant %.40q, which is no tenant: exit %d, want %d naming the flag\n%s", tenant, code, exitUsage, errOut)
		}
	}
}
