package prom_test

// The Grafana dashboard and the Prometheus alert rules in ../monitoring are
// checked here, beside the metrics they read: promtool checks and
// unit-tests the rules and parses the dashboard's queries, and every
// metric and label they name must be one this package registers.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sony/gobreaker/v2"
	"go.yaml.in/yaml/v3"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/prom"
)

// The files under test.
var (
	alertsFile     = filepath.Join("..", "monitoring", "courier-alerts.yml")
	alertTestsFile = filepath.Join("..", "monitoring", "courier-alerts.test.yml")
	dashboardFile  = filepath.Join("..", "monitoring", "courier-dashboard.json")
)

// promtool returns the path of promtool. Without it the test fails, under
// CI=true and elsewhere alike: the checks it runs are the point of these
// tests.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is missing: %v; `make services` installs it (Debian's prometheus package: apt-get install prometheus)", err)
	}
	return path
}

// runPromtool runs promtool with args in dir and fails the test, with
// promtool's output, if it exits non-zero.
func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestMonitoringRulesPassPromtool(t *testing.T) {
	t.Run("check", func(t *testing.T) {
		runPromtool(t, ".", "check", "rules", alertsFile)
	})
	t.Run("test", func(t *testing.T) {
		// The test file names its rule files relative to itself.
		runPromtool(t, filepath.Dir(alertTestsFile), "test", "rules", filepath.Base(alertTestsFile))
	})
}

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTestFile is a promtool unit test file, as far as these tests read it.
type ruleTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// dashboard is a Grafana dashboard, as far as these tests read it.
type dashboard struct {
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// variable is a template variable of a dashboard.
type variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Query is a string, or {"query": "…"} in newer Grafanas.
	Query      json.RawMessage `json:"query"`
	Datasource *datasourceRef  `json:"datasource"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's.
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// datasourceVar is what every panel and query of the dashboard reads from:
// the data source variable, so that the dashboard imports into any
// Grafana.
const datasourceVar = "${datasource}"

func readRules(t *testing.T) ruleFile {
	t.Helper()
	return readYAML(t, alertsFile, func(f ruleFile) bool { return len(f.Groups) == 0 })
}

func readRuleTests(t *testing.T) ruleTestFile {
	t.Helper()
	return readYAML(t, alertTestsFile, func(f ruleTestFile) bool { return len(f.Tests) == 0 })
}

// readYAML decodes the YAML file at path, and fails the test if it cannot
// or if the file holds nothing (empty says).
func readYAML[T any](t *testing.T, path string, empty func(T) bool) T {
	t.Helper()
	var v T
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if empty(v) {
		t.Fatalf("%s holds nothing to check", path)
	}
	return v
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboardFile)
	}
	return d
}

// allPanels returns the dashboard's panels, those of collapsed rows
// included, in order.
func allPanels(panels []panel) []panel {
	var out []panel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// query is a PromQL expression of the monitoring files and where it is.
type query struct {
	where string
	expr  string
}

// grafanaVars replaces the dashboard's variables with what Prometheus
// would get, for promtool; a variable not listed here fails the test.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$job", ".*",
)

// dashboardQueries returns every PromQL expression of the dashboard: its
// panels' targets and the selectors of its label_values variables.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var out []query
	for _, p := range allPanels(d.Panels) {
		for _, target := range p.Targets {
			out = append(out, query{fmt.Sprintf("dashboard panel %q target %s", p.Title, target.RefID), target.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("dashboard variable %q: query is neither a string nor {\"query\": …}: %s", v.Name, v.Query)
			}
		}
		// label_values(selector, label): the selector is PromQL.
		inner, ok := strings.CutPrefix(q.Query, "label_values(")
		i := strings.LastIndex(inner, ",")
		if !ok || i < 0 {
			t.Fatalf("dashboard variable %q: query %q is not label_values(selector, label)", v.Name, q.Query)
		}
		out = append(out, query{fmt.Sprintf("dashboard variable %q", v.Name), inner[:i]})
	}
	return out
}

// ruleQueries returns the expression of every rule.
func ruleQueries(f ruleFile) []query {
	var out []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, query{fmt.Sprintf("rule %s%s in group %s", r.Alert, r.Record, g.Name), r.Expr})
		}
	}
	return out
}

func TestMonitoringDashboardQueriesParse(t *testing.T) {
	// promtool parses PromQL when it checks recording rules: one rule per
	// query.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := dashboardQueries(t, readDashboard(t))
	for i, q := range queries {
		expr := grafanaVars.Replace(q.expr)
		if strings.Contains(expr, "$") {
			t.Fatalf("%s: %q uses a variable this test does not know; add it to grafanaVars", q.where, q.expr)
		}
		quoted, err := json.Marshal(expr) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, quoted)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, ".", "check", "rules", path)
	if len(queries) < 20 {
		t.Errorf("the dashboard has %d queries; a panel lost its targets?", len(queries))
	}
}

func TestMonitoringDashboardReadsTheDatasourceVariable(t *testing.T) {
	d := readDashboard(t)
	found := slices.ContainsFunc(d.Templating.List, func(v variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"`
	})
	if !found {
		t.Errorf(`the dashboard has no variable {"name": "datasource", "type": "datasource", "query": "prometheus"}`)
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != datasourceVar) {
			t.Errorf("variable %q reads data source %+v, want uid %s", v.Name, v.Datasource, datasourceVar)
		}
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != datasourceVar {
			t.Errorf("panel %q reads data source %+v, want uid %s", p.Title, p.Datasource, datasourceVar)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			if target.Datasource == nil || target.Datasource.UID != datasourceVar {
				t.Errorf("panel %q target %s reads data source %+v, want uid %s", p.Title, target.RefID, target.Datasource, datasourceVar)
			}
		}
	}
}

// registered returns the series names the package's metrics expose, each
// with its label names: every collector of NewRelayMetrics,
// NewConsumerMetrics and NewDedupeMetrics, their optional constant labels
// (table, group) set. A histogram gives its _bucket (with le), _sum and
// _count.
func registered(t *testing.T) map[string][]string {
	t.Helper()
	reg := &countingRegisterer{Registry: prometheus.NewRegistry()}
	relay, err := prom.NewRelayMetrics(reg, prom.Config{Table: "shop.courier_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "payouts"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "payouts"}); err != nil {
		t.Fatal(err)
	}
	// A vector is gathered once it has a series: give each one.
	relay.Claimed(1)
	relay.Batch(1, producer.BatchStages{Claim: time.Millisecond, Publish: time.Millisecond, Settle: time.Millisecond})
	relay.Published("orders", time.Millisecond)
	relay.PublishFailed("orders", "permanent")
	relay.DeadLettered("orders")
	relay.BreakerChanged(producer.BreakerOpen)
	relay.Backlog(1, time.Second)
	relay.Held("orders", 3, time.Unix(60, 0))
	cons.Message("orders", consumer.OutcomeHandled)
	cons.HandlerDuration("orders", time.Millisecond)
	cons.InFlight("orders", 1)
	cons.BreakerChanged("bank-api", gobreaker.StateOpen)
	cons.Lag("orders", 0, 1)
	cons.OldestInFlight("orders", 0, time.Second)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != reg.n {
		t.Fatalf("gathered %d metric families of the %d collectors registered: give the new one a series above", len(families), reg.n)
	}
	out := map[string][]string{}
	for _, f := range families {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
			continue
		}
		out[f.GetName()] = labels
	}
	return out
}

// countingRegisterer counts the collectors registered on its Registry.
// The constructors register with Register alone, and unregister only after
// a failed Register, which fails the test anyway.
type countingRegisterer struct {
	*prometheus.Registry
	n int
}

func (r *countingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if err == nil {
		r.n++
	}
	return err
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

func TestMonitoringUsesRegisteredMetrics(t *testing.T) {
	metrics := registered(t)
	queries := append(dashboardQueries(t, readDashboard(t)), ruleQueries(readRules(t))...)
	for _, test := range readRuleTests(t).Tests {
		for _, s := range test.InputSeries {
			queries = append(queries, query{fmt.Sprintf("alert test %q input series", test.Name), s.Series})
		}
	}
	for _, q := range queries {
		for _, problem := range unknownNames(metrics, q.expr) {
			t.Errorf("%s: %s", q.where, problem)
		}
	}
}

// unknownNames returns what expr names that package prom does not
// register (metrics is registered()): a metric, a label of a metric's
// matchers, or a label of a by, without, on, ignoring, group_left or
// group_right clause that no metric expr selects has. The scrape's job and
// instance are every metric's labels.
func unknownNames(metrics map[string][]string, expr string) []string {
	sels, clauses, err := promqlSelectors(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	known := slices.Clone(targetLabels)
	for _, s := range sels {
		if s.metric == "" { // {__name__=~"…"}: any metric's labels
			for _, labels := range metrics {
				known = append(known, labels...)
			}
			continue
		}
		labels, ok := metrics[s.metric]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not a metric package prom registers (%q)", s.metric, expr))
			continue
		}
		known = append(known, labels...)
		for _, l := range s.labels {
			if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
				problems = append(problems, fmt.Sprintf("%s has no label %s; it has %s, and %s from the scrape (%q)",
					s.metric, l, strings.Join(labels, ", "), strings.Join(targetLabels, ", "), expr))
			}
		}
	}
	for _, l := range clauses {
		if !slices.Contains(known, l) {
			problems = append(problems, fmt.Sprintf("no metric of the expression has the label %s of its by, without, on or ignoring (%q)", l, expr))
		}
	}
	return problems
}

func TestMonitoringUnknownNames(t *testing.T) {
	metrics := registered(t)
	for _, good := range []string{
		`max by (job, instance, table) (courier_outbox_pending{table="a"})`,
		`sum by (le, op) (rate(courier_dedupe_seconds_bucket[5m]))`,
		`courier_outbox_claims_total and on (job, instance, table) courier_outbox_pending`,
		`sum without (topic) (courier_consumer_inflight) * on (group) group_left (topic) courier_consumer_lag`,
	} {
		if problems := unknownNames(metrics, good); len(problems) > 0 {
			t.Errorf("unknownNames(%q) = %q, want none", good, problems)
		}
	}
	for _, bad := range []string{
		`courier_outbox_pendng`,
		`courier_outbox_pending{topic="a"}`,
		`max by (job, tabel) (courier_outbox_pending)`,
		`sum without (opp) (courier_dedupe_errors_total)`,
		`courier_outbox_claims_total and on (job, instanse) courier_outbox_pending`,
		`courier_outbox_pending unless ignoring (grup) courier_outbox_breaker_state`,
		`courier_consumer_lag * on (group) group_left (reason) courier_consumer_inflight`,
		`sum by (topic) (courier_outbox_pending)`,
	} {
		if problems := unknownNames(metrics, bad); len(problems) != 1 {
			t.Errorf("unknownNames(%q) = %q, want one problem", bad, problems)
		}
	}
}

func TestMonitoringChartsEveryMetric(t *testing.T) {
	series := registered(t)
	charted := map[string]bool{}
	for _, q := range dashboardQueries(t, readDashboard(t)) {
		sels, _, err := promqlSelectors(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, s := range sels {
			charted[familyOf(series, s.metric)] = true
		}
	}
	missing := map[string]bool{}
	for name := range series {
		if f := familyOf(series, name); !charted[f] {
			missing[f] = true
		}
	}
	for _, f := range slices.Sorted(maps.Keys(missing)) {
		t.Errorf("no dashboard panel reads %s", f)
	}
}

// familyOf returns the metric family of a series name of registered():
// a histogram's _bucket, _sum and _count belong to the histogram.
func familyOf(series map[string][]string, name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && series[base+"_bucket"] != nil {
			return base
		}
	}
	return name
}

func TestMonitoringAlertsAreTested(t *testing.T) {
	rules := readRules(t)
	tests := readRuleTests(t)
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(alertsFile)}) {
		t.Errorf("%s tests rule files %q, want [%s]", alertTestsFile, tests.RuleFiles, filepath.Base(alertsFile))
	}
	fires := map[string]bool{}
	for _, test := range tests.Tests {
		for _, a := range test.AlertRuleTests {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s never fires in %s: add a test whose exp_alerts expects it", r.Alert, alertTestsFile)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", alertsFile)
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not have", alertTestsFile, name, alertsFile)
		}
	}
}

// TestObservabilityGuideListsTheAlerts: the table of alerts in the
// observability guide (docs/observability.md) has one row per alert of the
// rules, in their order, with the rule's severity.
func TestObservabilityGuideListsTheAlerts(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				want = append(want, r.Alert+" "+r.Labels["severity"])
			}
		}
	}
	for line := range strings.Lines(string(readme)) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`Courier") {
			continue
		}
		got = append(got, strings.Trim(strings.TrimSpace(cells[1]), "`")+" "+strings.TrimSpace(cells[2]))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/observability.md's alert table lists (alert severity)\n%s\nwant, as %s has them,\n%s", strings.Join(got, "\n"), alertsFile, strings.Join(want, "\n"))
	}
}
