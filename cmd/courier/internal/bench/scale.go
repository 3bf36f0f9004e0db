package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/delaylink"
)

// scaleCase is one configuration of the scaling run: relays relays of
// workers workers each.
type scaleCase struct {
	relays, workers int
}

func (c scaleCase) name() string {
	return fmt.Sprintf("%s/relays=%d/workers=%d", RelayDefaults, c.relays, c.workers)
}

// scaleCases are the scaling run's configurations; the first is the
// baseline, and a case of N workers in all should drain at least 0.8·N
// times as fast.
var scaleCases = []scaleCase{{1, 1}, {2, 1}, {4, 1}, {1, 2}, {1, 4}}

// scale drains a backlog of cfg.ScaleEvents through a proxy that adds
// cfg.ScaleDelay to every packet each way between the relays and
// PostgreSQL, as a database on another host would (under cfg.Network,
// through the profile's delay lines instead), with each of
// scaleCases, taking turns for cfg.Rounds rounds, and returns each case's
// median rate beside the one relay's.
func scale(ctx context.Context, cfg RelayConfig) ([]ThroughputResult, error) {
	svc, err := openRelayServices(ctx, cfg, "scale")
	if err != nil {
		return nil, err
	}
	results, err := scaleOn(ctx, svc)
	return results, errors.Join(err, svc.close())
}

func scaleOn(ctx context.Context, svc *relayServices) ([]ThroughputResult, error) {
	cfg := svc.cfg
	table, err := svc.table(ctx)
	if err != nil {
		return nil, err
	}
	var link *delaylink.Link
	shown := RelayReport{} // how the run reaches PostgreSQL, for progress
	if !cfg.Network {
		shown.ScaleDelay = cfg.ScaleDelay
		pgConfig := svc.admin.Config().ConnConfig
		if link, err = delaylink.New(net.JoinHostPort(pgConfig.Host, fmt.Sprint(pgConfig.Port)), cfg.ScaleDelay); err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, link.Close)
	}
	most := 0
	for _, c := range scaleCases {
		most = max(most, c.relays)
	}
	// One pool per relay, as separate processes would have, each through
	// the proxy.
	pools := make([]*pgxpool.Pool, most)
	for i := range pools {
		pc := table.pool.Config().Copy()
		if link != nil {
			pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Fallbacks = link.Host(), link.Port(), nil
			pc.ConnConfig.TLSConfig = nil
		}
		if pools[i], err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, func() error { pools[i].Close(); return nil })
	}
	pubs, err := warmPublishers(ctx, svc, table.topic, most)
	if err != nil {
		return nil, err
	}
	spent := make([][]time.Duration, len(scaleCases))
	windows := make([][]cpuWindow, len(scaleCases))
	claims := make([]atomic.Int64, len(scaleCases))
	for round := range cfg.Rounds {
		progress(cfg.Progress, "relay scaling: round %d of %d, %d configurations draining %d events %s",
			round+1, cfg.Rounds, len(scaleCases), cfg.ScaleEvents, shown.scaleLink())
		for i := range scaleCases {
			j := (round + i) % len(scaleCases)
			c := scaleCases[j]
			var cpu cpuWindow
			took, err := drainWith(ctx, pools[:c.relays], table, pubs[:c.relays], relayConfig{workers: c.workers, started: cpu.start},
				cfg.ScaleEvents, cfg.Logger, &claims[j])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name(), err)
			}
			cpu.stop()
			spent[j], windows[j] = append(spent[j], took), append(windows[j], cpu)
		}
	}
	base := MedianRate(cfg.ScaleEvents, spent[0])
	results := make([]ThroughputResult, len(scaleCases))
	for i, c := range scaleCases {
		res := ThroughputResult{Name: c.name(), Events: cfg.ScaleEvents, Rate: MedianRate(cfg.ScaleEvents, spent[i]),
			Baseline: scaleCases[0].name(), ClaimsPerDrain: float64(claims[i].Load()) / float64(cfg.Rounds)}
		res.CPUBusy, res.CPUMicrosPerEvent = cpuOf(windows[i], cfg.ScaleEvents)
		if n := c.relays * c.workers; n > 1 {
			res.Target = 0.8 * float64(n)
		}
		if base > 0 {
			res.Ratio = res.Rate / base
		}
		results[i] = res
	}
	return results, nil
}
