// Package delaylink is a TCP link with latency: a proxy on loopback that
// holds every chunk of bytes for a delay before passing it on, in each
// direction, without holding up the chunks behind it. Benchmarks put it
// between the relay and PostgreSQL to measure courier as users run it, with
// the database a network hop away, on a machine where loopback answers in
// microseconds.
package delaylink

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Link forwards the connections it accepts to a target, each chunk delay
// after it was read, each way: a link with delay's one-way latency and no
// bandwidth limit.
type Link struct {
	listener net.Listener
	target   string
	delay    time.Duration
	wg       sync.WaitGroup
	mu       sync.Mutex
	closed   bool
	conns    []net.Conn
}

// New listens on a free loopback port and forwards what it accepts to
// target (host:port), delay late each way.
func New(target string, delay time.Duration) (*Link, error) {
	if delay < 0 {
		return nil, fmt.Errorf("delaylink: delay %v is negative", delay)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	link := &Link{listener: l, target: target, delay: delay}
	link.wg.Go(link.accept)
	return link, nil
}

// Host and Port are where the link listens.
func (l *Link) Host() string { return l.addr().IP.String() }

// Port is the link's port; see Host.
func (l *Link) Port() uint16 { return uint16(l.addr().Port) }

// Addr is Host and Port as host:port.
func (l *Link) Addr() string { return l.listener.Addr().String() }

func (l *Link) addr() *net.TCPAddr { return l.listener.Addr().(*net.TCPAddr) }

func (l *Link) accept() {
	for {
		client, err := l.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l.mu.Lock()
		if l.closed { // accepted as Close ran
			l.mu.Unlock()
			_, _ = client.Close(), server.Close()
			return
		}
		l.conns = append(l.conns, client, server)
		l.wg.Go(func() { l.pipe(server, client) })
		l.wg.Go(func() { l.pipe(client, server) })
		l.mu.Unlock()
	}
}

// chunk is bytes read at a moment, to be written delay later.
type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies from src to dst, each chunk delay after it was read, and
// closes both when either side ends.
func (l *Link) pipe(dst, src net.Conn) {
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
		time.Sleep(time.Until(c.at.Add(l.delay)))
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
func (l *Link) Close() error {
	err := l.listener.Close()
	l.mu.Lock()
	l.closed = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Listener is a net.Listener whose connections come through a Link: its
// Addr is the Link's, so a server that advertises the address it listens
// on (a Kafka broker in its metadata) is reached, by every client, with
// the link's delay each way.
type Listener struct {
	inner net.Listener
	link  *Link
}

// Listen listens on a free loopback port behind a Link of delay each way.
func Listen(delay time.Duration) (*Listener, error) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	link, err := New(inner.Addr().String(), delay)
	if err != nil {
		_ = inner.Close()
		return nil, err
	}
	return &Listener{inner: inner, link: link}, nil
}

// Accept waits for the next connection through the link.
func (l *Listener) Accept() (net.Conn, error) { return l.inner.Accept() }

// Addr is the link's address, where clients connect.
func (l *Listener) Addr() net.Addr { return l.link.listener.Addr() }

// Close closes the link and the listener behind it.
func (l *Listener) Close() error { return errors.Join(l.link.Close(), l.inner.Close()) }
