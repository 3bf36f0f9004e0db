package producer

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/courierkit/courier/kafkaauth"
)

// TestClassesFollowKafka: every error code Kafka classes as retriable is
// the cluster's condition, held with no attempt counted, except
// CORRUPT_MESSAGE, a refusal of the record itself; of the codes Kafka does
// not retry, only those that refuse the record count an attempt, and the
// others (an unknown server error, a refused access) are held too. A
// refusal after a try whose fate is unknown is held: it may have been
// appended.
func TestClassesFollowKafka(t *testing.T) {
	t.Parallel()
	for code := int16(-1); code < 200; code++ {
		k, ok := kerr.ErrorForCode(code).(*kerr.Error)
		if !ok || code == 0 {
			continue
		}
		err := placedError{topicPartition{"orders", 3}, sarama.KError(code)}
		got := classify(err)
		switch _, refusal := recordRefusals[sarama.KError(code)]; {
		case refusal && got == failHeld:
			t.Errorf("%s: held, want a refusal of the record", k.Message)
		case !refusal && got != failHeld:
			t.Errorf("%s (Kafka: retriable %v): %v, want held: it says nothing of the record", k.Message, k.Retriable, got)
		case k.Retriable && got != failHeld && code != kerr.CorruptMessage.Code:
			t.Errorf("%s: Kafka retries it, courier %v; want held", k.Message, got)
		}
		if unknown := classify(fmt.Errorf("wrapped: %w", fateUnknownError{err})); unknown != failHeld {
			t.Errorf("%s after a try of unknown fate: %v, want held", k.Message, unknown)
		}
	}
}

// TestNoTokenIsTheClustersCondition: a broker connection that cannot
// (re)authenticate for want of a token fails every event on it the same
// way; no attempt is counted.
func TestNoTokenIsTheClustersCondition(t *testing.T) {
	err := &kafkaauth.TokenError{Source: "the OAuth token endpoint https://idp.example.com/token", Reason: "HTTP 503"}
	for _, e := range []error{err, fmt.Errorf("produce to orders/3: %w", err), placedError{topicPartition{"orders", 3}, err}} {
		if got := classify(e); got != failUnavailable {
			t.Errorf("%v: %v, want unavailable", e, got)
		}
	}
}

// produceErrors are the codes a produce request's answer can carry, in
// the order the relay guide lists them.
var produceErrors = []*kerr.Error{
	kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend,
	kerr.RequestTimedOut, kerr.NetworkException, kerr.KafkaStorageError, kerr.UnknownLeaderEpoch, kerr.FencedLeaderEpoch,
	kerr.ThrottlingQuotaExceeded, kerr.UnknownServerError, kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed,
	kerr.UnknownTopicOrPartition, kerr.CorruptMessage,
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidTopicException, kerr.InvalidRecord, kerr.PolicyViolation,
	kerr.InvalidTimestamp, kerr.UnsupportedForMessageFormat,
}

// produceErrorRow is the relay guide's row of a produce error code: its name,
// whether Kafka retries it, and what the relay does.
func produceErrorRow(k *kerr.Error) string {
	err := sarama.KError(k.Code)
	var does string
	switch class := classify(err); {
	case missingTopic(err):
		does = "held for `MissingTopicGrace` (5 minutes), then each failure counts an attempt"
	case class == failHeld && !refusedUnwritten(err):
		does = "held; it may have been appended, so it is published again (in the same session where it can), never dead-lettered"
	case class == failHeld:
		does = "held: no attempt counted, never dead-lettered"
	case class == failRefused:
		does = "an attempt counted; retried with `Backoff`, dead-lettered after `MaxAttempts`"
	case class == failPermanent:
		does = "dead-lettered at once (a record refused in a batch is first sent again alone)"
	default:
		does = class.String()
	}
	retriable := "no"
	if k.Retriable {
		retriable = "yes"
	}
	return fmt.Sprintf("| `%s` (%d) | %s | %s |", k.Message, k.Code, retriable, does)
}

// TestRelayGuideStatesTheProduceErrors: the relay guide's
// (docs/relay.md) table of produce error codes is what classify does with
// each.
func TestRelayGuideStatesTheProduceErrors(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/relay.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := []string{"| error code | Kafka retries it | the relay |", "| --- | --- | --- |"}
	for _, k := range produceErrors {
		rows = append(rows, produceErrorRow(k))
	}
	table := strings.Join(rows, "\n") + "\n"
	// The table sits in a list item: read its lines without their indent.
	var unindented strings.Builder
	for line := range strings.Lines(string(readme)) {
		unindented.WriteString(strings.TrimLeft(line, " "))
	}
	if !strings.Contains(unindented.String(), table) {
		t.Errorf("docs/relay.md does not hold the table of produce errors the relay's classify makes; make it this table:\n%s", table)
	}
}
