// Package dlq is courier's dead-letter contract: the versioned JSON envelope
// that the outbox relay and the consumer write when they give up on a record,
// and that the inspector and the replayer read back.
//
// # Writing
//
// Build an envelope from the failed record and the failure with New, then
// turn it into the dead-letter record with Envelope.Record (envelope mode,
// the default) or Envelope.RawRecord (raw mode), and produce that record to
// Topic(original, suffix). A Writer does all of that through a
// record.Publisher (record.NewSyncPublisher of a Sarama SyncProducer), and
// falls back to raw mode for an envelope too large for the broker;
// Writer.Record renders the record alone, for a caller publishing it among
// others:
//
//   - Envelope mode: key = the original key, value = the JSON envelope
//     (Encode), headers = the dlq_* context headers (Envelope.Headers) plus
//     dlq_format=envelope.
//   - Raw mode, for schema-registry users: key, value and headers are the
//     original ones, untouched, followed by the dlq_* context headers and
//     dlq_format=raw (as Kafka Connect and Spring do). Original headers whose
//     names start with dlq_ are dropped in this mode, so a dead letter of a
//     dead letter replaces the context instead of appending to it.
//
// # Reading
//
// Read takes any dead-letter record, looks at its dlq_format header and
// returns the Envelope: Decode parses envelope mode, FromRaw rebuilds the
// envelope of a raw-mode record. Envelope.Original then restores the
// original key, value and headers byte for byte, which is what the replayer
// publishes.
//
// # Inspecting and replaying dead-letter topics
//
// Scan reads a dead-letter topic up to its end, and Get one record of it,
// without joining a consumer group or committing anything; Filter selects
// records by original topic, key, error text and kind, consumer group,
// tenant (the original ce_tenantid, Envelope.TenantID),
// failure time and place. ScanFrom reads only what was appended since an
// earlier read, for a caller that keeps up with a topic. Replay moves the
// selected records back to their original topic (the original partition,
// key, value and headers byte for byte, plus a replay_count header), in
// batches whose position a consumer group commits only after the topic
// acknowledged them; `courier dlq` is the same on the command line.
// ReplayConfig.Route sends each record elsewhere instead:
// retrytopics.ReplayRoute sends it to the first retry tier of the consumer
// group that failed it, so that only that group handles it again, while
// the original topic reaches every group. The consumer copies replay_count
// into the envelope of a record that fails again, and Replay refuses
// records replayed
// MaxReplays times, so a record cannot loop for ever.
//
// A bad record never stops a replay. A record that is not a readable
// dead letter (not JSON, a missing or out-of-range field, an original
// topic Kafka would refuse, counts over MaxCount, a raw-mode record with a
// missing or malformed dlq_* header) is reported once as ActionCorrupt and
// passed. A readable one whose target topic does not exist, is the
// dead-letter topic itself (a loop) or is a retry topic
// ("<t>.retry.<delay>", unless Route sends it there), or that Route
// refuses, is reported as ActionSkipped and stays for a later run; ReplayReport counts both, and the run goes on with the rest.
//
// # Byte-exact originals
//
// Kafka keys, values and header values are arbitrary bytes, while JSON
// strings are UTF-8, so each of them has a text form and a base64 form and
// exactly one is used:
//
//   - The value goes into original_message as JSON when it is valid UTF-8
//     JSON that encodes back to the same bytes (that is, it is already
//     compact) and is not the literal null; anything else goes into
//     original_message_base64. A nil value (a tombstone) leaves both fields
//     null; an empty value is original_message_base64 = "".
//   - The key goes into original_key when it is valid UTF-8 and into
//     original_key_base64 otherwise. A nil key leaves both out (original_key
//     is null); an empty key is original_key = "".
//   - Headers: Kafka headers are an ordered list whose names may repeat and
//     whose values may be binary or null, which a JSON object cannot hold.
//     original_header_list keeps them in order, one {"key", "value"} object
//     per header, with key_base64/value_base64 for bytes that are not UTF-8
//     and no value field at all for a null value. The replayer restores
//     headers from this list only. original_headers (text values) and
//     original_headers_base64 (the other values) are a name-to-value view of
//     the same headers for people and tools (jq, the inspector); for a
//     repeated name the last value wins, and headers whose names are not
//     UTF-8 appear only in the list. Validate refuses an envelope whose view
//     disagrees with its list, so an edit of the view cannot silently differ
//     from what replay publishes. An envelope without a list (written by
//     another tool from the documented map) is restored from the two maps,
//     in name order.
//
// Encode writes JSON with HTML escaping turned off, so original_message
// keeps its bytes. Re-encoding an envelope with a JSON library that escapes
// <, > and & (json.Marshal does) changes original_message; use Encode.
//
// # Sizes
//
// The error text is capped at MaxErrorBytes and every dlq_* header value at
// MaxHeaderValueBytes, so a record that fails again and again never grows
// past the broker's message size limit. The original key, value and headers
// are never cut.
//
// The guides tell how to use it: [Dead letters] and [Wire format].
//
// [Dead letters]: https://github.com/courierkit/courier/blob/main/docs/dead-letters.md
// [Wire format]: https://github.com/courierkit/courier/blob/main/docs/wire-format.md
package dlq
