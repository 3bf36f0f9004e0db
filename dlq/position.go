package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// position is how far a replay group got in one partition of a dead-letter
// topic: every offset below next is settled, and so is every offset in
// done, the records above next that were replayed while an earlier record
// (one the filters left out, a corrupt or a refused one) stays unsettled.
// It is committed as the group's offset, with done in the commit metadata,
// so a later run with other filters still finds the records this one left
// behind, and no run replays a record twice. The metadata also names the
// run that committed it, so that a run sees another run of the group
// commit, even the same offsets.
type position struct {
	next int64
	done []offsetRange // sorted, disjoint, not adjacent, all >= next
	run  string        // the run that committed it, or commits it next
}

// offsetRange is the offsets from..to, both included.
type offsetRange struct{ from, to int64 }

// metadataPrefix starts the commit metadata a replay writes; it carries a
// version so that a later courier can change the format.
const metadataPrefix = "courier-replay/1 "

// maxMetadataBytes keeps the metadata under Kafka's default
// offset.metadata.max.bytes (4096).
const maxMetadataBytes = 4000

func (p *position) clone() position {
	return position{next: p.next, done: slices.Clone(p.done), run: p.run}
}

// has reports whether offset is settled.
func (p *position) has(offset int64) bool {
	if offset < p.next {
		return true
	}
	_, found := slices.BinarySearchFunc(p.done, offset, func(r offsetRange, o int64) int {
		switch {
		case r.to < o:
			return -1
		case r.from > o:
			return 1
		}
		return 0
	})
	return found
}

// settle marks offset settled.
func (p *position) settle(offset int64) { p.settleRange(offset, offset+1) }

// settleRange marks the offsets [from, to) settled, merging ranges and
// moving next past a settled run that starts at it.
func (p *position) settleRange(from, to int64) {
	from = max(from, p.next)
	if from >= to {
		return
	}
	merged := offsetRange{from, to - 1}
	out := make([]offsetRange, 0, len(p.done)+1)
	placed := false
	for _, r := range p.done {
		switch {
		case r.to+1 < merged.from: // before, not touching
			out = append(out, r)
		case merged.to+1 < r.from: // after, not touching
			if !placed {
				out, placed = append(out, merged), true
			}
			out = append(out, r)
		default: // overlapping or adjacent
			merged = offsetRange{min(r.from, merged.from), max(r.to, merged.to)}
		}
	}
	if !placed {
		out = append(out, merged)
	}
	p.done = out
	if p.done[0].from <= p.next {
		p.next = p.done[0].to + 1
		p.done = p.done[1:]
	}
}

// skipTo settles everything below offset: the records there are gone
// (retention deleted them).
func (p *position) skipTo(offset int64) { p.settleRange(p.next, offset) }

// String is the position as committed: the offset and the metadata.
func (p *position) String() string { return strconv.FormatInt(p.next, 10) + " " + p.metadata() }

// metadata encodes the position for the offset commit:
// "courier-replay/1 run=<run>", then " done=" and the ranges "a-b" or single
// offsets, comma-separated, when there are any.
func (p *position) metadata() string {
	var b strings.Builder
	b.WriteString(metadataPrefix)
	b.WriteString("run=")
	b.WriteString(p.run)
	for i, r := range p.done {
		if i == 0 {
			b.WriteString(" done=")
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(r.from, 10))
		if r.to != r.from {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(r.to, 10))
		}
	}
	return b.String()
}

// parsePosition reads a committed offset and its metadata. Metadata that
// a replay did not write (another tool's) is ignored.
func parsePosition(next int64, metadata string) (position, error) {
	p := position{next: next}
	rest, ok := strings.CutPrefix(metadata, metadataPrefix)
	if !ok {
		return p, nil
	}
	bad := fmt.Errorf("dlq: the replay position's commit metadata %q is not one this courier wrote; "+
		"commit a plain offset for the group or use another group", metadata)
	runField, doneField, _ := strings.Cut(rest, " ")
	if p.run, ok = strings.CutPrefix(runField, "run="); !ok {
		return position{}, bad
	}
	if doneField == "" {
		return p, nil
	}
	ranges, ok := strings.CutPrefix(doneField, "done=")
	if !ok {
		return position{}, bad
	}
	for item := range strings.SplitSeq(ranges, ",") {
		fromText, toText, isRange := strings.Cut(item, "-")
		from, err := strconv.ParseInt(fromText, 10, 64)
		to := from
		if err == nil && isRange {
			to, err = strconv.ParseInt(toText, 10, 64)
		}
		if err != nil || to < from || (len(p.done) > 0 && from <= p.done[len(p.done)-1].to+1) || from <= next {
			return position{}, bad
		}
		p.done = append(p.done, offsetRange{from, to})
	}
	return p, nil
}

// positions reads and writes a replay group's positions through the
// group coordinator, without joining the group.
type positions struct {
	client sarama.Client
	group  string
	topic  string
}

// coordinatorTries bounds the attempts of a request to the group
// coordinator, which may move (a broker restart) between two requests.
const coordinatorTries = 3

// withCoordinator calls call with the group's coordinator, finding it
// again and retrying when call fails with a retriable error (the
// coordinator moved or is loading, the connection broke).
func (ps positions) withCoordinator(ctx context.Context, call func(*sarama.Broker) error) error {
	var err error
	for try := range coordinatorTries {
		if try > 0 {
			timer := time.NewTimer(time.Duration(try) * 200 * time.Millisecond)
			select {
			case <-ctx.Done():
				timer.Stop()
				return errors.Join(err, ctx.Err())
			case <-timer.C:
			}
			_ = ps.client.RefreshCoordinator(ps.group)
		}
		var coordinator *sarama.Broker
		if coordinator, err = ps.client.Coordinator(ps.group); err != nil {
			continue
		}
		if err = call(coordinator); !retriable(err) {
			return err
		}
	}
	return err
}

// retriable reports whether a coordinator request that failed with err
// may succeed when sent again, to the coordinator found anew.
func retriable(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrOffsetsLoadInProgress, sarama.ErrRequestTimedOut:
			return true
		}
		return false
	}
	return err != nil // a broken connection
}

// fetch returns the group's position in each partition; a partition the
// group never committed starts at 0.
func (ps positions) fetch(ctx context.Context, partitions []int32) (map[int32]*position, error) {
	var resp *sarama.OffsetFetchResponse
	fresh := false // a group that never committed (kfake says so; Kafka answers -1)
	err := ps.withCoordinator(ctx, func(coordinator *sarama.Broker) error {
		req := sarama.NewOffsetFetchRequest(ps.client.Config().Version, ps.group, map[string][]int32{ps.topic: partitions})
		var err error
		if resp, err = coordinator.FetchOffset(req); err != nil {
			return err
		}
		if resp.Err == sarama.ErrGroupIDNotFound {
			fresh = true
			return nil
		}
		if resp.Err != sarama.ErrNoError {
			return resp.Err
		}
		for _, partition := range partitions {
			block := resp.GetBlock(ps.topic, partition)
			if block == nil {
				return sarama.ErrIncompleteResponse
			}
			if block.Err != sarama.ErrNoError {
				return block.Err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dlq: read the offsets of group %q in %s: %w", ps.group, ps.topic, err)
	}
	out := make(map[int32]*position, len(partitions))
	for _, partition := range partitions {
		next, metadata := int64(0), ""
		if !fresh {
			if block := resp.GetBlock(ps.topic, partition); block.Offset >= 0 {
				next, metadata = block.Offset, block.Metadata
			}
		}
		p, err := parsePosition(next, metadata)
		if err != nil {
			return nil, err
		}
		out[partition] = &p
	}
	return out, nil
}

// commit stores the position of partition.
func (ps positions) commit(ctx context.Context, partition int32, p *position) error {
	err := ps.withCoordinator(ctx, func(coordinator *sarama.Broker) error {
		req := sarama.NewOffsetCommitRequest(ps.client.Config(), ps.group)
		req.AddBlockWithLeaderEpoch(ps.topic, partition, p.next, -1, 0, p.metadata())
		resp, err := coordinator.CommitOffset(req)
		if err != nil {
			return err
		}
		kerr, ok := resp.Errors[ps.topic][partition]
		switch {
		case !ok:
			return sarama.ErrIncompleteResponse
		case kerr != sarama.ErrNoError:
			return kerr
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dlq: commit the replay position of group %q in %s/%d (offset %d): %w", ps.group, ps.topic, partition, p.next, err)
	}
	return nil
}
