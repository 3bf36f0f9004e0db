package dlqindex_test

import (
	"context"
	"fmt"
	"log"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
)

// The console keeps an index of a dead-letter topic, refreshes it, then
// counts and pages through it without reading Kafka.
func Example() {
	client, err := sarama.NewClient([]string{"localhost:9092"}, sarama.NewConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	x := dlqindex.New(client, "payouts.dlq")
	if err := x.Refresh(context.Background()); err != nil {
		log.Fatal(err)
	}

	timeouts := dlq.Filter{ErrorContains: "timeout"}
	s := x.Summary(timeouts)
	fmt.Printf("%d of %d dead letters time out, %d of them on %s\n", s.Total, x.Len(), s.ByOriginalTopic[0].N, s.ByOriginalTopic[0].Value)

	page, next := x.List(timeouts, dlqindex.Cursor{}, 20)
	for _, it := range page {
		fmt.Println(it.Partition, it.Offset, it.FailedAt, it.Kind) // escape Key and Error before printing them
	}
	// The next page, for instance after the cursor went through a URL.
	after, err := dlqindex.ParseCursor(next.String())
	if err != nil {
		log.Fatal(err)
	}
	page, _ = x.List(timeouts, after, 20)
	fmt.Println(len(page), "more")
}

// A cursor goes through a URL as text; the zero Cursor, the first page, is
// the empty string.
func ExampleParseCursor() {
	c, err := dlqindex.ParseCursor("1768557600000.3.1842")
	fmt.Println(c, c.IsZero(), err)
	first, _ := dlqindex.ParseCursor("")
	fmt.Printf("%q %v\n", first, first.IsZero())
	_, err = dlqindex.ParseCursor("page-2")
	fmt.Println(err)
	// Output:
	// 1768557600000.3.1842 false <nil>
	// "" true
	// dlqindex: cursor "page-2" is not one a page gave (<unix ms>.<partition>.<offset>); start again from the first page
}
