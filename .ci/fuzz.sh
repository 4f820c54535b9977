#!/usr/bin/env bash
# Runs each `func FuzzXxx` in the module for a short time ($1, default 10s).
# A crasher is written by go test under testdata/fuzz and fails the run.
# Go minimizes each input that finds new coverage for up to 60 s by default;
# from a large seed (a 94 KB mountstats) that pass never ends and a short
# run would spend all of its time in it, so minimizing is capped at 5 s.
#
# Fuzzing runs on Go 1.27.3, not the module's 1.26. Go 1.26's fuzz
# coordinator can report its own -fuzztime deadline as a failure ("context
# deadline exceeded", no crasher written) when a worker is mid-call as the
# deadline fires; a loaded CI machine hit it on FuzzParseExposition. The race
# is golang/go#75804, fixed in internal/fuzz's stop() for Go 1.27 and not
# backported to 1.26. go1.27.3 is the toolchain the module proxy serves here;
# the go command fetches it like a module. FUZZ_GOTOOLCHAIN overrides it
# (FUZZ_GOTOOLCHAIN=local uses the Go on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
export GOTOOLCHAIN=${FUZZ_GOTOOLCHAIN:-go1.27.3}
echo "== fuzzing with $(go version)"
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== fuzz $pkg $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$pkg"
	n=$((n + 1))
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed 's/func //' | sort -u)
echo "fuzzed $n targets"
