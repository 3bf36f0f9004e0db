package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/topicname"
)

// dlqFilter is a dead-letter list's filter as a form holds it.
type dlqFilter struct {
	OriginalTopic, Key, Error, Kind, Group, Tenant, Since, Until, Partition, Offset string
}

// dlqFilterFields are the query fields of dlqFilter, in order.
var dlqFilterFields = []string{"original_topic", "key", "error", "kind", "group", "tenant", "since", "until", "partition", "offset"}

func (f dlqFilter) fields() []string {
	return []string{f.OriginalTopic, f.Key, f.Error, f.Kind, f.Group, f.Tenant, f.Since, f.Until, f.Partition, f.Offset}
}

// readDLQFilter reads the filter from a query or form.
func readDLQFilter(v url.Values) dlqFilter {
	var f dlqFilter
	for i, p := range []*string{&f.OriginalTopic, &f.Key, &f.Error, &f.Kind, &f.Group, &f.Tenant, &f.Since, &f.Until, &f.Partition, &f.Offset} {
		*p = v.Get(dlqFilterFields[i])
	}
	return f
}

// values is f as query fields.
func (f dlqFilter) values() url.Values {
	v := url.Values{}
	for i, s := range f.fields() {
		if s != "" {
			v.Set(dlqFilterFields[i], s)
		}
	}
	return v
}

// Query is f as a query string, for links.
func (f dlqFilter) Query() template.URL { return template.URL(f.values().Encode()) }

// Hidden is f as hidden form fields.
func (f dlqFilter) Hidden() [][2]string {
	var out [][2]string
	for i, s := range f.fields() {
		if s != "" {
			out = append(out, [2]string{dlqFilterFields[i], s})
		}
	}
	return out
}

// absolute returns f with its since and until as the times they named
// (see outboxFilter.absolute).
func (f dlqFilter) absolute(pf dlq.Filter) dlqFilter {
	f.Since, f.Until = rfc3339(pf.Since), rfc3339(pf.Until)
	return f
}

// errorKinds are the kinds a dead letter's error has.
var errorKinds = []string{string(dlq.KindRetriesExhausted), string(dlq.KindPermanent)}

// filter converts f to dlq.Filter, refusing what it cannot use.
func (f dlqFilter) filter(now time.Time) (dlq.Filter, error) {
	for i, s := range f.fields() {
		if err := checkText(dlqFilterFields[i], s); err != nil {
			return dlq.Filter{}, err
		}
	}
	if f.Kind != "" && !slices.Contains(errorKinds, f.Kind) {
		return dlq.Filter{}, fmt.Errorf("kind %q: use %s", f.Kind, strings.Join(errorKinds, " or "))
	}
	since, until, err := display.ParseTimeRange("since", f.Since, "until", f.Until, now)
	if err != nil {
		return dlq.Filter{}, err
	}
	out := dlq.Filter{OriginalTopic: f.OriginalTopic, Key: f.Key, ErrorContains: f.Error, ErrorKind: dlq.ErrorKind(f.Kind),
		ConsumerGroup: f.Group, TenantID: f.Tenant, Since: since, Until: until}
	if f.Partition != "" {
		p, err := strconv.ParseInt(f.Partition, 10, 32)
		if err != nil || p < 0 {
			return dlq.Filter{}, fmt.Errorf("partition %q: use a partition number, 0 or more", f.Partition)
		}
		out.Partitions = []int32{int32(p)}
	}
	if f.Offset != "" {
		o, err := strconv.ParseInt(f.Offset, 10, 64)
		if err != nil || o < 0 || o == math.MaxInt64 || f.Partition == "" {
			return dlq.Filter{}, fmt.Errorf("offset %q: use an offset, 0 or more, with a partition", f.Offset)
		}
		out.FromOffset, out.UntilOffset = o, o+1
	}
	if err := out.Validate(); err != nil {
		return dlq.Filter{}, err
	}
	return out, nil
}

// topicOf reads and checks the {topic} of a dead-letter page.
func topicOf(r *http.Request) (string, error) {
	topic := r.PathValue("topic")
	if err := topicname.Validate(topic); err != nil {
		return "", fmt.Errorf("%q is not a topic name: %w", topic, err)
	}
	if !strings.HasSuffix(topic, dlq.DefaultSuffix) {
		return "", fmt.Errorf("%q is not a dead-letter topic: their names end in %s", topic, dlq.DefaultSuffix)
	}
	return topic, nil
}

// topicRow is a dead-letter topic on the topics page.
type topicRow struct {
	Topic   string
	Indexed bool
	Summary dlqindex.Summary
	At      time.Time
	Err     string
}

// listIndexed is how many dead-letter topics the topics page follows and
// counts at once; it links the others.
const listIndexed = 20

// deadLetterTopics lists the cluster's dead-letter topics, with the
// counts of the first listIndexed (read in parallel, waiting at most
// firstWait for topics no page read before).
func (s *Server) deadLetterTopics(w http.ResponseWriter, r *http.Request) {
	topics, err := dlqindex.Topics(r.Context(), s.indexClient)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("list the topics of Kafka: %w", err))
		return
	}
	rows := make([]topicRow, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		rows[i].Topic = topic
		idx, ok := s.indexes.peek(topic)
		if !ok && i < listIndexed {
			idx, ok = s.indexes.get(topic)
		}
		if !ok {
			continue
		}
		wg.Go(func() {
			row := &rows[i]
			err := first(r.Context(), idx)
			if err == nil || isDeadline(err) {
				err = s.indexes.problem(topic)
			}
			if err != nil {
				row.Err = err.Error()
			}
			row.Indexed, row.Summary, row.At = true, idx.Summary(dlq.Filter{}), idx.RefreshedAt()
		})
	}
	wg.Wait()
	s.render(w, r, http.StatusOK, "dlqtopics", "Dead-letter topics", "dlq", rows)
}

// exists checks that topic is in the cluster, asking the brokers (which
// the console's clients never make create a topic).
func (s *Server) exists(topic string) error {
	if _, err := s.indexClient.Partitions(topic); err != nil {
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return fmt.Errorf("topic %q does not exist", topic)
		}
		return fmt.Errorf("look up topic %q in Kafka: %w", topic, err)
	}
	return nil
}

// isDeadline reports whether err is a page's wait running out.
func isDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// deadLettersData is a dead-letter topic's page.
type deadLettersData struct {
	Topic   string
	Filter  dlqFilter
	Kinds   []string
	Summary dlqindex.Summary
	Items   []dlqindex.Item
	Next    template.URL
	First   bool
	Indexed int
	At      time.Time
	Loading bool
	ToGroup bool
	Problem string
}

// deadLetters shows a dead-letter topic: counts and a filtered list.
func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	topic, err := topicOf(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	q := r.URL.Query()
	df := readDLQFilter(q)
	f, err := df.filter(time.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	after, err := dlqindex.ParseCursor(q.Get("after"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if err := s.exists(topic); err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	idx, ok := s.indexes.get(topic)
	if !ok {
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("the console follows %d dead-letter topics already; it drops those no page asked for in %v", maxIndexes, idleAfter))
		return
	}
	d := deadLettersData{Topic: topic, Filter: df, Kinds: errorKinds, First: after.IsZero(), ToGroup: len(s.cfg.RetryDelays) > 0}
	err = first(r.Context(), idx)
	if err == nil {
		err = s.indexes.problem(topic)
	}
	if err != nil {
		switch {
		case errors.Is(err, dlq.ErrNoTopic):
			s.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q does not exist", topic))
			return
		case isDeadline(err):
			d.Loading = true
		default:
			d.Problem = err.Error()
		}
	}
	d.Summary = idx.Summary(f)
	items, next := idx.List(f, after, pageSize)
	d.Items, d.Indexed, d.At = items, idx.Len(), idx.RefreshedAt()
	if !next.IsZero() {
		v := df.values()
		v.Set("after", next.String())
		d.Next = template.URL(v.Encode())
	}
	s.render(w, r, http.StatusOK, "dlqtopic", topic, "dlq", d)
}

// deadLetterData is one dead letter's page.
type deadLetterData struct {
	Topic    string
	Entry    dlq.Entry
	Original *dlq.Original
	// Place is the filter of this record alone, for "replay this one".
	Place   dlqFilter
	ToGroup bool
}

// deadLetter shows one dead letter: its envelope decoded, the original
// record's key, value and headers shown safely.
func (s *Server) deadLetter(w http.ResponseWriter, r *http.Request) {
	topic, err := topicOf(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	partition, err1 := strconv.ParseInt(r.PathValue("partition"), 10, 32)
	offset, err2 := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if err1 != nil || err2 != nil || partition < 0 || offset < 0 || offset == math.MaxInt64 {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q/%q is not a partition and offset", r.PathValue("partition"), r.PathValue("offset")))
		return
	}
	if err := s.exists(topic); err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	e, err := dlq.Get(r.Context(), s.indexClient, topic, int32(partition), offset)
	switch {
	case errors.Is(err, dlq.ErrNotFound), errors.Is(err, dlq.ErrNoTopic):
		s.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil:
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := deadLetterData{Topic: topic, Entry: e, Place: dlqFilter{Partition: strconv.Itoa(int(e.Partition)), Offset: strconv.FormatInt(e.Offset, 10)}, ToGroup: len(s.cfg.RetryDelays) > 0}
	if e.Err == nil {
		if o, err := e.Envelope.Original(); err == nil {
			d.Original = &o
		}
	}
	s.render(w, r, http.StatusOK, "dlqrecord", fmt.Sprintf("%s %d/%d", topic, e.Partition, e.Offset), "dlq", d)
}
