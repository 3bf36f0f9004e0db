package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
)

func TestKafkaSaramaProducesAndConsumesThroughThreeBrokers(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.Brokers(3))
	if k.Cluster != nil && len(k.Brokers) != 3 {
		t.Fatalf("kfake brokers = %v, want 3 addresses", k.Brokers)
	}
	topic := k.Topic(t, 3)

	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatalf("sarama client: %v", err)
	}
	defer client.Close()
	if k.Cluster != nil && len(client.Brokers()) != 3 {
		t.Fatalf("metadata lists %d brokers, want 3", len(client.Brokers()))
	}

	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatalf("sync producer: %v", err)
	}
	defer producer.Close()
	want := map[string]string{}
	for i := range 30 {
		key, value := fmt.Sprintf("key-%d", i%7), fmt.Sprintf(`{"n":%d}`, i)
		want[value] = key
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic:   topic,
			Key:     sarama.StringEncoder(key),
			Value:   sarama.StringEncoder(value),
			Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte(value)}},
		})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	got := map[string]string{}
	keyPartition := map[string]int32{}
	for p := range int32(3) {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("high watermark of partition %d: %v", p, err)
		}
		if hwm == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consume partition %d: %v", p, err)
		}
		for msg := range pc.Messages() {
			if h := msg.Headers; len(h) != 1 || string(h[0].Value) != string(msg.Value) {
				t.Errorf("message %s: headers %v, want ce_id=%s", msg.Value, h, msg.Value)
			}
			got[string(msg.Value)] = string(msg.Key)
			if prev, seen := keyPartition[string(msg.Key)]; seen && prev != p {
				t.Errorf("key %s on partitions %d and %d", msg.Key, prev, p)
			}
			keyPartition[string(msg.Key)] = p
			if msg.Offset == hwm-1 {
				break
			}
		}
		pc.AsyncClose()
	}
	if len(got) != len(want) {
		t.Fatalf("consumed %d distinct messages, want %d", len(got), len(want))
	}
	for v, key := range want {
		if got[v] != key {
			t.Errorf("message %s: key %q, want %q", v, got[v], key)
		}
	}
}

func TestPostgresGivesEachTestItsOwnSchema(t *testing.T) {
	t.Parallel()
	var schemas []string
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			pg := testkit.Postgres(t)
			var current string
			if err := pg.Pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&current); err != nil {
				t.Fatal(err)
			}
			if current != pg.Schema {
				t.Fatalf("current_schema() = %q, want the test schema %q", current, pg.Schema)
			}
			if _, err := pg.Pool.Exec(context.Background(), "CREATE TABLE probe (id int)"); err != nil {
				t.Fatal(err)
			}
			schemas = append(schemas, pg.Schema)
		})
	}
	if len(schemas) != 2 || schemas[0] == schemas[1] {
		t.Fatalf("schemas = %v, want two distinct", schemas)
	}
	pg := testkit.Postgres(t)
	for _, s := range schemas {
		var exists bool
		err := pg.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", s).Scan(&exists)
		if err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("schema %s still exists after its test ended", s)
		}
	}
}

func TestRedisPrefixIsCleanedUp(t *testing.T) {
	t.Parallel()
	var prefix string
	t.Run("writer", func(t *testing.T) {
		r := testkit.NewRedis(t)
		prefix = r.Prefix
		for i := range 3 {
			if err := r.Client.Set(context.Background(), fmt.Sprintf("%sk%d", r.Prefix, i), "v", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	r := testkit.NewRedis(t)
	if r.Prefix == prefix {
		t.Fatalf("two tests share the prefix %q", prefix)
	}
	keys, err := r.Client.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("keys left under %s: %v", prefix, keys)
	}
}

func TestParseBrokers(t *testing.T) {
	got := testkit.ParseBrokers(" a:9092, ,b:9093,")
	if want := []string{"a:9092", "b:9093"}; !slices.Equal(got, want) {
		t.Fatalf("ParseBrokers = %v, want %v", got, want)
	}
	if got := testkit.ParseBrokers(""); got != nil {
		t.Fatalf("ParseBrokers(\"\") = %v, want nil", got)
	}
}

func TestUniqueNameIsAnIdentifier(t *testing.T) {
	a, b := testkit.UniqueName(t, 20), testkit.UniqueName(t, 20)
	if a == b {
		t.Fatalf("UniqueName returned %q twice", a)
	}
	for _, n := range []string{a, b} {
		if len(n) > 20 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			t.Fatalf("UniqueName = %q: want at most 20 bytes of [a-z0-9_]", n)
		}
	}
}

// TestUnreachableServiceFailsUnderCI runs a test against a dead PostgreSQL
// port in a child process: under CI=true it must fail with a hint, elsewhere
// it is skipped with the same hint.
func TestUnreachableServiceFailsUnderCI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ci       string
		wantFail bool
		wantLine string
	}{
		{ci: "true", wantFail: true, wantLine: "--- FAIL: TestHelperUnreachablePostgres"},
		{ci: "", wantFail: false, wantLine: "--- SKIP: TestHelperUnreachablePostgres"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperUnreachablePostgres$", "-test.v")
		cmd.Env = append(os.Environ(),
			"COURIER_TESTKIT_HELPER=1",
			"CI="+tc.ci,
			testkit.EnvDatabaseURL+"=postgres://postgres@127.0.0.1:1/test?connect_timeout=2",
		)
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if failed := errors.As(err, &exitErr); failed != tc.wantFail {
			t.Fatalf("CI=%q: child failed=%v (err %v), want %v\n%s", tc.ci, failed, err, tc.wantFail, out)
		}
		for _, want := range []string{tc.wantLine, "make services", "PostgreSQL is not reachable"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("CI=%q: output lacks %q:\n%s", tc.ci, want, out)
			}
		}
	}
}

// TestHelperUnreachablePostgres is the child process of
// TestUnreachableServiceFailsUnderCI; run directly, it does nothing (the
// os/exec TestHelperProcess idiom).
func TestHelperUnreachablePostgres(t *testing.T) {
	if os.Getenv("COURIER_TESTKIT_HELPER") != "1" {
		return
	}
	testkit.Postgres(t)
	t.Fatal("testkit.Postgres returned for an unreachable server")
}
