package main

import (
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/kfakeoauth"
	"github.com/courierkit/courier/internal/testkit"
)

// TestPayoutsSignInWithTheVariablesOfTheCLI: the worker reads the
// sign-in of courier's CLI from the environment and creates its topic on
// a broker that takes only a token its issuer signed.
func TestPayoutsSignInWithTheVariablesOfTheCLI(t *testing.T) {
	issuer := kfakeoauth.NewIssuer(t, "payouts", "payouts-s3cret", time.Hour)
	broker := kfakeoauth.New(issuer)
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(broker.Options(0)...))
	broker.Install(k.Cluster)
	env := map[string]string{
		"COURIER_BROKERS":                  k.Brokers[0],
		"COURIER_SASL_MECHANISM":           "OAUTHBEARER",
		"COURIER_SASL_OAUTH_TOKEN_URL":     issuer.URL,
		"COURIER_SASL_OAUTH_CLIENT_ID":     "payouts",
		"COURIER_SASL_OAUTH_CLIENT_SECRET": "payouts-s3cret",
		"COURIER_SASL_OAUTH_EXTENSIONS":    "logicalCluster=lkc-1",
	}
	cfg, err := parseConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kafka.SASL.Name(); got != "OAUTHBEARER" {
		t.Fatalf("the worker signs in with %q", got)
	}
	sc, err := cfg.Kafka.Config(consumer.NewSaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := createTopic(cfg.Brokers, sc, "orders", 3); err != nil {
		t.Fatalf("create the topic signed in: %v", err)
	}
	if c := broker.SignedIn(t); c.Extensions[0]["logicalCluster"] != "lkc-1" {
		t.Errorf("the broker got the extensions %q; want logicalCluster=lkc-1", c.Extensions[0])
	}
}

func TestPayoutsRefuseASignInTheyCannotUse(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"COURIER_SASL_MECHANISM": "GSSAPI"}, "use PLAIN, SCRAM-SHA-256"},
		{map[string]string{"COURIER_SASL_MECHANISM": "OAUTHBEARER"}, "the static token is empty"},
		{map[string]string{"COURIER_SASL_MECHANISM": "AWS_MSK_IAM", "COURIER_TLS": "1"}, "needs the cluster's region"},
		{map[string]string{"COURIER_SASL_MECHANISM": "AWS_MSK_IAM", "COURIER_AWS_REGION": "eu-west-1"}, "needs COURIER_TLS=true"},
		{map[string]string{"COURIER_TLS": "yes please"}, `COURIER_TLS="yes please"`},
		{map[string]string{"COURIER_TLS_CERT": "client.pem"}, "does not read it"},
		{map[string]string{"COURIER_SASL_MECHANISM": "OAUTHBEARER", "COURIER_SASL_OAUTH_TOKEN": "t", "COURIER_SASL_OAUTH_EXTENSIONS": "logicalCluster"}, "use key=value pairs"},
		{map[string]string{"COURIER_TLS_CA": "/nope/ca.pem"}, "COURIER_TLS_CA"},
		{map[string]string{"COURIER_SASL_MECHANISM": "SCRAM-SHA-512", "COURIER_SASL_USER": "payouts"}, ""},
	} {
		cfg, err := parseConfig(nil, func(k string) string { return tc.env[k] })
		if tc.want == "" { // SCRAM without a password: refused when the config is built
			if err == nil {
				_, err = cfg.Kafka.Config(consumer.NewSaramaConfig())
			}
			if err == nil || !strings.Contains(err.Error(), "needs a password") {
				t.Errorf("%v: %v; want a missing password", tc.env, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.env, err, tc.want)
		}
	}
}
