package bench

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
)

// TestSoakSamplesTheQueueAndCleansUp runs a six-second soak at 200
// events/s on the test database and an in-process broker: a sample every
// second and a last one once the relay drained the queue, every event
// enqueued published, sizes measured, the verdict computed from the
// samples, and the schema and topic gone afterwards.
func TestSoakSamplesTheQueueAndCleansUp(t *testing.T) {
	t.Parallel()
	ctx, pg, brokers := services(t)
	var progressOut bytes.Buffer
	report, err := Soak(ctx, SoakConfig{DatabaseURL: pg.URL, Brokers: brokers, Rate: 200, Duration: 6 * time.Second,
		Sample: time.Second, Settle: 2 * time.Second, Name: testkit.UniqueName(t, 30), Progress: &progressOut})
	if err != nil {
		t.Fatalf("Soak: %v\n%s", err, progressOut.String())
	}

	samples := report.Samples
	if len(samples) < 6 {
		t.Fatalf("%d samples, want at least 6 (one a second and one after the drain)", len(samples))
	}
	last := samples[len(samples)-1]
	if !last.Drained || last.Backlog != 0 || !report.Verdict.Drained {
		t.Errorf("the last sample %+v (verdict drained %v): want the drained one, with no backlog", last, report.Verdict.Drained)
	}
	if report.Enqueued == 0 || report.Published != report.Enqueued || report.DeadLettered != 0 {
		t.Errorf("enqueued %d, published %d, dead-lettered %d: want every event enqueued published", report.Enqueued, report.Published, report.DeadLettered)
	}
	for i, s := range samples {
		if s.Queue.TableBytes <= 0 || s.Queue.IndexBytes <= 0 || s.HistoryBytes <= 0 {
			t.Errorf("sample %d has no sizes: %+v", i, s)
		}
		if !s.Drained && s.EnqueueRate <= 0 {
			t.Errorf("sample %d under load enqueued nothing: %+v", i, s)
		}
	}
	if n := strings.Count(progressOut.String(), "soak minute "); n != len(samples) {
		t.Errorf("%d progress lines of samples, want %d:\n%s", n, len(samples), progressOut.String())
	}

	// The verdict, from the samples: the reference is the sample at 2s, the
	// end the last under load.
	v := report.Verdict
	if !v.Evaluated || v.End != len(samples)-2 || (samples[v.Reference].Elapsed-2*time.Second).Abs() > 500*time.Millisecond {
		t.Fatalf("verdict %+v: want it evaluated, the reference at 2s and the end at sample %d", v, len(samples)-2)
	}
	ref, end := samples[v.Reference], samples[v.End]
	after := samples[v.Reference+1 : v.End+1]
	minRate := slices.MinFunc(after, func(a, b SoakSample) int { return cmp.Compare(a.EnqueueRate, b.EnqueueRate) }).EnqueueRate
	maxLag := slices.MaxFunc(after, func(a, b SoakSample) int { return cmp.Compare(a.Lag, b.Lag) }).Lag
	tableRatio := float64(end.Queue.TableBytes) / float64(ref.Queue.TableBytes)
	indexRatio := float64(end.Queue.IndexBytes) / float64(ref.Queue.IndexBytes)
	if v.TableRatio != tableRatio || v.IndexRatio != indexRatio || v.MinRate != minRate || v.MaxLag != maxLag || v.LagAtSettle != ref.Lag {
		t.Errorf("verdict %+v: want table ratio %v, index ratio %v, min rate %v, max lag %v, lag at settle %v", v, tableRatio, indexRatio, minRate, maxLag, ref.Lag)
	}
	if v.TableOK != (tableRatio <= 1.2) || v.IndexOK != (indexRatio <= 1.2) || v.RateFlat != (minRate >= 190) ||
		v.LagFlat != (maxLag <= 2*ref.Lag+time.Second) || v.Pass != (v.TableOK && v.IndexOK && v.RateFlat && v.LagFlat) {
		t.Errorf("verdict %+v does not follow its rules", v)
	}

	var schemaLeft bool
	if err := pg.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", report.Schema).Scan(&schemaLeft); err != nil {
		t.Fatal(err)
	}
	if report.Schema == "" || schemaLeft {
		t.Errorf("schema %q is still there after the soak", report.Schema)
	}
	admin, err := sarama.NewClusterAdmin(brokers, defaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if _, left := topics[report.Topic]; left {
		t.Errorf("topic %s is still there after the soak", report.Topic)
	}
}

// TestSoakVerdictAppliesTheGoalsRules judges made-up samples, a minute
// apart, with the reference at minute 5: sizes at most 20 % above the
// reference's, every rate after it at least 95 %, the largest lag after
// it at most twice its own plus 1s; what happens before the reference does
// not count.
func TestSoakVerdictAppliesTheGoalsRules(t *testing.T) {
	steady := func() []SoakSample {
		var samples []SoakSample
		for m := 1; m <= 10; m++ {
			samples = append(samples, SoakSample{Elapsed: time.Duration(m) * time.Minute, EnqueueRate: 3000, Lag: 100 * time.Millisecond,
				Queue: SoakTable{TableBytes: 1000, IndexBytes: 500}})
		}
		return append(samples, SoakSample{Elapsed: 10*time.Minute + time.Second, Drained: true})
	}
	for _, c := range []struct {
		name   string
		change func(s []SoakSample)
		check  func(v SoakVerdict) bool
	}{
		{"steady", func([]SoakSample) {}, func(v SoakVerdict) bool {
			return v.Pass && v.Drained && v.Reference == 4 && v.End == 9 && v.TableRatio == 1 && v.MinRate == 3000 && v.MaxLag == 100*time.Millisecond
		}},
		{"table 19% larger", func(s []SoakSample) { s[9].Queue.TableBytes = 1190 }, func(v SoakVerdict) bool { return v.TableOK && v.Pass }},
		{"table 21% larger", func(s []SoakSample) { s[9].Queue.TableBytes = 1210 }, func(v SoakVerdict) bool { return !v.TableOK && v.IndexOK && !v.Pass }},
		{"indexes 21% larger", func(s []SoakSample) { s[9].Queue.IndexBytes = 605 }, func(v SoakVerdict) bool { return !v.IndexOK && !v.Pass }},
		{"table vacuumed to half", func(s []SoakSample) { s[9].Queue.TableBytes = 500 }, func(v SoakVerdict) bool { return v.TableOK && v.Pass }},
		{"bloat before the reference", func(s []SoakSample) { s[0].Queue.TableBytes = 1 }, func(v SoakVerdict) bool { return v.Pass }},
		{"rate at 94% after it", func(s []SoakSample) { s[7].EnqueueRate = 2820 }, func(v SoakVerdict) bool { return !v.RateFlat && v.MinRate == 2820 && !v.Pass }},
		{"rate at 94% before it", func(s []SoakSample) { s[2].EnqueueRate = 2820 }, func(v SoakVerdict) bool { return v.RateFlat && v.Pass }},
		{"lag at 2x+1s", func(s []SoakSample) { s[6].Lag = 1200 * time.Millisecond }, func(v SoakVerdict) bool { return v.LagFlat && v.Pass }},
		{"lag above 2x+1s", func(s []SoakSample) { s[6].Lag = 1201 * time.Millisecond }, func(v SoakVerdict) bool { return !v.LagFlat && !v.Pass }},
		{"not drained", func(s []SoakSample) { s[10].Backlog = 7 }, func(v SoakVerdict) bool { return !v.Drained && v.Pass }},
	} {
		samples := steady()
		c.change(samples)
		if v := judge(samples, 3000, 5*time.Minute); !c.check(v) {
			t.Errorf("%s: verdict %+v", c.name, v)
		}
	}
	if v := judge(steady()[:5], 3000, 5*time.Minute); v.Evaluated || v.Pass {
		t.Errorf("interrupted at the reference: verdict %+v, want none", v)
	}
}

// TestSoakReportMarkdown renders a report of made-up samples: the section,
// the paragraph with the rate and duration, a row per sample and the
// verdict with its rules.
func TestSoakReportMarkdown(t *testing.T) {
	r := SoakReport{PostgreSQL: "15.20", Autovacuum: "off", Rate: 3000, Duration: 10 * time.Minute, Sample: time.Minute, Settle: 5 * time.Minute,
		Enqueuers: 32, Relay: SoakRelay{Workers: 2, BatchSize: 1000, Retention: 7 * 24 * time.Hour, CleanupInterval: time.Minute},
		Enqueued: 1_800_000, Published: 1_800_000}
	for m := 1; m <= 10; m++ {
		r.Samples = append(r.Samples, SoakSample{Elapsed: time.Duration(m) * time.Minute, EnqueueRate: 3001, Backlog: 12, Lag: 4 * time.Millisecond,
			Queue: SoakTable{TableBytes: int64(m) << 20, IndexBytes: 1 << 19, LiveTuples: 12, DeadTuples: int64(m) * 180_000}, HistoryBytes: int64(m) * 100 << 20})
	}
	r.Samples = append(r.Samples, SoakSample{Elapsed: 10*time.Minute + 2*time.Second, Drained: true})
	r.Verdict = judge(r.Samples, r.Rate, r.Settle)
	var out bytes.Buffer
	if err := r.WriteMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	doc := out.String()
	for _, want := range []string{
		"\n## Soak\n\nEnqueued 3,000 events/s for 10m0s, one event per transaction",
		"retention of 7 days run every 1m0s",
		"| minute | enqueued/s | backlog | lag ms | queue table MB | queue indexes MB | queue live/dead tuples | vacuums | waiting table MB | history MB |\n| --- | ---: |",
		"| 5 | 3,001 | 12 | 4.0 | 5.000 | 0.500 | 12/900,000 | 0 | 0.000 | 500.0 |\n",
		"| 10.03 (drained) | – | 0 |",
		"- Queue table: 10.0 MB at the end, 5.000 MB at minute 5, 2.00×: **fail** (rule: at most 20 % above the reference).\n",
		"- Queue indexes: 0.500 MB at the end, 0.500 MB at minute 5, 1.00×: **pass**",
		"- Enqueue rate: at least 3,001 events/s in every sample after minute 5, 100.0 % of 3,000: **flat**",
		"- Relay lag: at most 4.0 ms after minute 5, 4.0 ms at it: **flat** (rule: the largest lag after the reference at most 2 × the reference's + 1s).\n",
		"- Verdict: **fail**.\n",
		"- Drain: **drained**: the relay published all 1,800,000 events enqueued",
		"- Note: autovacuum is off",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the section lacks %q:\n%s", want, doc)
		}
	}
}
