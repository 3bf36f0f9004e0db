package main

import (
	"fmt"
	"strings"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
)

// kafkaFlags are the Kafka connection options shared by every command that
// talks to Kafka: brokers, client id, TLS and SASL.
type kafkaFlags struct {
	brokers  string
	clientID string
}

func (k *kafkaFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&k.brokers, "brokers", envOr("COURIER_BROKERS", "127.0.0.1:9092"),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS)")
	f.StringVar(&k.clientID, "client-id", envOr("COURIER_CLIENT_ID", "courier"), "Kafka client id (env COURIER_CLIENT_ID)")
}

// config returns the broker list and a Sarama configuration with the
// connection options applied; bad options are usage errors.
func (k *kafkaFlags) config() ([]string, *sarama.Config, error) {
	brokers := splitList(k.brokers)
	if len(brokers) == 0 {
		return nil, nil, usageError{fmt.Errorf("--brokers is empty: name at least one Kafka broker, e.g. --brokers 127.0.0.1:9092")}
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = k.clientID
	if err := cfg.Validate(); err != nil {
		return nil, nil, usageError{fmt.Errorf("Kafka options: %w", err)}
	}
	return brokers, cfg, nil
}

// unreachable explains a failure to reach the brokers.
func (k *kafkaFlags) unreachable(err error) error {
	return fmt.Errorf("cannot reach Kafka at %s: %w (is the broker running, and are --brokers, TLS and SASL options right? `courier dev` runs a local one)",
		strings.Join(splitList(k.brokers), ","), err)
}
