package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// closedPort is an address nothing listens on (port 1, tcpmux, which no
// test can bind): a dial is refused at once (ECONNREFUSED).
const closedPort = "127.0.0.1:1"

// outages are the ways a downstream is down, as its client reports them.
var outages = []struct {
	name string
	call func(ctx context.Context, payout string) error
}{
	{"connection refused", dialRefused},
	{"http connection refused", httpRefused},
	{"503 marked Unavailable", func(_ context.Context, payout string) error {
		return consumer.Unavailable(fmt.Errorf("psp: %s: 503 service unavailable", payout))
	}},
	{"timeout", func(ctx context.Context, payout string) error { return fmt.Errorf("%s: %w", payout, timesOut(ctx)) }},
}

// dialRefused dials closedPort: a *net.OpError of ECONNREFUSED.
func dialRefused(ctx context.Context, payout string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", closedPort)
	if err == nil {
		conn.Close()
		return nil
	}
	return fmt.Errorf("psp: %s: %w", payout, err)
}

// httpRefused posts to closedPort: a *url.Error of ECONNREFUSED.
func httpRefused(ctx context.Context, payout string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+closedPort+"/payouts/"+url.PathEscape(payout), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// psp is a payment provider stub that fails with down while down.
type psp struct {
	down  atomic.Bool
	fail  func(ctx context.Context, payout string) error
	calls atomic.Int64
	// lastDown is whether the last call found the PSP down: its health
	// check reports that, so a test recovering the PSP while a failing
	// call is between its failure and the check still sees them agree.
	lastDown atomic.Bool
}

func (p *psp) pay(ctx context.Context, payout string) error {
	p.calls.Add(1)
	down := p.down.Load()
	p.lastDown.Store(down)
	if down {
		return p.fail(ctx, payout)
	}
	return nil
}

// health is the PSP's health check: it fails while the last call found
// the PSP down.
func (p *psp) health(context.Context) error {
	if p.lastDown.Load() {
		return errors.New("psp health: 503 service unavailable")
	}
	return nil
}

// TestBreakerPausesConsumption: the PSP is down (each kind of outage: a
// connection refused, a 503 marked Unavailable, a timeout), the breaker
// opens after five failures, and the partition pauses: the message that
// met the open breaker counts no attempt, nothing is dead-lettered (with
// the default MaxAttempts), the handler runs only for the breaker's probes.
// Once the PSP recovers, every message is handled.
func TestBreakerPausesConsumption(t *testing.T) {
	t.Parallel()
	for _, outage := range outages {
		t.Run(outage.name, func(t *testing.T) {
			t.Parallel()
			testBreakerPausesConsumption(t, outage.call, false)
		})
	}
	t.Run("timeout confirmed by Check", func(t *testing.T) {
		t.Parallel()
		testBreakerPausesConsumption(t, outages[len(outages)-1].call, true)
	})
}

func testBreakerPausesConsumption(t *testing.T, fail func(ctx context.Context, payout string) error, check bool) {
	const total = 20
	const openFor = 200 * time.Millisecond
	f := newFixture(t, 1)
	var msgs []*sarama.ProducerMessage
	for i := range total {
		msgs = append(msgs, record(fmt.Sprint("payout-", i), fmt.Sprint("p", i)))
	}
	f.produce(t, f.topic, msgs...)

	stub := &psp{fail: fail}
	stub.down.Store(true)
	metrics := &recorder{}
	bc := consumer.BreakerConfig{Name: "psp", OpenFor: openFor, Logger: testkit.Logger(t), Hooks: []consumer.Hook{metrics}}
	if check {
		bc.Check = stub.health
	}
	breaker, err := consumer.NewBreaker(bc)
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
	cfg.Breakers = []*consumer.Breaker{breaker} // MaxAttempts: the default, 5
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
	if maxAttempt > consumer.DefaultMaxAttempts {
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

// TestBreakerDo: errors that say the downstream is down (here a 503
// marked Unavailable) open the breaker; a Permanent error and an answer
// about one request (a plain error) do not count, and reset the count of
// failures in a row as a success does.
func TestBreakerDo(t *testing.T) {
	t.Parallel()
	b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 2, OpenFor: time.Hour, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := consumer.Unavailable(errors.New("psp: 503 service unavailable"))
	answered := errors.New("psp: 500 internal server error for this payout")
	calls := 0
	call := func(err error) func(context.Context) error {
		return func(context.Context) error { calls++; return err }
	}
	for i, err := range []error{consumer.Permanent(errors.New("declined")), fail, answered, fail, answered, answered} {
		if got := b.Do(ctx, call(err)); got != err || b.State() != gobreaker.StateClosed {
			t.Fatalf("call %d: Do = %v, breaker %v; want the call's error %v and the breaker closed", i+1, got, b.State(), err)
		}
	}
	if err := b.Do(ctx, call(fail)); !errors.Is(err, fail) || errors.Is(err, consumer.ErrBreakerOpen) {
		t.Fatalf("first failure: %v", err)
	}
	err = b.Do(ctx, call(fail)) // the second failure in a row opens the breaker
	open, ok := errors.AsType[*consumer.BreakerOpenError](err)
	if !ok || !errors.Is(err, fail) || !errors.Is(err, consumer.ErrUnavailable) || open.Breaker != "psp" || time.Until(open.RetryAt) < 59*time.Minute {
		t.Fatalf("failure that opened the breaker: %v, want a *BreakerOpenError wrapping it, retry in an hour", err)
	}
	err = b.Do(ctx, call(nil))
	if !errors.Is(err, consumer.ErrBreakerOpen) || !errors.Is(err, gobreaker.ErrOpenState) || calls != 8 {
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
	fail := func(context.Context) error { return fmt.Errorf("psp: %w", context.DeadlineExceeded) }
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

// TestBreakerLetsAPoisonMessageGo: one partition, the default MaxAttempts
// and breaker, and one message whose call always fails with an answer
// about that message (a 500 for its payload). The breaker never opens: the
// message is dead-lettered after its MaxAttempts attempts, and the
// messages after it are handled.
func TestBreakerLetsAPoisonMessageGo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	metrics := &recorder{}
	breaker, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", Logger: testkit.Logger(t), Hooks: []consumer.Hook{metrics}})
	if err != nil {
		t.Fatal(err)
	}
	var handled counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		handled.add(string(m.Value))
		return breaker.Do(ctx, func(context.Context) error {
			if string(m.Value) == "poison" {
				return errors.New("psp: 500 internal server error: cannot pay payout poison")
			}
			return nil
		})
	}))
	cfg.Breakers = []*consumer.Breaker{breaker}
	cfg.MaxAttempts = 0 // the default, 5 = DefaultBreakerFailures
	f.produce(t, f.topic, record("k", "poison"), record("k", "after-1"), record("k2", "after-2"))
	f.consumeAll(t, cfg, 3)
	if !metrics.firstState("psp", gobreaker.StateOpen).IsZero() || breaker.State() != gobreaker.StateClosed {
		t.Errorf("the breaker opened (now %v) for one message's failures", breaker.State())
	}
	if n := handled.get("poison"); n != consumer.DefaultMaxAttempts {
		t.Errorf("the poison message was tried %d times, want %d", n, consumer.DefaultMaxAttempts)
	}
	letters := f.deadLetters(t)
	if len(letters) != 1 || letters[0].ErrorKind != dlq.KindRetriesExhausted || !strings.Contains(letters[0].Error, "500") {
		t.Fatalf("dead letters %+v, want the poison message alone, its attempts exhausted", letters)
	}
	if handled.get("after-1") != 1 || handled.get("after-2") != 1 {
		t.Errorf("the messages after it were handled %d and %d times, want once each", handled.get("after-1"), handled.get("after-2"))
	}
}

// TestBreakerIsFailureOfYourOwn: an IsFailure of the user's replaces the
// default both ways; one that panics leaves the verdict to IsUnavailable.
func TestBreakerIsFailureOfYourOwn(t *testing.T) {
	t.Parallel()
	plain := errors.New("psp: 500 internal server error")
	down := consumer.Unavailable(errors.New("psp: 503 service unavailable"))
	for _, tc := range []struct {
		name      string
		isFailure func(error) bool
		err       error
		opens     bool
	}{
		{"counting every error opens on plain ones", func(err error) bool { return err != nil }, plain, true},
		{"counting none stays closed on Unavailable", func(error) bool { return false }, down, false},
		{"counting none stays closed on connection refused", func(error) bool { return false }, dialRefused(context.Background(), "p"), false},
		{"panicking: Unavailable still opens it", func(error) bool { panic("bug in IsFailure") }, down, true},
		{"panicking: a plain error still does not", func(error) bool { panic("bug in IsFailure") }, plain, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 3, OpenFor: time.Hour,
				IsFailure: tc.isFailure, Logger: testkit.Logger(t, "IsFailure panicked")})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				_ = b.Do(context.Background(), func(context.Context) error { return tc.err })
			}
			if opened := b.State() == gobreaker.StateOpen; opened != tc.opens {
				t.Errorf("after 3 calls failing with %v the breaker is %v, want open: %t", tc.err, b.State(), tc.opens)
			}
		})
	}
}

// panicsInCall is a call that panics, named so its frame can be found in
// the stack.
func panicsInCall(context.Context) error { panic("bad payload") }

// TestBreakerPanickingCall: a panic in the call goes on up with its value
// and its stack, and counts neither way: it does not open a closed breaker,
// nor close or reopen a half-open one.
func TestBreakerPanickingCall(t *testing.T) {
	t.Parallel()
	b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 1, OpenFor: 50 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	do := func() (v any, stack string) {
		defer func() {
			v, stack = recover(), string(debug.Stack())
		}()
		_ = b.Do(context.Background(), panicsInCall)
		return nil, ""
	}
	for range 3 {
		if v, stack := do(); v != "bad payload" || !strings.Contains(stack, "panicsInCall") {
			t.Fatalf("recovered %v with a stack without the call's frame:\n%s", v, stack)
		}
	}
	if s := b.State(); s != gobreaker.StateClosed {
		t.Fatalf("after three panics the breaker is %v, want closed", s)
	}
	_ = b.Do(context.Background(), func(context.Context) error { return consumer.Unavailable(errors.New("503")) })
	testkit.WaitFor(t, 5*time.Second, "the breaker half-open", func() bool { return b.State() == gobreaker.StateHalfOpen })
	do()
	if s := b.State(); s != gobreaker.StateHalfOpen {
		t.Fatalf("after a panicking probe the breaker is %v, want still half-open", s)
	}
	if err := b.Do(context.Background(), func(context.Context) error { return nil }); err != nil || b.State() != gobreaker.StateClosed {
		t.Fatalf("a probe after the panicking one: %v, breaker %v; want it let through and the breaker closed", err, b.State())
	}
}

// TestIsUnavailable: what the default IsFailure counts, with the errors
// real clients return where they can be had.
func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A server that accepts connections and closes them unanswered, and
	// one that never answers.
	cut, hang := listen(t, true), listen(t, false)
	post := func(client *http.Client, addr string) error {
		resp, err := client.Post("http://"+addr+"/payouts", "application/json", strings.NewReader(`{}`))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	tlsServer := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake the client aborts
	tlsServer.StartTLS()
	t.Cleanup(tlsServer.Close)
	var truncated struct{ ID string }
	decodeErr := json.NewDecoder(strings.NewReader(`{"id": "p-`)).Decode(&truncated)
	_, badURL := http.NewRequest(http.MethodPost, "http://psp/payouts/p\n1", nil)

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error (a 500 for one payload)", errors.New("psp: 500 internal server error"), false},
		{"marked Unavailable", consumer.Unavailable(errors.New("psp: 503")), true},
		{"marked Unavailable, wrapped", fmt.Errorf("pay p-1: %w", consumer.Unavailable(errors.New("psp: 503"))), true},
		{"429 marked Unavailable with RetryAfter", consumer.RetryAfter(consumer.Unavailable(errors.New("psp: 429")), time.Second), true},
		{"Permanent beats Unavailable", consumer.Permanent(consumer.Unavailable(errors.New("psp: 503"))), false},
		{"Unavailable of a Permanent", consumer.Unavailable(consumer.Permanent(errors.New("psp: 400"))), false},
		{"joined with an Unavailable", errors.Join(errors.New("audit log: 500"), consumer.Unavailable(errors.New("psp: 503"))), true},
		{"deadline exceeded", fmt.Errorf("psp: %w", context.DeadlineExceeded), true},
		{"canceled", fmt.Errorf("psp: %w", context.Canceled), false},
		{"dial refused", dialRefused(ctx, "p-1"), true},
		{"http refused", httpRefused(ctx, "p-1"), true},
		{"http connection closed unanswered", post(http.DefaultClient, cut), true},
		{"http timeout", post(&http.Client{Timeout: 50 * time.Millisecond}, hang), true},
		{"tls certificate not trusted", func() error {
			resp, err := http.Get(tlsServer.URL)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}(), true},
		{"dns error", &net.DNSError{Err: "no such host", Name: "psp.invalid", IsNotFound: true}, true},
		{"bare ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"EPIPE in a SyscallError", os.NewSyscallError("write", syscall.EPIPE), true},
		{"url.Error of an unexpected EOF", &url.Error{Op: "Post", URL: "http://psp", Err: io.ErrUnexpectedEOF}, true},
		{"bare unexpected EOF (a truncated JSON payload)", decodeErr, false},
		{"bare EOF", fmt.Errorf("decode: %w", io.EOF), false},
		{"url.Error of a URL that does not parse", badURL, false},
		{"url.Error of an unsupported scheme", func() error { _, err := http.Get("psp://p-1"); return err }(), false},
		{"nil wrapped by %w", fmt.Errorf("weird: %w", nil), false},
		{"a panic of the handler", &consumer.PanicError{Value: "boom"}, false},
		{"an inner breaker open", fmt.Errorf("ledger: %w", gobreaker.ErrOpenState), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := consumer.IsUnavailable(tc.err); got != tc.want {
				t.Errorf("IsUnavailable(%#v) = %t, want %t (%v)", tc.err, got, tc.want, tc.err)
			}
		})
	}
}

// listen accepts connections on a fresh 127.0.0.1 listener and never
// answers: it closes each at once (hangUp) or when the test ends. It
// returns the listener's address.
func listen(t *testing.T, hangUp bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if hangUp {
				c.Close()
			} else {
				held = append(held, c)
			}
		}
	}()
	return l.Addr().String()
}

// timesOut is a call the downstream never answers in time.
func timesOut(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-ctx.Done()
	return fmt.Errorf("psp: no answer: %w", ctx.Err())
}

// TestBreakerCheck: with a Check, a failure that would open the breaker
// opens it only when Check fails too (or panics); when the downstream
// passes its check, the failure is the call's alone: it is not counted,
// and a half-open breaker closes.
func TestBreakerCheck(t *testing.T) {
	t.Parallel()
	newBreaker := func(t *testing.T, check func(context.Context) error) *consumer.Breaker {
		b, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 2, OpenFor: 50 * time.Millisecond,
			Check: check, Logger: testkit.Logger(t, "check", "Check")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	t.Run("up: timeouts are the calls' own", func(t *testing.T) {
		t.Parallel()
		var checks atomic.Int32
		b := newBreaker(t, func(context.Context) error { checks.Add(1); return nil })
		for i := range 6 {
			if err := b.Do(ctx, timesOut); errors.Is(err, consumer.ErrBreakerOpen) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: %v, want the call's own timeout", i+1, err)
			}
		}
		if b.State() != gobreaker.StateClosed || checks.Load() == 0 {
			t.Errorf("breaker %v after %d checks, want closed, checked", b.State(), checks.Load())
		}
	})
	for name, check := range map[string]func(context.Context) error{
		"down":     func(context.Context) error { return errors.New("psp health: connection refused") },
		"panicked": func(context.Context) error { panic("bug in Check") },
	} {
		t.Run(name+": the breaker opens", func(t *testing.T) {
			t.Parallel()
			b := newBreaker(t, check)
			_ = b.Do(ctx, timesOut)
			if err := b.Do(ctx, timesOut); !errors.Is(err, consumer.ErrBreakerOpen) || b.State() != gobreaker.StateOpen {
				t.Fatalf("second failure: %v, breaker %v; want it open", err, b.State())
			}
		})
	}
	t.Run("half-open: a probe that fails while the downstream is up closes it", func(t *testing.T) {
		t.Parallel()
		var down atomic.Bool
		down.Store(true)
		b := newBreaker(t, func(context.Context) error {
			if down.Load() {
				return errors.New("psp health: 503")
			}
			return nil
		})
		_, _ = b.Do(ctx, timesOut), b.Do(ctx, timesOut)
		testkit.WaitFor(t, 5*time.Second, "the breaker half-open", func() bool { return b.State() == gobreaker.StateHalfOpen })
		down.Store(false)
		if err := b.Do(ctx, timesOut); errors.Is(err, consumer.ErrBreakerOpen) || b.State() != gobreaker.StateClosed {
			t.Fatalf("probe: %v, breaker %v; want the call's own error and the breaker closed", err, b.State())
		}
	})
}

// TestBreakerPoisonTimeout: one partition, the default MaxAttempts and
// breaker, and one message whose call the downstream never answers in
// time while it answers the others. Without a Check the breaker cannot
// tell it from an outage (see Breaker): it opens, the message's probes
// count no attempt, and it waits, dead-lettering nothing. With a Check
// that the downstream passes, the message is dead-lettered after
// MaxAttempts, the breaker never opens, and the next message is handled.
func TestBreakerPoisonTimeout(t *testing.T) {
	t.Parallel()
	for _, withCheck := range []bool{false, true} {
		t.Run(fmt.Sprintf("check %t", withCheck), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1)
			metrics := &recorder{}
			bc := consumer.BreakerConfig{Name: "psp", OpenFor: 100 * time.Millisecond, Logger: testkit.Logger(t), Hooks: []consumer.Hook{metrics}}
			if withCheck {
				bc.Check = func(context.Context) error { return nil }
			}
			breaker, err := consumer.NewBreaker(bc)
			if err != nil {
				t.Fatal(err)
			}
			var handled counter
			cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
				handled.add(string(m.Value))
				return breaker.Do(ctx, func(ctx context.Context) error {
					if string(m.Value) == "poison" {
						return timesOut(ctx)
					}
					return nil
				})
			}))
			cfg.Breakers = []*consumer.Breaker{breaker}
			f.produce(t, f.topic, record("k", "poison"), record("k", "after"))
			if withCheck {
				f.consumeAll(t, cfg, 2)
				letters := f.deadLetters(t)
				if !metrics.firstState("psp", gobreaker.StateOpen).IsZero() || len(letters) != 1 || handled.get("poison") != consumer.DefaultMaxAttempts || handled.get("after") != 1 {
					t.Fatalf("breaker opened at %v; %d dead letters; poison tried %d times, the next %d; want never, 1, %d, 1",
						metrics.firstState("psp", gobreaker.StateOpen), len(letters), handled.get("poison"), handled.get("after"), consumer.DefaultMaxAttempts)
				}
				return
			}
			stop := run(t, newConsumer(t, cfg))
			testkit.WaitFor(t, 30*time.Second, "three failed half-open probes", func() bool { return handled.get("poison") >= consumer.DefaultMaxAttempts+3 })
			stop()
			if n := len(f.readAll(t, f.dlq)); n != 0 || handled.get("after") != 0 || metrics.firstState("psp", gobreaker.StateOpen).IsZero() {
				t.Fatalf("%d dead letters, the next message handled %d times, breaker opened %t; want the documented wait: 0, 0, true",
					n, handled.get("after"), !metrics.firstState("psp", gobreaker.StateOpen).IsZero())
			}
		})
	}
}
