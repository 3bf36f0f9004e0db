// Package kfakefloor makes an in-process kfake cluster refuse, as Kafka
// 4.0 does, every request older than Kafka 4.0's protocol floor
// (internal/kafkafloor): kfake itself still serves versions back to 0.
package kfakefloor

import (
	"fmt"

	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Refuse installs on cluster a control for each API whose floor is above
// version 0: a request below the floor is reported to refused (its API's
// name and version) and its connection closed, which is how a Kafka 4.0
// broker answers a removed version; any other request passes on to the
// controls added later and to the cluster. Call it right after
// kfake.NewCluster, so that it runs before any fault a test injects on the
// same API. refused may be called from several goroutines.
func Refuse(cluster *kfake.Cluster, refused func(api string, version int16)) {
	for _, key := range kafkafloor.Keys() {
		cluster.ControlKey(key, func(req kmsg.Request) (kmsg.Response, error, bool) {
			if kafkafloor.Accepts(req.Key(), req.GetVersion()) {
				return nil, nil, false
			}
			cluster.KeepControl()
			name := kmsg.NameForKey(req.Key())
			refused(name, req.GetVersion())
			return nil, fmt.Errorf("%s version %d is below Kafka 4.0's floor of %d", name, req.GetVersion(), kafkafloor.MinVersion(req.Key())), true
		})
	}
}
