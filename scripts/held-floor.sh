#!/bin/sh
# held-floor.sh measures, with PostgreSQL's pgbench, what the events of a
# held partition cost the database in each of the relay's batches, on this
# machine: what BenchmarkRelayBesideAHeldPartition's neighbour pays for
# them at the least. Three costs, each a pgbench transaction on the
# outbox's own tables (made by courier's migrations, in a scratch schema):
#
#   park-20      the 20 held events of a batch move to the waiting table
#                (beside 10,000 that sleep there);
#   publish-20   the same 20 events go to the history instead, as they
#                would from a healthy partition;
#   check-520    the order check of a batch of 520 new events while
#                anything waits: one probe of the waiting table's key index
#                per event (it is skipped while nothing waits).
#
# Each insert is rolled back, so every transaction meets the same tables.
# Usage: scripts/held-floor.sh [database URL]; it needs psql, pgbench and go.
set -eu
db=${1:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}}
schema=courier_held_floor
dir=$(mktemp -d)
trap 'rm -rf "$dir"; psql -q "$db" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true' EXIT
psql -q "$db" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1
if ! go run ./cmd/courier migrate up --database-url "$db" --schema "$schema" >"$dir/migrate.log" 2>&1; then
	cat "$dir/migrate.log" >&2
	exit 1
fi
columns="seq, id, topic, partition_key, event_type, payload, content_type, created_at"
psql -q "$db" -v ON_ERROR_STOP=1 >/dev/null <<SQL
INSERT INTO $schema.courier_outbox_waiting ($columns, status, next_attempt_at, held_partition)
SELECT g, gen_random_uuid(), 'orders', 'sick-' || g, 'T', '{}', 'application/json', now(), 'pending', now() + interval '5 minutes', 0
FROM generate_series(1, 10000) g;
ANALYZE $schema.courier_outbox_waiting;
SQL
rows="SELECT 1000000000 + :base + g, gen_random_uuid(), 'orders', 'new-' || (:base + g), 'T', '{}', 'application/json', now()"
cat >"$dir/park-20.sql" <<SQL
\set base random(1, 1000000000)
BEGIN;
INSERT INTO $schema.courier_outbox_waiting ($columns, status, next_attempt_at, held_partition)
$rows, 'pending', now() + interval '5 minutes', 0 FROM generate_series(1, 20) g;
ROLLBACK;
SQL
cat >"$dir/publish-20.sql" <<SQL
\set base random(1, 1000000000)
BEGIN;
INSERT INTO $schema.courier_outbox_published ($columns, retry_count, published_at)
$rows, 0, now() FROM generate_series(1, 20) g;
ROLLBACK;
SQL
cat >"$dir/check-520.sql" <<SQL
\set base random(1, 1000000000)
SELECT count(*) FROM generate_series(1, 520) g
WHERE EXISTS (SELECT FROM $schema.courier_outbox_waiting w
    WHERE hashtextextended(w.partition_key, hashtextextended(w.topic, 0)) = hashtextextended('healthy-' || (:base + g), hashtextextended('orders', 0))
      AND w.topic = 'orders' AND w.partition_key = 'healthy-' || (:base + g) OFFSET 0);
SQL
for case in park-20 publish-20 check-520; do
	latency=$(pgbench -n -M prepared -c 1 -T 10 -f "$dir/$case.sql" "$db" 2>/dev/null | sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p')
	echo "$case: $latency ms a transaction"
done
