// Package dlqindex keeps an in-memory index of one dead-letter topic, so the
// console can count and browse its dead letters in a few milliseconds
// instead of reading the topic from Kafka on every page.
//
// New makes an empty Index of a topic; Refresh reads what the topic
// appended since the last Refresh (dlq.ScanFrom), and forgets what
// retention deleted since. Summary counts the dead letters a dlq.Filter
// selects, by original topic, error kind, error and consumer group; List
// pages through them newest first with a keyset Cursor, which stays valid
// while records are appended. Both read an immutable snapshot, so they
// never wait for a Refresh and never see half of one. Topics lists the
// cluster's dead-letter topics.
//
// # Matching
//
// Summary and List select with dlq.Filter.Match itself, on a dlq.Entry
// rebuilt from the Item: the place (partition, offset, timestamp) and the
// envelope fields an Item holds (original topic and key, error, error
// kind, failure time, consumer group, attempts, replay count, tenant). A filter
// therefore selects here what dlq.Scan and `courier dlq list` select, and
// a field added to dlq.Filter on any of these works here unchanged. Two
// shortcuts keep a read of 100,000 records within a few milliseconds, both
// resting on what dlq.Filter documents (empty fields match everything, set
// fields must all match): the zero Filter selects every record without a
// call, and ErrorContains is asked once per distinct error rather than
// once per record.
//
// # What a Refresh costs
//
// Reading appended records costs at least 100 ms, which Sarama's consumer
// spends gathering partitions before it fetches, and then about 20 µs a
// record, mostly dlq.Decode (2 s for the first Refresh of 100,000 on 2
// cores). A Refresh that finds nothing new costs a round trip per
// partition; right after one that read records, though, it waits up to
// the client's Consumer.MaxWaitTime (500 ms by default), because the
// broker holds that read's last fetch on the connection it uses. So give
// the index a client of its own with a short MaxWaitTime (20 ms), and
// refresh in the background, not on the way to a page: Summary and List
// never wait for a Refresh. BENCHMARKS.md has the figures.
//
// # Memory
//
// A record costs the index about 80 bytes plus its key (9 MB for the
// 100,000 of BenchmarkIndex100k): original topics, error kinds, errors,
// consumer groups, tenants and the reasons of corrupt records are each kept once
// (interned), and forgotten once retention deleted the last record
// holding them. The error is kept in full, as ErrorContains
// matches it; courier never writes one longer than dlq.MaxErrorBytes, and
// a longer one (another tool's envelope) is cut as dlq.TruncateError cuts
// it, so a filter that would match past the cut does not match here.
package dlqindex
