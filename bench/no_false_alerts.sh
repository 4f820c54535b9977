#!/usr/bin/env bash
# No false alerts (issue 6, acceptance 3): the alerting integration stack of
# dashboards/ (plateau_exporter on a loop-mounted ext4 with a baseline
# characterized on it, the Debian packages' Prometheus with the shipped
# rules and Alertmanager with the shipped route and inhibitions), never
# throttled, for N successful probe runs; fails if PlateauProbeRegression or PlateauProbeBelowPlateau
# was ever pending or firing, or reached the webhook, and prints the
# spread of the ratio the thresholds have to clear.
#
# The set-up is the Go test's, so this script and `make integration` share
# one implementation; the test only runs when PLATEAU_NO_FALSE_ALERTS=1.
#
# Usage: bench/no_false_alerts.sh [runs (default 30)]
# Needs root (loop device, mount, blkio cgroup), prometheus and
# prometheus-alertmanager (.ci/packages.txt). Takes about runs x 5s plus a
# minute of set-up.
set -euo pipefail
runs=${1:-30}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (loop device, mount, blkio cgroup)"; exit 1; }
command -v go >/dev/null || { echo "missing go"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
PLATEAU_NO_FALSE_ALERTS=1 PLATEAU_NO_FALSE_ALERTS_RUNS=$runs \
	go test -tags integration -count=1 -v -timeout 60m -run '^TestNoFalseAlerts$' ./dashboards/ >"$log" 2>&1 || status=$?
if [ "$status" != 0 ]; then
	cat "$log"
	echo "FAIL: see the log above"
	exit "$status"
fi
# The ratios per op, and the verdict.
grep -o 'RESULT .*' "$log" | sed 's/^RESULT //'
echo "PASS: no regression or below-plateau alert in $runs unthrottled probe runs"
