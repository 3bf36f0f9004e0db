// Package topicname applies Kafka's rules for topic names, for every package
// that derives topic names from configuration (dead-letter and retry
// topics).
package topicname

import (
	"errors"
	"fmt"
)

// MaxLen is Kafka's limit on the length of a topic name.
const MaxLen = 249

// Validate reports why topic is not a valid Kafka topic name, or nil. Its
// errors read after the name, e.g. "topic orders+ " + err.Error().
func Validate(topic string) error {
	switch {
	case topic == "":
		return errors.New("is empty; set it to the topic the record was read from or meant for")
	case len(topic) > MaxLen:
		return fmt.Errorf("has %d characters, Kafka allows at most %d", len(topic), MaxLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("%q is not a valid Kafka topic", topic)
	}
	for _, r := range topic {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q has %q; Kafka topics use only ASCII letters, digits, '.', '_' and '-'", topic, r)
		}
	}
	return nil
}
