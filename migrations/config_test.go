package migrations_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/courierkit/courier/migrations"
)

// TestConfigWithDefaults: WithDefaults (New's) and WithInboxDefaults
// (NewInbox's) set each zero field to its default and keep the fields
// already set.
func TestConfigWithDefaults(t *testing.T) {
	own := slog.New(slog.DiscardHandler)
	set := migrations.Config{Schema: "billing", Table: "events", Logger: own}
	for _, c := range []struct {
		name          string
		got           migrations.Config
		schema, table string
		logger        *slog.Logger // nil: any non-nil logger
	}{
		{"WithDefaults of zero", migrations.Config{}.WithDefaults(), migrations.DefaultSchema, migrations.DefaultTable, nil},
		{"WithInboxDefaults of zero", migrations.Config{}.WithInboxDefaults(), migrations.DefaultSchema, migrations.DefaultInboxTable, nil},
		{"WithDefaults of set", set.WithDefaults(), "billing", "events", own},
		{"WithInboxDefaults of set", set.WithInboxDefaults(), "billing", "events", own},
	} {
		if c.got.Schema != c.schema || c.got.Table != c.table || c.got.Logger == nil || (c.logger != nil && c.got.Logger != c.logger) {
			t.Errorf("%s = %+v, want Schema %q Table %q and the logger %v", c.name, c.got, c.schema, c.table, c.logger)
		}
	}
	if migrations.DefaultSchema != "public" || migrations.DefaultTable != "courier_outbox" || migrations.DefaultInboxTable != "courier_inbox" {
		t.Errorf("defaults %q %q %q, want public, courier_outbox and courier_inbox", migrations.DefaultSchema, migrations.DefaultTable, migrations.DefaultInboxTable)
	}
}

// TestInvalidConfigIsOneError: every config error of New and NewInbox
// matches ErrInvalidConfig and names the field.
func TestInvalidConfigIsOneError(t *testing.T) {
	for _, c := range []struct {
		cfg  migrations.Config
		says string
	}{
		{migrations.Config{Schema: "Billing"}, "schema"},
		{migrations.Config{Table: "outbox-events"}, "table"},
	} {
		for name, err := range map[string]error{"New": second(migrations.New(c.cfg)), "NewInbox": second(migrations.NewInbox(c.cfg))} {
			if !errors.Is(err, migrations.ErrInvalidConfig) || !strings.Contains(strings.ToLower(err.Error()), c.says) {
				t.Errorf("%s(%+v) = %v; want ErrInvalidConfig naming the %s", name, c.cfg, err, c.says)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
