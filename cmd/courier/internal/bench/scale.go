package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
// PostgreSQL, as a database on another host would, with each of
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
	proxy, err := newDelayProxy(svc.admin.Config().ConnConfig.Host, svc.admin.Config().ConnConfig.Port, cfg.ScaleDelay)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, proxy.Close)
	most := 0
	for _, c := range scaleCases {
		most = max(most, c.relays)
	}
	// One pool per relay, as separate processes would have, each through
	// the proxy.
	pools := make([]*pgxpool.Pool, most)
	for i := range pools {
		pc := table.pool.Config().Copy()
		pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Fallbacks = proxy.host, proxy.port, nil
		pc.ConnConfig.TLSConfig = nil
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
	busy := make([]float64, len(scaleCases))
	claims := make([]atomic.Int64, len(scaleCases))
	for round := range cfg.Rounds {
		progress(cfg.Progress, "relay scaling: round %d of %d, %d configurations draining %d events through a proxy adding %v each way",
			round+1, cfg.Rounds, len(scaleCases), cfg.ScaleEvents, cfg.ScaleDelay)
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
			spent[j], busy[j] = append(spent[j], took), busy[j]+cpu.machineBusyShare()/float64(cfg.Rounds)
		}
	}
	base := MedianRate(cfg.ScaleEvents, spent[0])
	results := make([]ThroughputResult, len(scaleCases))
	for i, c := range scaleCases {
		res := ThroughputResult{Name: c.name(), Events: cfg.ScaleEvents, Rate: MedianRate(cfg.ScaleEvents, spent[i]),
			Baseline: scaleCases[0].name(), ClaimsPerDrain: float64(claims[i].Load()) / float64(cfg.Rounds), CPUBusy: busy[i]}
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

// delayProxy forwards TCP connections to a server, holding every chunk of
// bytes for delay before passing it on, in each direction, without holding
// up the chunks behind it: a link with delay's latency and no bandwidth
// limit.
type delayProxy struct {
	listener net.Listener
	target   string
	delay    time.Duration
	host     string
	port     uint16
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newDelayProxy(host string, port uint16, delay time.Duration) (*delayProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().(*net.TCPAddr)
	p := &delayProxy{listener: l, target: net.JoinHostPort(host, fmt.Sprint(port)), delay: delay,
		host: addr.IP.String(), port: uint16(addr.Port)}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *delayProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

// chunk is bytes read at a moment, to be written delay later.
type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies from src to dst, each chunk delay after it was read, and
// closes both when either side ends.
func (p *delayProxy) pipe(dst, src net.Conn) {
	chunks := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{at: time.Now(), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(p.delay)))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	for range chunks { // let the reader finish
	}
	wg.Wait()
}

// Close stops accepting, closes every connection and waits for the pipes.
func (p *delayProxy) Close() error {
	err := p.listener.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
