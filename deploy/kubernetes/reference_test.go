package kubernetes

// What the manifests are checked against, read from where it is stated:
// courier's CLI reference (generated from --help), the consumer's guide,
// the payouts example's flags, KEDA's Kafka scaler and the Kubernetes guide.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// repo is the repository's top directory, from this package.
const repo = "../.."

// saramaProducerTimeout is Sarama's Producer.Timeout (sarama.NewConfig),
// which bounds a dead-letter send already in flight when a consumer stops
// (docs/consumer.md, "Limits to know"); courier's consumer keeps it.
const saramaProducerTimeout = 10 * time.Second

// pending are the names and values the Kafka sign-in work of issue 31 adds
// to courier relay (COURIER_AWS_REGION, --sasl-mechanism AWS_MSK_IAM), which
// relay-msk-iam uses: until docs/cli-reference.md lists them they are
// logged, not failed; from then on they are checked like the others.
var pending = map[string]bool{"COURIER_AWS_REGION": true, "AWS_MSK_IAM": true}

// pendingPayoutsFlags are the flags of examples/payouts another change of
// issue 31 adds (--health-addr, serving /livez and /readyz): until main.go
// declares them they are logged, not failed.
var pendingPayoutsFlags = map[string]bool{"health-addr": true}

// reference is what the manifests must agree with.
type reference struct {
	relayVariables  map[string]string // COURIER_* variables of courier relay → their default
	relayFlags      map[string]bool   // the flags of courier relay
	mechanisms      []string          // the values --sasl-mechanism takes
	relayShutdown   time.Duration     // --shutdown-timeout's default
	webhookDrainMax time.Duration     // the most the webhook's drain takes after it

	consumerShutdown time.Duration   // consumer.Config.ShutdownTimeout's default
	payoutsFlags     map[string]bool // the flags of examples/payouts
	payoutsVariables map[string]bool // the variables examples/payouts reads

	kafkaScaler map[string]kedaParameter // the parameters KEDA's kafka trigger reads, by name
	guide       string                   // docs/kubernetes.md
	guideSecret map[string]map[string]bool
}

// A kedaParameter is one field of KEDA's kafka scaler metadata, from its
// `keda:"name=…,order=…"` tag.
type kedaParameter struct {
	fromMetadata, fromAuth bool     // order=triggerMetadata, order=authParams
	required               bool     // neither optional nor with a default
	enum                   []string // the values it takes, if listed
}

var references = sync.OnceValues(readReferences)

func mustReference(t *testing.T) *reference {
	t.Helper()
	r, err := references()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readReferences() (*reference, error) {
	r := &reference{}
	var errs []error
	for _, read := range []func(*reference) error{readCLIReference, readConsumerGuide, readPayouts, readKafkaScaler, readGuide} {
		errs = append(errs, read(r))
	}
	return r, errors.Join(errs...)
}

var (
	variableRow  = regexp.MustCompile("^\\| `(COURIER_[A-Z0-9_]+)` \\| (?:`--([a-z0-9-]+)`|\\(none\\)) \\| ([^|]+) \\| (.*) \\|$")
	helpFlag     = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: \w+)?\s{2,}(.*)$`)
	drainMax     = regexp.MustCompile(`as long again \(at most (\w+)\)`)
	mechanism    = regexp.MustCompile(`[A-Z][A-Z0-9_]*(?:-[A-Z0-9_]+)*`)
	aside        = regexp.MustCompile(`\([^)]*\)`)
	shutdownRow  = regexp.MustCompile("(?m)^\\| `ShutdownTimeout` \\| ([^|]+) \\|")
	payoutsFlag  = regexp.MustCompile(`fs\.\w+\((?:[^,()]+, )?"([a-z0-9-]+)"`)
	payoutsEnv   = regexp.MustCompile(`(?:envOr\(getenv, |getenv\()"([A-Z0-9_]+)"`)
	kedaTag      = regexp.MustCompile("`keda:\"([^\"]+)\"`")
	createSecret = regexp.MustCompile(`kubectl create secret generic (\S+)(.*)`)
	secretKey    = regexp.MustCompile(`--from-(?:literal|file)=([^=\s]+)=`)
)

// readCLIReference reads docs/cli-reference.md: its table of environment
// variables (those of courier relay) and courier relay's --help.
func readCLIReference(r *reference) error {
	data, err := os.ReadFile(filepath.Join(repo, "docs", "cli-reference.md"))
	if err != nil {
		return err
	}
	r.relayVariables, r.relayFlags = map[string]string{}, map[string]bool{}
	section := ""
	var shutdownHelp, mechanismHelp string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\n")
		if s, ok := strings.CutPrefix(line, "## "); ok {
			section = s
			continue
		}
		if m := variableRow.FindStringSubmatch(line); m != nil && section == "Environment variables" {
			for c := range strings.SplitSeq(m[3], ",") {
				if strings.TrimSpace(c) == "relay" {
					r.relayVariables[m[1]] = strings.Trim(m[4], "`")
				}
			}
		}
		if m := helpFlag.FindStringSubmatch(line); m != nil && section == "courier relay" {
			r.relayFlags[m[1]] = true
			switch m[1] {
			case "shutdown-timeout":
				shutdownHelp = m[2]
			case "sasl-mechanism":
				mechanismHelp = m[2]
			}
		}
	}
	if len(r.relayVariables) < 20 || len(r.relayFlags) < 20 {
		return fmt.Errorf("docs/cli-reference.md: found %d variables and %d flags of courier relay; has the table or the --help section moved?", len(r.relayVariables), len(r.relayFlags))
	}
	def, ok := r.relayVariables["COURIER_SHUTDOWN_TIMEOUT"]
	if r.relayShutdown, err = time.ParseDuration(def); !ok || err != nil {
		return fmt.Errorf("docs/cli-reference.md: COURIER_SHUTDOWN_TIMEOUT's default %q is not a duration", def)
	}
	m := drainMax.FindStringSubmatch(shutdownHelp)
	if m == nil {
		return fmt.Errorf("docs/cli-reference.md: courier relay's --shutdown-timeout no longer says how long the webhook's drain may take (\"as long again (at most …)\"): %q; update relayGraceProblems", shutdownHelp)
	}
	if r.webhookDrainMax, err = time.ParseDuration(m[1]); err != nil {
		return fmt.Errorf("docs/cli-reference.md: the webhook's drain is at most %q: %w", m[1], err)
	}
	mechanismHelp, _, _ = strings.Cut(mechanismHelp, "; empty")
	mechanismHelp = aside.ReplaceAllString(strings.TrimPrefix(mechanismHelp, "SASL mechanism:"), "")
	r.mechanisms = mechanism.FindAllString(mechanismHelp, -1)
	if len(r.mechanisms) < 3 {
		return fmt.Errorf("docs/cli-reference.md: --sasl-mechanism lists %q; has its help changed?", r.mechanisms)
	}
	return nil
}

// readConsumerGuide reads consumer.Config.ShutdownTimeout's default from
// the configuration table of docs/consumer.md.
func readConsumerGuide(r *reference) error {
	data, err := os.ReadFile(filepath.Join(repo, "docs", "consumer.md"))
	if err != nil {
		return err
	}
	m := shutdownRow.FindStringSubmatch(string(data))
	if m == nil {
		return errors.New("docs/consumer.md has no row for ShutdownTimeout in its configuration table")
	}
	if r.consumerShutdown, err = time.ParseDuration(strings.ReplaceAll(strings.TrimSpace(m[1]), " ", "")); err != nil {
		return fmt.Errorf("docs/consumer.md: ShutdownTimeout's default %q: %w", m[1], err)
	}
	return nil
}

// readPayouts reads the flags and the variables of examples/payouts.
func readPayouts(r *reference) error {
	data, err := os.ReadFile(filepath.Join(repo, "examples", "payouts", "main.go"))
	if err != nil {
		return err
	}
	r.payoutsFlags, r.payoutsVariables = map[string]bool{}, map[string]bool{}
	for _, m := range payoutsFlag.FindAllStringSubmatch(string(data), -1) {
		r.payoutsFlags[m[1]] = true
	}
	for _, m := range payoutsEnv.FindAllStringSubmatch(string(data), -1) {
		r.payoutsVariables[m[1]] = true
	}
	if !r.payoutsFlags["group"] || !r.payoutsFlags["topic"] || !r.payoutsVariables["COURIER_BROKERS"] {
		return fmt.Errorf("examples/payouts/main.go: found the flags %v and the variables %v, not --group, --topic and COURIER_BROKERS; has its flag set changed?", r.payoutsFlags, r.payoutsVariables)
	}
	return nil
}

// readKafkaScaler reads the parameters of KEDA's kafka trigger from the
// tags of kafkaMetadata in pkg/scalers/kafka_scaler.go, in the KEDA module
// these tests build with.
func readKafkaScaler(r *reference) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
	if err != nil {
		return fmt.Errorf("go list -m github.com/kedacore/keda/v2: %w", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "pkg", "scalers", "kafka_scaler.go")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	r.kafkaScaler = map[string]kedaParameter{}
	for _, m := range kedaTag.FindAllStringSubmatch(string(data), -1) {
		var name string
		p := kedaParameter{required: true}
		for field := range strings.SplitSeq(m[1], ",") {
			key, value, _ := strings.Cut(field, "=")
			switch key {
			case "name":
				name = value
			case "order":
				p.fromMetadata = strings.Contains(value, "triggerMetadata")
				p.fromAuth = strings.Contains(value, "authParams")
			case "optional", "default":
				p.required = false
			case "enum":
				p.enum = strings.Split(value, ";")
			}
		}
		r.kafkaScaler[name] = p
	}
	for _, want := range []string{"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "offsetResetPolicy", "sasl", "username", "password"} {
		if _, ok := r.kafkaScaler[want]; !ok {
			return fmt.Errorf("%s: found no parameter %s among %d; has KEDA's kafka scaler changed?", file, want, len(r.kafkaScaler))
		}
	}
	return nil
}

// readGuide reads docs/kubernetes.md and the Secrets its kubectl create
// secret generic commands create, with their keys.
func readGuide(r *reference) error {
	data, err := os.ReadFile(filepath.Join(repo, "docs", "kubernetes.md"))
	if err != nil {
		return err
	}
	r.guide = string(data)
	r.guideSecret = map[string]map[string]bool{}
	joined := strings.ReplaceAll(r.guide, "\\\n", " ") // a command continued over lines
	for _, m := range createSecret.FindAllStringSubmatch(joined, -1) {
		keys := r.guideSecret[m[1]]
		if keys == nil {
			keys = map[string]bool{}
			r.guideSecret[m[1]] = keys
		}
		for _, k := range secretKey.FindAllStringSubmatch(m[2], -1) {
			keys[k[1]] = true
		}
	}
	if len(r.guideSecret) == 0 {
		return errors.New("docs/kubernetes.md has no kubectl create secret generic command")
	}
	return nil
}
