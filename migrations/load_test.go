package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbeddedMigrationsLoad(t *testing.T) {
	ms, err := load(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "create_outbox" {
		t.Fatalf("first migration = %+v, want version 1 create_outbox", ms[0])
	}
	for _, m := range ms {
		if !strings.Contains(m.Up, "courier_outbox") || m.Down == "" {
			t.Errorf("migration %d: up or down SQL missing", m.Version)
		}
	}
}

func TestLoadRejectsMalformedFiles(t *testing.T) {
	file := func(body string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(body)} }
	for name, tc := range map[string]struct {
		fsys fstest.MapFS
		want string
	}{
		"bad name":     {fstest.MapFS{"sql/1_x.up.sql": file("x")}, "is not named"},
		"missing down": {fstest.MapFS{"sql/0001_x.up.sql": file("x")}, "needs both an up and a down"},
		"two names": {fstest.MapFS{
			"sql/0001_x.up.sql": file("x"), "sql/0001_y.down.sql": file("y"),
		}, "has two names"},
		"gap": {fstest.MapFS{
			"sql/0001_a.up.sql": file("a"), "sql/0001_a.down.sql": file("a"),
			"sql/0003_c.up.sql": file("c"), "sql/0003_c.down.sql": file("c"),
		}, "without gaps"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(tc.fsys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRenderRenamesTableAndDerivedNames(t *testing.T) {
	got := render("CREATE TABLE courier_outbox (); CREATE INDEX courier_outbox_due ON courier_outbox (x); -- my_courier_outbox", "billing_events")
	want := "CREATE TABLE billing_events (); CREATE INDEX billing_events_due ON billing_events (x); -- my_courier_outbox"
	if got != want {
		t.Fatalf("render:\n got %s\nwant %s", got, want)
	}
}
