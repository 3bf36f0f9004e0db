package bench

import "strings"

// MaxHeadlines is how many runs the table of headline figures shows: the
// report's own run and the runs before it, newest first.
const MaxHeadlines = 10

// headlineColumns are the columns of the table of headline figures: which
// run, then one figure of each harness beside its baseline.
var headlineColumns = []string{
	"run",
	"commit",
	"relay drain (× plain loop that keeps)",
	"4 relays, PostgreSQL 1 ms away (× 1 relay)",
	"relay p99 at 1,000/s (× direct produce)",
	"consumer (× raw Sarama group)",
	"Redis dedupe (× raw Sarama group)",
	"enqueue at 16 clients (courier / floor)",
	"batch of 100 (× COPY)",
}

// Headline is one run's row of the table of headline figures, its cells
// in the order of headlineColumns; a figure the run did not measure is
// "–".
type Headline []string

// HeadlineOf reads the headline figures of a report WriteMarkdown wrote
// (any version of it whose tables have the same configurations and
// columns), from its header and its tables. ok is false when doc holds
// no run's date.
func HeadlineOf(doc string) (h Headline, ok bool) {
	date := headerValue(doc, "Date")
	if date == "" {
		return nil, false
	}
	date, _, _ = strings.Cut(date, " ")
	commit := strings.TrimSuffix(headerValue(doc, "Commit"), "-dirty")
	if len(commit) > 7 {
		commit = commit[:7]
	}
	if strings.HasSuffix(headerValue(doc, "Commit"), "-dirty") {
		commit += " (with changes)"
	}
	if commit == "" {
		commit = "–"
	}
	tables := tablesOf(doc)
	relay := tables["Relay throughput"].last(func(row map[string]string) bool {
		return strings.HasPrefix(row["configuration"], "`"+RelayDefaults+"/events=") || row["configuration"] == "`"+RelayDefaults+"`"
	})
	scale := tables["Relay scaling"].last(func(row map[string]string) bool {
		return row["configuration"] == "`"+RelayDefaults+"/relays=4/workers=1`"
	})
	latency := tables["Relay latency"].last(func(row map[string]string) bool {
		return row["configuration"] == "`"+RelayDefaults+"`" && row["rate asked"] == "1,000"
	})
	consumer := tables["Consumer"].last(func(row map[string]string) bool { return row["configuration"] == "`"+NoFailures+"`" })
	dedupe := tables["Consumer"].last(func(row map[string]string) bool { return row["configuration"] == "`"+DedupeRedis+"`" })
	enqueue := tables["Enqueue cost"].last(func(row map[string]string) bool { return row["clients"] == "16" })
	batch := tables["Enqueue cost"].last(func(row map[string]string) bool { return row["events/s"] != "" })
	return Headline{
		date,
		commit,
		figure(relay, "events/s", "/s", "ratio"),
		figure(scale, "events/s", "/s", "ratio"),
		figure(latency, "p99 ms", " ms", "p99 ratio"),
		figure(consumer, "msgs/s", "/s", "ratio"),
		figure(dedupe, "msgs/s", "/s", "ratio"),
		figure(enqueue, "", "", "courier / floor"),
		figure(batch, "events/s", "/s", "ratio"),
	}, true
}

// figure is a headline cell: row's value column with its unit, then its
// ratio column in brackets; "–" when the row is missing.
func figure(row map[string]string, value, unit, ratio string) string {
	if row == nil || row[ratio] == "" {
		return "–"
	}
	if value == "" {
		return row[ratio]
	}
	return row[value] + unit + " (" + row[ratio] + ")"
}

// HeadlinesOf returns the rows of the table of headline figures in a
// previous report, newest first: its table's rows when it has one (its
// own run first), or else the one row HeadlineOf reads from its tables;
// nil when it holds neither.
func HeadlinesOf(doc string) []Headline {
	if s := tablesOf(doc)["Headline figures"]; len(s) > 0 && strings.Join(s[0].columns, "|") == strings.Join(headlineColumns, "|") {
		t := s[0]
		rows := make([]Headline, 0, len(t.rows))
		for _, row := range t.rows {
			rows = append(rows, Headline(row))
		}
		return rows
	}
	if h, ok := HeadlineOf(doc); ok {
		return []Headline{h}
	}
	return nil
}

// writeHeadlines writes the table of headline figures: this run's row,
// then the earlier runs', MaxHeadlines rows at most.
func writeHeadlines(b *strings.Builder, this Headline, earlier []Headline) {
	b.WriteString(`
## Headline figures

One figure of each harness beside its baseline, for this run (first row) and the runs before it
whose reports this one replaced (each row is copied from the report before, as ` + "`make bench`" + `
wrote it). The sections below hold this run's every figure, and how each was measured.

`)
	b.WriteString("| " + strings.Join(headlineColumns, " | ") + " |\n|")
	b.WriteString(strings.Repeat(" --- |", len(headlineColumns)) + "\n")
	rows := append([]Headline{this}, earlier...)
	for i, row := range rows[:min(len(rows), MaxHeadlines)] {
		if i > 0 && len(row) != len(headlineColumns) {
			continue
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
}

// headerValue is the value of the report header line "- **name:** value",
// without backquotes; "" when doc has none.
func headerValue(doc, name string) string {
	prefix := "- **" + name + ":** "
	for line := range strings.SplitSeq(doc, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.Trim(strings.TrimSpace(v), "`")
		}
	}
	return ""
}

// table is a Markdown table: its column names and its rows' cells.
type table struct {
	columns []string
	rows    [][]string
}

// section is the tables under one "## " heading.
type section []table

// last returns the last row of the section's tables for which match is
// true, as cells by column name; nil when none is.
func (s section) last(match func(map[string]string) bool) map[string]string {
	var found map[string]string
	for _, t := range s {
		for _, cells := range t.rows {
			row := make(map[string]string, len(t.columns))
			for i, c := range t.columns {
				if i < len(cells) {
					row[c] = cells[i]
				}
			}
			if match(row) {
				found = row
			}
		}
	}
	return found
}

// tablesOf returns the Markdown tables of doc by the "## " heading they
// stand under.
func tablesOf(doc string) map[string]section {
	out := make(map[string]section)
	heading := ""
	var current *table
	for line := range strings.SplitSeq(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading, current = strings.TrimSpace(h), nil
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if current != nil {
				out[heading] = append(out[heading], *current)
			}
			current = nil
			continue
		}
		cells := splitRow(line)
		switch {
		case current == nil:
			current = &table{columns: cells}
		case !isSeparator(cells):
			current.rows = append(current.rows, cells)
		}
	}
	if current != nil {
		out[heading] = append(out[heading], *current)
	}
	return out
}

// splitRow returns the trimmed cells of a Markdown table row.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(c)
	}
	return cells
}

// isSeparator reports whether cells are a table's "| --- | ---: |" line.
func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}
