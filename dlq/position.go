package dlq

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// position is how far a replay group got in one partition of a dead-letter
// topic: every offset below next is settled, and so is every offset in
// done, the records above next that were replayed while an earlier record
// (one the filters left out, a corrupt or a refused one) stays unsettled.
// It is committed as the group's offset, with done in the commit metadata,
// so a later run with other filters still finds the records this one left
// behind, and no run replays a record twice.
type position struct {
	next int64
	done []offsetRange // sorted, disjoint, not adjacent, all >= next
}

// offsetRange is the offsets from..to, both included.
type offsetRange struct{ from, to int64 }

// metadataPrefix starts the commit metadata a replay writes; it carries a
// version so that a later courier can change the format.
const metadataPrefix = "courier-replay/1:"

// maxMetadataBytes keeps the metadata under Kafka's default
// offset.metadata.max.bytes (4096).
const maxMetadataBytes = 4000

func (p *position) clone() position { return position{next: p.next, done: slices.Clone(p.done)} }

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

// settle marks offset settled, merging ranges and moving next past a
// settled run that starts at it.
func (p *position) settle(offset int64) {
	if p.has(offset) {
		return
	}
	i, _ := slices.BinarySearchFunc(p.done, offset, func(r offsetRange, o int64) int {
		if r.to < o {
			return -1
		}
		return 1
	})
	p.done = slices.Insert(p.done, i, offsetRange{offset, offset})
	// Merge with the neighbours it touches.
	if i+1 < len(p.done) && p.done[i+1].from == offset+1 {
		p.done[i].to = p.done[i+1].to
		p.done = slices.Delete(p.done, i+1, i+2)
	}
	if i > 0 && p.done[i-1].to == offset-1 {
		p.done[i-1].to = p.done[i].to
		p.done = slices.Delete(p.done, i, i+1)
	}
	if len(p.done) > 0 && p.done[0].from == p.next {
		p.next = p.done[0].to + 1
		p.done = p.done[1:]
	}
}

// skipTo settles everything below offset: the records there are gone
// (retention deleted them).
func (p *position) skipTo(offset int64) {
	if offset <= p.next {
		return
	}
	p.next = offset
	for len(p.done) > 0 && p.done[0].to < offset {
		p.done = p.done[1:]
	}
	if len(p.done) > 0 && p.done[0].from <= offset {
		p.next = p.done[0].to + 1
		p.done = p.done[1:]
	}
}

// metadata encodes done for the offset commit: "courier-replay/1:" then
// ranges "a-b" or single offsets, comma-separated.
func (p *position) metadata() string {
	if len(p.done) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(metadataPrefix)
	for i, r := range p.done {
		if i > 0 {
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
	if !ok || rest == "" {
		return p, nil
	}
	for item := range strings.SplitSeq(rest, ",") {
		fromText, toText, isRange := strings.Cut(item, "-")
		from, err := strconv.ParseInt(fromText, 10, 64)
		to := from
		if err == nil && isRange {
			to, err = strconv.ParseInt(toText, 10, 64)
		}
		if err != nil || to < from || (len(p.done) > 0 && from <= p.done[len(p.done)-1].to+1) || from <= next {
			return position{}, fmt.Errorf("dlq: the replay position's commit metadata %q is not one this courier wrote; "+
				"commit a plain offset for the group or use another group", metadata)
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

// fetch returns the group's position in each partition; a partition the
// group never committed starts at 0.
func (ps positions) fetch(partitions []int32) (map[int32]*position, error) {
	coordinator, err := ps.client.Coordinator(ps.group)
	if err != nil {
		return nil, fmt.Errorf("dlq: find the coordinator of group %q: %w", ps.group, err)
	}
	req := sarama.NewOffsetFetchRequest(ps.client.Config().Version, ps.group, map[string][]int32{ps.topic: partitions})
	resp, err := coordinator.FetchOffset(req)
	fresh := false // a group that never committed (kfake says so; Kafka answers -1)
	if err == nil && resp.Err != sarama.ErrNoError {
		fresh, err = resp.Err == sarama.ErrGroupIDNotFound, resp.Err
	}
	if err != nil && !fresh {
		return nil, fmt.Errorf("dlq: read the offsets of group %q: %w", ps.group, err)
	}
	out := make(map[int32]*position, len(partitions))
	for _, partition := range partitions {
		next, metadata := int64(0), ""
		if block := resp.GetBlock(ps.topic, partition); block != nil && !fresh {
			if block.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("dlq: read the offset of group %q in %s/%d: %w", ps.group, ps.topic, partition, block.Err)
			}
			if block.Offset >= 0 {
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
func (ps positions) commit(partition int32, p *position) error {
	coordinator, err := ps.client.Coordinator(ps.group)
	if err != nil {
		return fmt.Errorf("dlq: find the coordinator of group %q: %w", ps.group, err)
	}
	req := sarama.NewOffsetCommitRequest(ps.client.Config(), ps.group)
	req.AddBlockWithLeaderEpoch(ps.topic, partition, p.next, -1, 0, p.metadata())
	resp, err := coordinator.CommitOffset(req)
	if err == nil {
		if kerr, ok := resp.Errors[ps.topic][partition]; !ok {
			err = sarama.ErrIncompleteResponse
		} else if kerr != sarama.ErrNoError {
			err = kerr
		}
	}
	if err != nil {
		return fmt.Errorf("dlq: commit the replay position of group %q in %s/%d (offset %d): %w", ps.group, ps.topic, partition, p.next, err)
	}
	return nil
}
