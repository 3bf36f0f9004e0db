// Package kafkaaddr checks Kafka bootstrap addresses, the one check the
// consumer and the relay share, so that an address no dial could reach is
// refused by New instead of read later as a Kafka outage.
package kafkaaddr

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// Validate says what is wrong with a bootstrap address, if anything: it
// must be host:port with a host free of spaces and control characters and
// a port from 1 to 65535. The message reads after the address, e.g.
// `Brokers[0] "x" is not a host:port address; …`.
func Validate(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("is not a host:port address; write it as \"kafka-1:9092\"")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("has no valid port (1-65535); write it as \"kafka-1:9092\"")
	}
	return nil
}
