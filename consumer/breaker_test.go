package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// psp is a payment provider stub that fails while down.
type psp struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (p *psp) pay(ctx context.Context, payout string) error {
	p.calls.Add(1)
	if p.down.Load() {
		return fmt.Errorf("psp: %s: 503 service unavailable", payout)
	}
	return nil
}

// TestBreakerPausesConsumption: the PSP fails five times, the breaker
// opens, and the partition pauses: the message that met the open breaker
// counts no attempt, nothing is dead-lettered, the handler runs only for
// the breaker's probes. Once the PSP recovers, every message is handled.
func TestBreakerPausesConsumption(t *testing.T) {
	t.Parallel()
	const total = 20
	const openFor = 200 * time.Millisecond
	f := newFixture(t, 1)
	var msgs []*sarama.ProducerMessage
	for i := range total {
		msgs = append(msgs, record(fmt.Sprint("payout-", i), fmt.Sprint("p", i)))
	}
	f.produce(t, f.topic, msgs...)

	stub := &psp{}
	stub.down.Store(true)
	metrics := &recorder{}
	breaker, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", OpenFor: openFor, Logger: testkit.Logger(t), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []time.Time
	maxAttempt := 0
	handled := map[string]int{}
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		calls = append(calls, time.Now())
		maxAttempt = max(maxAttempt, m.Attempt)
		mu.Unlock()
		if err := breaker.Do(ctx, func(ctx context.Context) error { return stub.pay(ctx, string(m.Value)) }); err != nil {
			return err
		}
		mu.Lock()
		handled[string(m.Value)]++
		mu.Unlock()
		return nil
	}))
	cfg.MaxAttempts = 10 // more than the breaker's 5 failures
	run(t, newConsumer(t, cfg))

	var opened time.Time
	testkit.WaitFor(t, 10*time.Second, "the breaker to open", func() bool {
		opened = metrics.firstState("psp", gobreaker.StateOpen)
		return !opened.IsZero()
	})
	testkit.WaitFor(t, 10*time.Second, "three half-open probes", func() bool { return stub.calls.Load() >= 5+3 })
	downFor := time.Since(opened)
	mu.Lock()
	var whileOpen int
	for _, c := range calls {
		if c.After(opened) {
			whileOpen++
		}
	}
	handledWhileDown := len(handled)
	mu.Unlock()
	if limit := int(downFor/openFor) + 2; whileOpen > limit {
		t.Errorf("the handler ran %d times in the %v the breaker was open, want at most %d (one probe per %v)", whileOpen, downFor, limit, openFor)
	}
	if handledWhileDown != 0 {
		t.Errorf("%d messages handled while the PSP was down", handledWhileDown)
	}
	if f.committed(t, 0) > 0 {
		t.Error("an offset was committed while the PSP was down")
	}

	stub.down.Store(false)
	testkit.WaitFor(t, 10*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == total })
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != total {
		t.Errorf("%d of %d messages handled", len(handled), total)
	}
	if maxAttempt > 5 {
		t.Errorf("a message reached attempt %d: calls refused by the open breaker (or that opened it) must not count", maxAttempt)
	}
	if n := len(f.readAll(t, f.dlq)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if breaker.State() != gobreaker.StateClosed {
		t.Errorf("breaker %v after recovery, want closed", breaker.State())
	}
}

// TestBreakerErrorsOfYourOwn: a handler guarding its downstream with a
// gobreaker of its own makes the partition wait BreakerWait on
// gobreaker.ErrOpenState, counting no attempt.
func TestBreakerErrorsOfYourOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "v"))
	var refusals atomic.Int64
	var mu sync.Mutex
	var attempts []int
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Attempt)
		mu.Unlock()
		if refusals.Add(1) <= 5 {
			return fmt.Errorf("calling the psp: %w", gobreaker.ErrOpenState)
		}
		return nil
	}))
	cfg.MaxAttempts = 2
	cfg.BreakerWait = 10 * time.Millisecond
	f.consumeAll(t, cfg, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 6 || attempts[5] != 1 {
		t.Errorf("attempts %v, want five refusals and a success, all attempt 1", attempts)
	}
	if n := len(f.readAll(t, f.dlq)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func TestBreakerDo(t *testing.T) {
	t.Parallel()
	b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 2, OpenFor: time.Hour, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := errors.New("timeout")
	calls := 0
	call := func(err error) func(context.Context) error {
		return func(context.Context) error { calls++; return err }
	}
	if err := b.Do(ctx, call(consumer.Permanent(errors.New("declined")))); errors.Is(err, consumer.ErrBreakerOpen) {
		t.Fatalf("a permanent error counted as a failure: %v", err)
	}
	if err := b.Do(ctx, call(fail)); !errors.Is(err, fail) || errors.Is(err, consumer.ErrBreakerOpen) {
		t.Fatalf("first failure: %v", err)
	}
	err = b.Do(ctx, call(fail)) // the second failure opens the breaker
	open, ok := errors.AsType[*consumer.BreakerOpenError](err)
	if !ok || !errors.Is(err, fail) || open.Breaker != "psp" || time.Until(open.RetryAt) < 59*time.Minute {
		t.Fatalf("failure that opened the breaker: %v, want a *BreakerOpenError wrapping it, retry in an hour", err)
	}
	err = b.Do(ctx, call(nil))
	if !errors.Is(err, consumer.ErrBreakerOpen) || !errors.Is(err, gobreaker.ErrOpenState) || calls != 3 {
		t.Fatalf("call on an open breaker: %v after %d calls, want it refused without calling", err, calls)
	}
}

// TestBreakerIgnoresCancelledCalls: a call cut short by its context says
// nothing about the downstream. It must not close a half-open breaker (the
// probe never got an answer) nor reset the count of failures in a row.
func TestBreakerIgnoresCancelledCalls(t *testing.T) {
	t.Parallel()
	b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 2, OpenFor: 20 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("timeout") }
	cancelled := func(context.Context) error { return context.Canceled }

	_ = b.Do(ctx, fail)
	_ = b.Do(ctx, cancelled)
	if err := b.Do(ctx, fail); !errors.Is(err, consumer.ErrBreakerOpen) {
		t.Fatalf("two failures around a cancelled call: %v, want the breaker open", err)
	}
	testkit.WaitFor(t, 5*time.Second, "the breaker half-open", func() bool { return b.State() == gobreaker.StateHalfOpen })
	if err := b.Do(ctx, cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled probe: %v", err)
	}
	if s := b.State(); s != gobreaker.StateHalfOpen {
		t.Fatalf("after a cancelled probe the breaker is %v, want still half-open", s)
	}
	if err := b.Do(ctx, func(context.Context) error { return nil }); err != nil || b.State() != gobreaker.StateClosed {
		t.Fatalf("a probe that succeeds: %v, breaker %v, want closed", err, b.State())
	}
}

// TestBreakerOwnRefusalsOnly: an error of the call that wraps
// gobreaker.ErrOpenState (an inner breaker's) is the call's failure, not this
// breaker's refusal, so it carries no RetryAt of a breaker that never opened.
func TestBreakerOwnRefusalsOnly(t *testing.T) {
	t.Parallel()
	b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	inner := fmt.Errorf("ledger client: %w", gobreaker.ErrOpenState)
	err = b.Do(context.Background(), func(context.Context) error { return inner })
	if err != inner {
		t.Fatalf("Do = %v, want the call's own error %v", err, inner)
	}
}

// TestBreakerOpenErrorWithoutRetryAt: a *BreakerOpenError whose RetryAt is
// unset makes the partition wait BreakerWait, not spin on the handler.
func TestBreakerOpenErrorWithoutRetryAt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, &sarama.ProducerMessage{Value: sarama.StringEncoder(`{}`)})
	const wait = 200 * time.Millisecond
	var mu sync.Mutex
	var calls []time.Time
	cfg := f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			return &consumer.BreakerOpenError{Breaker: "psp", Err: gobreaker.ErrOpenState}
		}
		return nil
	}))
	cfg.BreakerWait = wait
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("%d handler calls, want 2 (refused, then handled)", len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < wait {
		t.Fatalf("the handler was called again after %v, want at least BreakerWait (%v)", gap, wait)
	}
}
