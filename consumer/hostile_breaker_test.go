package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// (Errors of odd shapes a call may return.)
type (
	// unwrapsNil says it wraps an error and unwraps to nil.
	unwrapsNil struct{}
	// unwrapsNils says it wraps errors and unwraps to nils.
	unwrapsNils struct{}
	// pointerError's Error panics on a nil pointer.
	pointerError struct{ msg string }
)

func (e *pointerError) Error() string { return e.msg }

func (unwrapsNil) Error() string    { return "psp: odd error wrapping nil" }
func (unwrapsNil) Unwrap() error    { return nil }
func (unwrapsNils) Error() string   { return "psp: odd error wrapping nils" }
func (unwrapsNils) Unwrap() []error { return []error{nil, nil} }

// TestHostileBreaker: calls through a Breaker (the default one, the
// default MaxAttempts, listed in Config.Breakers) that fail for one bad
// message in ways that say nothing about the downstream being down. Each
// case has a breaker of its own and, on one partition, its bad messages
// then good ones, so no call of another case comes between its failures.
// The breaker never opens, the bad messages are dead-lettered (at once
// when Permanent, after MaxAttempts otherwise), the good messages after
// them are handled once, and handled + dead-lettered = produced, within a
// bounded time.
func TestHostileBreaker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		bad  int // bad messages in a row
		call func(ctx context.Context, payload string) error
		kind dlq.ErrorKind
	}{
		{"500 for one payload", 1, func(context.Context, string) error {
			return errors.New("psp: 500 internal server error: cannot pay this payout")
		}, dlq.KindRetriesExhausted},
		{"500 for two payloads in a row", 2, func(context.Context, string) error {
			return errors.New("psp: 500 internal server error")
		}, dlq.KindRetriesExhausted},
		{"400 marked Permanent", 1, func(context.Context, string) error {
			return consumer.Permanent(errors.New("psp: 400 bad request: amount_cents must be above 0"))
		}, dlq.KindPermanent},
		{"panicking call", 1, func(context.Context, string) error {
			var fees map[string]int
			fees["EUR"]++ // a nil map: panics
			return nil
		}, dlq.KindRetriesExhausted},
		{"nil wrapped with %w", 1, func(context.Context, string) error {
			return fmt.Errorf("psp: %w", nil)
		}, dlq.KindRetriesExhausted},
		{"error unwrapping to nil", 1, func(context.Context, string) error { return unwrapsNil{} }, dlq.KindRetriesExhausted},
		{"error unwrapping to nils", 1, func(context.Context, string) error {
			return fmt.Errorf("pay: %w", unwrapsNils{})
		}, dlq.KindRetriesExhausted},
		{"typed nil error whose Error panics", 1, func(context.Context, string) error {
			var err *pointerError
			return err
		}, dlq.KindRetriesExhausted},
		{"URL built from the payload does not parse", 1, func(ctx context.Context, payload string) error {
			_, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://psp.invalid/payouts/"+payload+"\n", nil)
			return err // a *url.Error, before any connection
		}, dlq.KindRetriesExhausted},
		{"truncated JSON decoded in the call", 1, func(_ context.Context, payload string) error {
			var p struct{ Amount int }
			return json.NewDecoder(strings.NewReader(`{"amount": 1`)).Decode(&p) // io.ErrUnexpectedEOF
		}, dlq.KindRetriesExhausted},
		{"context.Canceled of the call's own", 1, func(context.Context, string) error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return fmt.Errorf("psp client closed: %w", ctx.Err())
		}, dlq.KindRetriesExhausted},
		{"1 MiB error message with control characters", 1, func(context.Context, string) error {
			return errors.New("psp: 500: " + strings.Repeat("\x1b[31m\x00\xff", 256<<10))
		}, dlq.KindRetriesExhausted},
	}

	f := newFixture(t, 1)
	metrics := &recorder{}
	breakers := map[string]*consumer.Breaker{}
	var handled, tried counter
	var records []*sarama.ProducerMessage
	for _, tc := range cases {
		b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: tc.name, Logger: testkit.Logger(t), Hooks: []consumer.Hook{metrics}})
		if err != nil {
			t.Fatal(err)
		}
		breakers[tc.name] = b
		for i := range tc.bad {
			records = append(records, record(tc.name, fmt.Sprintf("%s/bad-%d", tc.name, i)))
		}
		records = append(records, record(tc.name, tc.name+"/good-0"), record(tc.name, tc.name+"/good-1"))
	}
	calls := map[string]func(context.Context, string) error{}
	for _, tc := range cases {
		calls[tc.name] = tc.call
	}
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		name, item, _ := strings.Cut(string(m.Value), "/")
		tried.add(string(m.Value))
		err := breakers[name].Do(ctx, func(ctx context.Context) error {
			if strings.HasPrefix(item, "bad-") {
				return calls[name](ctx, string(m.Value))
			}
			return nil
		})
		if err == nil {
			handled.add(string(m.Value))
		}
		return err
	}))
	cfg.MaxAttempts = 0 // the default, DefaultBreakerFailures
	cfg.Hooks = []consumer.Hook{metrics}
	for _, b := range breakers {
		cfg.Breakers = append(cfg.Breakers, b)
	}
	f.produce(t, f.topic, records...)
	stop := run(t, newConsumer(t, cfg))
	t.Run("every offset committed", func(t *testing.T) { // failing alone, so that the cases say which held the partition
		testkit.WaitFor(t, 60*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == int64(len(records)) })
	})
	stop()

	letters := f.accountFor(t, &handled, len(records))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if opened := metrics.firstState(tc.name, gobreaker.StateOpen); !opened.IsZero() || breakers[tc.name].State() != gobreaker.StateClosed {
				t.Errorf("the breaker opened (at %v; now %v) for bad messages", opened, breakers[tc.name].State())
			}
			attempts := consumer.DefaultMaxAttempts
			if tc.kind == dlq.KindPermanent {
				attempts = 1
			}
			for i := range tc.bad {
				bad := fmt.Sprintf("%s/bad-%d", tc.name, i)
				if env, ok := letters[bad]; !ok || env.ErrorKind != tc.kind {
					t.Errorf("%s: dead-lettered %t, kind %q; want %q", bad, ok, env.ErrorKind, tc.kind)
				}
				if n := tried.get(bad); n != attempts {
					t.Errorf("%s tried %d times, want %d", bad, n, attempts)
				}
			}
			for _, good := range []string{tc.name + "/good-0", tc.name + "/good-1"} {
				if n := handled.get(good); n != 1 {
					t.Errorf("%s handled %d times, want once", good, n)
				}
			}
		})
	}
}

// accountFor returns the fixture's dead letters by their original value,
// and checks that the handled ones (distinct values) and they add up to
// the produced ones.
func (f *fixture) accountFor(t *testing.T, handled *counter, produced int) map[string]dlq.Envelope {
	t.Helper()
	letters := f.lettersByValue(t)
	if handled.len()+len(letters) != produced {
		t.Errorf("%d handled + %d dead-lettered, want the %d produced", handled.len(), len(letters), produced)
	}
	return letters
}

// lettersByValue returns the fixture's dead letters by their original
// value.
func (f *fixture) lettersByValue(t *testing.T) map[string]dlq.Envelope {
	t.Helper()
	letters := map[string]dlq.Envelope{}
	for _, env := range f.deadLetters(t) {
		o, err := env.Original()
		if err != nil {
			t.Fatal(err)
		}
		letters[string(o.Value)] = env
	}
	return letters
}
