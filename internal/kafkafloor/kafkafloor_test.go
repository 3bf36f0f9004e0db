package kafkafloor_test

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMinVersionIsKafka40s: the floor of each API courier's clients send
// is the lower bound of the request's validVersions in Kafka 4.0.
func TestMinVersionIsKafka40s(t *testing.T) {
	t.Parallel()
	for key, want := range map[kmsg.Key]int16{
		kmsg.Produce: 3, kmsg.Fetch: 4, kmsg.ListOffsets: 1, kmsg.OffsetCommit: 2, kmsg.OffsetFetch: 1,
		kmsg.CreateTopics: 2, kmsg.DeleteTopics: 1, kmsg.OffsetForLeaderEpoch: 2, kmsg.DescribeConfigs: 1,
		kmsg.ApiVersions: 0, kmsg.Metadata: 0, kmsg.FindCoordinator: 0, kmsg.JoinGroup: 0, kmsg.SyncGroup: 0,
		kmsg.Heartbeat: 0, kmsg.LeaveGroup: 0, kmsg.DescribeGroups: 0, kmsg.ListGroups: 0,
		kmsg.InitProducerID: 0, kmsg.DeleteRecords: 0, kmsg.SASLHandshake: 0, kmsg.SASLAuthenticate: 0,
		kmsg.CreatePartitions: 0,
	} {
		if got := kafkafloor.MinVersion(int16(key)); got != want {
			t.Errorf("MinVersion(%s) = %d, want %d", key.Name(), got, want)
		}
		if want > 0 && kafkafloor.Accepts(int16(key), want-1) {
			t.Errorf("Accepts(%s, %d) = true, below the floor", key.Name(), want-1)
		}
		if !kafkafloor.Accepts(int16(key), want) {
			t.Errorf("Accepts(%s, %d) = false, at the floor", key.Name(), want)
		}
	}
}

// TestKeysAreTheAPIsWithAFloor: Keys lists exactly the APIs whose floor is
// above version 0, so that a broker checking only those misses none.
func TestKeysAreTheAPIsWithAFloor(t *testing.T) {
	t.Parallel()
	listed := map[int16]bool{}
	for _, k := range kafkafloor.Keys() {
		listed[k] = true
	}
	for key := range int16(100) {
		if got, want := listed[key], kafkafloor.MinVersion(key) > 0; got != want {
			t.Errorf("API %d listed = %v, floor %d", key, got, kafkafloor.MinVersion(key))
		}
	}
}

// TestCheckRefusesSaramaBelowTheFloor: Kafka 2.1 passes, 2.0 is refused
// with an error naming the version, the floor and Kafka 4.0.
func TestCheckRefusesSaramaBelowTheFloor(t *testing.T) {
	t.Parallel()
	for _, v := range []sarama.KafkaVersion{sarama.V2_1_0_0, sarama.DefaultVersion, sarama.MaxVersion} {
		if err := kafkafloor.Check(v); err != nil {
			t.Errorf("Check(%s) = %v, want nil", v, err)
		}
	}
	for _, v := range []sarama.KafkaVersion{sarama.V2_0_1_0, sarama.V2_0_0_0, sarama.V0_11_0_0, sarama.V0_8_2_0} {
		err := kafkafloor.Check(v)
		if err == nil {
			t.Errorf("Check(%s) = nil, want an error", v)
			continue
		}
		for _, says := range []string{v.String(), "2.1.0", "Kafka 4.0", "sarama.V2_1_0_0"} {
			if !strings.Contains(err.Error(), says) {
				t.Errorf("Check(%s) = %q, does not say %q", v, err, says)
			}
		}
	}
}
