package dlqindex

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
)

// Topics returns the dead-letter topics of the cluster: the topics whose
// names end in dlq.DefaultSuffix, sorted. It asks the brokers for fresh
// metadata first, so a topic created a moment ago is there; when ctx ends
// first it returns its error, and the request ends on the client's own
// timeouts.
func Topics(ctx context.Context, client sarama.Client) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlqindex: list the topics: %w", err)
	}
	refreshed := make(chan error, 1)
	go func() { refreshed <- client.RefreshMetadata() }()
	select {
	case err := <-refreshed:
		if err != nil {
			return nil, fmt.Errorf("dlqindex: list the topics: %w", err)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("dlqindex: list the topics: %w", ctx.Err())
	}
	all, err := client.Topics()
	if err != nil {
		return nil, fmt.Errorf("dlqindex: list the topics: %w", err)
	}
	var out []string
	for _, t := range all {
		if strings.HasSuffix(t, dlq.DefaultSuffix) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}
