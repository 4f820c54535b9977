#!/usr/bin/env bash
# Runs the root-only tests: the Test functions of the `//go:build integration`
# files, and only those. `go test -tags integration ./...` would also re-run
# every untagged test of those packages, which `make test` has already run
# (the dashboards package alone is five minutes of them), so each package
# gets a -run pattern naming its integration tests exactly. A test added to
# a tagged file is picked up by the same grep; TestMain of a tagged file
# still runs, as go test always runs it.
#
# Packages run one at a time (-p 1 before): they share loop devices,
# mounts, cgroups and the two cores the timing assertions need. The one
# exception, packaging, is below.
#
#   .ci/integration.sh            run them
#   .ci/integration.sh -list      print "package pattern" lines, run nothing
#
# Extra arguments after -- go to every go test (e.g. -- -v).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

mode=run
if [[ ${1:-} == -list ]]; then
	mode=list
	shift
fi
[[ ${1:-} == -- ]] && shift

# A build line that names the tag in any other form would have its tests
# silently left out of both runs: refuse it.
if odd=$(grep -rl --include='*_test.go' -E '^//go:build .*integration' . | xargs -r grep -Lx '//go:build integration'); [[ -n $odd ]]; then
	echo "integration.sh: only '//go:build integration' is understood; change the build line of:" >&2
	echo "$odd" >&2
	exit 2
fi

declare -A names
while IFS= read -r file; do
	dir=$(dirname "$file")
	for n in $(grep -oE '^func Test[A-Za-z0-9_]+\(' "$file" | sed -e 's/^func //' -e 's/($//'); do
		[[ $n == TestMain ]] && continue
		names[$dir]+="${names[$dir]:+|}$n"
	done
done < <(grep -rlx --include='*_test.go' '//go:build integration' . | sort)

# Work that has no timing assertion runs beside the packages that wait,
# under SCHED_IDLE (chrt --idle: it takes only the CPU nothing else
# wants), once cmd's and collector's tests are done: those two keep the
# CPU busy (characterize, the md probe) and create the user plateau and
# sudoers drop-ins. What runs beside:
#   - the packaging test (build the RPM, install it into a root of its
#     own, check its files and sudoers), which shares no root resource
#     with the alerting and cluster suites that follow;
#   - $INTEGRATION_BESIDE, a command (.ci/run passes `make fuzz`).
# Their output follows the others', each with its wall time.
beside=./packaging
after=./collector

run() {
	local dir=$1
	shift
	# -v: each test's time is in the log, so where CI's time goes is read, not guessed.
	$GO test -count=1 -p 1 -tags integration -timeout 40m -v -run "^(${names[$dir]})\$" "$@" "$dir"
}

declare -a bgpids bgnames bglogs
# background NAME COMMAND...: runs COMMAND under SCHED_IDLE, its output to
# a log printed at the end with its wall time.
background() {
	local name=$1 log
	shift
	log=$(mktemp)
	echo "== $name: started beside the next packages (SCHED_IDLE); its output comes at the end"
	(
		start=$SECONDS rc=0
		chrt --idle 0 "$@" || rc=$?
		echo "== $name took $((SECONDS - start)) s, rc=$rc"
		exit "$rc"
	) >"$log" 2>&1 &
	bgpids+=($!)
	bgnames+=("$name")
	bglogs+=("$log")
}

# What killed runs left (.ci/leftovers.sh) skews this one: it is named
# first, and whatever this run adds to it fails the run at the end, since
# every test must clean up after itself, also when it fails.
left_before=
if [[ $mode == run ]] && ! left_before=$(bash .ci/leftovers.sh); then
	echo "== left by an earlier, interrupted run (.ci/leftovers.sh -clean removes them):"
	echo "$left_before"
fi

status=0
for dir in $(printf '%s\n' "${!names[@]}" | sort); do
	if [[ $mode == list ]]; then
		echo "$dir ^(${names[$dir]})\$"
		continue
	fi
	[[ $dir == "$beside" ]] && continue
	echo "== integration $dir"
	run "$dir" "$@" || status=1
	if [[ $dir == "$after" ]]; then
		if [[ -n ${names[$beside]:-} ]]; then
			background "integration $beside" bash -c "$(declare -p names GO); $(declare -f run); run $beside \"\$@\"" _ "$@"
		fi
		if [[ -n ${INTEGRATION_BESIDE:-} ]]; then
			background "$INTEGRATION_BESIDE" bash -c "$INTEGRATION_BESIDE"
		fi
	fi
done
for i in "${!bgpids[@]}"; do
	wait "${bgpids[i]}" || status=1
	echo "== ${bgnames[i]} (ran beside the others)"
	cat "${bglogs[i]}"
	rm -f "${bglogs[i]}"
done
if [[ $mode == run ]]; then
	left_after=$(bash .ci/leftovers.sh) || true
	if added=$(comm -13 <(sort <<<"$left_before") <(sort <<<"$left_after") | grep .); then
		echo "== FAILED: the tests left these behind (.ci/leftovers.sh):"
		echo "$added"
		status=1
	fi
fi
exit $status
