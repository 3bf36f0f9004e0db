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
count=0
while read -r dir name; do
	echo "fuzz $name in ./$dir for $FUZZTIME"
	$GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "./$dir/"
	count=$((count + 1))
done <<<"$targets"
echo "$count fuzz targets ran for $FUZZTIME each"
