#!/usr/bin/env bash
# measure-relay.sh: what one `courier relay` process costs while it drains a
# backlog, for sizing the relay's resources in relay/deployment.yaml.
#
# It starts `courier dev` (the broker, in a process of its own so that its
# memory does not count), makes a schema with courier's migrations, inserts
# EVENTS events (about 200 bytes of JSON each, 1,000 keys, as the relay
# benchmarks of BENCHMARKS.md), runs `courier relay` until the outbox is
# empty and prints the relay's peak resident memory (VmHWM), its CPU time
# (user + system), the drain's events/s, and its CPU over 10 idle seconds.
#
#   go build -o /tmp/courier ./cmd/courier
#   COURIER=/tmp/courier nice -n 10 bash deploy/kubernetes/measure-relay.sh
#   COURIER=/tmp/courier GOMAXPROCS=1 nice -n 10 bash deploy/kubernetes/measure-relay.sh   # as under a CPU limit of 1
#
# Needs psql and a PostgreSQL (`make services`); it drops its schema at the end.
set -euo pipefail

COURIER=${COURIER:-courier}
DB=${COURIER_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
EVENTS=${EVENTS:-500000}
SCHEMA=k8s_measure_$$
BROKER=127.0.0.1:${BROKER_PORT:-19092}
METRICS=127.0.0.1:${METRICS_PORT:-19090}
work=$(mktemp -d)

dev=
relay=
cleanup() {
	[ -n "$relay" ] && kill -TERM "$relay" 2>/dev/null && wait "$relay" 2>/dev/null
	[ -n "$dev" ] && kill -TERM "$dev" 2>/dev/null && wait "$dev" 2>/dev/null
	psql -q "$DB" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

"$COURIER" dev --listen "$BROKER" --data-dir "" --partitions 12 >"$work/dev.log" 2>&1 &
dev=$!
psql -q "$DB" -c "CREATE SCHEMA $SCHEMA"
"$COURIER" migrate up --database-url "$DB" --schema "$SCHEMA" >/dev/null 2>&1
note=$(printf '%*s' 140 '' | tr ' ' x)
payload="{\"order_id\":\"order-1\",\"n\":1,\"status\":\"created\",\"note\":\"$note\"}"
psql -q "$DB" -c "INSERT INTO $SCHEMA.courier_outbox (id, topic, partition_key, event_type, payload, content_type)
  SELECT gen_random_uuid(), 'courier.measure.orders', 'key-' || (i % 1000), 'OrderCreated', convert_to('$payload', 'UTF8'), 'application/json'
  FROM generate_series(1, $EVENTS) i"
psql -q "$DB" -c "VACUUM ANALYZE $SCHEMA.courier_outbox"

left() {
	psql -tA "$DB" -c "SELECT (SELECT count(*) FROM $SCHEMA.courier_outbox) + (SELECT count(*) FROM $SCHEMA.courier_outbox_waiting)"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$relay/stat"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$relay/status"; }

start=$(date +%s.%N)
"$COURIER" relay --database-url "$DB" --schema "$SCHEMA" --brokers "$BROKER" --metrics-addr "$METRICS" >"$work/relay.out" 2>"$work/relay.log" &
relay=$!
until [ "$(left)" = 0 ]; do
	kill -0 "$relay" 2>/dev/null || { echo "the relay exited:"; cat "$work/relay.log"; exit 1; }
	sleep 0.2
done
end=$(date +%s.%N)
busy=$(cpu_ticks)
sleep 10
idle=$(( $(cpu_ticks) - busy ))
tick=$(getconf CLK_TCK)

awk -v n="$EVENTS" -v s="$start" -v e="$end" -v c="$busy" -v i="$idle" -v t="$tick" -v h="$(hwm_kib)" 'BEGIN {
	d = e - s; cpu = c / t
	printf "drained %d events in %.1f s: %.0f events/s\n", n, d, n / d
	printf "relay CPU %.2f s: %.2f cores while draining, %.1f µs per event\n", cpu, cpu / d, cpu / n * 1e6
	printf "relay CPU over 10 idle seconds: %.3f cores\n", i / t / 10
	printf "relay peak resident memory (VmHWM): %.1f MiB\n", h / 1024
}'
