package dedupe

import (
	"errors"
	"fmt"
	"time"
)

// DefaultWindow is how long a store remembers a processed id unless
// configured otherwise (RedisConfig.Window, InboxConfig.Window).
const DefaultWindow = 24 * time.Hour

// ErrInvalidArgument is matched by the error of a call given an argument
// out of range: a lease below 1ms (Redis.Claim, Redis.Extend) or a cleanup
// interval that is not positive (Inbox.RunCleanup).
var ErrInvalidArgument = errors.New("dedupe: invalid argument")

// validScope refuses an empty Scope.
func validScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("%w: Scope is empty; set Scope, usually the consumer group", ErrInvalidConfig)
	}
	return nil
}

// windowOrDefault refuses a negative window and turns 0 into DefaultWindow.
func windowOrDefault(w time.Duration) (time.Duration, error) {
	switch {
	case w < 0:
		return 0, fmt.Errorf("%w: Window is %v; use a positive duration, or 0 for the default of %v", ErrInvalidConfig, w, DefaultWindow)
	case w == 0:
		return DefaultWindow, nil
	}
	return w, nil
}
