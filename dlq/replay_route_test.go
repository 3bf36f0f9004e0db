package dlq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
)

// TestReplayRouteWritesWhereRouteSays: with Route, each record goes to the
// topic Route names with the key, value and headers Route gives, on its
// original partition, with replay_count set by Replay; a record Route
// refuses is skipped with Route's error as the reason and stays, so a later
// run moves it; a dry run reports Route's target.
func TestReplayRouteWritesWhereRouteSays(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 3)
	side := f.topic + ".side"
	f.k.CreateTopic(t, side, 3)
	f.deadLetter(t, dlq.Original{Partition: 2, Offset: 9, Key: []byte("order-1"), Value: []byte("v1"),
		Headers: []dlq.Header{{Key: []byte("ce_id"), Value: []byte("evt-1")}}},
		dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted, ConsumerGroup: "payouts", ReplayCount: 1}, false)
	f.deadLetter(t, dlq.Original{Partition: dlq.NoPartition, Offset: dlq.NoOffset, Key: []byte("order-2"), Value: []byte("v2")},
		dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted}, false)

	refuseRelay := true
	route := func(e dlq.Envelope) (*record.Record, error) {
		if e.ConsumerGroup == "" && refuseRelay {
			return nil, errors.New("no consumer group: replay it to its topic")
		}
		o, err := e.Original()
		if err != nil {
			return nil, err
		}
		headers := append(o.Headers, dlq.Header{Key: []byte("routed"), Value: []byte("yes")},
			dlq.Header{Key: []byte(dlq.ReplayCountHeader), Value: []byte("99")}) // Replay replaces it
		return &record.Record{Topic: side, Key: append([]byte("routed-"), o.Key...), Value: o.Value, Headers: headers, Partition: 0}, nil
	}

	dry, dryRecords := f.mustReplay(t, dlq.ReplayConfig{Route: route, DryRun: true})
	if dry.Moved != 1 || dry.Skipped != 1 || len(dryRecords) != 2 {
		t.Fatalf("dry run: %+v %+v, want 1 would_move and 1 skipped", dry, dryRecords)
	}
	for _, r := range dryRecords {
		switch r.Action {
		case dlq.ActionWouldMove:
			if r.To != side || r.ToPartition != 2 {
				t.Errorf("dry run reported %s to %s/%d, want %s/2", r.Action, r.To, r.ToPartition, side)
			}
		case dlq.ActionSkipped:
			if r.Reason != "no consumer group: replay it to its topic" || r.To != "" {
				t.Errorf("skipped with reason %q to %q, want Route's error and no target", r.Reason, r.To)
			}
		default:
			t.Errorf("dry run reported %+v", r)
		}
	}
	if n := len(f.k.ReadAll(t, side)); n != 0 {
		t.Fatalf("the dry run wrote %d records", n)
	}

	report, records := f.mustReplay(t, dlq.ReplayConfig{Route: route})
	if report.Moved != 1 || report.Skipped != 1 || len(records) != 2 {
		t.Fatalf("replay: %+v %+v, want 1 moved and 1 skipped", report, records)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Errorf("the original topic got %d records; Route sends them elsewhere", n)
	}
	got := f.k.ReadAll(t, side)
	if len(got) != 1 {
		t.Fatalf("%s holds %d records, want 1", side, len(got))
	}
	m := got[0]
	want := []dlq.Header{{Key: []byte("ce_id"), Value: []byte("evt-1")}, {Key: []byte("routed"), Value: []byte("yes")},
		{Key: []byte(dlq.ReplayCountHeader), Value: []byte("2")}}
	if m.Partition != 2 || string(m.Key) != "routed-order-1" || string(m.Value) != "v1" || !sameHeaders(m.Headers, want) {
		t.Errorf("routed record %s/%d %q=%q %s, want partition 2 (the original) routed-order-1=v1 %s",
			m.Topic, m.Partition, m.Key, m.Value, showHeaders(m.Headers), showDLQHeaders(want))
	}

	// The refused record stayed: once Route takes it, a later run moves it
	// (by key, as it never had a partition), and only it.
	refuseRelay = false
	later, records := f.mustReplay(t, dlq.ReplayConfig{Route: route})
	if later.Moved != 1 || later.Skipped != 0 || later.Total != 1 || len(records) != 1 || records[0].Entry.Envelope.ConsumerGroup != "" {
		t.Fatalf("later run: %+v %+v, want the relay's dead letter moved alone", later, records)
	}
}

// TestReplayRouteErrors: Route with To is a config error; Route returning
// nothing stops the run; Route naming the dead-letter topic itself, or a
// topic that does not exist, skips the record.
func TestReplayRouteErrors(t *testing.T) {
	t.Parallel()
	route := func(dlq.Envelope) (*record.Record, error) { return &record.Record{Topic: "orders"}, nil }
	_, err := dlq.Replay(t.Context(), dlq.ReplayConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", To: "orders", Route: route})
	if !errors.Is(err, dlq.ErrInvalidReplayConfig) || !strings.Contains(err.Error(), "To and Route are both set") {
		t.Errorf("Route with To: %v, want ErrInvalidReplayConfig naming both", err)
	}

	f := newReplayFixture(t, 1)
	f.failed(t, "order-1", "boom")
	_, _, err = f.replay(t, dlq.ReplayConfig{Route: func(dlq.Envelope) (*record.Record, error) { return nil, nil }})
	if err == nil || !strings.Contains(err.Error(), "Route returned neither a record nor an error") {
		t.Errorf("Route returning nil, nil: %v, want the run stopped saying so", err)
	}
	for target, reason := range map[string]string{
		f.dlqTopic:          "the dead-letter topic being replayed",
		f.topic + ".absent": "does not exist",
		"bad topic":         "Route's target topic",
	} {
		report, records := f.mustReplay(t, dlq.ReplayConfig{Route: func(dlq.Envelope) (*record.Record, error) { return &record.Record{Topic: target}, nil }})
		if report.Skipped != 1 || len(records) != 1 || !strings.Contains(records[0].Reason, reason) {
			t.Errorf("Route to %q: %+v %+v, want skipped saying %q", target, report, records, reason)
		}
	}
}
