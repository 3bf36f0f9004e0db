package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// TestDeadLettersFilterByTenant: the dead-letter page's tenant field
// selects the dead letters whose original ce_tenantid is the tenant, and
// keeps its value in the form.
func TestDeadLettersFilterByTenant(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	topic := r.kafka.Topic(t, 1)
	dlqTopic := topic + dlq.DefaultSuffix
	r.kafka.CreateTopic(t, dlqTopic, 1)
	tenant := func(id string) dlq.Header { return dlq.Header{Key: []byte("ce_tenantid"), Value: []byte(id)} }
	writeDeadLetter(t, r, dlqTopic, topic, "payouts", tenant("acme"))
	writeDeadLetter(t, r, dlqTopic, topic, "payouts", tenant("globex"))
	writeDeadLetter(t, r, dlqTopic, topic, "payouts", tenant("acme"))
	writeDeadLetter(t, r, dlqTopic, topic, "payouts")

	c := newClient(t, r.url)
	var page string
	testkit.WaitFor(t, 30*time.Second, "the page of tenant acme to count its 2 of 4", func() bool {
		_, page = c.get("/dlq/" + dlqTopic + "?tenant=acme")
		return strings.Contains(page, "2 of 4 record(s) match")
	})
	if !strings.Contains(page, `name="tenant" value="acme"`) {
		t.Errorf("the filter form does not keep the tenant:\n%.2000s", page)
	}
	if _, page = c.get("/dlq/" + dlqTopic + "?tenant=initech"); !strings.Contains(page, "0 of 4 record(s) match") {
		t.Errorf("a tenant without dead letters matches some:\n%.2000s", page)
	}
}
