package console

import (
	"context"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
)

// Indexing of dead-letter topics: each topic a page opened is followed in
// the background every refreshEvery. Pages never wait for a refresh but
// the first one, at most firstWait: a small topic shows whole on the first
// visit, a large one says it is still being read.
const (
	refreshEvery = time.Second
	firstWait    = 2 * time.Second
	// indexMaxWait is the index client's Consumer.MaxWaitTime: a refresh
	// that finds nothing new returns this soon (see package dlqindex).
	indexMaxWait = 20 * time.Millisecond
	// maxIndexes bounds the topics followed at once.
	maxIndexes = 200
)

// indexes are the followed dead-letter topics.
type indexes struct {
	ctx    context.Context
	client sarama.Client
	wg     *sync.WaitGroup
	mu     sync.Mutex
	byName map[string]*dlqindex.Index
	// problems holds each topic's last refresh error, nil once one works.
	problems map[string]error
}

// newIndexClient opens the client the indexes read through: cfg with a
// short Consumer.MaxWaitTime.
func newIndexClient(brokers []string, cfg *sarama.Config) (sarama.Client, error) {
	c := sarama.NewConfig()
	if cfg != nil {
		copied := *cfg
		c = &copied
	}
	c.Consumer.MaxWaitTime = indexMaxWait
	return sarama.NewClient(brokers, c)
}

func newIndexes(ctx context.Context, client sarama.Client, wg *sync.WaitGroup) *indexes {
	return &indexes{ctx: ctx, client: client, wg: wg, byName: map[string]*dlqindex.Index{}, problems: map[string]error{}}
}

// get returns the index of topic, following it from now on; false when
// the console follows maxIndexes topics already. Callers check that topic
// is a dead-letter topic first.
func (x *indexes) get(topic string) (*dlqindex.Index, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if idx, ok := x.byName[topic]; ok {
		return idx, true
	}
	if len(x.byName) >= maxIndexes {
		return nil, false
	}
	idx := dlqindex.New(x.client, topic)
	x.byName[topic] = idx
	x.wg.Go(func() { x.follow(topic, idx) })
	return idx, true
}

// problem is the last refresh error of topic; nil when it worked.
func (x *indexes) problem(topic string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.problems[topic]
}

// follow refreshes idx until the console closes, keeping its last error
// for the pages.
func (x *indexes) follow(topic string, idx *dlqindex.Index) {
	t := time.NewTicker(refreshEvery)
	defer t.Stop()
	for {
		err := idx.Refresh(x.ctx)
		if x.ctx.Err() != nil {
			return
		}
		x.mu.Lock()
		x.problems[topic] = err
		x.mu.Unlock()
		select {
		case <-x.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// first waits, at most firstWait, for idx's first refresh when it has had
// none; later pages show what the background refresh read. The error is
// the refresh's, context.DeadlineExceeded when it is still reading.
func first(ctx context.Context, idx *dlqindex.Index) error {
	if !idx.RefreshedAt().IsZero() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, firstWait)
	defer cancel()
	return idx.Refresh(ctx)
}
