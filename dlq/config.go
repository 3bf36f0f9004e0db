package dlq

import "errors"

// ErrInvalidConfig is matched by every error of a bad configuration in
// this package: those of Replay for a ReplayConfig it cannot use, and
// those of NewWriter and WriterConfig.Validate. ErrInvalidReplayConfig and
// ErrInvalidWriterConfig tell the two apart; each matches ErrInvalidConfig.
var ErrInvalidConfig = errors.New("dlq: invalid config")

// ErrInvalidReplayConfig is matched by the error of Replay for a config it
// cannot use. It matches ErrInvalidConfig.
var ErrInvalidReplayConfig error = &configError{"dlq: invalid replay config"}

// ErrInvalidWriterConfig is matched by every error NewWriter and
// WriterConfig.Validate return. It matches ErrInvalidConfig.
var ErrInvalidWriterConfig error = &configError{"dlq: invalid writer config"}

// configError is the sentinel of one config, which also matches
// ErrInvalidConfig and reads as before.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrInvalidConfig) true of the config's errors.
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }
