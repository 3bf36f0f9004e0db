package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/internal/kfakefloor"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defaults of courier dev.
const (
	// defaultDevListen is where courier dev listens: Kafka's usual port.
	defaultDevListen = "127.0.0.1:9092"
	// defaultDevDataDir is where courier dev keeps topics and records,
	// relative to the working directory.
	defaultDevDataDir = ".courier-dev"
	// defaultDevPartitions is the partition count of topics created on
	// first use, as Kafka's num.partitions.
	defaultDevPartitions = 1
)

// devBroker is what courier dev prints about the running broker; --output
// json prints it as is.
type devBroker struct {
	// Address is the host:port clients bootstrap from, with the real port
	// when --listen asked for port 0.
	Address string `json:"address"`
	// DataDir is the absolute directory the records are kept in; empty
	// when they are kept in memory only.
	DataDir string `json:"data_dir"`
	// Partitions is the partition count of topics created on first use.
	Partitions int `json:"partitions"`
}

// maxDevPartitions caps dev's --partitions: the broker holds every
// partition in memory.
const maxDevPartitions = 1000

func newDevCmd() *cobra.Command {
	var out outputFlag
	var listen, dataDir string
	var partitions int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local Kafka-protocol broker for development",
		Long: `Runs a single Kafka-protocol broker (kfake, the one courier's tests use) in
this process, until Ctrl-C, SIGTERM or SIGHUP. Any Kafka client talks to it: Sarama,
franz-go, librdkafka and so kcat.

Topics are created on first produce (or first metadata request asking for
it) with --partitions partitions. Topics, records and committed offsets are
kept in --data-dir and are there again after a restart, even after kill -9:
records are written as they come, though not synced to disk, so a crash of
the machine may lose the latest. Delete the directory to start empty, or
pass --data-dir "" to keep nothing.

It is for development only: no TLS, no SASL, one broker, no replication.`,
		Example: `  courier dev
  courier dev --listen 127.0.0.1:0 --data-dir /tmp/kafka --output json
  courier dev --partitions 3 &
  export COURIER_BROKERS=127.0.0.1:9092`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			if partitions < 1 || partitions > maxDevPartitions {
				return usageError{fmt.Errorf("--partitions %d: use 1 to %d", partitions, maxDevPartitions)}
			}
			if err := checkListen(listen); err != nil {
				return err
			}
			// A closed terminal (SIGHUP) stops it cleanly too; caught
			// before the address is printed, so a client that saw it can
			// rely on it.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGHUP)
			defer stop()
			broker := devBroker{Partitions: partitions}
			opts := []kfake.Opt{
				kfake.NumBrokers(1),
				kfake.ListenFn(listenOn(listen)),
				kfake.DefaultNumPartitions(partitions),
				kfake.WithLogger(kfake.BasicLogger(cmd.ErrOrStderr(), kfake.LogLevelError)),
			}
			if dataDir != "" {
				abs, err := filepath.Abs(dataDir)
				if err != nil {
					return usageError{fmt.Errorf("--data-dir %s: %w", dataDir, err)}
				}
				broker.DataDir = abs
				opts = append(opts, kfake.DataDir(abs))
			}
			cluster, err := kfake.NewCluster(opts...)
			if err != nil {
				return devStartError(listen, broker.DataDir, err)
			}
			autoCreateTopics(cluster, int32(partitions))
			// As a Kafka 4.0 broker does, refuse the request versions
			// 4.0 removed, so that a client that works here works there.
			stderr := cmd.ErrOrStderr()
			kfakefloor.Refuse(cluster, func(api string, version int16) {
				fmt.Fprintf(stderr, "courier dev: refused %s version %d, which Kafka 4.0 removed (KIP-896); configure the client for Kafka %s or later\n", api, version, kafkafloor.OldestKafka)
			})
			broker.Address = cluster.ListenAddrs()[0]
			if err := printDevBroker(cmd.OutOrStdout(), out, broker); err != nil {
				cluster.Close()
				return err
			}
			<-ctx.Done()
			cluster.Close()
			if out.json() {
				return nil
			}
			stopped := "courier dev: stopped; records kept in " + broker.DataDir
			if broker.DataDir == "" {
				stopped = `courier dev: stopped; its records were in memory only (--data-dir "") and are gone`
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), stopped)
			return err
		},
	}
	out.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", envOr("COURIER_DEV_LISTEN", defaultDevListen),
		"host:port to listen on; port 0 picks a free one (env COURIER_DEV_LISTEN)")
	cmd.Flags().StringVar(&dataDir, "data-dir", envOr("COURIER_DEV_DATA_DIR", defaultDevDataDir),
		`directory topics and records are kept in across restarts; "" keeps them in memory only (env COURIER_DEV_DATA_DIR)`)
	cmd.Flags().IntVar(&partitions, "partitions", defaultDevPartitions, "partitions of a topic created on first use")
	return cmd
}

// autoCreateTopics creates the topic a client names in a metadata request
// that allows auto-creation, before the request is answered. It goes
// through Cluster.CreateTopic, which records the topic in the data
// directory at once: kfake's own auto-creation records it only when the
// broker stops, so a killed broker would come back without the topic and
// its records.
func autoCreateTopics(cluster *kfake.Cluster, partitions int32) {
	cluster.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		m, ok := req.(*kmsg.MetadataRequest)
		if !ok || !m.AllowAutoTopicCreation {
			return nil, nil, false
		}
		var topics []string
		for _, t := range m.Topics {
			if t.Topic != nil && !strings.HasPrefix(*t.Topic, "__") {
				topics = append(topics, *t.Topic)
			}
		}
		if len(topics) > 0 {
			// The cluster runs admin calls only while this control
			// sleeps; an existing or invalid name fails the call, and
			// the request is answered as for any name.
			cluster.SleepControl(func() {
				for _, t := range topics {
					_ = cluster.CreateTopic(t, partitions, nil)
				}
			})
		}
		return nil, nil, false
	})
}

// checkListen validates --listen as host:port with a numeric port.
func checkListen(listen string) error {
	_, port, err := net.SplitHostPort(listen)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return usageError{fmt.Errorf("--listen %q: want host:port, e.g. 127.0.0.1:9092, or 127.0.0.1:0 for any free port", listen)}
	}
	return nil
}

// listenOn makes kfake's broker listen on addr instead of the random
// loopback port kfake asks for. The broker advertises its listener's
// address to clients, so a wildcard host (0.0.0.0, [::]) is advertised as
// 127.0.0.1.
func listenOn(addr string) func(network, _ string) (net.Listener, error) {
	return func(network, _ string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		tcp, ok := ln.Addr().(*net.TCPAddr)
		if !ok || !tcp.IP.IsUnspecified() {
			return ln, nil
		}
		return advertised{ln, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: tcp.Port}}, nil
	}
}

// advertised is a listener that reports addr as its address.
type advertised struct {
	net.Listener
	addr net.Addr
}

// Addr returns the advertised address.
func (a advertised) Addr() net.Addr { return a.addr }

// devStartError explains why the broker did not start.
func devStartError(listen, dataDir string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s: %w (is another `courier dev` or Kafka running there? stop it, or pick another address with --listen, e.g. --listen 127.0.0.1:0 for any free port)", listen, err)
	}
	var opError *net.OpError
	if errors.As(err, &opError) && opError.Op == "listen" {
		return fmt.Errorf("listen on %s: %w (pick an address of this machine with --listen)", listen, err)
	}
	if dataDir != "" {
		return fmt.Errorf("start the broker with data in %s: %w (if the data is damaged, move the directory away or pass another --data-dir)", dataDir, err)
	}
	return fmt.Errorf("start the broker: %w", err)
}

// printDevBroker tells how to point clients at the broker.
func printDevBroker(w io.Writer, out outputFlag, b devBroker) error {
	return out.emit(w, b, func(w io.Writer) error { return printDevBanner(w, b) })
}

// printDevBanner is the text form of printDevBroker.
func printDevBanner(w io.Writer, b devBroker) error {
	_, err := fmt.Fprintf(w, `courier dev: Kafka-protocol broker listening on %[1]s
  records kept%[2]s; topics are created on first produce with %[3]d partition(s)

Point clients at it:
  export COURIER_BROKERS=%[1]s
  echo 'order-1:{"id":1}' | kcat -b %[1]s -t orders -P -K:
  kcat -b %[1]s -t orders -C -K: -e
  Sarama: sarama.NewClient([]string{"%[1]s"}, sarama.NewConfig())

Ctrl-C stops it.
`, b.Address, keptIn(b.DataDir), b.Partitions)
	return err
}

// keptIn says where records are kept, for the text output.
func keptIn(dataDir string) string {
	if dataDir == "" {
		return ` in memory only (--data-dir ""): they are gone when it stops`
	}
	return " in " + dataDir
}
