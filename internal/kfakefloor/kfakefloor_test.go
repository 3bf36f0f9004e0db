package kfakefloor_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/courierkit/courier/internal/kfakefloor"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type refusals struct {
	mu   sync.Mutex
	seen []string
}

func (r *refusals) add(api string, version int16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf("%s v%d", api, version))
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// produce sends one record with Sarama configured for version.
func produce(t *testing.T, cluster *kfake.Cluster, version sarama.KafkaVersion) error {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = version
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 0
	p, err := sarama.NewSyncProducer(cluster.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: "t", Value: sarama.StringEncoder("v")})
	return err
}

// TestRefuseClosesBelowTheFloorAndPassesTheRest: Produce version 2 (Sarama
// at Kafka 0.10.2) is reported and fails; version 7 (Kafka 2.1) reaches the
// controls added later and the cluster.
func TestRefuseClosesBelowTheFloorAndPassesTheRest(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var r refusals
	kfakefloor.Refuse(cluster, r.add)
	var laterSaw sync.Map
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		laterSaw.Store(req.GetVersion(), true)
		return nil, nil, false
	})

	if err := produce(t, cluster, sarama.V0_10_2_0); err == nil {
		t.Error("Produce v2: nil error, want the request refused")
	}
	if got := r.list(); len(got) == 0 || got[0] != "Produce v2" {
		t.Errorf("refused %v, want Produce v2", got)
	}
	if _, ok := laterSaw.Load(int16(2)); ok {
		t.Error("the later control saw Produce v2, which Refuse had handled")
	}

	n := len(r.list())
	if err := produce(t, cluster, sarama.V2_1_0_0); err != nil {
		t.Errorf("Produce v7: %v, want it accepted", err)
	}
	if got := r.list(); len(got) != n {
		t.Errorf("refused %v with Sarama at 2.1.0, want nothing more", got[n:])
	}
	if _, ok := laterSaw.Load(int16(7)); !ok {
		t.Error("the later control did not see Produce v7")
	}
}
