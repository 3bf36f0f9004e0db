package kubernetes

import (
	"os"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestEveryContainerIsProbedOnItsDeclaredPorts: liveness on /livez,
// readiness on /readyz, startup on /livez, each on a declared port that the
// program listens on (--metrics-addr, --health-addr).
func TestEveryContainerIsProbedOnItsDeclaredPorts(t *testing.T) {
	check(t, probeProblems)
}

// TestEveryContainerHasRequestsAndLimits: CPU and memory, requested and
// limited, each request at most its limit.
func TestEveryContainerHasRequestsAndLimits(t *testing.T) {
	check(t, resourceProblems)
}

// TestNoSecretIsInline: passwords, tokens, client secrets and the URLs
// and headers that carry them come from a Secret (secretKeyRef).
func TestNoSecretIsInline(t *testing.T) {
	check(t, inlineSecretProblems)
}

// TestSecretNames: which names say their value is a secret.
func TestSecretNames(t *testing.T) {
	for name, want := range map[string]bool{
		"COURIER_DATABASE_URL": true, "COURIER_SASL_PASSWORD": true, "COURIER_SASL_OAUTH_CLIENT_SECRET": true,
		"COURIER_WEBHOOK_URL": true, "COURIER_WEBHOOK_HEADER": true, "OTEL_EXPORTER_OTLP_HEADERS": true, "COURIER_REDIS_URL": true,
		"COURIER_SASL_OAUTH_TOKEN_URL": false, "AWS_WEB_IDENTITY_TOKEN_FILE": false, "COURIER_SASL_USER": false, "COURIER_BROKERS": false,
	} {
		if got := isSecret(name); got != want {
			t.Errorf("isSecret(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestEverySecretIsCreatedByTheGuide: each Secret key a manifest reads is
// created by the kubectl create secret commands of docs/kubernetes.md.
func TestEverySecretIsCreatedByTheGuide(t *testing.T) {
	check(t, guideSecretProblems)
}

// TestRelayGraceExceedsItsShutdown: terminationGracePeriodSeconds >
// --shutdown-timeout + the webhook's drain, read from the manifest.
func TestRelayGraceExceedsItsShutdown(t *testing.T) {
	check(t, relayGraceProblems)
}

// TestConsumerGraceCoversItsShutdown: terminationGracePeriodSeconds >
// ShutdownTimeout + Sarama's Producer.Timeout.
func TestConsumerGraceCoversItsShutdown(t *testing.T) {
	check(t, consumerGraceProblems)
}

// TestEveryDeploymentIsARelayOrAConsumer: the component label that picks
// the rules, and a selector that selects the Deployment's pods.
func TestEveryDeploymentIsARelayOrAConsumer(t *testing.T) {
	check(t, componentProblems)
}

// TestDisruptionBudgetsSelectTheirDeployments: one PodDisruptionBudget per
// Deployment, selecting its pods, letting one go at a time.
func TestDisruptionBudgetsSelectTheirDeployments(t *testing.T) {
	check(t, disruptionProblems)
}

// TestScaledObjectScalesTheConsumerWithinItsPartitions: the ScaledObject
// names the consumer Deployment, keeps maxReplicaCount within the
// partitions its annotation states, and its kafka trigger reads the
// consumer's own group, topic and brokers with parameters KEDA's kafka
// scaler has.
func TestScaledObjectScalesTheConsumerWithinItsPartitions(t *testing.T) {
	check(t, scaledObjectProblems)
}

// TestRelayEnvironmentIsWhatCourierReads: the relay's flags and variables
// are courier relay's, as docs/cli-reference.md lists them, so a typo
// (COURIER_BROKER) fails here and not in the cluster, where courier would
// ignore it.
func TestRelayEnvironmentIsWhatCourierReads(t *testing.T) {
	check(t, relayEnvironmentProblems)
	r := mustReference(t)
	t.Logf("courier relay reads %d COURIER_* variables and takes --sasl-mechanism %s", len(r.relayVariables), strings.Join(r.mechanisms, ", "))
	for name := range pending {
		_, known := r.relayVariables[name]
		if !known && !slices.Contains(r.mechanisms, name) {
			t.Logf("%s is not in docs/cli-reference.md yet (the Kafka sign-in work of issue 31 adds it): relay-msk-iam's use of it is not checked until then", name)
		}
	}
}

// TestConsumerEnvironmentIsWhatPayoutsReads: the consumer's flags and
// variables are those of examples/payouts.
func TestConsumerEnvironmentIsWhatPayoutsReads(t *testing.T) {
	check(t, consumerEnvironmentProblems)
	r := mustReference(t)
	for name := range pendingPayoutsFlags {
		if !r.payoutsFlags[name] {
			t.Logf("examples/payouts has no --%s yet (issue 31 adds it): the manifest passes it already", name)
		}
	}
}

// TestEveryPodRunsAsItsServiceAccount: the ServiceAccount each pod runs as
// is in its bundle, and a relay signing in to MSK with IAM gets its role
// from it (IRSA) and names its region.
func TestEveryPodRunsAsItsServiceAccount(t *testing.T) {
	check(t, identityProblems)
}

// TestGuideNamesFilesThatExist: the paths under deploy/kubernetes that
// docs/kubernetes.md gives in its commands exist.
func TestGuideNamesFilesThatExist(t *testing.T) {
	for _, p := range guidePathProblems(mustReference(t)) {
		t.Error(p)
	}
}

// TestManifestsNameGuideSectionsThatExist: the docs/….md#anchor their
// comments point to are headings of those pages.
func TestManifestsNameGuideSectionsThatExist(t *testing.T) {
	m := mustLoad(t)
	names := []string{"Dockerfile", "measure-relay.sh", "measure-payouts.sh"}
	for f := range m.files {
		names = append(names, f)
	}
	for dir := range m.kustomizations {
		names = append(names, dir+"/kustomization.yaml")
	}
	files := map[string][]byte{}
	for _, f := range names {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files[f] = data
	}
	for _, p := range docReferenceProblems(files) {
		t.Error(p)
	}
	if p := docReferenceProblems(map[string][]byte{"x.yaml": []byte("# docs/kubernetes.md#no-such-section")}); len(p) != 1 {
		t.Errorf("a missing section gave %q, want one problem", p)
	}
}

// TestChecksCatchBrokenManifests: each rule above finds the fault it is
// for, once it is put in a copy of the rendered manifests; a rule that
// could not fail would check nothing.
func TestChecksCatchBrokenManifests(t *testing.T) {
	m, r := mustLoad(t), mustReference(t)
	relay := func(b *bundle) *corev1.Container {
		return &deployment(t, b, "courier-relay").Spec.Template.Spec.Containers[0]
	}
	payouts := func(b *bundle) *corev1.Container {
		return &deployment(t, b, "payouts").Spec.Template.Spec.Containers[0]
	}
	for _, c := range []struct {
		name  string
		dir   string
		rule  rule
		fault func(b *bundle)
		want  string
	}{
		{"no liveness probe", "relay", probeProblems, func(b *bundle) { relay(b).LivenessProbe = nil }, "no livenessProbe"},
		{"readiness on /healthz", "consumer", probeProblems, func(b *bundle) { payouts(b).ReadinessProbe.HTTPGet.Path = "/healthz" }, "want /readyz"},
		{"a probe on an undeclared port", "relay", probeProblems, func(b *bundle) { relay(b).ReadinessProbe.HTTPGet.Port = intstr.FromString("http") }, "does not declare"},
		{"the relay listening elsewhere", "relay", probeProblems, func(b *bundle) { setEnv(relay(b), "COURIER_METRICS_ADDR", ":9091") }, "program listens on [9091]"},
		{"payouts listening elsewhere", "consumer", probeProblems, func(b *bundle) {
			payouts(b).Args = replaceArg(payouts(b).Args, "--health-addr=:8081", "--health-addr=:8082")
		}, "program listens on [8082]"},
		{"no memory limit", "relay", resourceProblems, func(b *bundle) { delete(relay(b).Resources.Limits, corev1.ResourceMemory) }, "no memory limit"},
		{"a request above its limit", "consumer", resourceProblems, func(b *bundle) { payouts(b).Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2") }, "above its limit"},
		{"an inline password", "relay", inlineSecretProblems, func(b *bundle) { setEnv(relay(b), "COURIER_SASL_PASSWORD", "hunter2") }, "COURIER_SASL_PASSWORD holds a secret"},
		{"an inline database URL", "relay", inlineSecretProblems, func(b *bundle) { setEnv(relay(b), "COURIER_DATABASE_URL", "postgres://app:pw@db/shop") }, "COURIER_DATABASE_URL holds a secret"},
		{"an inline OAuth client secret", "relay", inlineSecretProblems, func(b *bundle) { setEnv(relay(b), "COURIER_SASL_OAUTH_CLIENT_SECRET", "s3cret") }, "COURIER_SASL_OAUTH_CLIENT_SECRET holds a secret"},
		{"envFrom", "consumer", inlineSecretProblems, func(b *bundle) {
			payouts(b).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "payouts"}}}}
		}, "envFrom"},
		{"a key the guide does not create", "relay", guideSecretProblems, func(b *bundle) {
			e := env(relay(b), "COURIER_SASL_PASSWORD")
			e.ValueFrom.SecretKeyRef.Key = "kafka-password"
		}, "key kafka-password of the Secret courier-relay"},
		{"a Secret the guide does not create", "consumer", guideSecretProblems, func(b *bundle) {
			ofType[*kedav1alpha1.TriggerAuthentication](b)[0].Spec.SecretTargetRef[0].Name = "keda"
		}, "the Secret keda"},
		{"a grace period of the shutdown alone", "relay", relayGraceProblems, func(b *bundle) { setGrace(deployment(t, b, "courier-relay"), 15) }, "must exceed --shutdown-timeout 10s + the webhook's drain 10s"},
		{"a longer shutdown", "relay", relayGraceProblems, func(b *bundle) { setEnv(relay(b), "COURIER_SHUTDOWN_TIMEOUT", "20s") }, "= 40s"},
		{"the shutdown as a flag", "relay", relayGraceProblems, func(b *bundle) { relay(b).Args = append(relay(b).Args, "--shutdown-timeout=1m") }, "= 2m0s"},
		{"no shutdown timeout", "relay", relayGraceProblems, func(b *bundle) { removeEnv(relay(b), "COURIER_SHUTDOWN_TIMEOUT") }, "set --shutdown-timeout"},
		{"a consumer's grace too short", "consumer", consumerGraceProblems, func(b *bundle) { setGrace(deployment(t, b, "payouts"), 20) }, "must exceed the ShutdownTimeout 10s"},
		{"no component", "relay", componentProblems, func(b *bundle) { delete(deployment(t, b, "courier-relay").Spec.Template.Labels, componentLabel) }, "want relay or consumer"},
		{"a budget that selects nothing", "relay", disruptionProblems, func(b *bundle) {
			ofType[*policyv1.PodDisruptionBudget](b)[0].Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "relay"
		}, "selects the pods of 0 Deployments"},
		{"a budget that blocks drains", "consumer", disruptionProblems, func(b *bundle) {
			one := intstr.FromInt32(1)
			pdb := ofType[*policyv1.PodDisruptionBudget](b)[0]
			pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable = nil, &one
		}, "lets none be evicted"},
		{"more replicas than partitions", "consumer", scaledObjectProblems, func(b *bundle) { *scaledObject(b).Spec.MaxReplicaCount = 4 }, "more than the 3 partitions"},
		{"no partitions stated", "consumer", scaledObjectProblems, func(b *bundle) { delete(scaledObject(b).Annotations, partitionsKey) }, "state the partitions"},
		{"scaling another Deployment", "consumer", scaledObjectProblems, func(b *bundle) { scaledObject(b).Spec.ScaleTargetRef.Name = "payout" }, "no Deployment of consumer"},
		{"scaling to zero", "consumer", scaledObjectProblems, func(b *bundle) { *scaledObject(b).Spec.MinReplicaCount = 0 }, "minReplicaCount must be 1"},
		{"replicas beside KEDA", "consumer", scaledObjectProblems, func(b *bundle) { two := int32(2); deployment(t, b, "payouts").Spec.Replicas = &two }, "sets replicas"},
		{"a misspelt trigger key", "consumer", scaledObjectProblems, func(b *bundle) { renameKey(scaledObject(b).Spec.Triggers[0].Metadata, "lagThreshold", "lagTreshold") }, `reads no "lagTreshold"`},
		{"a password in the metadata", "consumer", scaledObjectProblems, func(b *bundle) { scaledObject(b).Spec.Triggers[0].Metadata["password"] = "hunter2" }, `reads "password" from a TriggerAuthentication`},
		{"a SASL mechanism KEDA lacks", "consumer", scaledObjectProblems, func(b *bundle) { scaledObject(b).Spec.Triggers[0].Metadata["sasl"] = "scram_sha1" }, "takes none, plaintext"},
		{"another group", "consumer", scaledObjectProblems, func(b *bundle) { scaledObject(b).Spec.Triggers[0].Metadata["consumerGroup"] = "billing" }, "is not the group payouts consumes in"},
		{"another cluster", "consumer", scaledObjectProblems, func(b *bundle) { scaledObject(b).Spec.Triggers[0].Metadata["bootstrapServers"] = "kafka.other:9093" }, "the consumer's own cluster"},
		{"an authentication parameter KEDA lacks", "consumer", scaledObjectProblems, func(b *bundle) {
			ofType[*kedav1alpha1.TriggerAuthentication](b)[0].Spec.SecretTargetRef[0].Parameter = "user"
		}, `reads no authentication parameter "user"`},
		{"no IRSA role", "relay-msk-iam", identityProblems, func(b *bundle) {
			delete(ofType[*corev1.ServiceAccount](b)[0].Annotations, irsaAnnotation)
		}, "no eks.amazonaws.com/role-arn annotation"},
		{"an IRSA role that is no ARN", "relay-msk-iam", identityProblems, func(b *bundle) {
			ofType[*corev1.ServiceAccount](b)[0].Annotations[irsaAnnotation] = "courier-relay"
		}, "is not an IAM role's ARN"},
		{"MSK IAM without a region", "relay-msk-iam", identityProblems, func(b *bundle) { removeEnv(relay(b), "COURIER_AWS_REGION") }, "names no region"},
		{"another ServiceAccount", "consumer", identityProblems, func(b *bundle) { deployment(t, b, "payouts").Spec.Template.Spec.ServiceAccountName = "default" }, `the ServiceAccount "default"`},
		{"a misspelt variable", "relay", relayEnvironmentProblems, func(b *bundle) { renameEnv(relay(b), "COURIER_BROKERS", "COURIER_BROKER") }, "reads no variable COURIER_BROKER "},
		{"a variable of another command", "relay", relayEnvironmentProblems, func(b *bundle) { setEnv(relay(b), "COURIER_REDIS_URL", "redis://r") }, "reads no variable COURIER_REDIS_URL"},
		{"a flag courier relay lacks", "relay", relayEnvironmentProblems, func(b *bundle) { relay(b).Args = append(relay(b).Args, "--metric-addr=:9090") }, "no flag --metric-addr"},
		{"a duration that is not one", "relay", relayEnvironmentProblems, func(b *bundle) { setEnv(relay(b), "COURIER_SHUTDOWN_TIMEOUT", "10") }, "want a duration"},
		{"a mechanism courier lacks", "relay", relayEnvironmentProblems, func(b *bundle) { setEnv(relay(b), "COURIER_SASL_MECHANISM", "SCRAM-SHA-1") }, "--sasl-mechanism SCRAM-SHA-1 is none of"},
		{"a flag payouts lacks", "consumer", consumerEnvironmentProblems, func(b *bundle) { payouts(b).Args = append(payouts(b).Args, "--groups=payouts") }, "no flag --groups"},
		{"a variable payouts does not read", "consumer", consumerEnvironmentProblems, func(b *bundle) { setEnv(payouts(b), "COURIER_DATABASE_URL", "x") }, "reads no variable COURIER_DATABASE_URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			good := m.bundle(t, c.dir)
			if problems := c.rule(good, r); len(problems) > 0 {
				t.Fatalf("the manifests as they are: %q", problems)
			}
			broken := good.clone()
			c.fault(broken)
			problems := c.rule(broken, r)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("broken, the rule found %q; want a problem with %q", problems, c.want)
			}
		})
	}
}

func deployment(t *testing.T, b *bundle, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range ofType[*appsv1.Deployment](b) {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("%s has no Deployment %s", b.dir, name)
	return nil
}

func scaledObject(b *bundle) *kedav1alpha1.ScaledObject {
	return ofType[*kedav1alpha1.ScaledObject](b)[0]
}

func env(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name})
	return &c.Env[len(c.Env)-1]
}

func setEnv(c *corev1.Container, name, value string) {
	e := env(c, name)
	e.Value, e.ValueFrom = value, nil
}

func removeEnv(c *corev1.Container, name string) {
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

func renameEnv(c *corev1.Container, from, to string) { env(c, from).Name = to }

func renameKey(m map[string]string, from, to string) {
	m[to] = m[from]
	delete(m, from)
}

func replaceArg(args []string, from, to string) []string {
	out := slices.Clone(args)
	out[slices.Index(out, from)] = to
	return out
}

func setGrace(d *appsv1.Deployment, seconds int64) {
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &seconds
}
