package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"
)

// ErrMissingTopics is matched by the error of Ensure when topics are
// missing and it was not asked to create them.
var ErrMissingTopics = errors.New("retrytopics: topics missing")

// Ensure checks that the main, retry and dead-letter topics of each
// topology exist. With create, it creates the missing retry and
// dead-letter topics with their main topic's partition count and
// replication factor, and returns the ones it created (a topic another
// process created meanwhile counts as there). Without create, it returns
// an error matching ErrMissingTopics that names them. A missing main topic
// is always an error: Ensure does not guess its partition count.
func Ensure(ctx context.Context, admin sarama.ClusterAdmin, create bool, topologies ...Topology) (created []string, err error) {
	existing, err := admin.ListTopics()
	if err != nil {
		return nil, fmt.Errorf("retrytopics: list topics: %w (is Kafka reachable?)", err)
	}
	var missing []string
	for _, t := range topologies {
		main, ok := existing[t.Topic]
		if !ok {
			return created, fmt.Errorf("%w: the main topic %s does not exist; create it first", ErrMissingTopics, t.Topic)
		}
		for _, topic := range append(t.Topics(), t.DeadLetter) {
			if _, ok := existing[topic]; ok {
				continue
			}
			if !create {
				missing = append(missing, topic)
				continue
			}
			if err := ctx.Err(); err != nil {
				return created, err
			}
			detail := &sarama.TopicDetail{NumPartitions: main.NumPartitions, ReplicationFactor: main.ReplicationFactor}
			err := admin.CreateTopic(topic, detail, false)
			if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
				return created, fmt.Errorf("retrytopics: create %s: %w", topic, err)
			}
			existing[topic] = *detail
			if err == nil {
				created = append(created, topic)
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s; create them with the main topic's partition count, "+
			"or set retrytopics.Config.CreateTopics", ErrMissingTopics, strings.Join(missing, ", "))
	}
	return created, nil
}
