package retrytopics

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/topicname"
)

// DefaultSuffix starts the names of retry topics: "orders" with a delay of
// 5s → "orders.retry.5s".
const DefaultSuffix = ".retry"

// Bounds of Config.Delays.
const (
	// MaxTiers is the most tiers a topology has.
	MaxTiers = 100
	// MaxDelay is the longest delay of a tier: a record waits in its tier
	// topic that long at the most, holding up the records behind it.
	MaxDelay = 7 * 24 * time.Hour
)

// ErrInvalidConfig is matched by every error New returns for a bad config.
var ErrInvalidConfig = errors.New("retrytopics: invalid config")

// Config describes the retry tiers of a topic. The zero value has no tiers:
// a message that fails goes straight to the dead-letter topic.
type Config struct {
	// Delays are the waits of the tiers, in the order a failing message
	// passes through them, e.g. 5s, 1m, 10m: after its first failure a
	// message waits 5s in <topic>.retry.5s, then 1m in <topic>.retry.1m,
	// and so on; after the last tier it goes to the dead-letter topic.
	// Each delay is a whole number of milliseconds from 1ms to 7 days
	// (MaxDelay), at most 100 tiers (MaxTiers). Tiers with equal delays
	// share one topic. Every topic name derived (retry and dead-letter
	// topics) must be a valid Kafka topic name of at most 249 characters.
	// Defaults to none.
	Delays []time.Duration
	// Suffix makes a tier's topic: <topic><Suffix>.<delay>. Defaults to
	// ".retry".
	Suffix string
	// CreateTopics makes the consumer create the missing retry and
	// dead-letter topics when it starts, with the main topic's partition
	// count and replication factor (see Ensure). Defaults to false: a
	// missing topic is reported, and the consumer waits for it.
	CreateTopics bool
}

// Tier is one step of a topology.
type Tier struct {
	// Round is the tier's place: 1 for the first tier. A record in this
	// tier carries it in its retry_attempt header.
	Round int
	// Topic is where the tier's records wait.
	Topic string
	// Delay is how long a record waits there before it is handled again.
	Delay time.Duration
}

// Topology is the retry tiers and the dead-letter topic of one main topic.
type Topology struct {
	// Topic is the main topic.
	Topic string
	// Tiers are the retry tiers in order; Tiers[i].Round is i+1.
	Tiers []Tier
	// DeadLetter is the dead-letter topic.
	DeadLetter string
}

// WithDefaults returns c with every zero field set to its default: Suffix
// to DefaultSuffix.
func (c Config) WithDefaults() Config {
	if c.Suffix == "" {
		c.Suffix = DefaultSuffix
	}
	return c
}

// validate checks c's Delays, whatever the topic.
func (c Config) validate() error {
	if len(c.Delays) > MaxTiers {
		return fmt.Errorf("%w: Delays has %d tiers; use at most %d", ErrInvalidConfig, len(c.Delays), MaxTiers)
	}
	for i, d := range c.Delays {
		if d < time.Millisecond || d%time.Millisecond != 0 || d > MaxDelay {
			return fmt.Errorf("%w: Delays[%d] is %v; use a whole number of milliseconds from 1ms to %v (e.g. 5*time.Second)",
				ErrInvalidConfig, i, d, MaxDelay)
		}
	}
	return nil
}

// New returns the topology of topic under cfg, whose dead-letter topic is
// <topic><deadLetterSuffix> ("" for dlq.DefaultSuffix, ".dlq"; a consumer
// passes its Config.DeadLetterSuffix), or an error naming the field at
// fault.
func New(topic string, cfg Config, deadLetterSuffix string) (Topology, error) {
	if err := topicname.Validate(topic); err != nil {
		return Topology{}, fmt.Errorf("%w: topic %w", ErrInvalidConfig, err)
	}
	cfg = cfg.WithDefaults()
	t := Topology{Topic: topic, DeadLetter: dlq.Topic(topic, deadLetterSuffix)}
	if err := topicname.Validate(t.DeadLetter); err != nil {
		return Topology{}, fmt.Errorf("%w: DeadLetterSuffix %q: the dead-letter topic %w", ErrInvalidConfig, deadLetterSuffix, err)
	}
	if err := cfg.validate(); err != nil {
		return Topology{}, err
	}
	for i, d := range cfg.Delays {
		tier := Tier{Round: i + 1, Topic: TopicName(topic, cfg.Suffix, d), Delay: d}
		if err := topicname.Validate(tier.Topic); err != nil {
			return Topology{}, fmt.Errorf("%w: Suffix %q: the retry topic %w", ErrInvalidConfig, cfg.Suffix, err)
		}
		if tier.Topic == topic || tier.Topic == t.DeadLetter {
			return Topology{}, fmt.Errorf("%w: Suffix %q makes the retry topic %s, which is the main or the dead-letter topic; pick another suffix", ErrInvalidConfig, cfg.Suffix, tier.Topic)
		}
		t.Tiers = append(t.Tiers, tier)
	}
	return t, nil
}

// TopicName returns the retry topic of topic for delay: topic + suffix +
// "." + FormatDelay(delay), e.g. "orders.retry.5s". An empty suffix means
// DefaultSuffix.
func TopicName(topic, suffix string, delay time.Duration) string {
	if suffix == "" {
		suffix = DefaultSuffix
	}
	return topic + suffix + "." + FormatDelay(delay)
}

// FormatDelay writes a delay as topic names carry it: in the largest unit
// that divides it, e.g. 500ms, 5s, 90s, 1m, 10m, 2h.
func FormatDelay(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}

// Topics returns the distinct retry topics in tier order.
func (t Topology) Topics() []string {
	var out []string
	for _, tier := range t.Tiers {
		if !slices.Contains(out, tier.Topic) {
			out = append(out, tier.Topic)
		}
	}
	return out
}

// IsRetryTopic reports whether topic is one of t's retry topics.
func (t Topology) IsRetryTopic(topic string) bool {
	return slices.ContainsFunc(t.Tiers, func(tier Tier) bool { return tier.Topic == topic })
}

// Next returns the tier a record goes to after failing in round (0 for the
// main topic), and false when round was the last: the record then goes to
// the dead-letter topic.
func (t Topology) Next(round int) (Tier, bool) {
	if round < 0 || round >= len(t.Tiers) {
		return Tier{}, false
	}
	return t.Tiers[round], true
}

// Holding returns the tier in which a record that must wait at least wait
// fits: the one with the shortest delay of at least wait, else the one with
// the longest. Records of a retry topic are handled in order, so a record
// must not wait longer than its tier's delay, or it would hold up the
// records behind it. It returns false when t has no tiers.
func (t Topology) Holding(wait time.Duration) (Tier, bool) {
	if len(t.Tiers) == 0 {
		return Tier{}, false
	}
	best := -1
	longest := 0
	for i, tier := range t.Tiers {
		if tier.Delay > t.Tiers[longest].Delay {
			longest = i
		}
		if tier.Delay >= wait && (best < 0 || tier.Delay < t.Tiers[best].Delay) {
			best = i
		}
	}
	if best < 0 {
		best = longest
	}
	return t.Tiers[best], true
}
