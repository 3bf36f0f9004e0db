// Package kafkafloor is Kafka 4.0's protocol floor: the oldest version of
// each request a Kafka 4.0 broker still accepts, and the oldest Sarama
// Config.Version whose requests all meet it.
//
// Kafka 4.0 removed the request versions older than Kafka 2.1's (KIP-896,
// as adopted: several APIs kept older versions that clients still used).
// A 4.0 broker closes the connection on a request below the floor, so a
// client configured for an older Kafka fails against it with no error that
// names the cause; Check names it before a connection is made.
package kafkafloor

import (
	"fmt"

	"github.com/IBM/sarama"
)

// minVersions is the oldest version of each request Kafka 4.0 accepts,
// for the APIs whose older versions it removed. Each bound is the lower
// end of the request's validVersions in Apache Kafka 4.0's message
// definitions (clients/src/main/resources/common/message/*Request.json in
// the Kafka repository, whose comments say "Versions 0-N were removed in
// Apache Kafka 4.0, Version N+1 is the new baseline"). Every API not
// listed kept version 0, among them those courier's clients send:
// ApiVersions, Metadata, FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, DescribeGroups, ListGroups, InitProducerId, DeleteRecords,
// SaslHandshake, SaslAuthenticate and CreatePartitions.
var minVersions = map[int16]int16{
	0:  3, // Produce: versions 0-2 removed
	1:  4, // Fetch: versions 0-3 removed
	2:  1, // ListOffsets: version 0 removed
	8:  2, // OffsetCommit: versions 0-1 removed
	9:  1, // OffsetFetch: version 0 removed
	19: 2, // CreateTopics: versions 0-1 removed
	20: 1, // DeleteTopics: version 0 removed
	23: 2, // OffsetForLeaderEpoch: versions 0-1 removed
	27: 1, // WriteTxnMarkers: version 0 removed
	30: 1, // CreateAcls: version 0 removed
	32: 1, // DescribeConfigs: version 0 removed
	35: 1, // DescribeLogDirs: version 0 removed
}

// MinVersion returns the oldest version of the request with API key key
// that Kafka 4.0 accepts: 0 for an API that kept all its versions.
func MinVersion(key int16) int16 { return minVersions[key] }

// Accepts reports whether Kafka 4.0 accepts version of the request with
// API key key, as far as the floor goes (a version newer than the broker
// knows is the broker's to refuse).
func Accepts(key, version int16) bool { return version >= MinVersion(key) }

// Keys returns the API keys whose floor is above version 0, in no order.
func Keys() []int16 {
	keys := make([]int16, 0, len(minVersions))
	for k := range minVersions {
		keys = append(keys, k)
	}
	return keys
}

// OldestKafka is the oldest Kafka release courier supports, with Sarama's
// Version at OldestSarama or later; Kafka 4.0 and later accept every
// request courier then sends.
const OldestKafka = "2.1"

// OldestSarama is the oldest Sarama Config.Version courier accepts:
// Kafka 2.1, the baseline KIP-896 kept. Sarama configured for 1.0 or
// older sends requests Kafka 4.0 refuses (DescribeConfigs version 0, for
// one); courier's tests run against a broker that refuses them.
var OldestSarama = sarama.V2_1_0_0

// Check returns an error naming version and the floor when Sarama,
// configured with version, would send requests Kafka 4.0 refuses. The
// error is meant to be wrapped in a package's invalid-config error.
func Check(version sarama.KafkaVersion) error {
	if version.IsAtLeast(OldestSarama) {
		return nil
	}
	return fmt.Errorf("Sarama Version %s is older than %s, the oldest courier supports: "+
		"Kafka 4.0 refuses the older protocol versions Sarama would send (KIP-896); "+
		"set Version to sarama.V2_1_0_0 or later, or leave Sarama's default", version, OldestSarama)
}
