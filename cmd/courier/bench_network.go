package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/delaylink"
)

// networkFlags are --network and its delays: the network profile of a
// bench run.
type networkFlags struct {
	on      bool
	profile bench.Network
}

// register adds --network and its delays to fs.
func (n *networkFlags) register(fs *pflag.FlagSet) {
	d := bench.DefaultNetwork
	n.profile.Brokers = d.Brokers
	fs.BoolVar(&n.on, "network", false, fmt.Sprintf("run under the network profile: PostgreSQL, Redis and %d in-process brokers behind delay lines (--network-*), as services a hop away are", d.Brokers))
	fs.DurationVar(&n.profile.PostgreSQL, "network-postgres", d.PostgreSQL, "with --network: the delay each way to PostgreSQL")
	fs.DurationVar(&n.profile.Redis, "network-redis", d.Redis, "with --network: the delay each way to Redis")
	fs.DurationVar(&n.profile.Kafka, "network-kafka", d.Kafka, "with --network: the delay each way to each broker")
	fs.DurationVar(&n.profile.Produce, "network-produce", d.Produce, "with --network: how much later a broker answers each Produce (acks=all)")
}

// validate refuses negative delays, and --network against brokers of
// one's own (their metadata would lead the clients around the delay
// lines).
func (n *networkFlags) validate(brokers string) error {
	if !n.on {
		return nil
	}
	if brokers != "" {
		return usageError{fmt.Errorf("--network runs the in-process brokers behind delay lines: drop --brokers (a cluster of your own has its own network)")}
	}
	for name, d := range map[string]time.Duration{"postgres": n.profile.PostgreSQL, "redis": n.profile.Redis, "kafka": n.profile.Kafka, "produce": n.profile.Produce} {
		if d < 0 || d > time.Second {
			return usageError{fmt.Errorf("--network-%s %v: use a delay from 0 to 1s, e.g. 500us", name, d)}
		}
	}
	return nil
}

// kafkaOptions are the in-process cluster's options: one broker on
// loopback, or under --network the profile's brokers each behind a delay
// line (which the brokers advertise, so every client goes through them).
func (n *networkFlags) kafkaOptions() []kfake.Opt {
	if !n.on {
		return []kfake.Opt{kfake.NumBrokers(1)}
	}
	delay := n.profile.Kafka
	return []kfake.Opt{kfake.NumBrokers(n.profile.Brokers), kfake.ListenFn(func(string, string) (net.Listener, error) { return delaylink.Listen(delay) })}
}

// delayProduce makes cluster answer each Produce the profile's delay
// later; other requests, and other connections, go on meanwhile.
func (n *networkFlags) delayProduce(cluster *kfake.Cluster) {
	if !n.on || n.profile.Produce <= 0 {
		return
	}
	delay := n.profile.Produce
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.SleepControl(func() { time.Sleep(delay) })
		return nil, nil, false
	})
}

// through returns a connection string (a URL or key=value pairs) to the
// same server through a delay line of delay each way, which closers ends;
// under a profile without delay for it, the string itself.
func through(conn string, delay time.Duration, closers *[]func() error) (string, error) {
	if delay <= 0 {
		return conn, nil
	}
	host, port, err := hostPort(conn)
	if err != nil {
		return "", err
	}
	link, err := delaylink.New(net.JoinHostPort(host, strconv.Itoa(port)), delay)
	if err != nil {
		return "", err
	}
	*closers = append(*closers, link.Close)
	if u, err := url.Parse(conn); err == nil && u.Host != "" {
		u.Host = link.Addr()
		return u.String(), nil
	}
	return fmt.Sprintf("%s host=%s port=%d", conn, link.Host(), link.Port()), nil
}

// hostPort is the server a connection string names: a PostgreSQL one
// (pgx's reading of it), or a redis:// URL.
func hostPort(conn string) (string, int, error) {
	if strings.HasPrefix(conn, "redis://") || strings.HasPrefix(conn, "rediss://") {
		opts, err := redis.ParseURL(conn)
		if err != nil {
			return "", 0, fmt.Errorf("--redis-url: %w", err)
		}
		host, port, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			return "", 0, fmt.Errorf("--redis-url: %w", err)
		}
		n, err := strconv.Atoi(port)
		return host, n, err
	}
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		return "", 0, fmt.Errorf("--database-url: %w", err)
	}
	return cfg.Host, int(cfg.Port), nil
}
