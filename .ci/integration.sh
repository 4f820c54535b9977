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
# mounts, cgroups and the two cores the timing assertions need.
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

status=0
for dir in $(printf '%s\n' "${!names[@]}" | sort); do
	pattern="^(${names[$dir]})\$"
	if [[ $mode == list ]]; then
		echo "$dir $pattern"
		continue
	fi
	echo "== integration $dir"
	# -v: each test's time is in the log, so where CI's time goes is read, not guessed.
	$GO test -count=1 -p 1 -tags integration -timeout 40m -v -run "$pattern" "$@" "$dir" || status=1
done
exit $status
