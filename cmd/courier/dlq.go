package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// dlqOptions are the options every dlq subcommand shares.
type dlqOptions struct {
	kafka kafkaFlags
	out   outputFlag
}

// connect validates the shared options and opens a Kafka client, giving
// up when ctx ends (SIGINT, SIGTERM) as well as after --kafka-timeout.
func (o *dlqOptions) connect(ctx context.Context) (sarama.Client, error) {
	if err := o.out.validate(); err != nil {
		return nil, err
	}
	brokers, cfg, err := o.kafka.config()
	if err != nil {
		return nil, err
	}
	return o.kafka.dialKafka(ctx, brokers, cfg)
}

// dlqError explains the errors of reading a dead-letter topic.
func dlqError(topic string, err error) error {
	if errors.Is(err, dlq.ErrNoTopic) {
		return fmt.Errorf("topic %q does not exist: name the dead-letter topic itself, e.g. orders%s (list topics with `kcat -L`)", topic, dlq.DefaultSuffix)
	}
	return err
}

func newDLQCmd() *cobra.Command {
	o := &dlqOptions{}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect dead-letter topics and replay their records",
		Long: `Reads the dead-letter topics that courier's consumer and relay write
(<topic>.dlq, records in the envelope of package dlq) and moves records back
to their original topics.

stats, list and show only read: they join no consumer group and commit
nothing. replay keeps its position as the offsets of a consumer group
(--group), committed after each batch the original topic acknowledged.

Text output escapes what a record could send to the terminal (control
characters, escape sequences, bidi overrides) as in a Go string literal,
and shows bytes that are not printable UTF-8 as base64:…. With --output
json, a key, header name or header value that is not UTF-8 comes as
key_base64 / value_base64 (the text field null), with the exact bytes.
Brokers that refuse or never answer fail the command within about twice
--kafka-timeout.`,
		Example: `  export COURIER_BROKERS=kafka-1:9092
  courier dlq stats payouts.dlq
  courier dlq list payouts.dlq --error timeout --since 24h
  courier dlq show payouts.dlq --partition 0 --offset 2
  courier dlq replay payouts.dlq --error timeout --dry-run
  courier dlq replay payouts.dlq --error timeout`,
	}
	o.kafka.register(cmd)
	o.out.register(cmd)
	cmd.AddCommand(newDLQStatsCmd(o), newDLQListCmd(o), newDLQShowCmd(o), newDLQReplayCmd(o))
	return cmd
}

// dlqFilterFlags select dead letters for stats, list and replay.
type dlqFilterFlags struct {
	originalTopic, key, errorContains string
	errorKind, consumerGroup, tenant  string
	since, until                      string
	partitions                        []int32
	fromOffset, untilOffset           int64
}

func (f *dlqFilterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.originalTopic, "original-topic", "", "only dead letters of this original topic")
	fl.StringVar(&f.key, "key", "", "only dead letters with this original key")
	fl.StringVar(&f.errorContains, "error", "", "only dead letters whose error contains this text (ignoring case)")
	fl.StringVar(&f.errorKind, "error-kind", "", fmt.Sprintf("only dead letters of this kind: %s or %s", dlq.KindRetriesExhausted, dlq.KindPermanent))
	fl.StringVar(&f.consumerGroup, "consumer-group", "", "only dead letters of this consumer group (exactly; the relay's have none)")
	fl.StringVar(&f.tenant, "tenant", "", "only dead letters of this tenant: the original record's ce_tenantid header, exactly")
	fl.StringVar(&f.since, "since", "", "only dead letters that failed at or after this time: RFC 3339 or a duration ago (2h, 7d)")
	fl.StringVar(&f.until, "until", "", "only dead letters that failed before this time: RFC 3339 or a duration ago")
	fl.Int32SliceVar(&f.partitions, "partition", nil, "only these partitions of the dead-letter topic (repeat or comma-separate)")
	fl.Int64Var(&f.fromOffset, "from-offset", 0, "only records at this offset of the dead-letter topic or later")
	fl.Int64Var(&f.untilOffset, "until-offset", 0, "only records before this offset of the dead-letter topic (0: no bound)")
}

func (f *dlqFilterFlags) filter(now time.Time) (dlq.Filter, error) {
	since, until, err := parseTimeRange(f.since, f.until, now)
	if err != nil {
		return dlq.Filter{}, err
	}
	for _, p := range f.partitions {
		if p < 0 {
			return dlq.Filter{}, usageError{fmt.Errorf("--partition %d: partitions are numbered from 0", p)}
		}
	}
	switch kind := dlq.ErrorKind(f.errorKind); {
	case f.fromOffset < 0 || f.untilOffset < 0:
		return dlq.Filter{}, usageError{fmt.Errorf("--from-offset %d / --until-offset %d: offsets start at 0", f.fromOffset, f.untilOffset)}
	case f.untilOffset != 0 && f.untilOffset <= f.fromOffset:
		return dlq.Filter{}, usageError{fmt.Errorf("--until-offset %d is not after --from-offset %d, so nothing matches", f.untilOffset, f.fromOffset)}
	case kind != "" && kind != dlq.KindRetriesExhausted && kind != dlq.KindPermanent:
		return dlq.Filter{}, usageError{fmt.Errorf("--error-kind %s: use %s or %s", f.errorKind, dlq.KindRetriesExhausted, dlq.KindPermanent)}
	}
	if err := retrytopics.ValidGroup(f.consumerGroup); err != nil {
		return dlq.Filter{}, usageError{fmt.Errorf("--consumer-group %w", err)}
	}
	if err := (dlq.Filter{TenantID: f.tenant}).Validate(); err != nil {
		return dlq.Filter{}, usageError{fmt.Errorf("--tenant: %w", err)}
	}
	return dlq.Filter{
		OriginalTopic: f.originalTopic, Key: f.key, ErrorContains: f.errorContains, ErrorKind: dlq.ErrorKind(f.errorKind), ConsumerGroup: f.consumerGroup,
		TenantID: f.tenant,
		Since:    since, Until: until, Partitions: f.partitions, FromOffset: f.fromOffset, UntilOffset: f.untilOffset,
	}, nil
}

// scan parses the filters, connects, and calls fn with every record of
// topic that they select.
func (o *dlqOptions) scan(ctx context.Context, topic string, ff *dlqFilterFlags, fn func(dlq.Entry) error) error {
	filter, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	client, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	return dlqError(topic, dlq.Scan(ctx, client, topic, filter, fn))
}

// dlqGroup is one line of dlq stats: dead letters of one original topic
// with one error.
type dlqGroup struct {
	OriginalTopic string    `json:"original_topic"`
	ErrorKind     string    `json:"error_kind"`
	Error         string    `json:"error"`
	Count         int       `json:"count"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
}

// dlqStats is what dlq stats prints.
type dlqStats struct {
	Topic   string     `json:"topic"`
	Total   int        `json:"total"`
	Corrupt int        `json:"corrupt"`
	Groups  []dlqGroup `json:"groups"`
}

// errorSummary is the first line of an error: what dlq stats groups by.
func errorSummary(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func newDLQStatsCmd(o *dlqOptions) *cobra.Command {
	var ff dlqFilterFlags
	cmd := &cobra.Command{
		Use:   "stats <dlq-topic>",
		Short: "Count a dead-letter topic's records by original topic and error",
		Example: `  courier dlq stats orders.dlq
  courier dlq stats orders.dlq --since 24h --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stats := dlqStats{Topic: args[0], Groups: []dlqGroup{}}
			groups := map[[3]string]*dlqGroup{}
			err := o.scan(cmd.Context(), args[0], &ff, func(e dlq.Entry) error {
				stats.Total++
				if e.Err != nil {
					stats.Corrupt++
					return nil
				}
				env := e.Envelope
				id := [3]string{env.OriginalTopic, string(env.ErrorKind), errorSummary(env.Error)}
				g := groups[id]
				if g == nil {
					g = &dlqGroup{OriginalTopic: id[0], ErrorKind: id[1], Error: id[2], FirstFailedAt: env.FailedAt, LastFailedAt: env.FailedAt}
					groups[id] = g
				}
				g.Count++
				g.FirstFailedAt = minTime(g.FirstFailedAt, env.FailedAt)
				g.LastFailedAt = maxTime(g.LastFailedAt, env.FailedAt)
				return nil
			})
			if err != nil {
				return err
			}
			for _, g := range groups {
				stats.Groups = append(stats.Groups, *g)
			}
			slices.SortFunc(stats.Groups, func(a, b dlqGroup) int {
				return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.OriginalTopic, b.OriginalTopic), cmp.Compare(a.Error, b.Error))
			})
			return o.out.emit(cmd.OutOrStdout(), stats, func(w io.Writer) error { return printDLQStats(w, stats) })
		},
	}
	ff.register(cmd)
	return cmd
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func printDLQStats(w io.Writer, s dlqStats) error {
	fmt.Fprintf(w, "%s: %d dead letter(s)", display.Text(s.Topic), s.Total)
	if s.Corrupt > 0 {
		fmt.Fprintf(w, ", %d of them corrupt (see `courier dlq list`)", s.Corrupt)
	}
	fmt.Fprintln(w)
	if len(s.Groups) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tORIGINAL TOPIC\tKIND\tFIRST FAILED\tLAST FAILED\tERROR")
	for _, g := range s.Groups {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", g.Count, cell(&g.OriginalTopic, 60), cell(&g.ErrorKind, 40),
			g.FirstFailedAt.UTC().Format(time.RFC3339), g.LastFailedAt.UTC().Format(time.RFC3339), cell(&g.Error, 100))
	}
	return tw.Flush()
}

// dlqEntryJSON is a dead letter as list and show print it with --output
// json: its place, and the envelope (show) or its main fields (list).
type dlqEntryJSON struct {
	Partition     int32         `json:"partition"`
	Offset        int64         `json:"offset"`
	Timestamp     time.Time     `json:"timestamp"`
	Corrupt       string        `json:"corrupt,omitempty"`
	OriginalTopic string        `json:"original_topic,omitempty"`
	Key           *string       `json:"key,omitempty"`
	KeyBase64     *string       `json:"key_base64,omitempty"`
	ErrorKind     string        `json:"error_kind,omitempty"`
	Error         string        `json:"error,omitempty"`
	Attempts      int           `json:"retry_count"`
	ReplayCount   int           `json:"replay_count"`
	FailedAt      *time.Time    `json:"failed_at,omitempty"`
	ConsumerGroup string        `json:"consumer_group,omitempty"`
	TenantID      string        `json:"tenant_id,omitempty"`
	Envelope      *dlq.Envelope `json:"envelope,omitempty"`
	Original      *originalJSON `json:"original,omitempty"`
}

func newDLQEntryJSON(e dlq.Entry, full bool) dlqEntryJSON {
	j := dlqEntryJSON{Partition: e.Partition, Offset: e.Offset, Timestamp: e.Timestamp.UTC()}
	if e.Err != nil {
		j.Corrupt = e.Err.Error()
		return j
	}
	env := e.Envelope
	failedAt := env.FailedAt.UTC()
	j.OriginalTopic, j.Key, j.KeyBase64, j.ErrorKind, j.Error = env.OriginalTopic, env.OriginalKey, env.OriginalKeyBase64, string(env.ErrorKind), env.Error
	j.Attempts, j.ReplayCount, j.FailedAt, j.ConsumerGroup, j.TenantID = env.Attempts, env.ReplayCount, &failedAt, env.ConsumerGroup, env.TenantID()
	if full {
		j.Envelope = &env
		if o, err := env.Original(); err == nil {
			j.Original = newOriginalJSON(o)
		}
	}
	return j
}

// keyText is the original key for people: the text, or "base64:…" for a
// binary key, nil for none.
func keyText(env dlq.Envelope) *string {
	switch {
	case env.OriginalKey != nil:
		return env.OriginalKey
	case env.OriginalKeyBase64 != nil:
		s := "base64:" + *env.OriginalKeyBase64
		return &s
	}
	return nil
}

// originalJSON is the original record decoded from an envelope: the bytes
// replay would write.
type originalJSON struct {
	Topic       string       `json:"topic"`
	Partition   int32        `json:"partition"`
	Offset      int64        `json:"offset"`
	Key         *string      `json:"key"`
	KeyBase64   *string      `json:"key_base64,omitempty"`
	Value       *string      `json:"value"`
	ValueBase64 *string      `json:"value_base64,omitempty"`
	Headers     []headerJSON `json:"headers"`
}

// headerJSON is one original header: key or key_base64 (when the name is
// not UTF-8), and value or value_base64 (when the value is not UTF-8;
// both null for a null value).
type headerJSON struct {
	Key         *string `json:"key"`
	KeyBase64   *string `json:"key_base64,omitempty"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

// textOrBase64 returns b as text when it is UTF-8, else in base64; both
// nil for nil.
func textOrBase64(b []byte) (text, b64 *string) {
	switch {
	case b == nil:
		return nil, nil
	case utf8.Valid(b):
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func newOriginalJSON(o dlq.Original) *originalJSON {
	j := &originalJSON{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Headers: []headerJSON{}}
	j.Key, j.KeyBase64 = textOrBase64(o.Key)
	j.Value, j.ValueBase64 = textOrBase64(o.Value)
	for _, h := range o.Headers {
		var hj headerJSON
		hj.Key, hj.KeyBase64 = textOrBase64(append([]byte{}, h.Key...)) // a nil name is the empty one
		hj.Value, hj.ValueBase64 = textOrBase64(h.Value)
		j.Headers = append(j.Headers, hj)
	}
	return j
}

func newDLQListCmd(o *dlqOptions) *cobra.Command {
	var ff dlqFilterFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "list <dlq-topic>",
		Short: "List a dead-letter topic's records, with filters",
		Example: `  courier dlq list orders.dlq
  courier dlq list orders.dlq --error "psp timeout" --since 2h
  courier dlq list orders.dlq --key order-42 --output json
  courier dlq list orders.dlq --tenant acme --since 24h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usageError{fmt.Errorf("--limit %d: list at least 1", limit)}
			}
			var entries []dlq.Entry
			more := 0
			err := o.scan(cmd.Context(), args[0], &ff, func(e dlq.Entry) error {
				if len(entries) < limit {
					entries = append(entries, e)
				} else {
					more++
				}
				return nil
			})
			if err != nil {
				return err
			}
			list := make([]dlqEntryJSON, len(entries))
			for i, e := range entries {
				list[i] = newDLQEntryJSON(e, false)
			}
			return o.out.emit(cmd.OutOrStdout(), map[string]any{"topic": args[0], "dead_letters": list, "more": more},
				func(w io.Writer) error { return printDLQEntries(w, args[0], entries, more) })
		},
	}
	ff.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many")
	return cmd
}

func printDLQEntries(w io.Writer, topic string, entries []dlq.Entry, more int) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintf(w, "no dead letters in %s match\n", display.Text(topic))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tFAILED AT\tORIGINAL\tKEY\tKIND\tATTEMPTS\tREPLAYS\tERROR")
	for _, e := range entries {
		if e.Err != nil {
			fmt.Fprintf(tw, "%d\t%d\t%s\t-\t-\tcorrupt\t-\t-\t%s\n", e.Partition, e.Offset, e.Timestamp.UTC().Format(time.RFC3339), cell(ptr(e.Err.Error()), 80))
			continue
		}
		env := e.Envelope
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s[%d]@%d\t%s\t%s\t%d\t%d\t%s\n", e.Partition, e.Offset, env.FailedAt.UTC().Format(time.RFC3339),
			cell(&env.OriginalTopic, 60), env.OriginalPartition, env.OriginalOffset, cell(keyText(env), 40), cell(ptr(string(env.ErrorKind)), 40), env.Attempts, env.ReplayCount,
			cell(ptr(errorSummary(env.Error)), 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		_, err := fmt.Fprintf(w, "… and %d more; raise --limit or narrow the filters\n", more)
		return err
	}
	return nil
}

func newDLQShowCmd(o *dlqOptions) *cobra.Command {
	var partition int32
	var offset int64
	cmd := &cobra.Command{
		Use:   "show <dlq-topic> --partition P --offset O",
		Short: "Show one dead letter in full, with its original message decoded",
		Example: `  courier dlq show orders.dlq --partition 0 --offset 12
  courier dlq show orders.dlq --partition 0 --offset 12 --output json | jq .original`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if offset < 0 || partition < 0 {
				return usageError{fmt.Errorf("--partition %d --offset %d: name the record's place, e.g. from `courier dlq list`", partition, offset)}
			}
			client, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer client.Close()
			e, err := dlq.Get(cmd.Context(), client, args[0], partition, offset)
			if err != nil {
				return dlqError(args[0], err)
			}
			return o.out.emit(cmd.OutOrStdout(), newDLQEntryJSON(e, true), func(w io.Writer) error { return printDLQEntry(w, args[0], e) })
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", -1, "partition of the dead-letter record (required)")
	cmd.Flags().Int64Var(&offset, "offset", -1, "offset of the dead-letter record (required)")
	_ = cmd.MarkFlagRequired("partition")
	_ = cmd.MarkFlagRequired("offset")
	return cmd
}

func printDLQEntry(w io.Writer, topic string, e dlq.Entry) error {
	fmt.Fprintf(w, "%s partition %d offset %d, written %s\n", display.Text(topic), e.Partition, e.Offset, e.Timestamp.UTC().Format(time.RFC3339Nano))
	if e.Err != nil {
		_, err := fmt.Fprintf(w, "corrupt: %s\nreplay skips it; it stays in the topic\n", display.Lines(e.Err.Error(), "  "))
		return err
	}
	env := e.Envelope
	o, err := env.Original()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "original\t%s partition %d offset %d", cell(&env.OriginalTopic, math.MaxInt), env.OriginalPartition, env.OriginalOffset)
	if !env.OriginalTimestamp.IsZero() {
		fmt.Fprintf(tw, ", at %s", env.OriginalTimestamp.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "error\t%s after %d failed attempt(s)\n", cell(ptr(string(env.ErrorKind)), math.MaxInt), env.Attempts)
	fmt.Fprintf(tw, "failed at\t%s (first failure %s)\n", env.FailedAt.UTC().Format(time.RFC3339Nano), env.FirstFailedAt.UTC().Format(time.RFC3339Nano))
	for _, row := range [][2]string{{"consumer group", env.ConsumerGroup}, {"tenant", env.TenantID()}, {"correlation id", env.CorrelationID}} {
		if row[1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", row[0], cell(&row[1], math.MaxInt))
		}
	}
	fmt.Fprintf(tw, "replays\t%d\n", env.ReplayCount)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "error text:\n  %s\n", display.Lines(env.Error, "  "))
	fmt.Fprintf(w, "key: %s\n", bytesForPeople(o.Key))
	fmt.Fprintf(w, "headers (%d):\n", len(o.Headers))
	for _, h := range o.Headers {
		fmt.Fprintf(w, "  %s: %s\n", bytesForPeople(h.Key), bytesForPeople(h.Value))
	}
	_, err = fmt.Fprintf(w, "value (%d bytes):\n%s\n", len(o.Value), valueForPeople(o.Value))
	return err
}

// bytesForPeople shows b as text when it is printable UTF-8, else as
// "base64:…" (so a record cannot send escape sequences to the terminal), or
// "(null)".
func bytesForPeople(b []byte) string {
	if b == nil {
		return "(null)"
	}
	if display.Printable(b, false) && !strings.HasPrefix(string(b), "base64:") {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// valueForPeople shows a value indented: printable JSON pretty-printed,
// else as bytesForPeople does.
func valueForPeople(b []byte) string {
	var pretty bytes.Buffer
	if display.Printable(b, true) && json.Indent(&pretty, b, "  ", "  ") == nil {
		return "  " + pretty.String()
	}
	return "  " + bytesForPeople(b)
}

func ptr[T any](v T) *T { return &v }
