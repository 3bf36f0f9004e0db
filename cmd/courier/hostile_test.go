package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// silentPort returns an address that accepts connections and never
// answers, as a firewall that drops or a wrong service may.
func silentPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// terminalUnsafe returns the first rune of out a terminal could act on:
// a byte that is not UTF-8, a control character other than line feed and
// tab (C0, DEL, C1) or another rune strconv.IsPrint refuses (such as a
// bidi override); "" when there is none.
func terminalUnsafe(out string) string {
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			return fmt.Sprintf("byte %#x at %d", out[i], i)
		}
		if r != '\n' && r != '\t' && r != ' ' && !strconv.IsPrint(r) {
			return fmt.Sprintf("rune %U at %d", r, i)
		}
	}
	return ""
}

// hostileDeadLetter writes a dead letter whose every text field holds
// terminal escapes, DEL, C1 controls, a bidi override and bytes that are
// not UTF-8, and returns its key.
func hostileDeadLetter(t *testing.T, f *dlqFixture) []byte {
	t.Helper()
	evil := "\x1b]0;pwned\x07\x1b[2J\r\x7f\u009b31m\u202e\x00"
	key := []byte("k\xff" + evil)
	sendDeadLetter(t, f, dlq.Original{Topic: f.topic, Partition: 0, Offset: 1, Key: key, Value: []byte("v\r" + evil + "\xfe"),
		Headers: []dlq.Header{{Key: []byte("h\xfe" + evil), Value: []byte(evil + "\xff")}, {Key: []byte("plain"), Value: []byte("x\ty")}}},
		dlq.Failure{Error: "bad" + evil + "\nsecond line" + evil, Kind: dlq.ErrorKind("perm" + evil), ConsumerGroup: "g" + evil, CorrelationID: "c" + evil})
	return key
}

// goodDeadLetter writes the dead letter of a record of target with key.
func goodDeadLetter(t *testing.T, f *dlqFixture, target, key string) {
	t.Helper()
	sendDeadLetter(t, f, dlq.Original{Topic: target, Partition: 0, Offset: 1, Key: []byte(key), Value: []byte(`{}`)},
		dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted})
}

// sendDeadLetter writes the envelope-mode dead letter of o to the
// fixture's dead-letter topic, whatever its original topic.
func sendDeadLetter(t *testing.T, f *dlqFixture, o dlq.Original, failure dlq.Failure) {
	t.Helper()
	env, err := dlq.New(o, failure)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := env.Record()
	if err != nil {
		t.Fatal(err)
	}
	rec.Topic = f.dlqName
	f.send(t, record.Message(rec))
}

// TestHostileCLI runs the command line as a careless or hostile operator
// would, each case distinct: numeric flags out of range (exit 2 before
// any connection), brokers and databases that refuse or never answer
// (exit 1 in bounded time, naming Kafka or PostgreSQL and the address),
// secrets in every form of connection string (never printed), dead
// letters full of terminal escapes (never printed raw, in text or JSON),
// bytes that are not UTF-8 (exact in JSON's base64 fields), and replays
// of dead letters that cannot go anywhere (skipped, counted, exit 1,
// the others moved).
func TestHostileCLI(t *testing.T) {
	t.Parallel()
	closed := closedPort(t)
	closedHost, closedNum, _ := net.SplitHostPort(closed)
	pgClosed := "postgres://courier@" + closed + "/db"
	k := []string{"--brokers", closed}

	type result struct {
		code        int
		out, errOut string
		took        time.Duration
	}
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		start := time.Now()
		code, out, errOut := courier(t, args...)
		r := result{code, out, errOut, time.Since(start)}
		if bad := terminalUnsafe(out + errOut); bad != "" {
			t.Errorf("courier %q printed %s:\n%q", args, bad, out+errOut)
		}
		return r
	}
	usage := func(args []string, want string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Parallel()
			r := run(t, args...)
			if r.code != exitUsage || !strings.Contains(r.errOut, want) {
				t.Errorf("courier %q: exit %d, want %d naming %q\n%s%s", args, r.code, exitUsage, want, r.out, r.errOut)
			}
			if r.took > 10*time.Second {
				t.Errorf("courier %q took %v for a usage error: did it connect first?", args, r.took)
			}
		}
	}
	unreachable := func(args []string, service, addr string, limit time.Duration) func(t *testing.T) {
		return func(t *testing.T) {
			t.Parallel()
			r := run(t, args...)
			if r.code != exitFailure || !strings.Contains(r.errOut, service) || !strings.Contains(r.errOut, addr) {
				t.Errorf("courier %q: exit %d, want %d naming %s at %s\n%s%s", args, r.code, exitFailure, service, addr, r.out, r.errOut)
			}
			if r.took > limit {
				t.Errorf("courier %q took %v, want at most %v", args, r.took, limit)
			}
		}
	}

	// Numeric flags out of range: usage errors, before connecting.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"replay --partition -1", append([]string{"dlq", "replay", "x.dlq", "--partition", "-1"}, k...), "--partition -1"},
		{"list --partition -2", append([]string{"dlq", "list", "x.dlq", "--partition", "0,-2"}, k...), "--partition -2"},
		{"stats --partition -1", append([]string{"dlq", "stats", "x.dlq", "--partition", "-1"}, k...), "--partition -1"},
		{"replay --rate NaN", append([]string{"dlq", "replay", "x.dlq", "--rate", "NaN"}, k...), "--rate NaN"},
		{"replay --rate +Inf", append([]string{"dlq", "replay", "x.dlq", "--rate", "+Inf"}, k...), "--rate +Inf"},
		{"replay --batch-size 0", append([]string{"dlq", "replay", "x.dlq", "--batch-size", "0"}, k...), "--batch-size 0"},
		{"replay --batch-size huge", append([]string{"dlq", "replay", "x.dlq", "--batch-size", "1000000000"}, k...), "--batch-size 1000000000"},
		{"replay --concurrency 0", append([]string{"dlq", "replay", "x.dlq", "--concurrency", "0"}, k...), "--concurrency 0"},
		{"replay --concurrency huge", append([]string{"dlq", "replay", "x.dlq", "--concurrency", "100000"}, k...), "--concurrency 100000"},
		{"replay --max -1", append([]string{"dlq", "replay", "x.dlq", "--max", "-1"}, k...), "--max -1"},
		{"replay --max-replays 0", append([]string{"dlq", "replay", "x.dlq", "--max-replays", "0"}, k...), "--max-replays 0"},
		{"replay --from-offset -5", append([]string{"dlq", "replay", "x.dlq", "--from-offset", "-5"}, k...), "--from-offset -5"},
		{"show --offset -1", append([]string{"dlq", "show", "x.dlq", "--partition", "0", "--offset", "-1"}, k...), "--offset -1"},
		{"show --partition over int32", append([]string{"dlq", "show", "x.dlq", "--partition", "4294967296", "--offset", "0"}, k...), "--partition"},
		{"list --limit 0", append([]string{"dlq", "list", "x.dlq", "--limit", "0"}, k...), "--limit 0"},
		{"--kafka-timeout 0", append([]string{"dlq", "stats", "x.dlq", "--kafka-timeout", "0s"}, k...), "--kafka-timeout 0s"},
		{"--brokers without a port", []string{"dlq", "stats", "x.dlq", "--brokers", "kafka-1"}, `--brokers "kafka-1"`},
		{"--brokers port out of range", []string{"dlq", "list", "x.dlq", "--brokers", "127.0.0.1:99999"}, `--brokers "127.0.0.1:99999"`},
		{"--kafka-timeout negative", append([]string{"dlq", "list", "x.dlq", "--kafka-timeout", "-1s"}, k...), "--kafka-timeout -1s"},
		{"outbox list --limit huge", []string{"outbox", "list", "--limit", "100000000", "--database-url", pgClosed}, "--limit 100000000"},
		{"outbox list --after -1", []string{"outbox", "list", "--after", "-1", "--database-url", pgClosed}, "--after -1"},
		{"outbox cleanup --retention -1h", []string{"outbox", "cleanup", "--retention", "-1h", "--database-url", pgClosed}, "--retention -1h"},
		{"outbox cleanup without --yes and no terminal", []string{"outbox", "cleanup", "--database-url", pgClosed}, "--yes"},
		{"dev --partitions huge", []string{"dev", "--partitions", "1000000000"}, "--partitions 1000000000"},
		{"relay --workers 0", []string{"relay", "--workers", "0", "--database-url", pgClosed}, "--workers 0"},
	} {
		t.Run("flag/"+tc.name, usage(tc.args, tc.want))
	}

	// --retention 0 means "keep forever" to cleanup as to the relay.
	t.Run("flag/outbox cleanup --retention 0 deletes nothing", func(t *testing.T) {
		t.Parallel()
		r := run(t, "outbox", "cleanup", "--retention", "0", "--database-url", pgClosed, "--output", "json")
		var res map[string]any
		if err := json.Unmarshal([]byte(r.out), &res); err != nil || r.code != exitOK || res["deleted"] != 0.0 || res["kept_forever"] != true {
			t.Errorf("cleanup --retention 0: exit %d, %v\n%s%s", r.code, err, r.out, r.errOut)
		}
	})

	// Brokers and databases that refuse, or accept and never answer.
	silent := silentPort(t)
	for _, tc := range []struct {
		name    string
		args    []string
		service string
		addr    string
		limit   time.Duration
	}{
		{"dlq stats, closed port", []string{"dlq", "stats", "x.dlq", "--brokers", closed}, "Kafka", closed, 30 * time.Second},
		{"dlq list, closed port", []string{"dlq", "list", "x.dlq", "--brokers", closed}, "Kafka", closed, 30 * time.Second},
		{"dlq show, closed port", []string{"dlq", "show", "x.dlq", "--partition", "0", "--offset", "0", "--brokers", closed}, "Kafka", closed, 30 * time.Second},
		{"dlq replay, closed port", []string{"dlq", "replay", "x.dlq", "--brokers", closed}, "Kafka", closed, 30 * time.Second},
		{"dlq replay --dry-run, closed port", []string{"dlq", "replay", "x.dlq", "--dry-run", "--brokers", closed}, "Kafka", closed, 30 * time.Second},
		{"dlq stats, silent port", []string{"dlq", "stats", "x.dlq", "--brokers", silent, "--kafka-timeout", "1s"}, "Kafka", silent, 15 * time.Second},
		{"dlq replay, silent port", []string{"dlq", "replay", "x.dlq", "--brokers", silent, "--kafka-timeout", "1s"}, "Kafka", silent, 15 * time.Second},
		{"outbox stats, closed port", []string{"outbox", "stats", "--database-url", pgClosed}, "PostgreSQL", closedHost + ":" + closedNum, 30 * time.Second},
		{"migrate status, closed port", []string{"migrate", "status", "--database-url", pgClosed}, "PostgreSQL", closedHost + ":" + closedNum, 30 * time.Second},
		{"relay, closed port", []string{"relay", "--database-url", pgClosed, "--brokers", closed}, "PostgreSQL", closedHost + ":" + closedNum, 30 * time.Second},
		{"outbox stats, silent port", []string{"outbox", "stats", "--database-url", "postgres://courier@" + silent + "/db?connect_timeout=1"}, "PostgreSQL", silent, 15 * time.Second},
	} {
		t.Run("unreachable/"+tc.name, unreachable(tc.args, tc.service, tc.addr, tc.limit))
	}

	// Secrets in every form of connection string and credential.
	for _, tc := range []struct {
		name, url string
		secrets   []string
	}{
		{"key=value with spaces around =", "host=127.0.0.1 password = s3cr3tA port=notaport", []string{"s3cr3tA"}},
		{"key=value quoted with a space", "host=127.0.0.1 password='s3cr3t B' port=notaport", []string{"s3cr3t B"}},
		{"key=value quoted with an escaped quote", `host=127.0.0.1 password = 's3c\'r3tC' port=notaport`, []string{`s3c'r3tC`}},
		{"key=value, unreachable", "host=127.0.0.1 port=" + closedNum + " user=u password=s3cr3tJ dbname=db", []string{"s3cr3tJ"}},
		{"URL userinfo, bad port", "postgres://u:s3cr3tD@127.0.0.1:notaport/db", []string{"s3cr3tD"}},
		{"URL userinfo, unreachable", "postgres://u:s3cr3tG@" + closed + "/db", []string{"s3cr3tG"}},
		{"URL userinfo with an unencoded slash", "postgres://u:s3c/r3tH@127.0.0.1:notaport/db", []string{"s3c/r3tH"}},
		{"URL userinfo percent-encoded", "postgres://u:s3c%3Fr3tK@127.0.0.1:notaport/db", []string{"s3c?r3tK"}},
		{"URL query password", "postgres://u@127.0.0.1:5432/db?password=s3cr3tE&sslmode=bogus", []string{"s3cr3tE"}},
		{"URL query with an encoded name", "postgres://u@127.0.0.1:5432/db?pass%77ord=s3cr3tI&sslmode=bogus", []string{"s3cr3tI"}},
		{"sslpassword", "host=127.0.0.1 sslpassword=s3cr3tF sslmode=bogus", []string{"s3cr3tF"}},
		{"key=value with an escaped space", `host=127.0.0.1 password=s3cr3tO\ s3cr3tP port=notaport`, []string{"s3cr3tO", "s3cr3tP"}},
		{"key=value with an escaped space and a trailing backslash", `host=127.0.0.1 port=notaport password=s3cr3tQ\ s3cr3tR\`, []string{"s3cr3tQ", "s3cr3tR"}},
		{"key=value with an escaped quote and space", `host=127.0.0.1 password=s3cr3tS\'\ s3cr3tT port=notaport`, []string{"s3cr3tS", "s3cr3tT"}},
		{"key=value with a space not escaped", "host=127.0.0.1 password=s3cr3tU s3cr3tV port=notaport", []string{"s3cr3tU", "s3cr3tV"}},
		{"key=value with an escaped space, unreachable", `host=127.0.0.1 port=` + closedNum + ` user=u password=s3cr3tW\ s3cr3tX dbname=db`, []string{"s3cr3tW", "s3cr3tX"}},
		{"sslpassword with an escaped space", `host=127.0.0.1 sslpassword=s3cr3tY\ s3cr3tZ sslmode=bogus`, []string{"s3cr3tY", "s3cr3tZ"}},
		{"URL query with an unencoded &", "postgres://u@127.0.0.1:5432/db?password=s3cr3t1&s3cr3t2&sslmode=bogus", []string{"s3cr3t1", "s3cr3t2"}},
	} {
		t.Run("secret/"+tc.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{"outbox", "stats"}, {"migrate", "status"}, {"relay", "--brokers", closed}} {
				r := run(t, append(args, "--database-url", tc.url)...)
				printed := slices.ContainsFunc(tc.secrets, func(s string) bool { return strings.Contains(r.out+r.errOut, s) })
				if r.code == exitOK || printed || !strings.Contains(r.errOut, "PostgreSQL") && !strings.Contains(r.errOut, "--database-url") {
					t.Errorf("courier %q with %s: exit %d, output (must fail naming the database, without %q):\n%s%s", args, tc.name, r.code, tc.secrets, r.out, r.errOut)
				}
			}
		})
	}
	t.Run("secret/environment and SASL password", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"outbox", "stats"},
			{"dlq", "stats", "x.dlq", "--brokers", closed, "--sasl-mechanism", "PLAIN", "--sasl-user", "u", "--sasl-password", "s3cr3tL"},
		} {
			cmd := exec.Command(testkit.CourierBinary(t), args...)
			cmd.Env = append(os.Environ(), "COURIER_DATABASE_URL=host=127.0.0.1 password = s3cr3tM port=notaport", "COURIER_SASL_PASSWORD=s3cr3tN")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code == exitOK || strings.Contains(out.String(), "s3cr3t") {
				t.Errorf("courier %q: exit %d, a secret printed:\n%s", args, code, out.String())
			}
		}
	})

	// Dead letters full of terminal escapes and bytes that are not UTF-8.
	f := newDLQFixture(t, 1)
	key := hostileDeadLetter(t, f)
	f.send(t, &sarama.ProducerMessage{Topic: f.dlqName, Value: sarama.StringEncoder(
		`{"envelope_version":1,"original_topic":"t\u001b[31m","original_partition":0,"original_offset":0,"failed_at":"2026-01-01T00:00:00Z","error_kind":"x"}`)})
	for _, args := range [][]string{
		{"dlq", "stats", f.dlqName}, {"dlq", "list", f.dlqName}, {"dlq", "show", f.dlqName, "--partition", "0", "--offset", "0"},
		{"dlq", "show", f.dlqName, "--partition", "0", "--offset", "1"}, {"dlq", "replay", f.dlqName, "--dry-run"},
	} {
		for _, format := range []string{"text", "json"} {
			t.Run(fmt.Sprintf("escape/%s %s", strings.Join(args[:2], " "), format), func(t *testing.T) {
				t.Parallel()
				r := run(t, f.args(append(args, "--output", format)...)...) // run checks the output
				if r.code != exitOK {
					t.Errorf("courier %q: exit %d\n%s%s", args, r.code, r.out, r.errOut)
				}
			})
		}
	}
	t.Run("escape/show json keeps the exact bytes in base64", func(t *testing.T) {
		t.Parallel()
		r := run(t, f.args("dlq", "show", f.dlqName, "--partition", "0", "--offset", "0", "--output", "json")...)
		var got struct {
			KeyBase64 *string `json:"key_base64"`
			Original  struct {
				KeyBase64 *string `json:"key_base64"`
				Headers   []struct {
					Key         *string `json:"key"`
					KeyBase64   *string `json:"key_base64"`
					ValueBase64 *string `json:"value_base64"`
				} `json:"headers"`
			} `json:"original"`
		}
		if err := json.Unmarshal([]byte(r.out), &got); err != nil || r.code != exitOK || len(got.Original.Headers) != 2 {
			t.Fatalf("show --output json: exit %d, %v\n%s", r.code, err, r.out)
		}
		decode := func(s *string) string {
			if s == nil {
				return "<none>"
			}
			b, err := base64.StdEncoding.DecodeString(*s)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		h := got.Original.Headers[0]
		if decode(got.KeyBase64) != string(key) || decode(got.Original.KeyBase64) != string(key) || h.Key != nil ||
			!strings.HasPrefix(decode(h.KeyBase64), "h\xfe\x1b") || !strings.HasSuffix(decode(h.ValueBase64), "\x00\xff") {
			t.Errorf("show --output json lost bytes: %+v", got)
		}
	})

	// Places past the end.
	for _, offset := range []string{"99", "9223372036854775807"} {
		t.Run("show/offset "+offset+" past the end", func(t *testing.T) {
			t.Parallel()
			r := run(t, f.args("dlq", "show", f.dlqName, "--partition", "0", "--offset", offset)...)
			if r.code != exitFailure || !strings.Contains(r.errOut, "no record at") {
				t.Errorf("show at offset %s: exit %d\n%s%s", offset, r.code, r.out, r.errOut)
			}
		})
	}
	t.Run("show/partition past the end", func(t *testing.T) {
		t.Parallel()
		r := run(t, f.args("dlq", "show", f.dlqName, "--partition", "7", "--offset", "0")...)
		if r.code != exitFailure || !strings.Contains(r.errOut, "no record at") {
			t.Errorf("show at partition 7: exit %d\n%s%s", r.code, r.out, r.errOut)
		}
	})

	// Replays of dead letters that cannot go anywhere: skipped, counted,
	// exit 1, the others moved.
	for _, tc := range []struct {
		name, target, reason string
		dry                  bool
	}{
		{"missing target topic", "gone.topic", "does not exist", false},
		{"missing target topic, dry run", "gone.topic", "does not exist", true},
		{"target is the dead-letter topic", "", "would loop", false},
	} {
		t.Run("replay/"+tc.name, func(t *testing.T) {
			t.Parallel()
			f := newDLQFixture(t, 1)
			target := tc.target
			if target == "" {
				target = f.dlqName
			}
			goodDeadLetter(t, f, f.topic, "first")
			goodDeadLetter(t, f, target, "bad")
			goodDeadLetter(t, f, f.topic, "last")
			args := f.args("dlq", "replay", f.dlqName, "--output", "json")
			if tc.dry {
				args = append(args, "--dry-run")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			code := runContext(ctx, args, &out, &errOut)
			var got struct {
				Report  replayReportJSON   `json:"report"`
				Records []replayRecordJSON `json:"records"`
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != exitFailure || got.Report.Skipped != 1 || got.Report.Moved != 2 ||
				!strings.Contains(errOut.String(), "skipped") {
				t.Fatalf("replay: exit %d (want %d), %v\n%s%s", code, exitFailure, err, out.String(), errOut.String())
			}
			skipped := 0
			for _, rec := range got.Records {
				if rec.Action == dlq.ActionSkipped {
					skipped++
					if rec.Offset != 1 || !strings.Contains(rec.Reason, tc.reason) {
						t.Errorf("skipped record %+v, want offset 1 with a reason naming %q", rec, tc.reason)
					}
				}
			}
			want := 2
			if tc.dry {
				want = 0
			}
			if n := len(f.k.ReadAll(t, f.topic)); skipped != 1 || n != want {
				t.Errorf("%d skipped, %d written to the topic; want 1 skipped and %d written", skipped, n, want)
			}
			if n := len(f.k.ReadAll(t, f.dlqName)); n != 3 {
				t.Errorf("the dead-letter topic holds %d records, want its 3 kept", n)
			}
		})
	}
}

// runContext is run with a context of the test's.
func runContext(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) int {
	return run(ctx, args, stdout, stderr)
}

// FuzzTerminalEscape checks the terminal escaper: display.Text's output
// holds no control character, no non-printable rune and no byte that is
// not UTF-8, and termUnescape gives the exact input back (and the text
// itself when it needs no escape); display.Lines keeps
// only line feeds and tabs raw; JSON written by writeJSON decodes to the
// same string and holds no DEL, C1 or other non-printable rune.
func FuzzTerminalEscape(f *testing.F) {
	for _, s := range []string{"", "plain", `back\slash`, "\x1b[31mred\x1b[0m", "\x7f\u0085\u009b", "\xff\xfe", "a\nb\tc\r",
		"\u202eevil", `"quoted"`, "\\x41", "\U0001F600", "\U000E0001", "\uFFFD", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := display.Text(s)
		if bad := terminalUnsafe(out); bad != "" || strings.ContainsAny(out, "\n\t") {
			t.Fatalf("display.Text(%q) = %q holds %s", s, out, bad)
		}
		back, err := termUnescape(out)
		if err != nil || back != s {
			t.Fatalf("termUnescape(display.Text(%q)) = %q, %v", s, back, err)
		}
		plain := display.Printable([]byte(s), false) && !strings.ContainsAny(s, "\\\uFFFD")
		if plain && out != s {
			t.Fatalf("display.Text(%q) = %q changed text that needs no escape", s, out)
		}
		lines := display.Lines(s, "  ")
		if bad := terminalUnsafe(lines); bad != "" {
			t.Fatalf("display.Lines(%q) = %q holds %s", s, lines, bad)
		}
		var buf bytes.Buffer
		if err := writeJSON(&buf, map[string]string{"v": s}); err != nil {
			t.Fatal(err)
		}
		if bad := terminalUnsafe(buf.String()); bad != "" {
			t.Fatalf("writeJSON(%q) = %q holds %s", s, buf.String(), bad)
		}
		var got map[string]string
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil || got["v"] != strings.ToValidUTF8(s, "\uFFFD") && utf8.ValidString(s) {
			t.Fatalf("writeJSON(%q) = %s decodes to %q, %v", s, buf.String(), got["v"], err)
		}
	})
}

// termUnescape inverts display.Text: the test's proof that the escape loses
// nothing.
func termUnescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	return strconv.Unquote(`"` + s + `"`)
}
