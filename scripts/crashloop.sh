#!/usr/bin/env bash
# Runs the consumer's kill test (TestGroupWithRetryTiersSurvivesRepeatedKills,
# consumer/crashloop_test.go) N times with the figures of issue 16 point 8:
# two members of a group with retry tiers of 100ms and 300ms, 4 partitions,
# 6,000 messages, 12 SIGKILLs and restarts, for 1 and for 4 workers.
# Not run by CI (it takes minutes); see CRASHLOOP.md for recorded results.
#
#   scripts/crashloop.sh [N]        N runs, default 20
#
# The members run with dynamic membership and the consumer's default Sarama
# config (consumer.NewSaramaConfig). Environment: RACE=1 builds with -race;
# COURIER_CRASHLOOP_MEMBERSHIP=static gives the members static membership;
# COURIER_CRASHLOOP_SARAMA=fast gives them test-sized waits; KEEP_LOGS=DIR
# keeps every run's log in DIR (failed runs' logs are always kept, in a
# temporary directory that is printed). It needs only Go: the broker is
# kfake, in process.
set -euo pipefail

runs=${1:-20}
cd "$(dirname "$0")/.."
logs=${KEEP_LOGS:-$(mktemp -d -t courier-crashloop.XXXXXX)}
mkdir -p "$logs"
bin="$logs/consumer.test"
build=(go test -c -o "$bin")
if [[ "${RACE:-}" == 1 ]]; then
	build+=(-race)
fi
"${build[@]}" ./consumer/

echo "# $(date -u +%Y-%m-%dT%H:%MZ) scripts/crashloop.sh $runs (race=${RACE:-0} membership=${COURIER_CRASHLOOP_MEMBERSHIP:-dynamic} sarama=${COURIER_CRASHLOOP_SARAMA:-consumer-default}) on $(nproc) cores"
passed=0
for i in $(seq 1 "$runs"); do
	log="$logs/run-$i.log"
	start=$(date +%s)
	set +e
	(cd consumer && COURIER_CRASHLOOP=1 "$bin" -test.run '^TestGroupWithRetryTiersSurvivesRepeatedKills$' -test.count=1 -test.v -test.timeout 20m) >"$log" 2>&1
	rc=$?
	set -e
	took=$(($(date +%s) - start))
	# One CRASHLOOP line per case (workers=1, workers=4), from the test's log.
	cases=$(grep -o 'CRASHLOOP workers=[0-9]* .*' "$log" | sed 's/^CRASHLOOP //' | sort | paste -sd ';' - || true)
	if [[ $rc == 0 ]]; then
		passed=$((passed + 1))
		verdict=pass
		[[ -n "${KEEP_LOGS:-}" ]] || rm -f "$log"
	else
		verdict="FAIL (log: $log)"
	fi
	printf 'run %2d/%d %s %ss: %s\n' "$i" "$runs" "$verdict" "$took" "${cases:-no case finished}"
done
rm -f "$bin"
echo "# $passed of $runs runs passed: every message handled or dead-lettered, offsets committed to the end of the main topic and both retry tiers"
[[ $passed == "$runs" ]]
