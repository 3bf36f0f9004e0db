package prom_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// selector is a vector selector of a PromQL expression: its metric name
// ("" for {__name__=~"…"}) and the label names its matchers name.
type selector struct {
	metric string
	labels []string
}

// promqlKeywords are the words of PromQL that are not metric names where
// they stand alone: binary operators, modifiers and aggregation operators
// (which a by or without clause may separate from their parenthesis).
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

// promqlLabelLists are the keywords followed by a list of label names.
var promqlLabelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// promqlSelectors returns the vector selectors of expr in order, and the
// label names of its by, without, on, ignoring, group_left and
// group_right clauses in order. It lexes rather than parses: it finds the
// metric and label names of a valid expression (promtool checks validity)
// without a PromQL parser, skipping strings, numbers and durations,
// Grafana variables, ranges and the names of functions and keywords.
func promqlSelectors(expr string) (sels []selector, clauses []string, err error) {
	l := &promqlLexer{s: expr}
	for l.skipSpace(); l.i < len(l.s); l.skipSpace() {
		c := l.s[l.i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if err := l.skipString(); err != nil {
				return nil, nil, err
			}
		case c == '#': // a comment, to the end of the line
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		case isDigit(c) || c == '.' && l.i+1 < len(l.s) && isDigit(l.s[l.i+1]):
			// A number (1e3, 0x1f, .5) or a duration (10m, 1h30m).
			for l.i < len(l.s) && (isNameByte(c) || c == '.') {
				l.i++
				c = l.byteAt(l.i)
			}
		case c == '$': // a Grafana variable: $job, ${job}, $__rate_interval
			if err := l.skipVariable(); err != nil {
				return nil, nil, err
			}
		case c == '[': // a range or a subquery: durations only
			end := strings.IndexByte(l.s[l.i:], ']')
			if end < 0 {
				return nil, nil, fmt.Errorf("unclosed [ at %d in %q", l.i, expr)
			}
			l.i += end + 1
		case c == '{':
			labels, err := l.matchers()
			if err != nil {
				return nil, nil, err
			}
			sels = append(sels, selector{labels: labels})
		case isNameStart(c):
			word := l.name()
			l.skipSpace()
			next := l.byteAt(l.i)
			lower := strings.ToLower(word)
			switch {
			case promqlLabelLists[lower]:
				if next == '(' { // group_left and group_right may stand alone
					labels, err := l.labelList()
					if err != nil {
						return nil, nil, err
					}
					clauses = append(clauses, labels...)
				}
			case next == '(' || promqlKeywords[lower]:
				// A function, an aggregation or a keyword.
			default:
				s := selector{metric: word}
				if next == '{' {
					var err error
					if s.labels, err = l.matchers(); err != nil {
						return nil, nil, err
					}
				}
				sels = append(sels, s)
			}
		default:
			l.i++
		}
	}
	return sels, clauses, nil
}

type promqlLexer struct {
	s string
	i int
}

func (l *promqlLexer) byteAt(i int) byte {
	if i < len(l.s) {
		return l.s[i]
	}
	return 0
}

func (l *promqlLexer) skipSpace() {
	for l.i < len(l.s) && strings.IndexByte(" \t\r\n", l.s[l.i]) >= 0 {
		l.i++
	}
}

// name reads a metric, label or function name (colons included).
func (l *promqlLexer) name() string {
	start := l.i
	for l.i < len(l.s) && (isNameByte(l.s[l.i]) || l.s[l.i] == ':') {
		l.i++
	}
	return l.s[start:l.i]
}

// skipString skips a quoted string, honouring backslash escapes in "…"
// and '…' (not in raw `…`).
func (l *promqlLexer) skipString() error {
	quote, start := l.s[l.i], l.i
	for l.i++; l.i < len(l.s); l.i++ {
		switch l.s[l.i] {
		case '\\':
			if quote != '`' {
				l.i++
			}
		case quote:
			l.i++
			return nil
		}
	}
	return fmt.Errorf("unterminated string at %d in %q", start, l.s)
}

func (l *promqlLexer) skipVariable() error {
	l.i++
	if l.byteAt(l.i) == '{' {
		end := strings.IndexByte(l.s[l.i:], '}')
		if end < 0 {
			return fmt.Errorf("unclosed ${ at %d in %q", l.i, l.s)
		}
		l.i += end + 1
		return nil
	}
	l.name()
	return nil
}

// labelList reads a parenthesised list of label names, (a, b), and
// returns them.
func (l *promqlLexer) labelList() ([]string, error) {
	return l.labels(')', func() error { return nil })
}

// matchers reads {name op "value", …} and returns the label names.
func (l *promqlLexer) matchers() ([]string, error) {
	return l.labels('}', func() error {
		l.skipSpace()
		for strings.IndexByte("=!~", l.byteAt(l.i)) >= 0 && l.i < len(l.s) {
			l.i++
		}
		l.skipSpace()
		if c := l.byteAt(l.i); c != '"' && c != '\'' && c != '`' {
			return fmt.Errorf("want a quoted label value at %d in %q", l.i, l.s)
		}
		return l.skipString()
	})
}

// labels reads a list that opens at l.i and ends with closer, of items
// separated by commas, each a label name and then what rest reads; it
// returns the label names.
func (l *promqlLexer) labels(closer byte, rest func() error) ([]string, error) {
	start := l.i
	l.i++ // ( or {
	var labels []string
	for {
		l.skipSpace()
		switch l.byteAt(l.i) {
		case closer:
			l.i++
			return labels, nil
		case ',':
			l.i++
			continue
		case 0:
			return nil, fmt.Errorf("unclosed %c at %d in %q", l.s[start], start, l.s)
		}
		name := l.name()
		if name == "" {
			return nil, fmt.Errorf("want a label name at %d in %q", l.i, l.s)
		}
		labels = append(labels, name)
		if err := rest(); err != nil {
			return nil, err
		}
	}
}

func isDigit(c byte) bool     { return '0' <= c && c <= '9' }
func isNameStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isNameByte(c byte) bool  { return isNameStart(c) || isDigit(c) }

func TestMonitoringPromQLSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		want    []selector
		clauses []string
	}{
		{`courier_outbox_pending`, []selector{{metric: "courier_outbox_pending"}}, nil},
		{`max by (job, table) (courier_outbox_oldest_pending_age_seconds{job=~"$job"}) > 300`,
			[]selector{{"courier_outbox_oldest_pending_age_seconds", []string{"job"}}}, []string{"job", "table"}},
		{`histogram_quantile(0.99, sum by (le, topic) (rate(a_bucket{op="}", x!~'\'{'}[$__rate_interval])))`,
			[]selector{{"a_bucket", []string{"op", "x"}}}, []string{"le", "topic"}},
		{`SUM(rate(a_total[5m:1m] @ start())) BY (le) / ignoring(op) group_left(topic) b:rule`,
			[]selector{{metric: "a_total"}, {metric: "b:rule"}}, []string{"le", "op", "topic"}},
		{"a unless a offset 10m or count_values(\"v\", c) # d_total", []selector{{metric: "a"}, {metric: "a"}, {metric: "c"}}, nil},
		{`sum without (instance) (x) > bool 1e3 * .5 + 0x1F and on (job) ${y}`, []selector{{metric: "x"}}, []string{"instance", "job"}},
		{`a * on() group_left b and on(job,instance,) c`, []selector{{metric: "a"}, {metric: "b"}, {metric: "c"}}, []string{"job", "instance"}},
		{`label_replace(m{topic=~".+\\.retry\\..+"}, "dst", "$1", "src", "(.*)")`, []selector{{"m", []string{"topic"}}}, nil},
		{`{__name__=~"courier_.+", job="a"}`, []selector{{labels: []string{"__name__", "job"}}}, nil},
		{`courier_x{job="a",}`, []selector{{"courier_x", []string{"job"}}}, nil},
	} {
		got, clauses, err := promqlSelectors(tc.expr)
		if err != nil {
			t.Errorf("promqlSelectors(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(clauses, tc.clauses) {
			t.Errorf("promqlSelectors(%q) = %+v, %q, want %+v, %q", tc.expr, got, clauses, tc.want, tc.clauses)
		}
	}
	for _, bad := range []string{`x{a="b"`, `x{a="b}`, `"open`, `x{a=b}`, `rate(x[5m)`, `sum by (le x`, `sum by (le, "x") (y)`} {
		if got, clauses, err := promqlSelectors(bad); err == nil {
			t.Errorf("promqlSelectors(%q) = %+v, %q, want an error", bad, got, clauses)
		}
	}
}
