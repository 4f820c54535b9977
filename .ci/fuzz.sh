#!/usr/bin/env bash
# Runs each `func FuzzXxx` in the module for a short time ($1, default 10s).
# A crasher is written by go test under testdata/fuzz and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== fuzz $pkg $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
	n=$((n + 1))
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed 's/func //' | sort -u)
echo "fuzzed $n targets"
