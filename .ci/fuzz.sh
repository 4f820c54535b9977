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
# never run at once, and a package's instrumented test binary is built
# once (go test -c -fuzz) and run for each of its targets. A lane's lines
# are prefixed with its number.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
export GOTOOLCHAIN=${FUZZ_GOTOOLCHAIN:-go1.27.3}
lanes=${FUZZ_LANES:-$(nproc)}
echo "== fuzzing with $(go version), $lanes lanes"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# can_leave_idle: whether this process may move a child from SCHED_IDLE to
# the normal policy (root may; others only within RLIMIT_NICE).
can_leave_idle() {
	chrt --other 0 true 2>/dev/null
}

# FUZZ_TARGETS, a regular expression, picks targets by name (all by default).
targets=$(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed 's/func //' | sort -u |
	grep -E ":(${FUZZ_TARGETS:-.*})\$")
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

# The floor. Beside the integration suites (.ci/run) the fuzzers run under
# SCHED_IDLE, and a target whose $fuzztime falls while a suite keeps both
# cores busy gets next to nothing: wall time alone promises no fuzzing.
# A try is starved when it never got past its seeds: the fuzzing itself
# never started ("now fuzzing" not printed) or made no execs. A slower
# try is not: a target's rate varies within a run and from run to run far
# more than starvation moves it (the rate of its best 3-second window
# halved, tried as a floor, called 24 of 44 targets starved with nothing
# else running; CI4 and CI5 beside the suites made 3.03M and 2.86M execs,
# a run alone 2.60M). (The kernel's per-thread run and wait times were
# tried too and do not say it: a target that writes files, as the
# InfiniBand one does, waits at any priority.) A starved try is fuzzed
# again, up to $max_tries tries, the last under the normal policy, where
# the scheduler owes it a fair share. The test binary is built once per
# package and run directly, so a try is all fuzzing, no link.
max_tries=3
fuzzcache="$(go env GOCACHE)/fuzz"

# starved LOG: whether the try whose output is LOG was starved, as above;
# prints the execs it made.
starved() {
	awk '
		/now fuzzing/ { fuzzing = 1 }
		/^fuzz: elapsed: .*execs: / { for (i = 1; i <= NF; i++) if ($i == "execs:") n = $(i + 1) + 0 }
		END {
			printf "%d execs", n
			exit !(n == 0 || !fuzzing)
		}' "$1"
}

# fuzz_target DIR BINARY NAME: fuzzes one target until a try was not
# starved; prints a "floor" verdict per try.
fuzz_target() {
	local dir=$1 bin=$2 name=$3 try=1 log verdict
	local -a prio
	log=$(mktemp)
	while :; do
		prio=()
		((try == max_tries)) && can_leave_idle && prio=(chrt --other 0)
		echo "== fuzz $dir $name ($fuzztime, try $try)"
		(cd "$dir" && exec "${prio[@]}" "$bin" -test.run '^$' -test.fuzz "^${name}\$" \
			-test.fuzztime "$fuzztime" -test.fuzzminimizetime 5s -test.parallel 1 \
			-test.fuzzcachedir "$fuzzcache") 2>&1 | tee "$log"
		((PIPESTATUS[0] == 0)) || { rm -f "$log"; return 1; }
		if ! verdict=$(starved "$log"); then
			echo "== floor $name: $verdict, on try $try"
			break
		fi
		if ((try == max_tries)); then
			echo "== floor $name: $verdict, on the last try $try: starved"
			break
		fi
		echo "== starved $name: $verdict; fuzzed again"
		try=$((try + 1))
	done
	rm -f "$log"
}

run_lane() {
	local l=$1 dir file name bin
	for dir in ${lane_pkgs[l]}; do
		bin="$work/$(echo "$dir" | tr -c 'A-Za-z0-9\n' _).test"
		go test -c -fuzz . -o "$bin" "$dir" || return 1
		while IFS=: read -r file name; do
			[[ $(dirname "$file") == "$dir" ]] || continue
			fuzz_target "$dir" "$bin" "$name" || return 1
		done <<<"$targets"
	done
}

# Every package fuzzed is built with coverage instrumentation of all it
# imports, the standard library included. Built once here, by one go
# command using every core, the instrumented standard library is in the
# build cache before the lanes start, not compiled by each lane at once.
echo "== warming the build cache: instrumented standard library"
go test -c -fuzz . -o "$work/warm.test" ./probe/iocount

for ((l = 0; l < lanes; l++)); do
	echo "== lane $l: ${lane_n[l]} targets:${lane_pkgs[l]}"
done
pids=()
for ((l = 0; l < lanes; l++)); do
	(run_lane "$l" | sed -u "s/^/[$l] /" | tee "$work/lane$l.log"; exit "${PIPESTATUS[0]}") &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
echo "fuzzed $(echo "$targets" | wc -l) targets"
# Per target: its tries and the execs of the last, so a starved target is
# read, not guessed.
echo "== fuzz floor: target, tries, execs of the last try"
cat "$work"/lane*.log | awk '
	{ sub(/^\[[0-9]+\] /, "") }
	/^== fuzz / { name = $4; sub(/\)$/, "", $NF); tries[name] = $NF }
	/^== floor / { split($0, f, " "); ex[name] = f[4]; order[++n] = name; if ($0 ~ /: starved$/) low++ }
	END {
		for (i = 1; i <= n; i++) { t = order[i]; printf "%-34s %d %9d\n", t, tries[t], ex[t]; if (tries[t] > 1) again++ }
		printf "%d of %d targets fuzzed again for want of CPU; %d starved on all %s\n", again, n, low, "'"$max_tries"'"
	}'
exit $status
