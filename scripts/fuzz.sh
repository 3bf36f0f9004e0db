#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a bounded time each
# (FUZZTIME, default 10s). A target's committed corpus under
# testdata/fuzz/<Target>/ is its seed; an input that fails is written there
# by Go, so that the failure reproduces under plain `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-10s}"
targets=$(git ls-files '*_test.go' | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' \
	| sed -E 's/^(.*)\/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*/\1 \2/' | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets"
	exit 0
fi
# fuzz runs one target; Go's fuzzer can end a run whose time ran out
# while a worker still held an input with "context deadline exceeded" and
# no failing input: that run found nothing, and is run once more. Any
# other failure (a failing input, written to testdata/fuzz) fails at once.
fuzz() { # fuzz <dir> <name>
	local out
	out=$(mktemp)
	if $GO test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "./$1/" 2>&1 | tee "$out"; then
		rm -f "$out"
		return 0
	fi
	if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
		rm -f "$out"
		echo "fuzz $2: the fuzzer's time ran out mid-input, with no failing input; running it once more"
		$GO test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "./$1/"
		return
	fi
	rm -f "$out"
	return 1
}
count=0
while read -r dir name; do
	echo "fuzz $name in ./$dir for $FUZZTIME"
	fuzz "$dir" "$name"
	count=$((count + 1))
done <<<"$targets"
echo "$count fuzz targets ran for $FUZZTIME each"
