package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
)

// devWait bounds every wait on a courier dev process or a kcat run.
const devWait = 60 * time.Second

// TestDevServesKcatAndKeepsRecordsAcrossRestarts runs courier dev as a
// user would: kcat produces to a topic that does not exist yet and reads the
// records back; after SIGTERM (exit 0) a second courier dev on the same data
// directory still serves them, and after SIGKILL a third one serves those
// and the topic the second one created, then stops on SIGHUP (a closed
// terminal) with exit 0.
func TestDevServesKcatAndKeepsRecordsAcrossRestarts(t *testing.T) {
	t.Parallel()
	kcat := lookKcat(t)
	dataDir := t.TempDir()
	orders := []string{`order-1:{"id":1,"total":42}`, `order-2:{"id":2,"total":7}`, "order-3:", "order-1:second event of order-1"}
	payments := []string{"pay-1:captured", "pay-2:refunded"}

	first := startDev(t, dataDir, "--output", "text")
	addr := strings.TrimPrefix(first.waitLine(t, "the export line", func(l string) bool {
		return strings.HasPrefix(l, "  export COURIER_BROKERS=")
	}), "  export COURIER_BROKERS=")
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		t.Fatalf("printed address %q: want the real host:port (%v)", addr, err)
	}
	kcatProduce(t, kcat, addr, "dev.orders", orders)
	assertKcatReads(t, kcat, addr, "dev.orders", orders)
	if rest := first.stop(t, syscall.SIGTERM); len(rest) == 0 || rest[len(rest)-1] != "courier dev: stopped; records kept in "+dataDir {
		t.Errorf("output after SIGTERM %q, want it to end with where the records are kept", rest)
	}

	second := startDev(t, dataDir, "--output", "json")
	printed := second.waitJSON(t)
	if printed.DataDir != dataDir || printed.Partitions != defaultDevPartitions {
		t.Errorf("printed %+v, want data dir %s and %d partition(s)", printed, dataDir, defaultDevPartitions)
	}
	assertKcatReads(t, kcat, printed.Address, "dev.orders", orders)
	kcatProduce(t, kcat, printed.Address, "dev.payments", payments)
	second.kill(t)

	third := startDev(t, dataDir, "--output", "json")
	addr = third.waitJSON(t).Address
	assertKcatReads(t, kcat, addr, "dev.orders", orders)
	assertKcatReads(t, kcat, addr, "dev.payments", payments)
	if rest := third.stop(t, syscall.SIGHUP); len(rest) != 0 {
		t.Errorf("--output json printed %q after its JSON", rest)
	}
}

// TestDevSaramaAutoCreatesTopics runs courier dev in this process with
// records in memory only: a Sarama producer creates a topic on first
// produce with --partitions partitions; one configured for Kafka 0.10.2
// is refused, as Kafka 4.0 refuses its produce version 2, and stderr says
// so; cancelling the command's context (what a signal does) ends it with
// exit code 0.
func TestDevSaramaAutoCreatesTopics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0", "--data-dir", "", "--partitions", "3", "--output", "json"}, stdoutW, &stderr)
		stdoutW.Close()
	}()
	var printed devBroker
	if err := json.NewDecoder(stdout).Decode(&printed); err != nil {
		t.Fatalf("read the printed address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if printed.DataDir != "" || printed.Partitions != 3 {
		t.Errorf("printed %+v, want no data dir and 3 partitions", printed)
	}

	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	client, err := sarama.NewClient([]string{printed.Address}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "dev.auto", Value: sarama.StringEncoder("v")}); err != nil {
		t.Fatalf("produce to a new topic: %v", err)
	}
	if partitions, err := client.Partitions("dev.auto"); err != nil || len(partitions) != 3 {
		t.Errorf("dev.auto has partitions %v (%v), want 3", partitions, err)
	}
	if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "dev.auto", Value: sarama.StringEncoder("again")}); err != nil {
		t.Fatalf("produce to the topic again: %v", err)
	}
	old := sarama.NewConfig()
	old.Version = sarama.V0_10_2_0
	old.Producer.Return.Successes = true
	old.Producer.Retry.Max = 0
	oldProducer, err := sarama.NewSyncProducer([]string{printed.Address}, old)
	if err != nil {
		t.Fatal(err)
	}
	defer oldProducer.Close()
	if _, _, err := oldProducer.SendMessage(&sarama.ProducerMessage{Topic: "dev.auto", Value: sarama.StringEncoder("old")}); err == nil {
		t.Error("produce with version 2 (Sarama at Kafka 0.10.2): nil error, want it refused as Kafka 4.0 refuses it")
	}

	cancel()
	select {
	case c := <-code:
		if c != exitOK {
			t.Errorf("exit code %d after the context ended, want %d; stderr:\n%s", c, exitOK, stderr.String())
		}
		if refused := strings.Count(stderr.String(), "courier dev: refused "); refused == 0 || !strings.Contains(stderr.String(), "refused Produce version 2, which Kafka 4.0 removed") {
			t.Errorf("stderr %q, want it to name the refused Produce version 2 and nothing the default Sarama config sent", stderr.String())
		} else if refused != strings.Count(stderr.String(), "courier dev: refused Produce version 2") {
			t.Errorf("stderr %q refuses more than the old producer's requests", stderr.String())
		}
	case <-time.After(devWait):
		t.Fatal("courier dev did not stop after its context ended")
	}
}

func TestDevBadFlags(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no partitions", []string{"--partitions", "0"}, exitUsage, "--partitions 0: use 1 to 1000"},
		{"listen without a port", []string{"--listen", "9092"}, exitUsage, "want host:port"},
		{"listen with a port out of range", []string{"--listen", "127.0.0.1:70000"}, exitUsage, "want host:port"},
		{"unknown output", []string{"--output", "yaml"}, exitUsage, "use text or json"},
		{"an argument", []string{"now"}, exitUsage, "unknown command"},
		{"port taken", []string{"--listen", busy.Addr().String()}, exitFailure, "pick another address with --listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), devWait)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"dev", "--data-dir", ""}, tc.args...)
			if code := run(ctx, args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("courier %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}

func TestDevWildcardListenAdvertisesLoopback(t *testing.T) {
	t.Parallel()
	ln, err := listenOn("0.0.0.0:0")("tcp", "ignored")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcp := ln.Addr().(*net.TCPAddr)
	if !tcp.IP.Equal(net.IPv4(127, 0, 0, 1)) || tcp.Port == 0 {
		t.Errorf("advertised %v, want 127.0.0.1 and the real port", tcp)
	}
}

// lookKcat returns kcat's path; without it the test is skipped, or fails
// under CI, which must have it.
func lookKcat(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kcat is missing: %v (make services installs it)", err)
		}
		t.Skipf("kcat is missing: %v (apt-get install kcat, or make services)", err)
	}
	return path
}

// runKcat runs kcat with stdin and returns its standard output.
func runKcat(t *testing.T, kcat, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), devWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// kcatProduce produces records ("key:value" lines) to topic with kcat.
func kcatProduce(t *testing.T, kcat, addr, topic string, records []string) {
	t.Helper()
	runKcat(t, kcat, strings.Join(records, "\n")+"\n", "-b", addr, "-t", topic, "-P", "-K:")
}

// assertKcatReads consumes topic from the start with kcat and fails the
// test unless it holds exactly records ("key:value" lines), in order.
func assertKcatReads(t *testing.T, kcat, addr, topic string, records []string) {
	t.Helper()
	out := runKcat(t, kcat, "", "-b", addr, "-t", topic, "-C", "-K:", "-e", "-q")
	if got, want := strings.TrimSuffix(out, "\n"), strings.Join(records, "\n"); got != want {
		t.Fatalf("kcat read from %s:\n%s\nwant:\n%s", topic, got, want)
	}
}

// devProcess is a courier dev process started from the built binary.
type devProcess struct {
	cmd *exec.Cmd
	// lines are the lines of its standard output; closed at its end.
	lines  chan string
	stderr bytes.Buffer // read only after the process is reaped
}

// startDev starts courier dev on a free loopback port with its records in
// dataDir; the process is killed when the test ends if it still runs.
func startDev(t *testing.T, dataDir string, args ...string) *devProcess {
	t.Helper()
	p := &devProcess{lines: make(chan string, 100)}
	p.cmd = exec.Command(testkit.CourierBinary(t), append([]string{"dev", "--listen", "127.0.0.1:0", "--data-dir", dataDir}, args...)...)
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start courier dev: %v", err)
	}
	go func() {
		defer close(p.lines)
		for s := bufio.NewScanner(stdout); s.Scan(); {
			p.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("courier dev %d stderr:\n%s", p.cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// next returns the next output line, or false at the end of the output.
func (p *devProcess) next(t *testing.T, what string) (string, bool) {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		return line, ok
	case <-time.After(devWait):
		t.Fatalf("timed out after %v waiting for courier dev to print %s", devWait, what)
		return "", false
	}
}

// waitLine reads output lines until match accepts one, and returns it.
func (p *devProcess) waitLine(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	for {
		line, ok := p.next(t, what)
		if !ok {
			t.Fatalf("courier dev ended its output before printing %s", what)
		}
		if match(line) {
			return line
		}
	}
}

// waitJSON reads what --output json prints.
func (p *devProcess) waitJSON(t *testing.T) devBroker {
	t.Helper()
	var printed devBroker
	var lines []string
	p.waitLine(t, "the JSON address", func(l string) bool {
		lines = append(lines, l)
		return json.Unmarshal([]byte(strings.Join(lines, "\n")), &printed) == nil
	})
	return printed
}

// kill SIGKILLs the process, which gets no chance to write anything out.
func (p *devProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL courier dev: %v", err)
	}
	for _, ok := p.next(t, "the end of its output"); ok; _, ok = p.next(t, "the end of its output") {
	}
	_ = p.cmd.Wait()
}

// stop sends sig, reads the rest of the output, and fails the test unless
// the process exits 0; it returns the lines read.
func (p *devProcess) stop(t *testing.T, sig os.Signal) []string {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v courier dev: %v", sig, err)
	}
	var rest []string
	for {
		line, ok := p.next(t, "the end of its output")
		if !ok {
			break
		}
		rest = append(rest, line)
	}
	if err := p.cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("courier dev exited %d after %v, want 0; stderr:\n%s", exit.ExitCode(), sig, p.stderr.String())
		}
		t.Fatal(err)
	}
	return rest
}
