package consumer

import (
	"time"

	"github.com/IBM/sarama"
)

// joinGroupLapse is how much longer than Consumer.Group.Rebalance.Timeout
// the consumer lets Sarama wait for a reply, as Java's clients give a
// JoinGroup request (rebalance timeout + 5s).
const joinGroupLapse = 5 * time.Second

// minReadTimeout is the Net.ReadTimeout that cfg needs: the broker holds a
// JoinGroup request until every member has joined or the rebalance timeout
// has passed, and Sarama reads every reply, this one included, within
// Net.ReadTimeout.
func minReadTimeout(cfg *sarama.Config) time.Duration {
	return cfg.Consumer.Group.Rebalance.Timeout + joinGroupLapse
}

// fitReadTimeout raises cfg.Net.ReadTimeout to minReadTimeout. With
// Sarama's defaults (30s, below the 60s rebalance timeout), a rebalance
// that waits more than 30s for a member (one that died while it was
// joining) makes every live member drop its connection and join again,
// and each new join restarts the broker's wait for the missing one: in
// kfake, the group then never leaves PreparingRebalance and nothing is
// consumed (issue 16 point 8; IBM/sarama#2820).
func fitReadTimeout(cfg *sarama.Config) {
	cfg.Net.ReadTimeout = max(cfg.Net.ReadTimeout, minReadTimeout(cfg))
}
