#!/usr/bin/env bash
# measure-payouts.sh: what the payouts worker (examples/payouts) costs while it
# pays a backlog, for sizing the consumer's resources in consumer/deployment.yaml.
#
# It starts `courier dev` (the broker, in a process of its own), lets the
# worker create `orders` (3 partitions) and its tiers, puts MESSAGES
# OrderCreated events in the outbox and lets `courier relay` publish them,
# then reads the worker's peak resident memory (VmHWM) and CPU time until it
# has logged every payment, and its CPU over 10 idle seconds. The worker pays
# its in-process stand-in PSP over loopback HTTP and dedupes in Redis, so
# both its PSP client and the stand-in count.
#
#   go build -o /tmp/courier ./cmd/courier && go build -o /tmp/payouts ./examples/payouts
#   COURIER=/tmp/courier PAYOUTS=/tmp/payouts nice -n 10 bash deploy/kubernetes/measure-payouts.sh
#
# Needs psql, redis-cli, PostgreSQL and Redis (`make services`); it drops its
# schema and its Redis keys (database REDIS_DB, 11 by default) at the end.
set -euo pipefail

COURIER=${COURIER:-courier}
PAYOUTS=${PAYOUTS:-payouts}
DB=${COURIER_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
MESSAGES=${MESSAGES:-20000}
REDIS_DB=${REDIS_DB:-11}
SCHEMA=k8s_measure_$$
BROKER=127.0.0.1:${BROKER_PORT:-19092}
work=$(mktemp -d)

dev=
relay=
worker=
cleanup() {
	for p in $worker $relay $dev; do
		kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	psql -q "$DB" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" 2>/dev/null || true
	redis-cli -n "$REDIS_DB" --scan --pattern '*payouts*' | xargs -r redis-cli -n "$REDIS_DB" DEL >/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

"$COURIER" dev --listen "$BROKER" --data-dir "" >"$work/dev.log" 2>&1 &
dev=$!
sleep 1
"$PAYOUTS" --brokers "$BROKER" --redis-url "redis://127.0.0.1:6379/$REDIS_DB" --topic orders --group payouts >"$work/payouts.log" 2>&1 &
worker=$!
until grep -q 'paying orders' "$work/payouts.log"; do
	kill -0 "$worker" 2>/dev/null || { echo "the worker exited:"; cat "$work/payouts.log"; exit 1; }
	sleep 0.2
done

psql -q "$DB" -c "CREATE SCHEMA $SCHEMA"
"$COURIER" migrate up --database-url "$DB" --schema "$SCHEMA" >/dev/null 2>&1
psql -q "$DB" -c "INSERT INTO $SCHEMA.courier_outbox (id, topic, partition_key, event_type, payload, content_type)
  SELECT gen_random_uuid(), 'orders', 'order-' || i, 'OrderCreated',
    convert_to('{\"order_id\":\"order-' || i || '\",\"amount_cents\":100,\"currency\":\"EUR\"}', 'UTF8'), 'application/json'
  FROM generate_series(1, $MESSAGES) i"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$worker/stat"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$worker/status"; }
paid() { grep -c 'msg=paid' "$work/payouts.log" || true; }

before=$(cpu_ticks)
start=$(date +%s.%N)
"$COURIER" relay --database-url "$DB" --schema "$SCHEMA" --brokers "$BROKER" >"$work/relay.out" 2>"$work/relay.log" &
relay=$!
until [ "$(paid)" -ge "$MESSAGES" ]; do
	kill -0 "$worker" 2>/dev/null || { echo "the worker exited:"; tail "$work/payouts.log"; exit 1; }
	sleep 0.2
done
end=$(date +%s.%N)
busy=$(( $(cpu_ticks) - before ))
kill -TERM "$relay" && wait "$relay" || true
relay=
sleep 10
idle=$(( $(cpu_ticks) - before - busy ))
tick=$(getconf CLK_TCK)

awk -v n="$MESSAGES" -v s="$start" -v e="$end" -v c="$busy" -v i="$idle" -v t="$tick" -v h="$(hwm_kib)" 'BEGIN {
	d = e - s; cpu = c / t
	printf "paid %d messages in %.1f s: %.0f messages/s (from the relay start)\n", n, d, n / d
	printf "worker CPU %.2f s: %.2f cores while paying, %.0f µs per message\n", cpu, cpu / d, cpu / n * 1e6
	printf "worker CPU over 10 idle seconds: %.3f cores\n", i / t / 10
	printf "worker peak resident memory (VmHWM): %.1f MiB\n", h / 1024
}'
