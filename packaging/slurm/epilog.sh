#!/bin/bash
# Slurm epilog: measure the node's storage between jobs with
# `plateau_exporter probe` (issue 30). The daemon skips its probes while a
# job holds the node (when_job_running: skip), so a node that is never idle
# is never probed by the daemon; this is the documented way to measure it.
#
# Install on every compute node, e.g. as /etc/slurm/epilog.d/50-plateau.sh
# with Epilog=/etc/slurm/epilog.d/* in slurm.conf (Slurm 21.08+ runs each
# file of a glob), or call it from the site's existing epilog.
#
# What it does and why:
# - Runs at most once per PLATEAU_EPILOG_MIN_INTERVAL seconds (default
#   3600) per node: the node stays COMPLETING while the epilog runs, and a
#   cluster of short jobs must not pay a probe at every job end.
# - Runs as the daemon's user (PLATEAU_USER, default plateau): the probe
#   directory <path>/<hostname>/ must be owned by the user that probes it,
#   and the daemon refuses one owned by someone else. The epilog runs as
#   root (SlurmdUser).
# - `probe` never skips for a job. In the epilog the job that just ended may
#   still be visible (its cgroup, its extern step's socket) until slurmd has
#   cleaned up, so looking for jobs here would see the job being cleaned up
#   and never measure. Probes of one target do not overlap: `probe` waits
#   for the daemon's run on the target, at most one probe timeout.
# - Each probe is bounded by its timeout in plateau.yml; PLATEAU_EPILOG_TIMEOUT
#   (default 300 s) bounds the whole run on top, because a hung mount must
#   not keep the node out of service.
# - Always exits 0. A non-zero epilog drains the node; whether a slow file
#   system should drain nodes is NHC's decision (`plateau_exporter probe`
#   exit status 1 below plateau, 2 on error, in an NHC check), not this
#   script's. The result goes to syslog (tag plateau_exporter-epilog).
# - Every node of a large job runs its epilog at the same moment: choose
#   light probes (PLATEAU_PROBES, default every configured probe) so that a
#   1000-node job's end does not load the shared file system like a
#   benchmark.
set -uo pipefail

PLATEAU=${PLATEAU:-/usr/bin/plateau_exporter}
PLATEAU_USER=${PLATEAU_USER:-plateau}
CONFIG=${CONFIG:-/etc/plateau_exporter/plateau.yml}
STAMP=${PLATEAU_EPILOG_STAMP:-/run/plateau_exporter-epilog.stamp}
MIN_INTERVAL=${PLATEAU_EPILOG_MIN_INTERVAL:-3600}
TIMEOUT=${PLATEAU_EPILOG_TIMEOUT:-300}
# Space-separated probe names (--probe); empty: every configured probe.
PROBES=${PLATEAU_PROBES:-}

# syslog, or stderr where there is none (slurmd discards the epilog's
# output, so that only matters when run by hand).
log() {
	logger -t plateau_exporter-epilog -- "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null ||
		echo "plateau_exporter-epilog: job ${SLURM_JOB_ID:-?}: $*" >&2
}

[ -x "$PLATEAU" ] || exit 0

now=$(date +%s)
if [ -e "$STAMP" ]; then
	last=$(stat -c %Y "$STAMP" 2>/dev/null || echo 0)
	if [ $((now - last)) -lt "$MIN_INTERVAL" ]; then
		exit 0
	fi
fi
touch "$STAMP" 2>/dev/null || true

args=(--config.file="$CONFIG" probe --output=json)
for p in $PROBES; do
	args+=(--probe="$p")
done

out=$(timeout --kill-after=10 "$TIMEOUT" runuser -u "$PLATEAU_USER" -- "$PLATEAU" "${args[@]}" 2>&1)
status=$?
case $status in
0) log "probes at or above their plateau" ;;
1) log "a probe is below its warning ratio: $(printf '%s' "$out" | tr -s '\n' ' ' | cut -c1-900)" ;;
124 | 137) log "probes did not finish within ${TIMEOUT}s" ;;
*) log "probe exited $status: $(printf '%s' "$out" | tr -s '\n' ' ' | cut -c1-900)" ;;
esac
exit 0
