package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbeddedMigrationsLoad(t *testing.T) {
	for _, s := range []struct{ dir, table, first string }{
		{"sql", "courier_outbox", "create_outbox"},
		{"sql/inbox", "courier_inbox", "create_inbox"},
	} {
		ms, err := load(files, s.dir)
		if err != nil {
			t.Fatalf("%s: %v", s.dir, err)
		}
		if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != s.first {
			t.Fatalf("%s: migrations %+v, want version 1 %s first", s.dir, ms, s.first)
		}
		for _, m := range ms {
			if !strings.Contains(m.Up, s.table) || m.Down == "" {
				t.Errorf("%s: migration %d: up or down SQL missing", s.dir, m.Version)
			}
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
			_, err := load(tc.fsys, "sql")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRenderRenamesTableAndDerivedNames(t *testing.T) {
	got := render("CREATE TABLE courier_outbox (); CREATE INDEX courier_outbox_due ON courier_outbox (x); -- my_courier_outbox", outbox.tableWord, "billing_events")
	want := "CREATE TABLE billing_events (); CREATE INDEX billing_events_due ON billing_events (x); -- my_courier_outbox"
	if got != want {
		t.Fatalf("render:\n got %s\nwant %s", got, want)
	}
	got = render("CREATE TABLE courier_inbox (); CREATE INDEX courier_inbox_processed ON courier_inbox (x); -- courier_outbox", inbox.tableWord, "billing_inbox")
	want = "CREATE TABLE billing_inbox (); CREATE INDEX billing_inbox_processed ON billing_inbox (x); -- courier_outbox"
	if got != want {
		t.Fatalf("render inbox:\n got %s\nwant %s", got, want)
	}
}

func TestLoadSkipsOtherSeries(t *testing.T) {
	file := &fstest.MapFile{Data: []byte("x")}
	ms, err := load(fstest.MapFS{
		"sql/0001_a.up.sql": file, "sql/0001_a.down.sql": file,
		"sql/inbox/0001_b.up.sql": file, "sql/inbox/0001_b.down.sql": file,
	}, "sql")
	if err != nil || len(ms) != 1 || ms[0].Name != "a" {
		t.Fatalf("load(sql) = %+v, %v; want only migration a", ms, err)
	}
}
