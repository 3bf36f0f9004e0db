package bench

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
)

// The workload every harness shares: the relay drains and the consumer
// reads the same kind of event.
const (
	keys        = 1_000 // distinct record keys
	partitions  = 12
	payloadSize = 200 // bytes of JSON per message
)

// defaultSarama is the client config of a harness's admin, seeding and
// reading clients when its config names none: acks from all in-sync
// replicas.
func defaultSarama() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	return cfg
}

// defaultLogger formats warnings and discards them, as a service would pay
// for formatting them.
func defaultLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// randomName is a default run name: a lower-case identifier.
func randomName() string {
	return "bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
}

// applyName sets an empty run name to a random one and refuses one that
// cannot start a schema name (see validName and maxNameLen).
func applyName(name *string) error {
	if *name == "" {
		*name = randomName()
	}
	if len(*name) > maxNameLen || !validName.MatchString(*name) {
		return fmt.Errorf("bench: Name %q: use lower-case letters, digits and underscores, at most %d bytes, not starting with a digit", *name, maxNameLen)
	}
	return nil
}

// count is a config field holding a count and the default that 0 stands for.
type count struct {
	field *int
	def   int
}

// applyCounts sets each zero count to its default and refuses a negative one.
func applyCounts(counts ...count) error {
	for _, c := range counts {
		if *c.field < 0 {
			return fmt.Errorf("bench: a negative count (%d); use a positive one, or 0 for the default of %d", *c.field, c.def)
		}
		if *c.field == 0 {
			*c.field = c.def
		}
	}
	return nil
}

// progress writes a line to w when w is set.
func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// orderPayload is the JSON value of the i-th OrderCreated event of key,
// padded to payloadSize bytes.
func orderPayload(key string, i int) []byte {
	payload := fmt.Appendf(nil, `{"order_id":%q,"n":%d,"status":"created","note":"`, key, i)
	payload = append(payload, strings.Repeat("x", max(payloadSize-len(payload)-2, 0))...)
	return append(payload, `"}`...)
}

// header is a Sarama record header.
func header(name, value string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(name), Value: []byte(value)}
}
