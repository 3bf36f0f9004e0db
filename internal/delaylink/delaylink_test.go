package delaylink_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courierkit/courier/internal/delaylink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves a line-echo server until the test ends and returns its
// address.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// TestEachRoundTripTakesTheDelayBothWays: every request through the link
// is answered no sooner than twice its delay (there and back), with its
// bytes intact and in order, a second request as late as the first; and
// Close ends the connections (TestMain checks that no goroutine is left).
func TestEachRoundTripTakesTheDelayBothWays(t *testing.T) {
	const delay = 20 * time.Millisecond
	link, err := delaylink.New(echo(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", link.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for _, msg := range []string{"first\n", "second\n"} {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 2*delay {
			t.Errorf("%q came back after %v, want at least %v", msg, took, 2*delay)
		}
		if got != msg {
			t.Errorf("came back %q, want %q", got, msg)
		}
	}
	if err := link.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("the connection still reads after Close")
	}
}

// TestNegativeDelayIsRefused: a link cannot deliver bytes before they were
// sent.
func TestNegativeDelayIsRefused(t *testing.T) {
	if _, err := delaylink.New("127.0.0.1:1", -time.Millisecond); err == nil {
		t.Fatal("New accepted a negative delay")
	}
}

// TestAListenerIsReachedThroughItsLink: a server on Listen advertises the
// link's address, and a round trip to it takes the delay both ways.
func TestAListenerIsReachedThroughItsLink(t *testing.T) {
	const delay = 20 * time.Millisecond
	l, err := delaylink.Listen(delay)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		_, _ = c.Write(line)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "ping\n" {
		t.Fatalf("%q, %v", got, err)
	}
	if rtt := time.Since(start); rtt < 2*delay {
		t.Errorf("a round trip through the listener's link took %v; want at least %v", rtt, 2*delay)
	}
	<-served
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
