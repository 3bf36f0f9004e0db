package main

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

// benchKafka is the Kafka a bench command runs against: the brokers given,
// or an in-process kfake broker.
type benchKafka struct {
	brokers []string
	// name says which it is, for the report's header.
	name string
	// cluster is the in-process broker; nil when brokers were given.
	cluster *kfake.Cluster
}

// startBenchKafka returns the brokers of list (comma-separated) or, when it
// names none, starts an in-process kfake broker, which close stops.
func startBenchKafka(list string) (*benchKafka, error) {
	k := &benchKafka{brokers: splitList(list)}
	k.name = strings.Join(k.brokers, ",")
	if len(k.brokers) > 0 {
		return k, nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("start the in-process broker: %w", err)
	}
	k.brokers, k.cluster = cluster.ListenAddrs(), cluster
	k.name = "in-process kfake broker (github.com/twmb/franz-go/pkg/kfake " + bench.KfakeVersion() + ")"
	return k, nil
}

// close stops the in-process broker, if one was started.
func (k *benchKafka) close() {
	if k.cluster != nil {
		k.cluster.Close()
	}
}
