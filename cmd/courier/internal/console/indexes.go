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
	// idleAfter is how long a topic no page asked for is followed still;
	// then its index is dropped, and the next page reads it anew.
	idleAfter = 10 * time.Minute
)

// indexes are the followed dead-letter topics.
type indexes struct {
	ctx    context.Context
	client sarama.Client
	wg     *sync.WaitGroup
	mu     sync.Mutex
	byName map[string]*followed
}

// followed is a topic's index, when a page last asked for it, and its
// last refresh error (nil once one works).
type followed struct {
	idx     *dlqindex.Index
	viewed  time.Time
	problem error
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
	c.Metadata.AllowAutoTopicCreation = false
	return sarama.NewClient(brokers, c)
}

func newIndexes(ctx context.Context, client sarama.Client, wg *sync.WaitGroup) *indexes {
	return &indexes{ctx: ctx, client: client, wg: wg, byName: map[string]*followed{}}
}

// get returns the index of topic, following it from now on (until no
// page asked for it for idleAfter); false when the console follows
// maxIndexes topics already. Callers check that topic exists first.
func (x *indexes) get(topic string) (*dlqindex.Index, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f, ok := x.byName[topic]; ok {
		f.viewed = time.Now()
		return f.idx, true
	}
	if len(x.byName) >= maxIndexes {
		return nil, false
	}
	f := &followed{idx: dlqindex.New(x.client, topic), viewed: time.Now()}
	x.byName[topic] = f
	x.wg.Go(func() { x.follow(topic, f) })
	return f.idx, true
}

// peek returns the index of topic when it is followed, without asking for
// it.
func (x *indexes) peek(topic string) (*dlqindex.Index, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f, ok := x.byName[topic]; ok {
		return f.idx, true
	}
	return nil, false
}

// problem is the last refresh error of topic; nil when it worked.
func (x *indexes) problem(topic string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f, ok := x.byName[topic]; ok {
		return f.problem
	}
	return nil
}

// follow refreshes f's index until the console closes or no page asked
// for it for idleAfter, keeping its last error for the pages.
func (x *indexes) follow(topic string, f *followed) {
	t := time.NewTicker(refreshEvery)
	defer t.Stop()
	for {
		err := f.idx.Refresh(x.ctx)
		if x.ctx.Err() != nil {
			return
		}
		x.mu.Lock()
		f.problem = err
		idle := time.Since(f.viewed) > idleAfter
		if idle {
			delete(x.byName, topic)
		}
		x.mu.Unlock()
		if idle {
			return
		}
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
