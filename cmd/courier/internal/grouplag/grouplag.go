package grouplag

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/kafkafloor"
)

// Partition is one partition a group reads.
type Partition struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset, the next record it
	// reads; -1 when the group committed nothing there (a partition
	// assigned to a member that has not committed yet).
	Committed int64
	// HighWater is the partition's high-water mark, the offset of the
	// next record written; -1 when the partition no longer exists (its
	// topic was deleted after the group committed on it).
	HighWater int64
	// Lag is HighWater - Committed, the records written that the group
	// has not committed past: HighWater when nothing is committed, 0 when
	// the partition no longer exists, and never below 0 (a committed
	// offset past the high-water mark, after a topic was recreated, lags
	// by 0).
	Lag int64
}

// Group is one consumer group of the cluster.
type Group struct {
	// Name is the group id.
	Name string
	// State is the group's state as its coordinator says: Stable,
	// PreparingRebalance, CompletingRebalance, Empty (no members, offsets
	// kept) or Dead.
	State string
	// Members counts the group's members.
	Members int
	// Partitions are the partitions the group committed an offset on or
	// has assigned to a member, sorted by topic and partition.
	Partitions []Partition
	// Lag is the sum of the partitions' lags.
	Lag int64
}

// place is a topic-partition.
type place struct {
	topic     string
	partition int32
}

// Read returns every consumer group of the cluster client talks to, sorted
// by name, with its partitions' committed offsets, high-water marks and
// lags. It sends one request to list the groups (to every broker), one to
// describe them (per coordinator), one per group for its committed offsets
// and one per topic-partition read by any group for its high-water mark.
//
// Read gives up as soon as ctx is done, returning ctx's error; a request
// already sent then ends in the background, within client's Net timeouts,
// and no other follows it. A group deleted while Read runs is left out. The
// client's Config.Version must be courier's oldest, Kafka 2.1, or later
// (see kafkafloor). Read does not close client.
func Read(ctx context.Context, client sarama.Client) ([]Group, error) {
	if err := kafkafloor.Check(client.Config().Version); err != nil {
		return nil, fmt.Errorf("grouplag: the client's config: %w", err)
	}
	type result struct {
		groups []Group
		err    error
	}
	done := make(chan result, 1)
	go func() {
		groups, err := read(ctx, client)
		done <- result{groups, err}
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-done:
		return r.groups, r.err
	}
}

// read is Read, checking ctx before every request.
func read(ctx context.Context, client sarama.Client) ([]Group, error) {
	// The admin's Close would close client; it holds nothing else.
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("grouplag: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	listed, err := admin.ListConsumerGroups()
	if err != nil {
		return nil, fmt.Errorf("grouplag: list the consumer groups: %w", err)
	}
	names := make([]string, 0, len(listed))
	for name := range listed {
		names = append(names, name)
	}
	slices.Sort(names)
	groups := make([]Group, 0, len(names))
	if len(names) == 0 {
		return groups, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	described, err := admin.DescribeConsumerGroups(names)
	if err != nil {
		return nil, fmt.Errorf("grouplag: describe %d consumer group(s): %w", len(names), err)
	}
	descriptions := make(map[string]*sarama.GroupDescription, len(described))
	for _, d := range described {
		if d != nil {
			descriptions[d.GroupId] = d
		}
	}
	// Committed offsets, group by group; the high-water marks after, once
	// per topic-partition.
	committed := make([]map[place]int64, 0, len(names))
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d := descriptions[name]
		switch {
		case d == nil || errors.Is(d.Err, sarama.ErrGroupIDNotFound):
			continue // deleted since it was listed
		case !errors.Is(d.Err, sarama.ErrNoError):
			return nil, fmt.Errorf("grouplag: describe consumer group %q: %w", name, d.Err)
		}
		offsets, err := groupOffsets(admin, name)
		if errors.Is(err, sarama.ErrGroupIDNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, p := range assigned(d) {
			if _, ok := offsets[p]; !ok {
				offsets[p] = -1
			}
		}
		groups = append(groups, Group{Name: name, State: d.State, Members: len(d.Members)})
		committed = append(committed, offsets)
	}
	marks, err := highWaters(ctx, client, committed)
	if err != nil {
		return nil, err
	}
	for i := range groups {
		g := &groups[i]
		for p, offset := range committed[i] {
			part := Partition{Topic: p.topic, Partition: p.partition, Committed: offset, HighWater: marks[p]}
			switch {
			case part.HighWater < 0:
			case part.Committed < 0:
				part.Lag = part.HighWater
			default:
				part.Lag = max(0, part.HighWater-part.Committed)
			}
			g.Partitions = append(g.Partitions, part)
			g.Lag += part.Lag
		}
		slices.SortFunc(g.Partitions, func(a, b Partition) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
	}
	return groups, nil
}

// groupOffsets reads the offsets group committed, on every partition, in
// one request.
func groupOffsets(admin sarama.ClusterAdmin, group string) (map[place]int64, error) {
	resp, err := admin.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return nil, fmt.Errorf("grouplag: committed offsets of consumer group %q: %w", group, err)
	}
	blocks := resp.Blocks
	if resp.Version >= 8 {
		blocks = nil
		if g := resp.GetGroup(group); g != nil {
			blocks = g.Blocks
		}
	}
	out := map[place]int64{}
	for topic, partitions := range blocks {
		for partition, b := range partitions {
			if b == nil || b.Offset < 0 {
				continue // nothing committed there
			}
			if !errors.Is(b.Err, sarama.ErrNoError) {
				return nil, fmt.Errorf("grouplag: committed offset of consumer group %q on %s/%d: %w", group, topic, partition, b.Err)
			}
			out[place{topic, partition}] = b.Offset
		}
	}
	return out, nil
}

// assigned returns the partitions assigned to the members of a group of
// consumers; none for other groups (Kafka Connect's, say), and none of a
// member whose assignment cannot be read.
func assigned(d *sarama.GroupDescription) []place {
	if d.ProtocolType != "consumer" {
		return nil
	}
	var out []place
	for _, m := range d.Members {
		a, err := m.GetMemberAssignment()
		if err != nil || a == nil {
			continue
		}
		for topic, partitions := range a.Topics {
			for _, p := range partitions {
				out = append(out, place{topic, p})
			}
		}
	}
	return out
}

// highWaters reads the high-water mark of every topic-partition in the
// groups' offsets once: -1 for a partition the cluster no longer has.
func highWaters(ctx context.Context, client sarama.Client, groups []map[place]int64) (map[place]int64, error) {
	marks := map[place]int64{}
	for _, offsets := range groups {
		for p := range offsets {
			if _, ok := marks[p]; ok {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			mark, err := client.GetOffset(p.topic, p.partition, sarama.OffsetNewest)
			switch {
			case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
				mark = -1
			case err != nil:
				return nil, fmt.Errorf("grouplag: high-water mark of %s/%d: %w", p.topic, p.partition, err)
			}
			marks[p] = mark
		}
	}
	return marks, nil
}
