package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// hostileRecord is a record a hostile or broken writer puts in a
// dead-letter topic. topic is the fixture's main topic; dlqTopic the
// dead-letter topic being replayed.
type hostileRecord func(t *testing.T, topic, dlqTopic string) *sarama.ProducerMessage

// envelopeRecord is the envelope of a good dead letter of topic, with
// change applied to its JSON fields.
func envelopeRecord(change func(m map[string]any)) hostileRecord {
	return func(t *testing.T, topic, dlqTopic string) *sarama.ProducerMessage {
		value := mutate(func(m map[string]any) {
			m["original_topic"] = topic
			if change != nil {
				change(m)
			}
		})
		value = strings.ReplaceAll(value, "{{dlq}}", dlqTopic)
		return &sarama.ProducerMessage{Topic: dlqTopic, Value: sarama.StringEncoder(value)}
	}
}

// rawRecord is a raw-mode dead letter of topic whose context headers are
// the good ones changed by change (a nil value drops the header; extra
// entries are appended, so a name may repeat).
func rawRecord(change func(headers []dlq.Header) []dlq.Header) hostileRecord {
	return func(t *testing.T, topic, dlqTopic string) *sarama.ProducerMessage {
		rec := deadLetterRecord(t, dlq.Original{Topic: topic, Partition: 0, Offset: 7, Key: []byte("raw"), Value: []byte("raw value")}, true)
		rec.Headers = change(rec.Headers)
		return messageTo(dlqTopic, rec)
	}
}

// deadLetterRecord is the dead-letter record (raw mode if raw) of o,
// failed with "boom".
func deadLetterRecord(t *testing.T, o dlq.Original, raw bool) *record.Record {
	t.Helper()
	env, err := dlq.New(o, dlq.Failure{Error: "boom", Kind: dlq.KindPermanent})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := env.Record()
	if raw {
		rec, err = env.RawRecord()
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// messageTo is the Sarama message that writes rec to topic.
func messageTo(topic string, rec *record.Record) *sarama.ProducerMessage {
	rec.Topic = topic
	return record.Message(rec)
}

// setHeader replaces the value of the context header name (nil: drop it).
func setHeader(name string, value []byte) func([]dlq.Header) []dlq.Header {
	return func(hs []dlq.Header) []dlq.Header {
		var out []dlq.Header
		for _, h := range hs {
			if string(h.Key) == name {
				if value == nil {
					continue
				}
				h.Value = value
			}
			out = append(out, h)
		}
		return out
	}
}

func appendHeader(name string, value []byte) func([]dlq.Header) []dlq.Header {
	return func(hs []dlq.Header) []dlq.Header { return append(hs, dlq.Header{Key: []byte(name), Value: value}) }
}

// TestHostileDLQ writes, between two good dead letters, one record a
// careless or hostile writer could put in a dead-letter topic, and replays
// the topic (for real, then as a dry run on a second group): the bad
// record is reported with a reason naming the problem and counted
// (corrupt or skipped), the good ones are moved, nothing is lost (the bad
// record is still in the dead-letter topic, the target holds exactly the
// good ones) and the run ends in bounded time without an error.
func TestHostileDLQ(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	producer := k.Producer(t)
	for _, tc := range []struct {
		name   string
		record hostileRecord
		// action is what the replay reports for the bad record; reason a
		// part of its reason.
		action dlq.ReplayAction
		reason string
	}{
		{"target topic deleted", envelopeRecord(set("original_topic", "gone.topic.x")), dlq.ActionSkipped, "does not exist"},
		{"target is the dead-letter topic itself", envelopeRecord(set("original_topic", "{{dlq}}")), dlq.ActionSkipped, "would loop"},
		{"target is a retry topic", envelopeRecord(set("original_topic", "orders.retry.5s")), dlq.ActionSkipped, "retry topic"},
		{"not JSON", func(t *testing.T, _, dlqTopic string) *sarama.ProducerMessage {
			return &sarama.ProducerMessage{Topic: dlqTopic, Value: sarama.StringEncoder(`{"envelope_version":1,`)}
		}, dlq.ActionCorrupt, "not valid JSON"},
		{"no value at all", func(t *testing.T, _, dlqTopic string) *sarama.ProducerMessage {
			return &sarama.ProducerMessage{Topic: dlqTopic}
		}, dlq.ActionCorrupt, "corrupt envelope"},
		{"envelope_version missing", envelopeRecord(del("envelope_version")), dlq.ActionCorrupt, "envelope_version"},
		{"envelope_version from the future", envelopeRecord(set("envelope_version", 9)), dlq.ActionCorrupt, "upgrade courier"},
		{"original_topic not a Kafka name", envelopeRecord(set("original_topic", "bad topic!")), dlq.ActionCorrupt, "original_topic"},
		{"original_topic too long", envelopeRecord(set("original_topic", strings.Repeat("t", 250))), dlq.ActionCorrupt, "original_topic"},
		{"original_topic with an escape sequence", envelopeRecord(set("original_topic", "orders\x1b[2J")), dlq.ActionCorrupt, "original_topic"},
		{"negative original_partition", envelopeRecord(set("original_partition", -5)), dlq.ActionCorrupt, "original_partition"},
		{"negative original_offset", envelopeRecord(set("original_offset", -9)), dlq.ActionCorrupt, "original_offset"},
		{"original_partition over int32", envelopeRecord(set("original_partition", 1<<40)), dlq.ActionCorrupt, "original_partition"},
		{"negative replay_count", envelopeRecord(set("replay_count", -1)), dlq.ActionCorrupt, "replay_count"},
		{"replay_count that would overflow", envelopeRecord(set("replay_count", 1<<62)), dlq.ActionCorrupt, "replay_count"},
		{"header list and map disagree", envelopeRecord(func(m map[string]any) {
			m["original_header_list"] = []any{map[string]any{"key": "a", "value": "1"}}
			m["original_headers"], m["original_headers_base64"] = map[string]any{"forged": "x"}, nil
		}), dlq.ActionCorrupt, "original_headers"},
		{"header list entry without a name", envelopeRecord(set("original_header_list", []any{map[string]any{"value": "v"}})), dlq.ActionCorrupt, "original_header_list"},
		{"bad base64 value", envelopeRecord(func(m map[string]any) {
			m["original_message"], m["original_message_base64"] = nil, "!!not base64"
		}), dlq.ActionCorrupt, "original_message_base64"},
		{"raw mode without dlq_original_topic", rawRecord(setHeader(dlq.HeaderOriginalTopic, nil)), dlq.ActionCorrupt, dlq.HeaderOriginalTopic},
		{"raw mode with a duplicate, bad dlq_original_topic", rawRecord(appendHeader(dlq.HeaderOriginalTopic, []byte("bad/topic"))), dlq.ActionCorrupt, "original_topic"},
		{"raw mode with a non-UTF-8 dlq_original_topic", rawRecord(setHeader(dlq.HeaderOriginalTopic, []byte{0xff, 0xfe})), dlq.ActionCorrupt, "original_topic"},
		{"raw mode with a negative dlq_original_offset", rawRecord(setHeader(dlq.HeaderOriginalOffset, []byte("-3"))), dlq.ActionCorrupt, "original_offset"},
		{"raw mode with a dlq_replay_count that is no number", rawRecord(setHeader(dlq.HeaderReplayCount, []byte("1e9"))), dlq.ActionCorrupt, dlq.HeaderReplayCount},
		{"unknown dlq_format", rawRecord(setHeader(dlq.HeaderFormat, []byte("zstd"))), dlq.ActionCorrupt, dlq.HeaderFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := k.Topic(t, 2)
			dlqTopic := dlq.Topic(topic, "")
			k.CreateTopic(t, dlqTopic, 1)
			good := func(key string) {
				rec := deadLetterRecord(t, dlq.Original{Topic: topic, Partition: 1, Offset: 3, Key: []byte(key), Value: []byte(`{"k":"` + key + `"}`)}, false)
				if _, _, err := producer.SendMessage(messageTo(dlqTopic, rec)); err != nil {
					t.Fatal(err)
				}
			}
			good("before")
			_, badOffset, err := producer.SendMessage(tc.record(t, topic, dlqTopic))
			if err != nil {
				t.Fatal(err)
			}
			good("after")

			for _, dry := range []bool{true, false} {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				var mu sync.Mutex
				var bad []dlq.ReplayedRecord
				report, err := dlq.Replay(ctx, dlq.ReplayConfig{
					Brokers: k.Brokers, Sarama: k.Config(), Topic: dlqTopic, Group: "g-" + fmt.Sprint(dry), DryRun: dry,
					OnRecord: func(r dlq.ReplayedRecord) {
						mu.Lock()
						defer mu.Unlock()
						if r.Action != dlq.ActionMoved && r.Action != dlq.ActionWouldMove {
							bad = append(bad, r)
						}
					},
				})
				cancel()
				if err != nil {
					t.Fatalf("dry run %v: Replay stopped: %v (report %+v)", dry, err, report)
				}
				if report.Moved != 2 || report.Corrupt+report.Skipped != 1 || report.Read != 3 {
					t.Errorf("dry run %v: report %+v, want 2 moved and the bad record counted once", dry, report)
				}
				if len(bad) != 1 || bad[0].Action != tc.action || bad[0].Entry.Offset != badOffset || !strings.Contains(bad[0].Reason, tc.reason) {
					t.Fatalf("dry run %v: reported %+v, want one %s at offset %d whose reason names %q", dry, bad, tc.action, badOffset, tc.reason)
				}
				if tc.action == dlq.ActionSkipped && report.Skipped != 1 || tc.action == dlq.ActionCorrupt && report.Corrupt != 1 {
					t.Errorf("dry run %v: counted %+v as the wrong kind (want %s)", dry, report, tc.action)
				}
			}
			// Nothing lost: the target holds exactly the two good records,
			// the dead-letter topic still holds all three.
			var keys []string
			for _, m := range k.ReadAll(t, topic) {
				keys = append(keys, string(m.Key))
			}
			if len(keys) != 2 || !(keys[0] == "before" && keys[1] == "after" || keys[0] == "after" && keys[1] == "before") {
				t.Errorf("target topic holds %q, want the two good records", keys)
			}
			if n := len(k.ReadAll(t, dlqTopic)); n != 3 {
				t.Errorf("dead-letter topic holds %d records, want all 3 kept", n)
			}
		})
	}
}

// TestHostileDLQSkippedRecordStaysForALaterRun: a record skipped for a
// missing target topic is left unsettled, so once the topic exists the
// same group moves it, and only it.
func TestHostileDLQSkippedRecordStaysForALaterRun(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	f.failed(t, "a", "boom")
	missing := f.topic + ".later"
	rec := deadLetterRecord(t, dlq.Original{Topic: missing, Partition: 0, Offset: 1, Key: []byte("b"), Value: []byte(`{}`)}, false)
	if _, _, err := f.producer.SendMessage(messageTo(f.dlqTopic, rec)); err != nil {
		t.Fatal(err)
	}
	report, _ := f.mustReplay(t, dlq.ReplayConfig{})
	if report.Moved != 1 || report.Skipped != 1 {
		t.Fatalf("first run: %+v, want 1 moved and 1 skipped", report)
	}
	f.k.CreateTopic(t, missing, 1)
	report, records := f.mustReplay(t, dlq.ReplayConfig{})
	if report.Moved != 1 || report.Skipped != 0 || len(records) != 1 || string(mustKey(t, records[0])) != "b" {
		t.Fatalf("second run: %+v %+v, want only the skipped record moved", report, records)
	}
}

func mustKey(t *testing.T, r dlq.ReplayedRecord) []byte {
	t.Helper()
	o, err := r.Entry.Envelope.Original()
	if err != nil {
		t.Fatal(err)
	}
	return o.Key
}

// FuzzEnvelope reads arbitrary dead-letter records (value, key and
// headers, in either mode): Read never panics, its errors are
// *EnvelopeError, and an envelope it accepts writes back (Record and
// RawRecord) to records that read to the same original, whose encoding
// is stable.
func FuzzEnvelope(f *testing.F) {
	f.Add([]byte(sampleEnvelope), []byte("k"), []byte(""), []byte(""), []byte(""), []byte(""))
	f.Add([]byte("raw value"), []byte("k"), []byte(dlq.HeaderFormat), []byte(dlq.FormatRaw), []byte(dlq.HeaderEnvelopeVersion), []byte("1"))
	f.Add([]byte(`{"envelope_version":1,"original_topic":"t"}`), []byte{0xff}, []byte("DLQ_FORMAT"), []byte("envelope"), []byte{0xff}, []byte{0})
	f.Add([]byte{}, []byte(nil), []byte(dlq.HeaderFormat), []byte("raw"), []byte(dlq.HeaderOriginalTopic), []byte("orders"))
	f.Add([]byte(mutate(set("replay_count", 1<<40))), []byte("k"), []byte("x"), []byte("y"), []byte("x"), []byte("z"))
	f.Fuzz(func(t *testing.T, value, key, h1k, h1v, h2k, h2v []byte) {
		headers := []dlq.Header{{Key: h1k, Value: h1v}, {Key: h2k, Value: h2v}}
		if bytes.EqualFold(h1k, []byte(dlq.HeaderFormat)) && string(h1v) == dlq.FormatRaw {
			// A raw record: give it the context headers of a good one, so
			// the fuzzer gets past the required ones to the originals.
			env, err := dlq.New(dlq.Original{Topic: "t", Partition: 0, Offset: 1}, dlq.Failure{Kind: dlq.KindPermanent})
			if err != nil {
				t.Fatal(err)
			}
			headers = append(env.Headers(), headers...)
		}
		env, err := dlq.Read(key, value, headers)
		if err != nil {
			if _, ok := errors.AsType[*dlq.EnvelopeError](err); !ok {
				t.Fatalf("Read error %v is not an *EnvelopeError", err)
			}
			return
		}
		first, err := env.Original()
		if err != nil {
			t.Fatalf("Read accepted an envelope Original rejects: %v", err)
		}
		encoded, err := dlq.Encode(env)
		if err != nil {
			t.Fatalf("Read accepted an envelope Encode rejects: %v", err)
		}
		for _, mode := range []string{dlq.FormatEnvelope, dlq.FormatRaw} {
			rec, err := env.Record()
			if mode == dlq.FormatRaw {
				rec, err = env.RawRecord()
			}
			if err != nil {
				t.Fatalf("%s record of an accepted envelope: %v", mode, err)
			}
			again, err := dlq.Read(rec.Key, rec.Value, rec.Headers)
			if err != nil {
				t.Fatalf("reading back the %s record: %v", mode, err)
			}
			second, err := again.Original()
			if err != nil {
				t.Fatal(err)
			}
			if mode == dlq.FormatRaw {
				// Raw mode drops original headers named dlq_*.
				var kept []dlq.Header
				for _, h := range first.Headers {
					if !bytes.HasPrefix(bytes.ToLower(h.Key), []byte("dlq_")) {
						kept = append(kept, h)
					}
				}
				want := first
				want.Headers = kept
				checkSameOriginal(t, second, want)
				continue
			}
			checkSameOriginal(t, second, first)
			reencoded, err := dlq.Encode(again)
			if err != nil || !bytes.Equal(reencoded, encoded) {
				t.Fatalf("envelope encodes to\n%s\nthen, read back, to\n%s (%v)", encoded, reencoded, err)
			}
		}
	})
}
