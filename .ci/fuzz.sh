#!/usr/bin/env bash
# Runs each `func FuzzXxx` in the module for a short time ($1, default 10s).
# A crasher is written by go test under testdata/fuzz and fails the run.
# Go minimizes each input that finds new coverage for up to 60 s by default;
# from a large seed (a 94 KB mountstats) that pass never ends and a short
# run would spend all of its time in it, so minimizing is capped at 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== fuzz $pkg $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$pkg"
	n=$((n + 1))
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed 's/func //' | sort -u)
echo "fuzzed $n targets"
