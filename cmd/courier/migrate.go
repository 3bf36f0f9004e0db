package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/migrations"
)

// dbFlags are the PostgreSQL options shared by every command that touches
// the outbox.
type dbFlags struct {
	url, schema, table string
}

func (f *dbFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "database-url", envOr("COURIER_DATABASE_URL", ""),
		"PostgreSQL URL or key=value string, e.g. postgres://user@host:5432/db (env COURIER_DATABASE_URL; empty: the libpq PG* variables); connecting gives up after its connect_timeout, 10s by default")
	cmd.PersistentFlags().StringVar(&f.schema, "schema", envOr("COURIER_SCHEMA", "public"), "schema of the outbox table (env COURIER_SCHEMA)")
	cmd.PersistentFlags().StringVar(&f.table, "table", envOr("COURIER_TABLE", "courier_outbox"), "outbox table name (env COURIER_TABLE)")
}

// outputFlag is --output, shared by commands that print results.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVarP(&o.format, "output", "o", envOr("COURIER_OUTPUT", "text"), "output format: text or json (env COURIER_OUTPUT)")
}

func (o *outputFlag) validate() error {
	if o.format != "text" && o.format != "json" {
		return usageError{fmt.Errorf("--output %q: use text or json", o.format)}
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

// emit writes v as JSON to w with --output json, and otherwise its text
// form.
func (o *outputFlag) emit(w io.Writer, v any, text func(io.Writer) error) error {
	if o.json() {
		return writeJSON(w, v)
	}
	return text(w)
}

// writeJSON writes v as indented JSON, with the runes a terminal may act
// on escaped (escapeJSONText).
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSONText(buf.Bytes()))
	return err
}

// migrationJSON is a migration as --output json prints it.
type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

func newMigrateCmd() *cobra.Command {
	var db dbFlags
	var out outputFlag
	var steps int
	var inbox bool
	cmd := &cobra.Command{
		Use:   "migrate [up|down|status]",
		Short: "Create, upgrade or revert the outbox table (or, with --inbox, the inbox table)",
		Long: `Applies courier's embedded SQL migrations to the outbox table, or with
--inbox to the inbox table that dedupe.Inbox records processed message ids in.

  up      apply every migration not yet applied (the default); safe to run
          from many processes at once
  down    revert the newest --steps migrations (reverting the first drops the
          table and every row in it)
  status  list the migrations and whether each is applied

With --inbox the table defaults to courier_inbox (env COURIER_INBOX_TABLE);
--table still overrides it, and COURIER_TABLE, which names the outbox, is
ignored.`,
		Example: `  courier migrate --database-url postgres://app@db:5432/shop
  courier migrate up --inbox --database-url postgres://app@db:5432/shop
  courier migrate status --schema billing --output json
  COURIER_DATABASE_URL=postgres://app@db/shop courier migrate down --steps 1`,
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"up", "down", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			action := "up"
			if len(args) == 1 {
				action = args[0]
			}
			if action == "down" && steps < 1 {
				return usageError{fmt.Errorf("--steps %d: revert at least 1 migration", steps)}
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			newMigrator, table := migrations.New, db.table
			if inbox {
				newMigrator = migrations.NewInbox
				if !cmd.Flags().Changed("table") {
					table = envOr("COURIER_INBOX_TABLE", migrations.DefaultInboxTable)
				}
			}
			m, err := newMigrator(migrations.Config{Schema: db.schema, Table: table, Logger: logger})
			if err != nil {
				return usageError{err}
			}
			conn, err := db.pool(cmd.Context(), 1, "courier-migrate")
			if err != nil {
				return err
			}
			defer conn.Close()

			var changed []migrations.Migration
			switch action {
			case "up":
				changed, err = m.Up(cmd.Context(), conn)
			case "down":
				changed, err = m.Down(cmd.Context(), conn, steps)
			}
			if err != nil {
				return err
			}
			states, err := m.Status(cmd.Context(), conn)
			if err != nil {
				return err
			}
			return printMigrations(cmd.OutOrStdout(), out, action, changed, states)
		},
	}
	db.register(cmd)
	out.register(cmd)
	cmd.Flags().IntVar(&steps, "steps", 1, "with down: how many migrations to revert")
	cmd.Flags().BoolVar(&inbox, "inbox", false, "migrate the inbox table (default courier_inbox) instead of the outbox")
	return cmd
}

func printMigrations(w io.Writer, out outputFlag, action string, changed []migrations.Migration, states []migrations.State) error {
	if out.json() {
		list := make([]migrationJSON, 0, len(states))
		for _, s := range states {
			j := migrationJSON{Version: s.Version, Name: s.Name, Applied: s.Applied}
			if s.Applied {
				j.AppliedAt = &s.AppliedAt
			}
			list = append(list, j)
		}
		return writeJSON(w, map[string]any{"action": action, "changed": len(changed), "migrations": list})
	}
	switch {
	case action == "up" && len(changed) == 0:
		fmt.Fprintln(w, "up to date")
	case action == "up":
		fmt.Fprintf(w, "applied %d migration(s)\n", len(changed))
	case action == "down":
		fmt.Fprintf(w, "reverted %d migration(s)\n", len(changed))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED AT")
	for _, s := range states {
		at := "not applied"
		if s.Applied {
			at = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\n", s.Version, s.Name, at)
	}
	return tw.Flush()
}
