package consumer

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is matched by every error New and NewBreaker return for
// a bad config.
var ErrInvalidConfig = errors.New("consumer: invalid config")

// ErrAttemptTimeout is matched by the error of an attempt that ran past
// Config.AttemptTimeout.
var ErrAttemptTimeout = errors.New("consumer: handler attempt timed out")

// PermanentError marks an error no retry can fix. Create it with Permanent.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as one no retry can fix (a malformed payload, a
// rejected request): the message skips its remaining attempts and goes to
// the dead-letter topic with error kind "permanent". Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// RetryAfterError asks for the next attempt after Delay. Create it with
// RetryAfter.
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.Err, e.Delay)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns err asking for the next attempt after d instead of
// the Backoff delay, e.g. from a downstream's Retry-After. The attempt still
// counts. The wait is exactly d (no jitter) and ends early only when the
// session ends. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: max(d, 0)}
}

// PanicError is the error of an attempt whose handler panicked.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
