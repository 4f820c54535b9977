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
#
# The targets run in lanes, one per core (FUZZ_LANES overrides), each
# fuzzer with one worker (-parallel=1): on 2 cores two fuzzers of one
# worker do the work of one fuzzer of two in half the wall time, and each
# target still gets the whole $1. A lane holds whole packages (the
# heaviest first into the lightest lane), so two fuzzers of one package
# never run at once, and a package's instrumented build is made once, by
# its lane's first target. A lane's lines are prefixed with its number.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
export GOTOOLCHAIN=${FUZZ_GOTOOLCHAIN:-go1.27.3}
lanes=${FUZZ_LANES:-$(nproc)}
echo "== fuzzing with $(go version), $lanes lanes"

targets=$(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed 's/func //' | sort -u)
# Packages by target count, most first; each goes to the lane with the
# fewest targets so far.
declare -a lane_pkgs lane_n
for ((l = 0; l < lanes; l++)); do lane_pkgs[l]=""; lane_n[l]=0; done
while read -r count dir; do
	best=0
	for ((l = 1; l < lanes; l++)); do
		((lane_n[l] < lane_n[best])) && best=$l
	done
	lane_pkgs[best]+=" $dir"
	lane_n[best]=$((lane_n[best] + count))
done < <(echo "$targets" | cut -d: -f1 | xargs -n1 dirname | sort | uniq -c | sort -k1,1nr -k2)

run_lane() {
	local l=$1 dir file name
	for dir in ${lane_pkgs[l]}; do
		while IFS=: read -r file name; do
			[[ $(dirname "$file") == "$dir" ]] || continue
			echo "== fuzz $dir $name ($fuzztime)"
			go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s -parallel=1 "$dir" 2>&1 || return 1
		done <<<"$targets"
	done
}

# Every package fuzzed is built with coverage instrumentation of all it
# imports, the standard library included. Built once here, by one go
# command using every core, the instrumented standard library is in the
# build cache before the lanes start, not compiled by each lane at once.
warm=$(mktemp -d)
trap 'rm -rf "$warm"' EXIT
echo "== warming the build cache: instrumented standard library"
go test -c -fuzz . -o "$warm/warm.test" ./probe/iocount

for ((l = 0; l < lanes; l++)); do
	echo "== lane $l: ${lane_n[l]} targets:${lane_pkgs[l]}"
done
pids=()
for ((l = 0; l < lanes; l++)); do
	(run_lane "$l" | sed -u "s/^/[$l] /"; exit "${PIPESTATUS[0]}") &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
echo "fuzzed $(echo "$targets" | wc -l) targets"
exit $status
