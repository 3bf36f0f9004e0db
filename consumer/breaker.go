package consumer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/internal/breakerdefault"
)

// Breaker defaults.
const (
	DefaultBreakerFailures = breakerdefault.Failures // 5, as the relay's
	DefaultBreakerOpenFor  = breakerdefault.OpenFor  // 30s, as the relay's
	DefaultBreakerProbes   = breakerdefault.Probes   // 1, as the relay's
	// MaxBreakerCount bounds ConsecutiveFailures and HalfOpenProbes.
	MaxBreakerCount = breakerdefault.MaxCount
)

// halfOpenRecheck is how long a caller that a half-open breaker turned away
// (its probes are busy) waits before it tries again.
const halfOpenRecheck = 100 * time.Millisecond

// ErrBreakerOpen is matched by the error of a call a Breaker refused or
// that opened it; errors.As finds the *BreakerOpenError.
var ErrBreakerOpen = errors.New("consumer: circuit breaker open")

// BreakerOpenError is returned by Breaker.Do when the breaker refused the
// call (open, or half-open with its probes busy) or when the call failed and
// the breaker is open after it. A handler that returns it (or an error
// wrapping it) makes the consumer pause the partition until RetryAt and
// then handle the same message again, counting no attempt.
type BreakerOpenError struct {
	// Breaker is the breaker's name.
	Breaker string
	// RetryAt is when the breaker lets a probe through. Left zero (or
	// past), the runner waits Config.BreakerWait.
	RetryAt time.Time
	// Err is the call's own error when the call ran and failed, or
	// gobreaker.ErrOpenState or gobreaker.ErrTooManyRequests when it was
	// refused.
	Err error
}

func (e *BreakerOpenError) Error() string {
	return fmt.Sprintf("circuit breaker %s open until %s: %v", e.Breaker, e.RetryAt.Format(time.RFC3339Nano), e.Err)
}

// Unwrap returns ErrBreakerOpen and Err.
func (e *BreakerOpenError) Unwrap() []error { return []error{ErrBreakerOpen, e.Err} }

// ErrUnavailable is matched by an error marked with Unavailable.
var ErrUnavailable = errors.New("consumer: downstream unavailable")

// unavailableError is an error marked with Unavailable: its message is the
// error's own.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{e.err, ErrUnavailable} }

// Unavailable marks err as the downstream saying it cannot serve anyone
// now, which a Breaker's default IsFailure counts: wrap a 503 Service
// Unavailable, a 502 or 504 from its gateway, a 429 Too Many Requests or
// any "try again later" answer that is about the downstream, not about the
// request. The error keeps its message; errors.Is(err, ErrUnavailable)
// reports the mark, and errors.Is/As still find err. For the message it is
// an ordinary retryable error (combine with RetryAfter to pace the next
// attempt). Do not wrap an answer about one request (a 400, a 409, a 500
// for one payload): counted, one bad message would open the breaker and
// stop every partition sharing it. Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err says the downstream is unreachable or
// overloaded, rather than answering about one request. It is a Breaker's
// default IsFailure; call it from an IsFailure of your own to extend it.
// It reports true for:
//
//   - an error marked with Unavailable (errors.Is(err, ErrUnavailable));
//   - context.DeadlineExceeded: the call got no answer in time (its own
//     timeout, or the attempt's, Config.AttemptTimeout);
//   - network errors: a net.Error (a *net.OpError of a dial, read or
//     write, a *net.DNSError, a timeout), the errnos ECONNREFUSED,
//     ECONNRESET, ECONNABORTED, EHOSTUNREACH, ENETUNREACH, ENETDOWN,
//     EHOSTDOWN, ETIMEDOUT and EPIPE, and io.EOF, io.ErrUnexpectedEOF or
//     "http: server closed idle connection" when a *url.Error carries it
//     (net/http's errors for a connection cut before or during the
//     answer);
//   - TLS failures, which no request can fix: a certificate the client
//     does not trust (*tls.CertificateVerificationError and the x509
//     errors), an alert from the server (tls.AlertError), a server that
//     does not speak TLS (tls.RecordHeaderError).
//
// A *url.Error counts only for what it carries: a URL that does not parse
// or an unsupported scheme is the request's fault. A bare
// io.ErrUnexpectedEOF does not count either (it is also what a
// json.Decoder says of a truncated payload): wrap it with Unavailable
// when you know the connection was cut. Permanent errors, nil and every
// other error report false.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if _, perm := errors.AsType[*PermanentError](err); perm {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, errno := range unreachableErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	return unreachable(err, false)
}

// unreachableErrnos say the connection to the downstream failed.
var unreachableErrnos = []error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EHOSTUNREACH,
	syscall.ENETUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN, syscall.ETIMEDOUT, syscall.EPIPE,
}

// httpClosedUnanswered is net/http's error (unexported) for a connection
// the server closed before it answered a request that cannot be retried
// (a POST, say).
const httpClosedUnanswered = "http: server closed idle connection"

// unreachable walks err's tree for a network or TLS failure; onConn says
// a *url.Error above carries err, so an end of file is a connection cut.
func unreachable(err error, onConn bool) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *url.Error:
		return unreachable(e.Err, true)
	case *net.OpError:
		return true
	case net.Error, *tls.CertificateVerificationError, tls.AlertError, tls.RecordHeaderError,
		x509.UnknownAuthorityError, x509.CertificateInvalidError, x509.HostnameError:
		return true
	}
	if onConn && (err == io.EOF || err == io.ErrUnexpectedEOF || err.Error() == httpClosedUnanswered) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return unreachable(u.Unwrap(), onConn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if unreachable(e, onConn) {
				return true
			}
		}
	}
	return false
}

// BreakerConfig configures a Breaker. Only Name is required.
type BreakerConfig struct {
	// Name names the breaker in errors, logs and metrics, e.g. "psp".
	// Required.
	Name string
	// ConsecutiveFailures open the breaker, at most 10,000
	// (MaxBreakerCount). Keep it at most the consumer's MaxAttempts (list
	// the breaker in Config.Breakers to have New check it). Defaults to 5.
	ConsecutiveFailures int
	// OpenFor is how long the breaker stays open before it lets probes
	// through (half-open), at most 24h (MaxTimeout). Defaults to 30s.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through;
	// all must succeed to close it, one failure opens it again. Defaults
	// to 1; at most 10,000 (MaxBreakerCount).
	HalfOpenProbes int
	// IsFailure reports whether a call's error says the downstream is
	// down, counting toward opening the breaker. Any other error, like
	// nil, says the downstream answered: it resets the count of failures
	// in a row and lets a half-open breaker close (the message's attempt
	// still fails, is retried, and is dead-lettered when its attempts run
	// out). Defaults to IsUnavailable: network errors, timeouts, TLS
	// failures and errors marked with Unavailable (a 503, a 429); never
	// Permanent ones. A function of your own replaces it (it may call
	// IsUnavailable); should it panic, IsUnavailable decides (and no failure
	// is counted should that panic too). Whatever it
	// says, a call cut short by its context (context.Canceled: a shutdown
	// or rebalance) or that panicked counts neither as a failure nor as a
	// success.
	IsFailure func(error) bool
	// Check, when set, asks the downstream whether it is up, apart from
	// any message: a call that always fails when the downstream is down
	// and never for a payload (an idempotent GET of a known resource, a
	// no-op request on the same path as the real calls; a liveness
	// endpoint that answers while the real path times out would make
	// every outage dead-letter messages). A failure that would open the
	// breaker (the ConsecutiveFailures-th in a row, or a half-open
	// probe's) is confirmed with it first: if Check returns nil, the
	// downstream is up, and the failure is the message's alone (not
	// counted; the breaker closes if half-open), so a message whose call
	// makes the downstream time out every time is dead-lettered after
	// MaxAttempts instead of holding the breaker open (see Breaker). If
	// Check fails (or panics), the breaker opens. Defaults to none: the
	// failures alone decide.
	Check func(context.Context) error
	// CheckTimeout bounds one Check, at most 24h (MaxTimeout). Defaults
	// to 5s.
	CheckTimeout time.Duration
	// Logger receives state changes. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks receive state changes: those implementing BreakerChangedHook
	// are called in order; each must implement one of the *Hook
	// interfaces (see Hook). Defaults to none.
	Hooks []Hook
}

// DefaultBreakerCheckTimeout is BreakerConfig.CheckTimeout's default.
const DefaultBreakerCheckTimeout = 5 * time.Second

// Breaker wraps calls to a downstream (a PSP client, say) in a circuit
// breaker (github.com/sony/gobreaker/v2): after ConsecutiveFailures
// failures in a row it refuses calls for OpenFor, then lets HalfOpenProbes
// calls through. Share one Breaker among all the handlers calling the same
// downstream. Its methods are safe for concurrent use.
//
// A breaker opens only when the downstream is unreachable, never for one
// bad message: by default only errors that say so count as failures (see
// BreakerConfig.IsFailure and IsUnavailable). A message whose call fails
// with any other error (the PSP answers 500 or 400 for that payload, the
// call panics) fails alone: it is retried and dead-lettered after
// MaxAttempts while the breaker stays closed and the other messages go
// on. Mark a downstream's "try later" answers (503, 429) with Unavailable,
// or they will not open it.
//
// Give the consumer at least ConsecutiveFailures attempts
// (Config.MaxAttempts), or a message meeting an outage from the start runs
// out of attempts and is dead-lettered before the breaker opens; list the
// breaker in Config.Breakers to have New refuse a config that breaks this.
//
// One case remains that the failures alone cannot tell from an outage: a
// message whose call makes the downstream time out (or cut the
// connection) every time, say a payload that hangs the PSP. When no other
// call through the breaker succeeds meanwhile (one partition with
// traffic), its timeouts are failures in a row: its ConsecutiveFailures-th
// attempt opens the breaker, and its half-open probes time out too. Calls
// that met or opened the breaker count no attempt, so the message is never
// dead-lettered: it, and every partition sharing the breaker, waits
// OpenFor after OpenFor, each pause logged ("circuit breaker open; pausing
// the partition") with the message's ce_id. With one call in flight, a
// downstream that hangs on one payload looks exactly like a downstream
// that is down, and counting the probes as attempts would dead-letter
// messages in every outage longer than MaxAttempts × OpenFor. Calls of
// other messages that succeed through the breaker meanwhile reset the
// count, and the message is then dead-lettered after MaxAttempts. Give
// the breaker a BreakerConfig.Check (a request that fails only when the
// downstream is down) and it asks before it opens: the downstream passes,
// the failure is the message's alone, and the message is dead-lettered
// after MaxAttempts. Without one, have the handler return Permanent for
// such a payload once you know it.
type Breaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	name     string
	openFor  time.Duration
	cfg      BreakerConfig
	log      *slog.Logger
	openedAt atomic.Int64 // unix nanoseconds of the last opening
}

// WithDefaults returns cfg with every zero field set to its default (the
// DefaultBreaker* constants, IsUnavailable, slog.Default()).
func (cfg BreakerConfig) WithDefaults() BreakerConfig {
	durations, ints := cfg.bounded()
	for _, f := range durations {
		f.setDefault()
	}
	for _, f := range ints {
		f.setDefault()
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = IsUnavailable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// bounded lists the numeric fields of cfg with their defaults and bounds.
func (cfg *BreakerConfig) bounded() ([]field[time.Duration], []field[int]) {
	return []field[time.Duration]{
			{"BreakerConfig.OpenFor", &cfg.OpenFor, DefaultBreakerOpenFor, MaxTimeout},
			{"BreakerConfig.CheckTimeout", &cfg.CheckTimeout, DefaultBreakerCheckTimeout, MaxTimeout},
		}, []field[int]{
			{"BreakerConfig.ConsecutiveFailures", &cfg.ConsecutiveFailures, DefaultBreakerFailures, MaxBreakerCount},
			{"BreakerConfig.HalfOpenProbes", &cfg.HalfOpenProbes, DefaultBreakerProbes, MaxBreakerCount},
		}
}

// validate checks cfg, with its defaults applied.
func (cfg *BreakerConfig) validate() error {
	if cfg.Name == "" {
		return fmt.Errorf("%w: BreakerConfig.Name is empty; name the downstream the breaker guards, e.g. \"psp\"", ErrInvalidConfig)
	}
	durations, ints := cfg.bounded()
	if err := checkBounds(durations...); err != nil {
		return err
	}
	return checkBounds(ints...)
}

// NewBreaker validates cfg, applies its defaults and returns a closed
// Breaker.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hooks, err := sortHooks("BreakerConfig.Hooks", cfg.Hooks)
	if err != nil {
		return nil, err
	}
	b := &Breaker{name: cfg.Name, openFor: cfg.OpenFor, cfg: cfg, log: cfg.Logger.With("breaker", cfg.Name)}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.Name,
		MaxRequests: uint32(cfg.HalfOpenProbes),
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.ConsecutiveFailures)
		},
		// Do judges each call once, outside the breaker's lock, and
		// reports the verdict as one of these sentinels.
		IsSuccessful: func(err error) bool { return err != errDownstreamFailed },
		IsExcluded:   func(err error) bool { return err == errNotJudged },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.openedAt.Store(time.Now().UnixNano())
			}
			b.log.Warn("circuit breaker changed", "from", from.String(), "to", to.String())
			hooks.BreakerChanged(cfg.Name, to)
		},
	})
	return b, nil
}

// The verdicts Do reports to the breaker (nil: the downstream answered).
var (
	errDownstreamFailed = errors.New("downstream failed")
	errNotJudged        = errors.New("call cut short or panicked")
)

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// State returns the breaker's state.
func (b *Breaker) State() gobreaker.State { return b.cb.State() }

// Do calls call through the breaker and returns its error. When the breaker
// refuses the call, or the call fails (IsFailure) and leaves the breaker
// open, the error is a *BreakerOpenError (matching ErrBreakerOpen). A panic
// in call counts neither as a failure nor as a success, and goes on up.
func (b *Breaker) Do(ctx context.Context, call func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done, err := b.cb.Allow()
	switch err {
	case nil:
	case gobreaker.ErrTooManyRequests:
		return &BreakerOpenError{Breaker: b.name, RetryAt: time.Now().Add(halfOpenRecheck), Err: err}
	default: // gobreaker.ErrOpenState
		return &BreakerOpenError{Breaker: b.name, RetryAt: b.halfOpensAt(), Err: err}
	}
	settled := false
	defer func() {
		if !settled { // call panicked: the panic goes on up, its stack intact
			done(errNotJudged)
		}
	}()
	err = call(ctx)
	failed := err != nil && !errors.Is(err, context.Canceled) && b.isFailure(err)
	if failed && b.cfg.Check != nil && b.wouldOpen() && b.up(ctx, err) {
		failed = false // the downstream is up: the failure is the message's
	}
	settled = true
	switch {
	case failed:
		done(errDownstreamFailed)
	case errors.Is(err, context.Canceled):
		done(errNotJudged)
	default:
		done(nil) // the downstream answered
	}
	if failed && b.cb.State() == gobreaker.StateOpen {
		// This failure opened the breaker (or met it opened by another
		// call): the message waits for the downstream, like the next ones.
		return &BreakerOpenError{Breaker: b.name, RetryAt: b.halfOpensAt(), Err: err}
	}
	return err
}

// wouldOpen reports whether one more failure opens the breaker.
func (b *Breaker) wouldOpen() bool {
	switch b.cb.State() {
	case gobreaker.StateHalfOpen:
		return true
	case gobreaker.StateClosed:
		return int(b.cb.Counts().ConsecutiveFailures)+1 >= b.cfg.ConsecutiveFailures
	}
	return false
}

// up asks Check whether the downstream is up, within CheckTimeout, after
// a call failed with err; a panic in Check says no.
func (b *Breaker) up(ctx context.Context, err error) (up bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.CheckTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			b.log.Error("BreakerConfig.Check panicked; the downstream is taken as down", "panic", v, "stack", string(debug.Stack()))
			up = false
		}
	}()
	if cerr := b.cfg.Check(ctx); cerr != nil {
		b.log.Warn("the downstream fails its check too; the breaker opens", "check_error", cerr)
		return false
	}
	b.log.Warn("a call failed as if the downstream were down, but it passes its check: "+
		"the failure is the message's alone, and does not count toward opening the breaker", "error", err)
	return true
}

// isFailure asks IsFailure, IsUnavailable should it panic, and counts the
// call as no failure should that panic too (an error that panics when
// looked into, a typed nil, says nothing about the downstream).
func (b *Breaker) isFailure(err error) bool {
	if failed, ok := b.judge("BreakerConfig.IsFailure", b.cfg.IsFailure, err); ok {
		return failed
	}
	failed, _ := b.judge("IsUnavailable", IsUnavailable, err)
	return failed
}

// judge calls isFailure on err, recovering and logging a panic (ok false).
func (b *Breaker) judge(name string, isFailure func(error) bool, err error) (failed, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			b.log.Error(name+" panicked on the call's error; the call counts as no failure unless IsUnavailable says otherwise",
				"panic", v, "stack", string(debug.Stack()))
		}
	}()
	return isFailure(err), true
}

// halfOpensAt is when the open breaker lets probes through.
func (b *Breaker) halfOpensAt() time.Time {
	return time.Unix(0, b.openedAt.Load()).Add(b.openFor)
}
