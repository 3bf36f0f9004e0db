package bench

import (
	"fmt"
	"time"
)

// Network is the network profile of a run: how long each byte takes, each
// way, between the benchmark and PostgreSQL, Redis and the Kafka brokers,
// and how much later than it would a broker answers a Produce (the wait
// for the replicas of acks=all). The zero Network is loopback.
type Network struct {
	PostgreSQL time.Duration `json:"postgresql_ns"`
	Redis      time.Duration `json:"redis_ns"`
	Kafka      time.Duration `json:"kafka_ns"`
	Produce    time.Duration `json:"produce_ns"`
	// Brokers is how many brokers the partitions' leaders are spread over.
	Brokers int `json:"brokers"`
}

// DefaultNetwork is the network profile of `courier bench --network`: a
// database, a cache and a cluster in the same region, a millisecond or
// less away, and a Produce with acks=all of about 5ms, on 3 brokers.
var DefaultNetwork = Network{PostgreSQL: 500 * time.Microsecond, Redis: 250 * time.Microsecond, Kafka: 500 * time.Microsecond, Produce: 5 * time.Millisecond, Brokers: 3}

// On reports whether n delays anything.
func (n Network) On() bool { return n.PostgreSQL > 0 || n.Redis > 0 || n.Kafka > 0 || n.Produce > 0 }

// String describes the profile for a report's header.
func (n Network) String() string {
	if !n.On() {
		return "loopback (PostgreSQL, Redis and Kafka on this machine)"
	}
	return fmt.Sprintf("network: every connection through a delay line, PostgreSQL %v each way, Redis %v each way, Kafka %v each way to each of %d brokers, "+
		"and each Produce answered %v later (acks=all); a broker handles one request of a connection at a time", n.PostgreSQL, n.Redis, n.Kafka, n.Brokers, n.Produce)
}
