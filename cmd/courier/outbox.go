package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/redact"
	"github.com/courierkit/courier/producer"
)

// outboxOptions are the options every outbox subcommand shares: where the
// table is and how to print.
type outboxOptions struct {
	db  dbFlags
	out outputFlag
}

// outboxSession is an Admin on a checked outbox table.
type outboxSession struct {
	*producer.Admin
	table pgname.Table
	pool  *pgxpool.Pool
}

// Close closes the session's connections.
func (s *outboxSession) Close() { s.pool.Close() }

// open validates the options, connects and checks that the outbox table
// exists; Close the session when done. (It connects with dbFlags.pool, not
// connect, whose errors would echo a password given as ?password=.)
func (o *outboxOptions) open(cmd *cobra.Command) (*outboxSession, error) {
	if err := o.out.validate(); err != nil {
		return nil, err
	}
	table, err := o.db.outboxTable()
	if err != nil {
		return nil, err
	}
	pool, err := o.db.pool(cmd.Context(), 1, "courier-outbox")
	if err != nil {
		return nil, err
	}
	s := &outboxSession{table: table, pool: pool}
	if err := requireOutboxTable(cmd.Context(), pool, table); err != nil {
		s.Close()
		return nil, o.db.reached(pool, err)
	}
	if s.Admin, err = producer.NewAdmin(pool, producer.AdminConfig{Schema: table.Schema, Table: table.Name}); err != nil {
		s.Close()
		return nil, usageError{err}
	}
	return s, nil
}

// outboxTable validates --schema and --table; a bad name is a usage error.
func (f *dbFlags) outboxTable() (pgname.Table, error) {
	table, err := pgname.NewTable(f.schema, f.table)
	if err != nil {
		return pgname.Table{}, usageError{fmt.Errorf("--schema/--table: %w", err)}
	}
	return table, nil
}

// requireOutboxTable fails with the command that creates or upgrades the
// outbox when its tables do not exist (or are of an older version), rather
// than with PostgreSQL's "relation does not exist" at the first query.
func requireOutboxTable(ctx context.Context, db producer.DBTX, table pgname.Table) error {
	exists, current, err := producer.LookupOutbox(ctx, db, table.Schema, table.Name)
	switch {
	case err != nil:
		return fmt.Errorf("look up the outbox table %s: %w", table, err)
	case !exists:
		return fmt.Errorf("the outbox table %s does not exist in this database: create it with `courier migrate up --schema %s --table %s` (and the same --database-url), or fix --schema/--table",
			table, table.Schema, table.Name)
	case !current:
		return fmt.Errorf("the outbox table %s has the layout of an older courier: upgrade it with `courier migrate up --schema %s --table %s` (and the same --database-url)",
			table, table.Schema, table.Name)
	}
	return nil
}

// pool opens a connection pool that may hold at least minConns connections,
// named appName in pg_stat_activity unless the URL names one. Its errors never
// print the password, wherever the URL or key=value string holds it.
func (f *dbFlags) pool(ctx context.Context, minConns int32, appName string) (*pgxpool.Pool, error) {
	secrets := redact.Secrets(f.url)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil { // pgx's error may echo the string, and its masking is best effort
		return nil, usageError{fmt.Errorf("--database-url %s: %s (want postgres://user@host:port/database or key=value pairs)",
			redact.ConnString(f.url), redact.String(parseReason(err), secrets))}
	}
	cfg.MaxConns = max(cfg.MaxConns, minConns)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %s (is it running, and is --database-url right? connecting gives up after %v)",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, redact.String(err.Error(), secrets), cfg.ConnConfig.ConnectTimeout)
	}
	return pool, nil
}

// reached adds to err the database pool reached, and, when --database-url
// was empty, that libpq's PG* variables and defaults chose it: a "table
// does not exist" then says where it looked.
func (f *dbFlags) reached(pool *pgxpool.Pool, err error) error {
	where := "in " + databaseName(pool.Config().ConnConfig)
	if f.url == "" {
		where += "; --database-url (COURIER_DATABASE_URL) is not set, so libpq's PG* variables and defaults chose this database: set it to name yours"
	}
	return fmt.Errorf("%w (%s)", err, where)
}

// parseReason is why pgx could not parse a connection string, without the
// string it quotes: the reason alone.
func parseReason(err error) string {
	if pe, ok := errors.AsType[*pgconn.ParseConfigError](err); ok {
		prefix := (&pgconn.ParseConfigError{ConnString: pe.ConnString}).Error() // "cannot parse `…`: "
		if reason, ok := strings.CutPrefix(pe.Error(), prefix); ok {
			return reason
		}
		return "cannot parse it"
	}
	return err.Error()
}

// newOutboxCmd is `courier outbox` and its subcommands.
func newOutboxCmd() *cobra.Command {
	o := &outboxOptions{}
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect and repair the outbox table: stats, list, show, requeue, purge, cleanup",
		Long: `Inspects and repairs an outbox table while relays run against it.

  stats    count the events by status, and per tenant; the age of the oldest
           due event
  list     list events (failed and dead-lettered by default), with filters
  show     print one event in full: payload, headers, error
  requeue  send failed and dead-lettered events back to the relays
  purge    delete dead-lettered (or published) events for good
  cleanup  delete published events past their retention, now

Filters (list, requeue, purge): --status, --topic, --key, --tenant,
--aggregate-type, --aggregate-id, --error (a case-insensitive substring of
the last error), --since and --until (an RFC 3339 time or a duration ago,
e.g. 2h or 7d; they bound the last attempt, the enqueue of an event never
attempted, or the publication of a published event).`,
		Example: `  courier outbox stats --database-url postgres://app@db:5432/shop --schema shop
  courier outbox list --topic orders --error "too large" --since 2h
  courier outbox list --status published --tenant acme --aggregate-type Order --aggregate-id order-42
  courier outbox show 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2
  courier outbox requeue --topic orders --status dead_lettered
  courier outbox purge --key order-42 --yes
  courier outbox cleanup --retention 168h --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	o.db.register(cmd)
	o.out.register(cmd)
	cmd.AddCommand(newOutboxStatsCmd(o), newOutboxListCmd(o), newOutboxShowCmd(o),
		newOutboxRequeueCmd(o), newOutboxPurgeCmd(o), newOutboxCleanupCmd(o))
	return cmd
}

// outboxStatuses are the event statuses in the order they are printed.
var outboxStatuses = []string{producer.StatusPending, producer.StatusFailed, producer.StatusPublished, producer.StatusDeadLettered}

// statsJSON is producer.Stats as --output json prints it.
type statsJSON struct {
	Table               string           `json:"table"`
	Counts              map[string]int64 `json:"counts"`
	PublishedEstimated  bool             `json:"published_estimated"`
	OldestDue           *time.Time       `json:"oldest_due"`
	OldestDueAgeSeconds float64          `json:"oldest_due_age_seconds"`
	Held                []heldJSON       `json:"held"`
	Tenants             *tenantStatsJSON `json:"tenants,omitempty"`
}

// heldJSON is a group of events Kafka's condition holds.
type heldJSON struct {
	Topic   string    `json:"topic"`
	Error   string    `json:"error"`
	Events  int64     `json:"events"`
	Oldest  time.Time `json:"oldest"`
	NextTry time.Time `json:"next_try"`
}

// statsHeldGroups is how many groups of held events stats shows.
const statsHeldGroups = 20

// printHeld writes the held groups as a table, nothing when there are none.
func printHeld(w io.Writer, held []heldJSON) error {
	if len(held) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nheld by Kafka's condition (no leader, too few in-sync replicas, a timeout, Kafka unreachable): no attempt counted;")
	fmt.Fprintln(w, "each key's first waiting event is counted, the later ones of its key wait behind it")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tEVENTS\tOLDEST\tNEXT_TRY\tERROR")
	for _, h := range held {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", cell(&h.Topic, 60), h.Events, timeCell(&h.Oldest), timeCell(&h.NextTry), cell(&h.Error, 160))
	}
	return tw.Flush()
}

// newOutboxStatsCmd is `courier outbox stats`.
func newOutboxStatsCmd(o *outboxOptions) *cobra.Command {
	tenants := defaultStatsTenants
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count the events by status and show how long the oldest due event has waited",
		Long: `Counts the events of the outbox table by status and finds the oldest due
event (pending or failed, due now): how long it has been waiting is the
relay's lag. A growing age means no relay runs, Kafka is unreachable, or the
relays cannot keep up. Beyond 100,000 published events, their count is
PostgreSQL's estimate, marked ~ (published_estimated in JSON): an exact count
would read the whole history.

While Kafka holds partitions (no leader, too few in-sync replicas, timeouts,
Kafka unreachable), it groups the held events by topic and error (held in
JSON): they wait with no attempt counted and are never dead-lettered. Only
each key's first waiting event is counted.

Then it counts the pending, failed and dead-lettered events per tenant
(Event.TenantID): the --tenants tenants with the most events waiting, then
the most dead letters, and one line summing the others. The published
history is not counted per tenant. This reads the queue, waiting and dead
tables once more; --tenants 0 skips it.`,
		Example: `  courier outbox stats
  courier outbox stats --tenants 3
  courier outbox stats --schema shop --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenants < 0 || tenants > producer.MaxTopTenants {
				return usageError{fmt.Errorf("--tenants %d: show 0 (none) to %d tenants", tenants, producer.MaxTopTenants)}
			}
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			stats, err := outbox.Stats(cmd.Context())
			if err != nil {
				return err
			}
			held, err := outbox.HeldGroups(cmd.Context(), statsHeldGroups)
			if err != nil {
				return err
			}
			v := statsJSON{Table: outbox.table.String(), Counts: stats.Counts, PublishedEstimated: stats.PublishedEstimated,
				OldestDueAgeSeconds: stats.OldestDueAge.Seconds(), Held: []heldJSON{}}
			for _, h := range held {
				v.Held = append(v.Held, heldJSON{Topic: h.Topic, Error: h.Error, Events: h.Count, Oldest: h.Oldest.UTC(), NextTry: h.Next.UTC()})
			}
			if !stats.OldestDue.IsZero() {
				v.OldestDue = utc(&stats.OldestDue)
			}
			var byTenant producer.TenantCounts
			if tenants > 0 {
				if byTenant, err = outbox.CountByTenant(cmd.Context(), tenants); err != nil {
					return err
				}
				v.Tenants = newTenantStatsJSON(byTenant)
			}
			return o.out.emit(cmd.OutOrStdout(), v, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "STATUS\tEVENTS")
				for _, s := range outboxStatuses {
					about := ""
					if s == producer.StatusPublished && stats.PublishedEstimated {
						about = "~" // an estimate beyond producer.ExactPublishedLimit
					}
					fmt.Fprintf(tw, "%s\t%s%d\n", s, about, stats.Counts[s])
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if stats.OldestDue.IsZero() {
					_, err = fmt.Fprintln(w, "no event is due")
				} else {
					_, err = fmt.Fprintf(w, "oldest due event: waiting %s (due since %s)\n",
						stats.OldestDueAge.Round(time.Millisecond), stats.OldestDue.UTC().Format(time.RFC3339))
				}
				if err != nil {
					return err
				}
				if err := printHeld(w, v.Held); err != nil {
					return err
				}
				return printTenantCounts(w, byTenant)
			})
		},
	}
	cmd.Flags().IntVar(&tenants, "tenants", defaultStatsTenants,
		fmt.Sprintf("show the counts of this many tenants, the most events waiting first, and the others summed (0: none, at most %d)", producer.MaxTopTenants))
	return cmd
}

// filterFlags are the event selectors of list, requeue and purge.
type filterFlags struct {
	ids                                []string
	statuses                           []string
	topic, key, errorContains          string
	tenant, aggregateType, aggregateID string
	since, until                       string
	all                                bool

	allowed  []string // the statuses --status takes
	defaults []string // the statuses without --status
}

// register adds the filters. --status takes the allowed statuses and
// selects defaults without it; bulk adds --id and --all, for the commands
// that change events.
func (f *filterFlags) register(cmd *cobra.Command, allowed, defaults []string, bulk bool) {
	f.allowed, f.defaults = allowed, defaults
	fs := cmd.Flags()
	fs.StringSliceVar(&f.statuses, "status", nil, fmt.Sprintf("only events of this status: %s (default %s; repeatable or comma-separated)",
		strings.Join(allowed, ", "), strings.Join(defaults, " and ")))
	fs.StringVar(&f.topic, "topic", "", "only events of this topic")
	fs.StringVar(&f.key, "key", "", "only events of this partition key")
	fs.StringVar(&f.tenant, "tenant", "", "only events of this tenant (Event.TenantID)")
	fs.StringVar(&f.aggregateType, "aggregate-type", "", "only events of this aggregate type (Event.AggregateType)")
	fs.StringVar(&f.aggregateID, "aggregate-id", "", "only events of this aggregate id (Event.AggregateID)")
	fs.StringVar(&f.errorContains, "error", "", "only events whose last error contains this text, ignoring case")
	fs.StringVar(&f.since, "since", "", "only events last attempted (or enqueued, or published) at or after this time: RFC 3339, or a duration ago such as 30m, 2h, 7d")
	fs.StringVar(&f.until, "until", "", "only events last attempted (or enqueued, or published) before this time: RFC 3339, or a duration ago")
	if bulk {
		fs.StringSliceVar(&f.ids, "id", nil, "only the event with this id (repeatable or comma-separated)")
		fs.BoolVar(&f.all, "all", false, "allow no selector other than --status: act on every event of those statuses")
	}
}

// filter parses the flags into a producer.Filter; bad values are usage
// errors.
func (f *filterFlags) filter(now time.Time) (producer.Filter, error) {
	pf := producer.Filter{Topic: f.topic, Key: f.key, TenantID: f.tenant, AggregateType: f.aggregateType, AggregateID: f.aggregateID,
		ErrorContains: f.errorContains, Statuses: f.statuses}
	for _, s := range f.statuses {
		if !slices.Contains(f.allowed, s) {
			return pf, usageError{fmt.Errorf("--status %q: use %s", s, orList(f.allowed))}
		}
	}
	for _, s := range f.ids {
		id, err := uuid.Parse(strings.TrimSpace(s))
		if err != nil {
			return pf, usageError{fmt.Errorf("--id %q is not an event id (a UUID such as 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2)", s)}
		}
		pf.IDs = append(pf.IDs, id)
	}
	var err error
	pf.Since, pf.Until, err = parseTimeRange(f.since, f.until, now)
	return pf, err
}

// requireSelector refuses a filter that would select every event of its
// statuses, unless --all says that is meant.
func (f *filterFlags) requireSelector(action string) error {
	if f.all || len(f.ids) > 0 || f.topic != "" || f.key != "" || f.tenant != "" || f.aggregateType != "" || f.aggregateID != "" ||
		f.errorContains != "" || f.since != "" || f.until != "" {
		return nil
	}
	return usageError{fmt.Errorf("%s needs a selector (--id, --topic, --key, --tenant, --aggregate-type, --aggregate-id, --error, --since or --until); pass --all to %s every event of the selected statuses", action, action)}
}

// describe renders the selection for a confirmation prompt.
func (f *filterFlags) describe() string {
	statuses := f.defaults
	if len(f.statuses) > 0 {
		statuses = f.statuses
	}
	parts := []string{"status " + orList(statuses)}
	for _, p := range []struct{ name, value string }{
		{"id", strings.Join(f.ids, ", ")}, {"topic", f.topic}, {"key", f.key}, {"tenant", f.tenant},
		{"aggregate type", f.aggregateType}, {"aggregate id", f.aggregateID},
		{"error containing", f.errorContains}, {"since", f.since}, {"until", f.until},
	} {
		if p.value != "" {
			parts = append(parts, fmt.Sprintf("%s %q", p.name, p.value))
		}
	}
	return strings.Join(parts, ", ")
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// parseTimeRange parses --since and --until (an RFC 3339 time or a
// duration ago, see display.ParseTime); a bad one is a usage error.
func parseTimeRange(sinceText, untilText string, now time.Time) (since, until time.Time, err error) {
	since, until, err = display.ParseTimeRange("--since", sinceText, "--until", untilText, now)
	if err != nil {
		return since, until, usageError{err}
	}
	return since, until, nil
}

// filterError makes a filter the Admin refused (a status it does not allow
// here) a usage error.
func filterError(err error) error {
	if errors.Is(err, producer.ErrInvalidFilter) {
		return usageError{err}
	}
	return err
}

// eventJSON is a producer.Record as --output json prints it. list leaves
// out the payload and headers; show has everything.
type eventJSON struct {
	ID             uuid.UUID         `json:"id"`
	Seq            int64             `json:"seq"`
	Status         string            `json:"status"`
	Topic          string            `json:"topic"`
	Key            *string           `json:"key"`
	Type           string            `json:"type"`
	Attempts       int               `json:"attempts"`
	MaxAttempts    *int              `json:"max_attempts"`
	LastError      *string           `json:"last_error"`
	LastAttemptAt  *time.Time        `json:"last_attempt_at"`
	FirstFailedAt  *time.Time        `json:"first_failed_at"`
	NextAttemptAt  *time.Time        `json:"next_attempt_at"`
	CreatedAt      *time.Time        `json:"created_at"`
	PublishedAt    *time.Time        `json:"published_at"`
	AggregateType  *string           `json:"aggregate_type,omitempty"`
	AggregateID    *string           `json:"aggregate_id,omitempty"`
	TenantID       *string           `json:"tenant_id,omitempty"`
	CorrelationID  *string           `json:"correlation_id,omitempty"`
	CausationID    *string           `json:"causation_id,omitempty"`
	IdempotencyKey *string           `json:"idempotency_key,omitempty"`
	ContentType    string            `json:"content_type,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	PayloadBytes   *int              `json:"payload_bytes,omitempty"`
	// Payload holds the payload when it is JSON, PayloadText when it is
	// other printable text, PayloadBase64 otherwise.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadText   *string         `json:"payload_text,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
}

// newEventJSON renders a record for --output json; full adds the
// payload, headers and the fields list leaves out.
func newEventJSON(r producer.Record, full bool) eventJSON {
	v := eventJSON{
		ID: r.ID, Seq: r.Seq, Status: r.Status, Topic: r.Topic, Key: r.Key, Type: r.Type,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, LastError: r.LastError,
		LastAttemptAt: utc(r.LastAttemptAt), FirstFailedAt: utc(r.FirstFailedAt),
		NextAttemptAt: utc(&r.NextAttemptAt), CreatedAt: utc(&r.CreatedAt), PublishedAt: utc(r.PublishedAt),
	}
	if !full {
		return v
	}
	v.AggregateType, v.AggregateID, v.TenantID = r.AggregateType, r.AggregateID, r.TenantID
	v.CorrelationID, v.CausationID, v.IdempotencyKey = r.CorrelationID, r.CausationID, r.IdempotencyKey
	v.ContentType, v.Headers = r.ContentType, r.Headers
	size := len(r.Payload)
	v.PayloadBytes = &size
	switch text, printable := payloadText(r.Payload); {
	case json.Valid(r.Payload):
		v.Payload = r.Payload
	case printable:
		v.PayloadText = &text
	default:
		encoded := base64.StdEncoding.EncodeToString(r.Payload)
		v.PayloadBase64 = &encoded
	}
	return v
}

// payloadText returns the payload as text when it is valid UTF-8 without
// control characters other than tab and newlines, which a terminal shows
// safely.
func payloadText(p []byte) (string, bool) {
	if !utf8.Valid(p) {
		return "", false
	}
	s := string(p)
	return s, !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' })
}

// utc returns t in UTC, or nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// cell renders a value for a text table: "-" for none, escaped by
// display.Text, at most maxLen runes.
func cell(s *string, maxLen int) string {
	if s == nil || *s == "" {
		return "-"
	}
	v := display.Text(*s)
	if utf8.RuneCountInString(v) > maxLen {
		v = string([]rune(v)[:maxLen-1]) + "…"
	}
	return v
}

// timeCell renders an optional time for a text table.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// maxListLimit caps outbox list's --limit: a page is held in memory.
const maxListLimit = 10000

// listJSON is what list prints with --output json. NextAfter is the
// --after of the next page, null on the last page.
type listJSON struct {
	Events    []eventJSON `json:"events"`
	NextAfter *int64      `json:"next_after"`
}

// newOutboxListCmd is `courier outbox list`.
func newOutboxListCmd(o *outboxOptions) *cobra.Command {
	var filters filterFlags
	var limit int
	var after int64
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events (failed and dead-lettered by default), oldest first",
		Long: `Lists the events matching the filters in enqueue order, at most --limit of
them. When a page is full, the last line (next_after in JSON) gives the
--after that fetches the next one. show prints an event's payload and
headers.`,
		Example: `  courier outbox list
  courier outbox list --status dead_lettered --topic orders --since 24h
  courier outbox list --error "message too large" --limit 20 --after 1842
  courier outbox list --status pending,failed --key order-42 --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > maxListLimit {
				return usageError{fmt.Errorf("--limit %d: list 1 to %d events (page on with --after)", limit, maxListLimit)}
			}
			if after < 0 {
				return usageError{fmt.Errorf("--after %d: use the SEQ of an event (0 or more)", after)}
			}
			f, err := filters.filter(time.Now())
			if err != nil {
				return err
			}
			f.Limit, f.AfterSeq = limit, after
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			records, err := outbox.List(cmd.Context(), f)
			if err != nil {
				return filterError(err)
			}
			var next *int64
			if len(records) == limit {
				next = &records[len(records)-1].Seq
			}
			v := listJSON{Events: make([]eventJSON, 0, len(records)), NextAfter: next}
			for _, r := range records {
				v.Events = append(v.Events, newEventJSON(r, false))
			}
			return o.out.emit(cmd.OutOrStdout(), v, func(w io.Writer) error { return printEvents(w, records, next) })
		},
	}
	filters.register(cmd, outboxStatuses, []string{producer.StatusFailed, producer.StatusDeadLettered}, false)
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many events")
	cmd.Flags().Int64Var(&after, "after", 0, "list events enqueued after the one with this SEQ: the next page")
	return cmd
}

// printEvents prints a page of list as a table, and the --after of the
// next page when next is set.
func printEvents(w io.Writer, records []producer.Record, next *int64) error {
	if len(records) == 0 {
		_, err := fmt.Fprintln(w, "no events match")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tID\tSTATUS\tTOPIC\tKEY\tTYPE\tATTEMPTS\tLAST ATTEMPT\tLAST ERROR")
	for _, r := range records {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Seq, r.ID, cell(&r.Status, 16), cell(&r.Topic, 40), cell(r.Key, 24),
			cell(&r.Type, 24), r.Attempts, timeCell(r.LastAttemptAt), cell(r.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil {
		_, err := fmt.Fprintf(w, "more may follow: add --after %d for the next page\n", *next)
		return err
	}
	return nil
}

// newOutboxShowCmd is `courier outbox show`.
func newOutboxShowCmd(o *outboxOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show <event-id>",
		Short: "Print one event in full: payload, headers, error and timestamps",
		Long: `Prints one event of any status. The payload is printed as text when it is
valid UTF-8 without control characters (JSON included), and as base64
otherwise; with --output json it is "payload" when it is JSON, "payload_text"
when it is other text and "payload_base64" otherwise.`,
		Example: `  courier outbox show 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2
  courier outbox show 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2 --output json | jq .payload`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return usageError{fmt.Errorf("%q is not an event id (a UUID such as 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2; `courier outbox list` shows them)", args[0])}
			}
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			r, err := outbox.Get(cmd.Context(), id)
			if errors.Is(err, producer.ErrNotFound) {
				return fmt.Errorf("no event %s in %s (was it published and cleaned up, or is it in another --schema/--table?)", id, outbox.table)
			}
			if err != nil {
				return err
			}
			return o.out.emit(cmd.OutOrStdout(), newEventJSON(r, true), func(w io.Writer) error { return printEvent(w, r) })
		},
	}
}

// printEvent prints one event in full for show.
func printEvent(w io.Writer, r producer.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	maxAttempts := "- (the relay's --max-attempts)"
	if r.MaxAttempts != nil {
		maxAttempts = strconv.Itoa(*r.MaxAttempts)
	}
	const unlimited = 1 << 20 // no truncation
	for _, f := range []struct{ name, value string }{
		{"id", r.ID.String()},
		{"seq", strconv.FormatInt(r.Seq, 10)},
		{"status", cell(&r.Status, unlimited)},
		{"topic", cell(&r.Topic, unlimited)},
		{"key", cell(r.Key, unlimited)},
		{"type", cell(&r.Type, unlimited)},
		{"aggregate_type", cell(r.AggregateType, unlimited)},
		{"aggregate_id", cell(r.AggregateID, unlimited)},
		{"tenant_id", cell(r.TenantID, unlimited)},
		{"correlation_id", cell(r.CorrelationID, unlimited)},
		{"causation_id", cell(r.CausationID, unlimited)},
		{"idempotency_key", cell(r.IdempotencyKey, unlimited)},
		{"attempts", strconv.Itoa(r.Attempts)},
		{"max_attempts", maxAttempts},
		{"last_error", cell(r.LastError, unlimited)},
		{"created_at", timeCell(&r.CreatedAt)},
		{"first_failed_at", timeCell(r.FirstFailedAt)},
		{"last_attempt_at", timeCell(r.LastAttemptAt)},
		{"next_attempt_at", timeCell(&r.NextAttemptAt)},
		{"published_at", timeCell(r.PublishedAt)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", f.name, f.value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "headers: %d\n", len(r.Headers))
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		value := r.Headers[name]
		fmt.Fprintf(w, "  %s: %s\n", cell(&name, unlimited), cell(&value, unlimited))
	}
	if display.Printable(r.Payload, true) {
		_, err := fmt.Fprintf(w, "payload (%s, %d bytes):\n%s\n", cell(&r.ContentType, unlimited), len(r.Payload), r.Payload)
		return err
	}
	_, err := fmt.Fprintf(w, "payload (%s, %d bytes, base64):\n%s\n", cell(&r.ContentType, unlimited), len(r.Payload),
		base64.StdEncoding.EncodeToString(r.Payload))
	return err
}

// newOutboxRequeueCmd is `courier outbox requeue`.
func newOutboxRequeueCmd(o *outboxOptions) *cobra.Command {
	var filters filterFlags
	var exact exactFlags
	cmd := &cobra.Command{
		Use:   "requeue",
		Short: "Send failed and dead-lettered events back to the relays",
		Long: `Resets the matching failed and dead-lettered events to pending with 0 failed
attempts, due now, and wakes the relays, which publish them in their keys'
order. last_error keeps the error that sent them there.

--dry-run counts them and changes nothing; --expect N then requeues only
when the selection still holds exactly N events (else nothing, exit 1), so a
script acts on what it counted. Give --since and --until as RFC 3339 times
there: a duration ago moves between the two runs.

It needs a selector (--id, --topic, --key, --tenant, --aggregate-type,
--aggregate-id, --error, --since or --until), or --all to requeue every failed
and dead-lettered event (of --status, if given).`,
		Example: `  courier outbox requeue --id 01966b1c-4f4e-7a43-9a55-3a1cf0b6e1d2
  courier outbox requeue --topic orders --error "not enough replicas" --since 1h
  courier outbox requeue --tenant acme --status dead_lettered
  courier outbox requeue --all --status dead_lettered --output json
  courier outbox requeue --key order-42 --dry-run && courier outbox requeue --key order-42 --expect 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filters.filter(time.Now())
			if err != nil {
				return err
			}
			if err := filters.requireSelector("requeue"); err != nil {
				return err
			}
			if err := exact.validate(cmd); err != nil {
				return err
			}
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			return exact.run(cmd, o, outbox, f, "requeue", "requeued", (*producer.Admin).CountRequeue, (*producer.Admin).Requeue)
		},
	}
	requeueable := []string{producer.StatusFailed, producer.StatusDeadLettered}
	filters.register(cmd, requeueable, requeueable, true)
	exact.register(cmd, "requeue")
	return cmd
}

// newOutboxPurgeCmd is `courier outbox purge`.
func newOutboxPurgeCmd(o *outboxOptions) *cobra.Command {
	var filters filterFlags
	var exact exactFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete dead-lettered (or published) events for good",
		Long: `Deletes the matching dead-lettered events, or with --status published the
published ones. Pending and failed events are refused: they are still to be
published.

It needs a selector (--id, --topic, --key, --tenant, --aggregate-type,
--aggregate-id, --error, --since or --until), or --all to purge every event
of the selected statuses. On a terminal it asks you to type yes; --yes
skips the question, and without a terminal (a script, a pipe) --yes is
required.

--dry-run counts them and deletes nothing; --expect N then purges only when
the selection still holds exactly N events (else nothing, exit 1), so a
script deletes what it counted. Give --since and --until as RFC 3339 times
there: a duration ago moves between the two runs.`,
		Example: `  courier outbox purge --key order-42
  courier outbox purge --topic orders --until 720h --yes
  courier outbox purge --status published --aggregate-type Customer --aggregate-id c-7 --yes
  courier outbox purge --all --status published --yes --output json
  courier outbox purge --key order-42 --dry-run && courier outbox purge --key order-42 --expect 3 --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filters.filter(time.Now())
			if err != nil {
				return err
			}
			if err := filters.requireSelector("purge"); err != nil {
				return err
			}
			if err := exact.validate(cmd); err != nil {
				return err
			}
			if !yes && !exact.dryRun && !isTerminal(cmd.InOrStdin()) {
				return usageError{errors.New("purge deletes events for good and stdin is not a terminal to confirm on: pass --yes")}
			}
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			if !yes && !exact.dryRun {
				prompt := fmt.Sprintf("Delete the events of %s with %s, for good? Type yes to continue: ",
					outbox.table, filters.describe())
				ok, err := confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), prompt)
				if err != nil {
					return err
				}
				if !ok {
					return errors.New("not confirmed; nothing was purged")
				}
			}
			return exact.run(cmd, o, outbox, f, "purge", "purged", (*producer.Admin).CountPurge, (*producer.Admin).Purge)
		},
	}
	filters.register(cmd, []string{producer.StatusDeadLettered, producer.StatusPublished}, []string{producer.StatusDeadLettered}, true)
	exact.register(cmd, "purge")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	return cmd
}

// exactFlags are --dry-run and --expect of requeue and purge: count the
// selection, then act only on exactly that count.
type exactFlags struct {
	dryRun bool
	expect int64
	// given is set when --expect was: 0 is a count too.
	given bool
}

func (f *exactFlags) register(cmd *cobra.Command, verb string) {
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "count the events it would "+verb+", and change nothing")
	fs.Int64Var(&f.expect, "expect", 0, verb+" only when exactly this many events match (the count --dry-run gave); else change nothing and exit 1")
}

func (f *exactFlags) validate(cmd *cobra.Command) error {
	f.given = cmd.Flags().Changed("expect")
	switch {
	case f.expect < 0:
		return usageError{fmt.Errorf("--expect %d: give the count --dry-run gave", f.expect)}
	case f.given && f.dryRun:
		return usageError{errors.New("--dry-run and --expect: --dry-run counts, --expect acts on that count; pick one")}
	}
	return nil
}

// errCountChanged ends an action whose selection no longer holds the
// count --expect names: its transaction rolls back.
var errCountChanged = errors.New("the selection changed")

// run counts f (--dry-run), or runs act on f, within one transaction that
// commits only when act touched exactly --expect events (when given), and
// prints the count as verb says ("purge", "purged").
func (f *exactFlags) run(cmd *cobra.Command, o *outboxOptions, outbox *outboxSession, pf producer.Filter, verb, done string,
	count, act func(*producer.Admin, context.Context, producer.Filter) (int64, error)) error {
	ctx := cmd.Context()
	if f.dryRun {
		n, err := count(outbox.Admin, ctx, pf)
		if err != nil {
			return filterError(err)
		}
		return o.out.emit(cmd.OutOrStdout(), map[string]int64{"would_" + verb: n}, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "would %s %d event(s); nothing was changed (to %s exactly these: --expect %d)\n", verb, n, verb, n)
			return err
		})
	}
	var n int64
	err := pgx.BeginFunc(ctx, outbox.pool, func(tx pgx.Tx) error {
		admin, err := producer.NewAdmin(tx, producer.AdminConfig{Schema: outbox.table.Schema, Table: outbox.table.Name})
		if err != nil {
			return err
		}
		if n, err = act(admin, ctx, pf); err != nil {
			return err
		}
		if f.given && n != f.expect {
			return errCountChanged
		}
		return nil
	})
	if errors.Is(err, errCountChanged) {
		return fmt.Errorf("the selection holds %d event(s), not the %d --expect names: it changed since it was counted, so nothing was done; count it again with --dry-run",
			n, f.expect)
	}
	if err != nil {
		return filterError(err)
	}
	return o.out.emit(cmd.OutOrStdout(), map[string]int64{done: n}, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s %d event(s)\n", done, n)
		return err
	})
}

// isTerminal reports whether r is an interactive terminal: a character
// device other than the null device (which cron, systemd and `docker run`
// without -t give as stdin). Any doubt is safe: confirm reads an answer,
// and only "yes" proceeds.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(info, null)
}

// confirm writes prompt to w and reports whether the line read from r is
// "yes".
func confirm(r io.Reader, w io.Writer, prompt string) (bool, error) {
	if _, err := io.WriteString(w, prompt); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the confirmation: %w", err)
	}
	return strings.TrimSpace(line) == "yes", nil
}

// newOutboxCleanupCmd is `courier outbox cleanup`.
func newOutboxCleanupCmd(o *outboxOptions) *cobra.Command {
	var retention time.Duration
	var yes bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete published events older than --retention, now",
		Long: `Deletes the events published more than --retention ago, in batches, as
every relay does each --cleanup-interval. Dead-lettered, pending and failed
events are never touched.

--retention means what it means to courier relay: 0 keeps published events
forever, so cleanup with --retention 0 deletes nothing (to delete every
published event, use ` + "`courier outbox purge --status published --all`" + `).

On a terminal it asks you to type yes; --yes skips the question, and
without a terminal (a script, a pipe) --yes is required.`,
		Example: `  courier outbox cleanup
  courier outbox cleanup --retention 24h --schema shop --yes --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), cmd.ErrOrStderr()); err != nil {
				return err
			}
			if retention < 0 {
				return usageError{fmt.Errorf("--retention %v: use a positive duration such as 168h, or 0 to keep published events forever", retention)}
			}
			if err := o.out.validate(); err != nil {
				return err
			}
			if retention == 0 {
				v := map[string]any{"deleted": 0, "retention_seconds": 0, "kept_forever": true}
				return o.out.emit(cmd.OutOrStdout(), v, func(w io.Writer) error {
					_, err := fmt.Fprintln(w, "--retention 0 keeps published events forever (as for courier relay): nothing deleted")
					return err
				})
			}
			if !yes && !isTerminal(cmd.InOrStdin()) {
				return usageError{errors.New("cleanup deletes published events for good and stdin is not a terminal to confirm on: pass --yes")}
			}
			outbox, err := o.open(cmd)
			if err != nil {
				return err
			}
			defer outbox.Close()
			if !yes {
				prompt := fmt.Sprintf("Delete the events of %s published more than %v ago, for good? Type yes to continue: ", outbox.table, retention)
				ok, err := confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), prompt)
				if err != nil {
					return err
				}
				if !ok {
					return errors.New("not confirmed; nothing was deleted")
				}
			}
			n, err := outbox.Cleanup(cmd.Context(), retention)
			if err != nil {
				return err
			}
			v := map[string]any{"deleted": n, "retention_seconds": retention.Seconds()}
			return o.out.emit(cmd.OutOrStdout(), v, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "deleted %d published event(s) older than %v\n", n, retention)
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&retention, "retention", producer.DefaultRetention,
		"delete events published longer ago than this; 0 keeps them forever, as for courier relay (deletes nothing)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	bindEnv(cmd.Flags(), "retention")
	return cmd
}
