package kubernetes

// The rules the manifests keep, each a function from a rendered bundle to
// the problems it finds, so that TestChecksCatchBrokenManifests can break a
// manifest and see its rule fail.

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// KEDA's validation logs through controller-runtime, which warns on
	// stderr when nothing took its logs.
	ctrllog.SetLogger(logr.Discard())
}

// A rule returns the problems it finds in a bundle.
type rule func(b *bundle, r *reference) []string

// check runs rule on every bundle of the manifests, each a subtest.
func check(t *testing.T, rule rule) {
	t.Helper()
	m, r := mustLoad(t), mustReference(t)
	for _, b := range m.bundles {
		t.Run(b.dir, func(t *testing.T) {
			for _, p := range rule(b, r) {
				t.Error(p)
			}
		})
	}
}

// The app.kubernetes.io/component of each Deployment says which rules hold
// for it.
const (
	componentLabel    = "app.kubernetes.io/component"
	relayComponent    = "relay"
	consumerComponent = "consumer"
	partitionsKey     = "courierkit.github.io/topic-partitions"
)

// secretNames are the parts of a variable's name that say its value is a
// secret: passwords, tokens and client secrets, and the URLs and headers
// that carry them (a database URL's password, a Redis URL's, a webhook's
// token in its path, an OTLP header's key).
var secretNames = []string{"PASSWORD", "SECRET", "TOKEN", "DATABASE_URL", "REDIS_URL", "WEBHOOK_URL", "HEADER", "CREDENTIAL"}

// notSecret are the parts of a name that say it names where a secret is,
// not the secret: an OAuth token endpoint, a token's file.
var notSecret = []string{"TOKEN_URL", "TOKEN_FILE"}

// isSecret reports whether a variable's name says its value is a secret.
func isSecret(name string) bool {
	has := func(part string) bool { return strings.Contains(name, part) }
	return slices.ContainsFunc(secretNames, has) && !slices.ContainsFunc(notSecret, has)
}

// otherVariables are the variables outside COURIER_* that courier's
// programs read: the Go runtime's, OpenTelemetry's (docs/relay.md) and,
// for AWS_MSK_IAM, the AWS SDK's.
var otherVariables = regexp.MustCompile(`^(GOMEMLIMIT|GOMAXPROCS|GOGC|GODEBUG|OTEL_EXPORTER_OTLP_[A-Z_]+|OTEL_SERVICE_NAME|OTEL_RESOURCE_ATTRIBUTES|OTEL_TRACES_SAMPLER(_ARG)?|AWS_REGION|AWS_PROFILE|AWS_ROLE_ARN|AWS_WEB_IDENTITY_TOKEN_FILE)$`)

// where names a container for a problem.
func where(b *bundle, d *appsv1.Deployment, c *corev1.Container) string {
	return fmt.Sprintf("%s: Deployment %s, container %s", b.dir, d.Name, c.Name)
}

// containers returns the containers of the bundle's Deployments of a
// component ("" for all).
func containers(b *bundle, component string) (out []struct {
	d *appsv1.Deployment
	c *corev1.Container
}) {
	for _, d := range ofType[*appsv1.Deployment](b) {
		if component != "" && d.Spec.Template.Labels[componentLabel] != component {
			continue
		}
		for i := range d.Spec.Template.Spec.Containers {
			out = append(out, struct {
				d *appsv1.Deployment
				c *corev1.Container
			}{d, &d.Spec.Template.Spec.Containers[i]})
		}
	}
	return out
}

// flag returns the value of --name in args (--name=value or --name value).
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// variable returns the env entry called name.
func variable(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// setting returns what a courier command runs with for flag: the flag in
// args, else its COURIER_ variable, as the CLI reads them (a flag wins).
func setting(c *corev1.Container, flagName string) (string, bool) {
	if v, ok := flag(c.Args, flagName); ok {
		return v, true
	}
	e, ok := variable(c, "COURIER_"+strings.ToUpper(strings.ReplaceAll(flagName, "-", "_")))
	return e.Value, ok
}

// listenPorts returns the ports a container's program listens on: those of
// its --…-addr flags and …_ADDR variables.
func listenPorts(c *corev1.Container) map[int32]bool {
	ports := map[int32]bool{}
	add := func(addr string) {
		if _, p, err := net.SplitHostPort(addr); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports[int32(n)] = true
			}
		}
	}
	for i, a := range c.Args {
		name, value, ok := strings.Cut(a, "=")
		if !ok && i+1 < len(c.Args) {
			value = c.Args[i+1]
		}
		if strings.HasPrefix(name, "--") && strings.HasSuffix(name, "-addr") {
			add(value)
		}
	}
	for _, e := range c.Env {
		if strings.HasSuffix(e.Name, "_ADDR") {
			add(e.Value)
		}
	}
	return ports
}

// probeProblems: every container has a liveness probe on /livez and a
// readiness probe on /readyz (a startup probe, if any, on /livez or
// /healthz), each an HTTP GET on a port the container declares and its
// program listens on.
func probeProblems(b *bundle, _ *reference) []string {
	var problems []string
	for _, dc := range containers(b, "") {
		d, c := dc.d, dc.c
		listens := listenPorts(c)
		for _, p := range []struct {
			field    string
			probe    *corev1.Probe
			paths    []string
			optional bool
		}{
			{"livenessProbe", c.LivenessProbe, []string{"/livez"}, false},
			{"readinessProbe", c.ReadinessProbe, []string{"/readyz"}, false},
			{"startupProbe", c.StartupProbe, []string{"/livez", "/healthz"}, true},
		} {
			if p.probe == nil {
				if !p.optional {
					problems = append(problems, fmt.Sprintf("%s: no %s", where(b, d, c), p.field))
				}
				continue
			}
			g := p.probe.HTTPGet
			if g == nil {
				problems = append(problems, fmt.Sprintf("%s: %s is no httpGet on the program's health endpoint", where(b, d, c), p.field))
				continue
			}
			if !slices.Contains(p.paths, g.Path) {
				problems = append(problems, fmt.Sprintf("%s: %s asks %s, want %s", where(b, d, c), p.field, g.Path, strings.Join(p.paths, " or ")))
			}
			port, declared := int32(0), false
			for _, cp := range c.Ports {
				if g.Port.Type == intstr.String && cp.Name == g.Port.StrVal || g.Port.Type == intstr.Int && cp.ContainerPort == g.Port.IntVal {
					port, declared = cp.ContainerPort, true
				}
			}
			switch {
			case !declared:
				problems = append(problems, fmt.Sprintf("%s: %s probes port %s, which the container does not declare in ports", where(b, d, c), p.field, g.Port.String()))
			case !listens[port]:
				problems = append(problems, fmt.Sprintf("%s: %s probes port %d, but the program listens on %v (its --…-addr flags and …_ADDR variables)",
					where(b, d, c), p.field, port, slices.Sorted(maps.Keys(listens))))
			}
		}
	}
	return problems
}

// resourceProblems: every container requests and limits CPU and memory,
// each request at most its limit.
func resourceProblems(b *bundle, _ *reference) []string {
	var problems []string
	for _, dc := range containers(b, "") {
		res := dc.c.Resources
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := res.Requests[name]
			limit, hasLimit := res.Limits[name]
			switch {
			case !hasReq || req.IsZero():
				problems = append(problems, fmt.Sprintf("%s: no %s request", where(b, dc.d, dc.c), name))
			case !hasLimit || limit.IsZero():
				problems = append(problems, fmt.Sprintf("%s: no %s limit", where(b, dc.d, dc.c), name))
			case req.Cmp(limit) > 0:
				problems = append(problems, fmt.Sprintf("%s: the %s request %s is above its limit %s", where(b, dc.d, dc.c), name, req.String(), limit.String()))
			}
		}
	}
	return problems
}

// inlineSecretProblems: every variable whose name says it holds a secret
// takes it from a Secret (valueFrom.secretKeyRef); no container loads
// variables wholesale (envFrom, which these checks cannot see into); no
// Secret of the manifests holds a value.
func inlineSecretProblems(b *bundle, _ *reference) []string {
	var problems []string
	for _, dc := range containers(b, "") {
		if len(dc.c.EnvFrom) > 0 {
			problems = append(problems, fmt.Sprintf("%s: envFrom hides the variables' names from these checks; list them in env", where(b, dc.d, dc.c)))
		}
		for _, e := range dc.c.Env {
			if !isSecret(e.Name) {
				continue
			}
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				problems = append(problems, fmt.Sprintf("%s: %s holds a secret: take it from a Secret (valueFrom.secretKeyRef), never inline", where(b, dc.d, dc.c), e.Name))
			}
		}
	}
	for _, s := range ofType[*corev1.Secret](b) {
		if len(s.Data) > 0 || len(s.StringData) > 0 {
			problems = append(problems, fmt.Sprintf("%s: Secret %s holds values; create it with kubectl create secret (docs/kubernetes.md) instead", b.dir, s.Name))
		}
	}
	return problems
}

// guideSecretProblems: every Secret key the manifests read is one that
// docs/kubernetes.md's kubectl create secret generic commands create (an
// optional one is at least named there).
func guideSecretProblems(b *bundle, r *reference) []string {
	var problems []string
	need := func(what, name, key string, optional bool) {
		if r.guideSecret[name][key] || optional && strings.Contains(r.guide, key) {
			return
		}
		if _, ok := r.guideSecret[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: %s reads the Secret %s, which no kubectl create secret generic %s of docs/kubernetes.md creates", b.dir, what, name, name))
			return
		}
		problems = append(problems, fmt.Sprintf("%s: %s reads the key %s of the Secret %s, which docs/kubernetes.md's kubectl create secret generic %s does not create", b.dir, what, key, name, name))
	}
	for _, dc := range containers(b, "") {
		for _, e := range dc.c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				need(where(b, dc.d, dc.c)+", "+e.Name, ref.Name, ref.Key, ref.Optional != nil && *ref.Optional)
			}
		}
	}
	for _, ta := range ofType[*kedav1alpha1.TriggerAuthentication](b) {
		for _, ref := range ta.Spec.SecretTargetRef {
			need("TriggerAuthentication "+ta.Name+", "+ref.Parameter, ref.Name, ref.Key, false)
		}
	}
	return problems
}

// grace is a pod's terminationGracePeriodSeconds, Kubernetes' 30 s when unset.
func grace(d *appsv1.Deployment) time.Duration {
	if s := d.Spec.Template.Spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return 30 * time.Second
}

// relayGraceProblems: a relay's terminationGracePeriodSeconds exceeds its
// --shutdown-timeout (set in the manifest) plus, with a webhook, the
// webhook's drain (as long again, at most 1m): docs/relay.md, "Stopping".
func relayGraceProblems(b *bundle, r *reference) []string {
	var problems []string
	for _, dc := range containers(b, relayComponent) {
		value, ok := setting(dc.c, "shutdown-timeout")
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: set --shutdown-timeout (or COURIER_SHUTDOWN_TIMEOUT) in the manifest, so that its grace period is derived from it, not from a default (%v)", where(b, dc.d, dc.c), r.relayShutdown))
			continue
		}
		shutdown, err := time.ParseDuration(value)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: --shutdown-timeout %q is not a duration", where(b, dc.d, dc.c), value))
			continue
		}
		need, because := shutdown, fmt.Sprintf("--shutdown-timeout %v", shutdown)
		if _, webhook := setting(dc.c, "webhook-url"); webhook {
			drain := min(shutdown, r.webhookDrainMax)
			need += drain
			because += fmt.Sprintf(" + the webhook's drain %v", drain)
		}
		if g := grace(dc.d); g <= need {
			problems = append(problems, fmt.Sprintf("%s: terminationGracePeriodSeconds %v must exceed %s = %v, or Kubernetes kills the relay before it stops", where(b, dc.d, dc.c), g, because, need))
		}
	}
	return problems
}

// consumerGraceProblems: a consumer's terminationGracePeriodSeconds exceeds
// its ShutdownTimeout (docs/consumer.md's default; --shutdown-timeout if it
// passes one) plus Sarama's Producer.Timeout, which bounds a dead-letter
// send in flight.
func consumerGraceProblems(b *bundle, r *reference) []string {
	var problems []string
	for _, dc := range containers(b, consumerComponent) {
		shutdown := r.consumerShutdown
		if v, ok := flag(dc.c.Args, "shutdown-timeout"); ok {
			var err error
			if shutdown, err = time.ParseDuration(v); err != nil {
				problems = append(problems, fmt.Sprintf("%s: --shutdown-timeout %q is not a duration", where(b, dc.d, dc.c), v))
				continue
			}
		}
		if need, g := shutdown+saramaProducerTimeout, grace(dc.d); g <= need {
			problems = append(problems, fmt.Sprintf("%s: terminationGracePeriodSeconds %v must exceed the ShutdownTimeout %v + Sarama's Producer.Timeout %v = %v",
				where(b, dc.d, dc.c), g, shutdown, saramaProducerTimeout, need))
		}
	}
	return problems
}

// componentProblems: every Deployment is a relay or a consumer (so that
// the rules of one hold for it), and its selector selects its pods.
func componentProblems(b *bundle, _ *reference) []string {
	var problems []string
	for _, d := range ofType[*appsv1.Deployment](b) {
		if c := d.Spec.Template.Labels[componentLabel]; c != relayComponent && c != consumerComponent {
			problems = append(problems, fmt.Sprintf("%s: Deployment %s: its pods' label %s is %q; want %s or %s, whose rules these tests check", b.dir, d.Name, componentLabel, c, relayComponent, consumerComponent))
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			problems = append(problems, fmt.Sprintf("%s: Deployment %s: its selector does not select its own pods", b.dir, d.Name))
		}
	}
	return problems
}

// disruptionProblems: every Deployment has one PodDisruptionBudget, whose
// selector matches its pods' labels and no other Deployment's, and which
// lets one pod be evicted (a budget that allows none blocks every node
// drain).
func disruptionProblems(b *bundle, _ *reference) []string {
	var problems []string
	deployments := ofType[*appsv1.Deployment](b)
	budgets := map[string]int{}
	for _, pdb := range ofType[*policyv1.PodDisruptionBudget](b) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			problems = append(problems, fmt.Sprintf("%s: PodDisruptionBudget %s has no selector", b.dir, pdb.Name))
			continue
		}
		var selected []*appsv1.Deployment
		for _, d := range deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				selected = append(selected, d)
			}
		}
		if len(selected) != 1 {
			problems = append(problems, fmt.Sprintf("%s: PodDisruptionBudget %s selects the pods of %d Deployments (%s); want exactly one", b.dir, pdb.Name, len(selected), sel))
			continue
		}
		d := selected[0]
		budgets[d.Name]++
		least := replicasAtLeast(b, d)
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			if n, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(least), true); err != nil || n < 1 {
				problems = append(problems, fmt.Sprintf("%s: PodDisruptionBudget %s: maxUnavailable %s lets no pod of %s be evicted", b.dir, pdb.Name, pdb.Spec.MaxUnavailable.String(), d.Name))
			}
		case pdb.Spec.MinAvailable != nil:
			if n, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(least), true); err != nil || int32(n) >= least {
				problems = append(problems, fmt.Sprintf("%s: PodDisruptionBudget %s: minAvailable %s of %d pods of %s lets none be evicted", b.dir, pdb.Name, pdb.Spec.MinAvailable.String(), least, d.Name))
			}
		default:
			problems = append(problems, fmt.Sprintf("%s: PodDisruptionBudget %s sets neither maxUnavailable nor minAvailable", b.dir, pdb.Name))
		}
	}
	for _, d := range deployments {
		if budgets[d.Name] != 1 {
			problems = append(problems, fmt.Sprintf("%s: Deployment %s has %d PodDisruptionBudgets; want one", b.dir, d.Name, budgets[d.Name]))
		}
	}
	return problems
}

// replicasAtLeast is the fewest pods a Deployment runs: its replicas, or
// the minReplicaCount of the ScaledObject that scales it.
func replicasAtLeast(b *bundle, d *appsv1.Deployment) int32 {
	for _, so := range ofType[*kedav1alpha1.ScaledObject](b) {
		if so.Spec.ScaleTargetRef != nil && so.Spec.ScaleTargetRef.Name == d.Name && so.Spec.MinReplicaCount != nil {
			return *so.Spec.MinReplicaCount
		}
	}
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

// scaledObjectProblems: every consumer Deployment is scaled by a
// ScaledObject, which names it, runs at least one replica (the retry tiers
// need a member) and at most the partitions its annotation states, owns
// the replica count alone, and whose kafka triggers read only parameters
// KEDA's kafka scaler has, from the place it reads them (metadata or the
// TriggerAuthentication), for the consumer's own group, topic and brokers.
func scaledObjectProblems(b *bundle, r *reference) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, b.dir+": "+fmt.Sprintf(format, args...)) }
	deployments := map[string]*appsv1.Deployment{}
	for _, d := range ofType[*appsv1.Deployment](b) {
		deployments[d.Name] = d
	}
	auths := map[string]*kedav1alpha1.TriggerAuthentication{}
	for _, ta := range ofType[*kedav1alpha1.TriggerAuthentication](b) {
		auths[ta.Name] = ta
		if _, err := ta.ValidateCreate(nil); err != nil {
			add("TriggerAuthentication %s: KEDA's webhook refuses it: %v", ta.Name, err)
		}
		for _, ref := range ta.Spec.SecretTargetRef {
			if p, ok := r.kafkaScaler[ref.Parameter]; !ok || !p.fromAuth {
				add("TriggerAuthentication %s: KEDA's kafka scaler reads no authentication parameter %q", ta.Name, ref.Parameter)
			}
		}
	}
	scaled := map[string]bool{}
	for _, so := range ofType[*kedav1alpha1.ScaledObject](b) {
		ref := so.Spec.ScaleTargetRef
		if ref == nil {
			add("ScaledObject %s has no scaleTargetRef", so.Name)
			continue
		}
		d, ok := deployments[ref.Name]
		if !ok || ref.Kind != "" && ref.Kind != "Deployment" || ref.APIVersion != "" && ref.APIVersion != "apps/v1" {
			add("ScaledObject %s scales %s %s %s, which is no Deployment of %s", so.Name, ref.APIVersion, ref.Kind, ref.Name, b.dir)
			continue
		}
		scaled[d.Name] = true
		if d.Spec.Replicas != nil {
			add("Deployment %s sets replicas, which every kubectl apply resets against the ScaledObject %s: leave them to KEDA", d.Name, so.Name)
		}
		if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
			add("ScaledObject %s: %v", so.Name, err)
		}
		if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
			add("ScaledObject %s: %v", so.Name, err)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			add("ScaledObject %s: minReplicaCount must be 1 or more: records waiting in the retry tiers are handled only by a running member", so.Name)
		}
		partitions, err := strconv.Atoi(so.Annotations[partitionsKey])
		switch {
		case err != nil || partitions < 1:
			add("ScaledObject %s: state the partitions of its topic in the annotation %s (a number), for maxReplicaCount to be checked against", so.Name, partitionsKey)
		case so.Spec.MaxReplicaCount == nil:
			add("ScaledObject %s: set maxReplicaCount, at most the %d partitions of its topic", so.Name, partitions)
		case int(*so.Spec.MaxReplicaCount) > partitions:
			add("ScaledObject %s: maxReplicaCount %d is more than the %d partitions of its topic: members beyond them get none and sit idle", so.Name, *so.Spec.MaxReplicaCount, partitions)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "kafka" {
				add("ScaledObject %s: trigger %q is a %s trigger; these checks know the kafka one", so.Name, tr.Name, tr.Type)
				continue
			}
			problems = append(problems, kafkaTriggerProblems(b, r, so, tr, d, auths)...)
		}
	}
	for _, dc := range containers(b, consumerComponent) {
		if !scaled[dc.d.Name] {
			add("consumer Deployment %s has no ScaledObject", dc.d.Name)
		}
	}
	return problems
}

// kafkaTriggerProblems checks one kafka trigger of so against KEDA's kafka
// scaler and against the consumer d it scales.
func kafkaTriggerProblems(b *bundle, r *reference, so *kedav1alpha1.ScaledObject, tr kedav1alpha1.ScaleTriggers, d *appsv1.Deployment, auths map[string]*kedav1alpha1.TriggerAuthentication) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: ScaledObject %s, trigger %q: ", b.dir, so.Name, tr.Name)+fmt.Sprintf(format, args...))
	}
	given := map[string]bool{}
	for key, value := range tr.Metadata {
		given[key] = true
		p, ok := r.kafkaScaler[key]
		switch {
		case !ok:
			add("KEDA's kafka scaler reads no %q", key)
		case !p.fromMetadata:
			add("KEDA's kafka scaler reads %q from a TriggerAuthentication (a Secret), not from the trigger's metadata", key)
		case p.enum != nil && !slices.Contains(p.enum, value):
			add("%s is %q; KEDA's kafka scaler takes %s", key, value, strings.Join(p.enum, ", "))
		}
	}
	var auth *kedav1alpha1.TriggerAuthentication
	if tr.AuthenticationRef != nil {
		if auth = auths[tr.AuthenticationRef.Name]; auth == nil || tr.AuthenticationRef.Kind != "" && tr.AuthenticationRef.Kind != "TriggerAuthentication" {
			add("authenticationRef names %s %s, which is no TriggerAuthentication of %s", tr.AuthenticationRef.Kind, tr.AuthenticationRef.Name, b.dir)
		} else {
			for _, ref := range auth.Spec.SecretTargetRef {
				given[ref.Parameter] = true
			}
		}
	}
	for name, p := range r.kafkaScaler {
		if p.required && !given[name] {
			add("sets no %s, which KEDA's kafka scaler requires", name)
		}
	}
	if _, err := strconv.ParseInt(tr.Metadata["lagThreshold"], 10, 64); err != nil {
		add("lagThreshold %q is not a number", tr.Metadata["lagThreshold"])
	}
	if sasl := tr.Metadata["sasl"]; sasl != "" && sasl != "none" {
		password := auth != nil && slices.ContainsFunc(auth.Spec.SecretTargetRef, func(s kedav1alpha1.AuthSecretTargetRef) bool { return s.Parameter == "password" })
		if !password && (auth == nil || auth.Spec.PodIdentity == nil) {
			add("signs in with %s, but no TriggerAuthentication gives it a password (or a pod identity)", sasl)
		}
	}
	c := &d.Spec.Template.Spec.Containers[0]
	if group, _ := flag(c.Args, "group"); tr.Metadata["consumerGroup"] != group {
		add("consumerGroup %q is not the group %s consumes in (--group %q)", tr.Metadata["consumerGroup"], d.Name, group)
	}
	if topic, _ := flag(c.Args, "topic"); tr.Metadata["topic"] != topic {
		add("topic %q is not the topic %s consumes (--topic %q)", tr.Metadata["topic"], d.Name, topic)
	}
	brokers, _ := variable(c, "COURIER_BROKERS")
	if got, want := hosts(tr.Metadata["bootstrapServers"]), hosts(brokers.Value); !slices.Equal(got, want) {
		add("bootstrapServers are on %v, but %s's COURIER_BROKERS on %v: KEDA must read the lag of the consumer's own cluster", got, d.Name, want)
	}
	return problems
}

// hosts returns the sorted hosts of a comma-separated list of addresses.
func hosts(addrs string) []string {
	var out []string
	for a := range strings.SplitSeq(addrs, ",") {
		if h, _, err := net.SplitHostPort(strings.TrimSpace(a)); err == nil {
			out = append(out, h)
		} else {
			out = append(out, strings.TrimSpace(a))
		}
	}
	slices.Sort(out)
	return out
}

// relayEnvironmentProblems: a relay container runs courier relay with
// flags courier relay has, and sets only variables courier relay reads
// (docs/cli-reference.md, generated from --help) or the Go runtime's and
// OpenTelemetry's, each value of the type of its default; its SASL
// mechanism is one --sasl-mechanism takes.
func relayEnvironmentProblems(b *bundle, r *reference) []string {
	var problems []string
	for _, dc := range containers(b, relayComponent) {
		c, at := dc.c, where(b, dc.d, dc.c)
		if len(c.Command) > 0 || len(c.Args) == 0 || c.Args[0] != "relay" {
			problems = append(problems, fmt.Sprintf("%s: runs %q %q; want the image's courier with args [relay, …]", at, c.Command, c.Args))
			continue
		}
		for _, a := range c.Args[1:] {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				if !r.relayFlags[name] {
					problems = append(problems, fmt.Sprintf("%s: courier relay has no flag --%s (docs/cli-reference.md)", at, name))
				}
			}
		}
		for _, e := range c.Env {
			def, known := r.relayVariables[e.Name]
			switch {
			case !strings.HasPrefix(e.Name, "COURIER_"):
				if !otherVariables.MatchString(e.Name) {
					problems = append(problems, fmt.Sprintf("%s: courier relay reads no variable %s: only COURIER_* (docs/cli-reference.md), the Go runtime's, OpenTelemetry's and the AWS SDK's", at, e.Name))
				}
				continue
			case !known && pending[e.Name]:
				continue // logged by TestRelayEnvironmentIsWhatCourierReads
			case !known:
				problems = append(problems, fmt.Sprintf("%s: courier relay reads no variable %s (docs/cli-reference.md's table lists what it reads)", at, e.Name))
				continue
			}
			if e.ValueFrom != nil {
				continue
			}
			if err := sameType(e.Value, def); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s=%q: %v", at, e.Name, e.Value, err))
			}
		}
		if m, ok := setting(c, "sasl-mechanism"); ok && m != "" && !slices.ContainsFunc(r.mechanisms, func(s string) bool { return strings.EqualFold(s, m) }) && !pending[m] {
			problems = append(problems, fmt.Sprintf("%s: --sasl-mechanism %s is none of %s", at, m, strings.Join(r.mechanisms, ", ")))
		}
	}
	return problems
}

// sameType reports whether value parses as its default does: a duration,
// a boolean or a number.
func sameType(value, def string) error {
	if _, err := time.ParseDuration(def); err == nil {
		if _, err := time.ParseDuration(value); err != nil {
			return fmt.Errorf("want a duration, as its default %s", def)
		}
	}
	if _, err := strconv.ParseBool(def); err == nil {
		if _, err := strconv.ParseBool(value); err != nil {
			return fmt.Errorf("want true or false, as its default %s", def)
		}
	}
	if _, err := strconv.Atoi(def); err == nil {
		if _, err := strconv.Atoi(value); err != nil {
			return fmt.Errorf("want a number, as its default %s", def)
		}
	}
	return nil
}

// consumerEnvironmentProblems: a consumer container (examples/payouts)
// passes only flags payouts has and sets only variables it reads.
func consumerEnvironmentProblems(b *bundle, r *reference) []string {
	var problems []string
	for _, dc := range containers(b, consumerComponent) {
		at := where(b, dc.d, dc.c)
		for _, a := range dc.c.Args {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: argument %q is no flag; write --name=value", at, a))
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if !r.payoutsFlags[name] && !pendingPayoutsFlags[name] {
				problems = append(problems, fmt.Sprintf("%s: examples/payouts has no flag --%s", at, name))
			}
		}
		for _, e := range dc.c.Env {
			if !r.payoutsVariables[e.Name] && !otherVariables.MatchString(e.Name) {
				problems = append(problems, fmt.Sprintf("%s: examples/payouts reads no variable %s (it reads %v)", at, e.Name, slices.Sorted(maps.Keys(r.payoutsVariables))))
			}
		}
	}
	return problems
}

// guidePathProblems: every deploy/kubernetes path docs/kubernetes.md names exists.
func guidePathProblems(r *reference) []string {
	var problems []string
	for _, p := range regexp.MustCompile(`deploy/kubernetes/[A-Za-z0-9._/-]*[A-Za-z0-9_]`).FindAllString(r.guide, -1) {
		if _, err := os.Stat(filepath.Join(repo, p)); err != nil {
			problems = append(problems, fmt.Sprintf("docs/kubernetes.md names %s, which does not exist", p))
		}
	}
	return problems
}

// roleARN is an IAM role's ARN, as IRSA's annotation takes it.
var roleARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$`)

const irsaAnnotation = "eks.amazonaws.com/role-arn"

// identityProblems: every Deployment runs as a ServiceAccount of its
// bundle; an IRSA annotation holds an IAM role's ARN; and a relay that
// signs in to MSK with IAM runs as a ServiceAccount with that annotation
// and names its region.
func identityProblems(b *bundle, _ *reference) []string {
	var problems []string
	accounts := map[string]*corev1.ServiceAccount{}
	for _, sa := range ofType[*corev1.ServiceAccount](b) {
		accounts[sa.Name] = sa
		if arn, ok := sa.Annotations[irsaAnnotation]; ok && !roleARN.MatchString(arn) {
			problems = append(problems, fmt.Sprintf("%s: ServiceAccount %s: %s %q is not an IAM role's ARN (arn:aws:iam::<account>:role/<name>)", b.dir, sa.Name, irsaAnnotation, arn))
		}
	}
	for _, dc := range containers(b, "") {
		name := dc.d.Spec.Template.Spec.ServiceAccountName
		sa, ok := accounts[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: runs as the ServiceAccount %q, which %s does not hold", where(b, dc.d, dc.c), name, b.dir))
			continue
		}
		if m, _ := setting(dc.c, "sasl-mechanism"); !strings.EqualFold(m, "AWS_MSK_IAM") {
			continue
		}
		if _, ok := sa.Annotations[irsaAnnotation]; !ok {
			problems = append(problems, fmt.Sprintf("%s: signs in with AWS_MSK_IAM, but its ServiceAccount %s has no %s annotation (IRSA) to give it a role", where(b, dc.d, dc.c), sa.Name, irsaAnnotation))
		}
		_, region := setting(dc.c, "aws-region")
		if _, ok := variable(dc.c, "AWS_REGION"); !region && !ok {
			problems = append(problems, fmt.Sprintf("%s: signs in with AWS_MSK_IAM but names no region (COURIER_AWS_REGION)", where(b, dc.d, dc.c)))
		}
	}
	return problems
}

var (
	docReference = regexp.MustCompile(`docs/([a-z0-9-]+\.md)(?:#([a-z0-9-]+))?`)
	headingLine  = regexp.MustCompile(`(?m)^#{1,6}\s+(.*?)\s*$`)
	notInSlug    = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// docReferenceProblems: every docs/….md#anchor the manifests' comments
// name is a page of docs/ with a heading of that anchor (GitHub's: lower
// case, punctuation dropped, spaces as hyphens).
func docReferenceProblems(files map[string][]byte) []string {
	var problems []string
	anchors := map[string]map[string]bool{}
	for f, data := range files {
		for _, m := range docReference.FindAllStringSubmatch(string(data), -1) {
			page, anchor := m[1], m[2]
			if _, ok := anchors[page]; !ok {
				doc, err := os.ReadFile(filepath.Join(repo, "docs", page))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s names docs/%s, which does not exist", f, page))
					anchors[page] = nil
					continue
				}
				anchors[page] = map[string]bool{}
				for _, h := range headingLine.FindAllStringSubmatch(string(doc), -1) {
					slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(h[1]), ""), " ", "-")
					anchors[page][slug] = true
				}
			}
			if anchor != "" && anchors[page] != nil && !anchors[page][anchor] {
				problems = append(problems, fmt.Sprintf("%s names docs/%s#%s, a heading the page does not have", f, page, anchor))
			}
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}
