package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRelayMetricsTenants: with --metrics-tenants the relay's published
// counter has a tenant label: a listed tenant its own value, every other
// tenant and the events without one "other"; a tenant the list refuses is
// a usage error naming the flag.
func TestRelayMetricsTenants(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	var events = []struct{ key, tenant string }{{"o-1", "acme"}, {"o-2", "acme"}, {"o-3", "globex"}, {"o-4", ""}}
	for _, e := range events {
		ev := event(topic, e.key, "OrderCreated")
		ev.TenantID = e.tenant
		o.enqueue(t, ev)
	}
	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json", "--metrics-tenants", "acme,initech")...)
	topicRecords(t, k, topic, len(events))
	base := "http://" + waitLog(t, &r.stderr, "serving metrics")["addr"].(string)
	want := []string{
		`courier_outbox_published_total{tenant="acme",topic="` + topic + `"} 2`,
		`courier_outbox_published_total{tenant="other",topic="` + topic + `"} 2`,
	}
	var body string
	testkit.WaitFor(t, 10*time.Second, "the published counters by tenant", func() bool {
		var code int
		code, body = httpGet(t, base+"/metrics")
		if code != http.StatusOK {
			return false
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	if strings.Contains(body, `tenant="globex"`) || strings.Contains(body, `tenant=""`) {
		t.Errorf("an unlisted tenant has its own series:\n%s", body)
	}

	code, _, errOut := courier(t, append([]string{"relay"}, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--metrics-tenants", "acme,other")...)...)
	if code != exitUsage || !strings.Contains(errOut, "--metrics-tenants") {
		t.Errorf("--metrics-tenants acme,other: exit %d, want %d naming the flag\n%s", code, exitUsage, errOut)
	}
}
