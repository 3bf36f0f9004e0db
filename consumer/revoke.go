package consumer

import (
	"context"

	"github.com/IBM/sarama"
)

// Revocation of one partition (cooperative rebalancing).
//
// Under an eager strategy a rebalance ends the whole session, and every
// wait of every partition stops with the session's context. Under a
// cooperative one the session goes on, and Sarama tells a partition that
// it was revoked only by closing its claim's Messages channel, which a
// partition waiting out a retry backoff, an open breaker, a dedupe claim
// or a failing write does not read. revocationFeed reads the channel for
// it, so that the partition's claimCtx ends the moment the channel closes
// and each of those waits stops at once, while the other partitions of
// the session go on.

// revocationFeed reads claim's messages on a goroutine of its own and
// hands them on in order through messages. cancel is called, and messages
// closed, when the claim's channel closes (the partition was revoked, or
// the session ended). It keeps reading while the partition does not take
// them, buffering them (the partition pauses fetching while more than
// Sarama's ChannelBufferSize wait, so the buffer stays about that size),
// because only reading shows when the channel closes. stop ends the
// goroutine and waits for it; the partition calls it when it is given up.
func (p *partition) revocationFeed(cancel context.CancelFunc) (messages <-chan *sarama.ConsumerMessage, stop func()) {
	out := make(chan *sarama.ConsumerMessage)
	quit, done := make(chan struct{}), make(chan struct{})
	limit := max(p.c.cfg.saramaConfig().ChannelBufferSize, 1)
	go func() {
		defer close(done)
		defer cancel()
		defer close(out)
		var (
			queue  []*sarama.ConsumerMessage
			paused bool
		)
		defer func() {
			if paused {
				p.resume()
			}
		}()
		in := p.claim.Messages()
		for {
			var (
				send chan<- *sarama.ConsumerMessage
				head *sarama.ConsumerMessage
			)
			if len(queue) > 0 {
				send, head = out, queue[0]
			}
			select {
			case msg, ok := <-in:
				if !ok {
					return
				}
				queue = append(queue, msg)
				if !paused && len(queue) > limit {
					p.pause()
					paused = true
				}
			case send <- head:
				queue[0] = nil
				queue = queue[1:]
				if paused && len(queue) <= limit/2 {
					p.resume()
					paused = false
				}
			case <-quit:
				return
			}
		}
	}()
	return out, func() {
		close(quit)
		<-done
	}
}
