package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker defaults.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 30 * time.Second
	DefaultBreakerProbes   = 1
	// MaxBreakerCount bounds ConsecutiveFailures and HalfOpenProbes.
	MaxBreakerCount = 10_000
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
	// IsFailure reports whether a call's error counts as a failure of the
	// downstream. Defaults to every error except Permanent ones (the
	// downstream answered: it is up). A call cut short by its context
	// (context.Canceled: a shutdown or rebalance) counts neither as a
	// failure nor as a success, whatever IsFailure says.
	IsFailure func(error) bool
	// Logger receives state changes. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics receives state changes (BreakerChanged). Defaults to none.
	Metrics Metrics
}

// Breaker wraps calls to a downstream (a PSP client, say) in a circuit
// breaker (github.com/sony/gobreaker/v2): after ConsecutiveFailures
// failures in a row it refuses calls for OpenFor, then lets HalfOpenProbes
// calls through. Share one Breaker among all the handlers calling the same
// downstream. Its methods are safe for concurrent use.
//
// Give the consumer at least ConsecutiveFailures attempts
// (Config.MaxAttempts), or a message meeting an outage from the start runs
// out of attempts and is dead-lettered before the breaker opens; list the
// breaker in Config.Breakers to have New refuse a config that breaks this.
type Breaker struct {
	cb       *gobreaker.CircuitBreaker[struct{}]
	name     string
	openFor  time.Duration
	cfg      BreakerConfig
	openedAt atomic.Int64 // unix nanoseconds of the last opening
}

// NewBreaker validates cfg, applies its defaults and returns a closed
// Breaker.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: BreakerConfig.Name is empty; name the downstream the breaker guards, e.g. \"psp\"", ErrInvalidConfig)
	}
	if err := setDefaults(field[time.Duration]{"BreakerConfig.OpenFor", &cfg.OpenFor, DefaultBreakerOpenFor, MaxTimeout}); err != nil {
		return nil, err
	}
	if err := setDefaults(
		field[int]{"BreakerConfig.ConsecutiveFailures", &cfg.ConsecutiveFailures, DefaultBreakerFailures, MaxBreakerCount},
		field[int]{"BreakerConfig.HalfOpenProbes", &cfg.HalfOpenProbes, DefaultBreakerProbes, MaxBreakerCount},
	); err != nil {
		return nil, err
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = func(err error) bool {
			var perm *PermanentError
			return err != nil && !errors.As(err, &perm)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	b := &Breaker{name: cfg.Name, openFor: cfg.OpenFor, cfg: cfg}
	log := cfg.Logger.With("breaker", cfg.Name)
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.Name,
		MaxRequests: uint32(cfg.HalfOpenProbes),
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.ConsecutiveFailures)
		},
		IsSuccessful: func(err error) bool { return !cfg.IsFailure(err) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.openedAt.Store(time.Now().UnixNano())
			}
			log.Warn("circuit breaker changed", "from", from.String(), "to", to.String())
			cfg.Metrics.BreakerChanged(cfg.Name, to)
		},
	})
	return b, nil
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// State returns the breaker's state.
func (b *Breaker) State() gobreaker.State { return b.cb.State() }

// Do calls call through the breaker and returns its error. When the breaker
// refuses the call, or the call fails and leaves the breaker open, the
// error is a *BreakerOpenError (matching ErrBreakerOpen). A panic in call
// counts as a failure and goes on up.
func (b *Breaker) Do(ctx context.Context, call func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, call(ctx) })
	switch {
	case err == nil:
		return nil
	// This breaker's own refusals are the bare sentinels; an error of the
	// call that wraps them (an inner breaker's) is the call's failure.
	case err == gobreaker.ErrTooManyRequests:
		return &BreakerOpenError{Breaker: b.name, RetryAt: time.Now().Add(halfOpenRecheck), Err: err}
	case err == gobreaker.ErrOpenState:
		return &BreakerOpenError{Breaker: b.name, RetryAt: b.halfOpensAt(), Err: err}
	case b.cb.State() == gobreaker.StateOpen && b.cfg.IsFailure(err) && !errors.Is(err, context.Canceled):
		// This failure opened the breaker (or met it opened by another
		// call): the message waits for the downstream, like the next ones.
		return &BreakerOpenError{Breaker: b.name, RetryAt: b.halfOpensAt(), Err: err}
	}
	return err
}

// halfOpensAt is when the open breaker lets probes through.
func (b *Breaker) halfOpensAt() time.Time {
	return time.Unix(0, b.openedAt.Load()).Add(b.openFor)
}
