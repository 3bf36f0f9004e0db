package consumer_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/testkit"
)

// handledOnly implements MessageHook alone: it counts the handled messages.
type handledOnly struct{ handled atomic.Int64 }

func (h *handledOnly) Message(_ string, o consumer.Outcome) {
	if o == consumer.OutcomeHandled {
		h.handled.Add(1)
	}
}

// misspelt means to be a MessageHook but its method name is wrong.
type misspelt struct{}

func (misspelt) Mesage(string, consumer.Outcome) {}

// TestHookOfOneInterface: a hook implementing MessageHook alone is called
// for every message, beside a hook implementing every interface.
func TestHookOfOneInterface(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "1"), record("b", "2"), record("c", "3"))
	var (
		all  recorder
		only handledOnly
	)
	cfg := f.config(t, counting(new(atomic.Int32)))
	cfg.Hooks = []consumer.Hook{&all, &only}
	stop := run(t, newConsumer(t, cfg))
	defer stop()
	testkit.WaitFor(t, 10*time.Second, "three messages handled", func() bool {
		return only.handled.Load() == 3 && all.count(consumer.OutcomeHandled) == 3
	})
}

// TestHookOfNoInterfaceRefused: a hook implementing none of the hook
// interfaces (a misspelt method) is refused, naming its index and type.
func TestHookOfNoInterfaceRefused(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, err error, want ...string) {
		t.Helper()
		if !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("err = %v, want ErrInvalidConfig", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %s", err, w)
			}
		}
	}
	cfg := minimalConfig()
	cfg.Hooks = []consumer.Hook{&handledOnly{}, misspelt{}}
	_, err := consumer.New(cfg)
	check(t, err, "Hooks[1]", "consumer_test.misspelt")

	cfg = minimalConfig()
	cfg.Dedupe = consumer.DedupeConfig{Store: nopStore{}, Hooks: []dedupe.Hook{misspelt{}}}
	_, err = consumer.New(cfg)
	check(t, err, "Dedupe.Hooks[0]", "consumer_test.misspelt")

	_, err = consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", Hooks: []consumer.Hook{nil}})
	check(t, err, "BreakerConfig.Hooks[0]", "<nil>")
}
