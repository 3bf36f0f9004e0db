package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRelayMetricsTenants: with --metrics-tenants the relay's published
// counter has a tenant label: a listed tenant its own value (the spaces
// around an entry do not count), every other tenant and the events without
// one "other".
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
		"--log-format", "json", "--metrics-tenants", " acme , initech")...)
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
}

// TestRelayMetricsTenantsRefused: a list the metrics refuse, from the flag
// or from COURIER_METRICS_TENANTS, whose entries are trimmed first (so
// " other" is "other"), is a usage error naming the flag, given before the
// relay connects to PostgreSQL or Kafka (both unreachable here).
func TestRelayMetricsTenantsRefused(t *testing.T) {
	nowhere := []string{"relay", "--database-url", "postgres://app@127.0.0.1:1/shop?connect_timeout=1", "--brokers", "127.0.0.1:1"}
	for _, tc := range []struct{ flag, env, want string }{
		{flag: "acme,other", want: `Tenants[1] is "other"`},
		{flag: "acme,,globex", want: "Tenants[1] is empty"},
		{flag: "acme, acme", want: `Tenants[1] "acme" is listed twice`},
		{env: "acme, other", want: `Tenants[1] is "other"`},
		{env: "acme,\t", want: "Tenants[1] is empty"},
	} {
		args := nowhere
		if tc.flag != "" {
			args = append(slices.Clone(nowhere), "--metrics-tenants", tc.flag)
		}
		t.Setenv("COURIER_METRICS_TENANTS", tc.env)
		code, _, errOut := courier(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "--metrics-tenants") || !strings.Contains(errOut, tc.want) {
			t.Errorf("--metrics-tenants %q, COURIER_METRICS_TENANTS=%q: exit %d, want %d naming the flag and saying %q\n%s",
				tc.flag, tc.env, code, exitUsage, tc.want, errOut)
		}
	}
}
