package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Sarama reads a JoinGroup reply within Net.ReadTimeout, and the broker
// holds it up to the rebalance timeout: with Sarama's defaults (30s and
// 60s) the members of a rebalance waiting for a dead member give up, join
// again and restart the broker's wait, for ever (issue 16 point 8). The
// consumer's Sarama configs wait for the reply long enough.
func TestReadTimeoutOutlastsTheRebalanceTimeout(t *testing.T) {
	if cfg := NewSaramaConfig(); cfg.Net.ReadTimeout < cfg.Consumer.Group.Rebalance.Timeout+5*time.Second {
		t.Errorf("NewSaramaConfig: Net.ReadTimeout %v, want at least the rebalance timeout %v plus 5s", cfg.Net.ReadTimeout, cfg.Consumer.Group.Rebalance.Timeout)
	}
	for _, tc := range []struct {
		name            string
		read, rebalance time.Duration
		wantRead        time.Duration
	}{
		{"sarama defaults", 30 * time.Second, 60 * time.Second, 65 * time.Second},
		{"long rebalance timeout", 30 * time.Second, 10 * time.Minute, 10*time.Minute + 5*time.Second},
		{"read timeout long enough already", 2 * time.Minute, 60 * time.Second, 2 * time.Minute},
		{"short rebalance timeout", 30 * time.Second, 10 * time.Second, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := sarama.NewConfig()
			given.Net.ReadTimeout = tc.read
			given.Consumer.Group.Rebalance.Timeout = tc.rebalance
			c, err := New(Config{
				Brokers: []string{"127.0.0.1:9"},
				Sarama:  given,
				Group:   "g",
				Topics:  []string{"t"},
				Handler: HandlerFunc(func(context.Context, *Message) error { return nil }),
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.cfg.Sarama.Net.ReadTimeout; got != tc.wantRead {
				t.Errorf("Net.ReadTimeout is %v, want %v", got, tc.wantRead)
			}
			if given.Net.ReadTimeout != tc.read {
				t.Errorf("the caller's config was changed: Net.ReadTimeout %v", given.Net.ReadTimeout)
			}
		})
	}
}
