// Package testkit gives each test its own slice of the real services courier
// runs against: a PostgreSQL schema, a Redis key prefix and Kafka topics.
//
// Services are found through environment variables:
//
//	COURIER_TEST_DATABASE_URL   default postgres://postgres@127.0.0.1:5432/test
//	COURIER_TEST_REDIS_URL      default redis://127.0.0.1:6379/0
//	COURIER_TEST_KAFKA_BROKERS  a real cluster, e.g. localhost:9092,localhost:9093;
//	                            unset: an in-process kfake cluster per test
//
// A service that cannot be reached skips the test with a hint, except under
// CI=true, where it fails the test: CI never passes by skipping.
package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/courierkit/courier/internal/redact"
)

// Environment variable names and defaults.
const (
	EnvDatabaseURL     = "COURIER_TEST_DATABASE_URL"
	EnvRedisURL        = "COURIER_TEST_REDIS_URL"
	EnvKafkaBrokers    = "COURIER_TEST_KAFKA_BROKERS"
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// unavailable ends a test whose service is unreachable: a failure under
// CI=true, a skip elsewhere. Both say how to bring the service up.
func unavailable(t testing.TB, service, where string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable at %s: %v\nstart it with `make services` (or point %s at a running one)",
		service, where, err, envFor(service))
	if inCI() {
		t.Fatal(msg)
	}
	t.Skip(msg + "\n(skipped because CI is not set; under CI=true this fails)")
}

func envFor(service string) string {
	switch service {
	case "PostgreSQL":
		return EnvDatabaseURL
	case "Redis":
		return EnvRedisURL
	default:
		return EnvKafkaBrokers
	}
}

func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// DatabaseURL is the test database: COURIER_TEST_DATABASE_URL or its default.
func DatabaseURL() string { return envOr(EnvDatabaseURL, DefaultDatabaseURL) }

// RedisURL is the test Redis: COURIER_TEST_REDIS_URL or its default.
func RedisURL() string { return envOr(EnvRedisURL, DefaultRedisURL) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// UniqueName returns a name unique to this test run, built from the test's
// name: lower-case letters, digits and underscores, at most maxLen bytes,
// ending in random hex so reruns and parallel tests never collide.
func UniqueName(t testing.TB, maxLen int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	suffix := "_" + randomHex(4)
	base := b.String()
	if keep := maxLen - len(suffix); len(base) > keep {
		base = base[:keep]
	}
	return base + suffix
}

// redactURL hides a password in a service URL before it is printed.
func redactURL(raw string) string { return redact.ConnString(raw) }

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails
	return hex.EncodeToString(buf)
}
