package bench

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRelayHistoryDrainRunsWhateverOnlyNames: a run asked for a history
// drain makes it, beside its baseline (the relay's defaults) and the plain
// loops, even when Only names other configurations; Only leaves the rest
// out, and every drain publishes its whole backlog.
func TestRelayHistoryDrainRunsWhateverOnlyNames(t *testing.T) {
	t.Parallel()
	ctx, pg, brokers := services(t)
	report, err := Relay(ctx, RelayConfig{DatabaseURL: pg.URL, Brokers: brokers, Backlogs: []int{300}, History: 1000,
		Only: []string{RelayDiscard}, ScaleDelay: -1, LatencyDuration: -1, Name: testkit.UniqueName(t, 30)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range report.Throughput {
		names = append(names, res.Name)
		if res.Rate <= 0 {
			t.Errorf("%s: %v events/s, want its backlog drained", res.Name, res.Rate)
		}
		// The relay's rows say where its batches' time went, from its
		// BatchHook: every event of the backlog in some batch.
		if s := res.Stages; strings.HasPrefix(res.Name, "relay/") != (s != nil) ||
			s != nil && (s.Batches < 1 || math.Abs(s.EventsPerBatch*float64(s.Batches)-300) > 0.01 || s.ClaimMs <= 0 || s.PublishMs <= 0 || s.SettleMs <= 0) {
			t.Errorf("%s: batch stages %+v, want the relay's batches (of the 300 events) and no figure for a plain loop", res.Name, s)
		}
	}
	want := []string{PlainLoop + "/events=300", "plain-skip-locked-loop/delete/workers=1/events=300", PlainLoopKeep + "/events=300",
		RelayDefaults + "/events=300", RelayDiscard + "/events=300", RelayDefaults + "/history=1,000/events=300"}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("configurations %q, want %q", names, want)
	}
}

// services are what a harness test runs on: a context that ends with the
// test (within 2 minutes), the test database and an in-process broker.
func services(t *testing.T) (context.Context, *testkit.PG, []string) {
	t.Helper()
	pg := testkit.Postgres(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, pg, cluster.ListenAddrs()
}

// TestRelayTracedRunsBesideItsBaseline: --only relay/traced also drains
// with relay/defaults, its baseline, so that its ratio is one.
func TestRelayTracedRunsBesideItsBaseline(t *testing.T) {
	t.Parallel()
	ctx, pg, brokers := services(t)
	report, err := Relay(ctx, RelayConfig{DatabaseURL: pg.URL, Brokers: brokers, Backlogs: []int{300},
		Only: []string{RelayTraced}, ScaleDelay: -1, LatencyDuration: -1, Name: testkit.UniqueName(t, 30)})
	if err != nil {
		t.Fatal(err)
	}
	var traced *ThroughputResult
	for i, res := range report.Throughput {
		if res.Name == RelayTraced+"/events=300" {
			traced = &report.Throughput[i]
		}
	}
	if traced == nil || traced.Baseline != RelayDefaults+"/events=300" || traced.Ratio <= 0 {
		t.Errorf("relay/traced: %+v, want a ratio to relay/defaults", traced)
	}
}

// TestLatencyRunLetsEnqueueAssignTheIDs: the latency run enqueues as a
// service does, leaving each event's id to Enqueue, so it measures the
// relay and not the price of ids of one's own (a row each in the keys
// table, which an earlier harness paid for every event): after the
// warm-up and a phase, every event arrived and the keys table is empty.
func TestLatencyRunLetsEnqueueAssignTheIDs(t *testing.T) {
	t.Parallel()
	ctx, pg, brokers := services(t)
	run, err := NewLatencyRun(ctx, RelayConfig{DatabaseURL: pg.URL, Brokers: brokers, LatencyDuration: 200 * time.Millisecond,
		Name: testkit.UniqueName(t, 30)}, RelayDefaults, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := run.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := run.Phase(ctx); err != nil {
		t.Fatal(err)
	}
	res := run.Result()
	if res.Events == 0 || res.Unarrived > 0 {
		t.Fatalf("the phase measured %d events, %d of them never arrived", res.Events, res.Unarrived)
	}
	// The phase's batches say where their time went.
	if s := res.Stages; s == nil || s.Batches < 1 || s.PublishMs <= 0 {
		t.Errorf("batch stages %+v, want those of the phase's batches", s)
	}
	var keys int
	if err := run.table.pool.QueryRow(ctx, "SELECT count(*) FROM "+run.table.schema+".courier_outbox_keys").Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 {
		t.Errorf("the keys table holds %d rows: the run enqueued ids of its own", keys)
	}
}
