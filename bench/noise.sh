#!/usr/bin/env bash
# Measures the operating-system noise a monitoring daemon adds to a compute
# node, the way HPC sites judge daemons (FWQ: Sandia/LLNL; Ferreira et al.,
# SC08): bench/fwq runs a fixed ~1 ms work quantum SAMPLES times on every
# core at once, pinned, and reports each core's mean overhead and its
# 99th, 99.9th percentile and largest detour. The states, in alternating
# rounds (A B C D A B C D ...) so that drift in the machine hits all alike:
#   idle            nothing else started
#   node_exporter   node_exporter (built from its source: NODE_EXPORTER=path)
#                   scraped every SCRAPE_INTERVAL
#   plateau_skip    plateau_exporter scraped every SCRAPE_INTERVAL, its
#                   probes skipped as on a node that runs a job (a fixture
#                   slurmd cgroup tree holding job_1); left out, with a
#                   message, by a binary without --slurm.cgroup-path
#   plateau_probe   plateau_exporter on its embedded default, probing and
#                   scraped every SCRAPE_INTERVAL
# Then each daemon's own cost when idle (no scrapes) for IDLE_SECONDS: CPU
# seconds per hour, RSS and the private (anonymous) part of it (the rest
# is pages of the binary, file-backed and shared), threads, and wakeups (context switches of all its
# threads) per second.
#
# Usage: NODE_EXPORTER=/path/to/node_exporter bench/noise.sh
#   ROUNDS=3 SAMPLES=30000 SCRAPE_INTERVAL=15 IDLE_SECONDS=300
# 30000 samples of 1 ms is 30 s a round, two scrapes of each daemon.
# Run it on an otherwise idle machine; it needs no root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SAMPLES=${SAMPLES:-30000}
SCRAPE_INTERVAL=${SCRAPE_INTERVAL:-15}
IDLE_SECONDS=${IDLE_SECONDS:-300}
NODE_EXPORTER=${NODE_EXPORTER:-}
for c in curl python3 taskset go; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
if [ -z "$NODE_EXPORTER" ] || [ ! -x "$NODE_EXPORTER" ]; then
	echo "set NODE_EXPORTER to a node_exporter binary built from its source:"
	echo "  git clone https://github.com/prometheus/node_exporter && (cd node_exporter && CGO_ENABLED=0 go build .)"
	exit 1
fi
make -s build

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/fwq" ./bench/fwq
ncpu=$(nproc)

# A slurmd cgroup v2 tree with one job, for the skipped state.
mkdir -p "$work/cgroup/system.slice/slurmstepd.scope/job_1" "$work/cgroup/system.slice/slurmstepd.scope/system" "$work/spool" "$work/tmp"
have_jobs=0
# The help is read whole before grep looks at it: with pipefail, grep -q
# quitting early would kill the writer with SIGPIPE and fail the test.
serve_help=$(./plateau_exporter serve --help 2>&1 || true)
grep -q -- '--slurm.cgroup-path' <<<"$serve_help" && have_jobs=1

port_ne=19100 port_pe=19731
# start_daemon STATE: starts the daemon of STATE in the background and
# prints its pid and the URL to scrape.
start_daemon() {
	case $1 in
	node_exporter)
		"$NODE_EXPORTER" --web.listen-address=127.0.0.1:$port_ne >"$work/ne.log" 2>&1 &
		echo "$! http://127.0.0.1:$port_ne/metrics" ;;
	plateau_skip)
		TMPDIR=$work/tmp ./plateau_exporter --web.listen-address=127.0.0.1:$port_pe \
			--slurm.cgroup-path="$work/cgroup" --slurm.spool-path="$work/spool" >"$work/pe.log" 2>&1 &
		echo "$! http://127.0.0.1:$port_pe/metrics" ;;
	plateau_probe)
		TMPDIR=$work/tmp ./plateau_exporter --web.listen-address=127.0.0.1:$port_pe >"$work/pe.log" 2>&1 &
		echo "$! http://127.0.0.1:$port_pe/metrics" ;;
	esac
}
wait_up() {
	for _ in $(seq 100); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done
	echo "daemon at $1 did not answer"; exit 1
}

# proc_cpu PID: CPU seconds of PID and of its children it has reaped (the
# probe workers), user and system.
proc_cpu() {
	python3 -c 'import os,sys; f=open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")",1)[1].split(); print(sum(int(x) for x in f[11:15])/os.sysconf("SC_CLK_TCK"))' "$1"
}
: >"$work/cpu.jsonl"

states=(idle node_exporter plateau_probe)
[ $have_jobs = 1 ] && states=(idle node_exporter plateau_skip plateau_probe)
[ $have_jobs = 1 ] || echo "note: this binary has no --slurm.cgroup-path; the plateau_skip state is left out"
: >"$work/samples.jsonl"
for round in $(seq "$ROUNDS"); do
	for st in "${states[@]}"; do
		dpid="" scraper=""
		if [ "$st" != idle ]; then
			read -r dpid url < <(start_daemon "$st")
			pids+=("$dpid")
			wait_up "$url"
			( while sleep "$SCRAPE_INTERVAL"; do curl -fs -o /dev/null "$url" || true; done ) &
			scraper=$!
			pids+=("$scraper")
		fi
		cpu0=$( [ -n "$dpid" ] && proc_cpu "$dpid" || echo 0 ); t0=$(date +%s.%N)
		fwqs=()
		for c in $(seq 0 $((ncpu - 1))); do
			GOMAXPROCS=1 GOGC=off taskset -c "$c" "$work/fwq" -samples "$SAMPLES" -core "$c" >"$work/fwq.$c" &
			fwqs+=($!)
		done
		wait "${fwqs[@]}"
		cpu1=$( [ -n "$dpid" ] && proc_cpu "$dpid" || echo 0 ); t1=$(date +%s.%N)
		# The daemon's own CPU time over the round, a share of all cores:
		# the mean time it can have taken from the work quanta.
		echo "{\"state\": \"$st\", \"round\": $round, \"daemon_cpu_share\": $(python3 -c "print(($cpu1-$cpu0)/(($t1-$t0)*$ncpu))")}" >>"$work/cpu.jsonl"
		for c in $(seq 0 $((ncpu - 1))); do
			python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["state"]=sys.argv[2]; d["round"]=int(sys.argv[3]); print(json.dumps(d))' "$work/fwq.$c" "$st" "$round" >>"$work/samples.jsonl"
		done
		[ -n "$scraper" ] && kill "$scraper" 2>/dev/null
		[ -n "$dpid" ] && { kill "$dpid"; wait "$dpid" 2>/dev/null || true; }
		echo "round $round $st done" >&2
	done
done

echo "## Noise on every core ($ncpu cores, $ROUNDS rounds of $SAMPLES x ~1 ms each, scrapes every ${SCRAPE_INTERVAL}s)"
python3 - "$work/samples.jsonl" "$work/cpu.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = [json.loads(l) for l in open(sys.argv[2])]
order = []
for r in rows:
    if r["state"] not in order: order.append(r["state"])
print("| state | mean overhead per core | daemon's own CPU, share of each core | detour p99 (us) | p99.9 (us) | max (us) |")
print("|---|---|---|---|---|---|")
for st in order:
    rs = [r for r in rows if r["state"] == st]
    med = lambda k: statistics.median(r[k] for r in rs)
    share = statistics.median(c["daemon_cpu_share"] for c in cpu if c["state"] == st)
    print(f"| {st} | {100*med('mean_overhead_ratio'):.3f}% | {100*share:.4f}% | {med('detour_p99_us'):.1f} | {med('detour_p999_us'):.1f} | {max(r['detour_max_us'] for r in rs):.0f} |")
print("\n(median over rounds and cores; max is the largest over all. The daemon's")
print("own CPU, with its probe workers', over the round's wall time and all cores,")
print("is the mean time it can have taken from the quanta, resolved far below")
print("the run-to-run drift of the mean overhead on a VM.)")
PY

# idle_cost NAME PID: CPU, RSS, threads and wakeups of PID over IDLE_SECONDS.
idle_cost() {
	python3 - "$1" "$2" "$IDLE_SECONDS" <<'PY'
import os, sys, time
name, pid, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
def snap():
    # CPU time from each thread's schedstat, in nanoseconds: /proc/PID/stat
    # counts in ticks of 10 ms, and an idle daemon uses a few ticks in
    # minutes, too few to tell 0.3 from 1 CPU s/hour.
    cpu, sw = 0.0, 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            cpu += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0]) / 1e9
            for l in open(f"/proc/{pid}/task/{t}/status"):
                if l.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    sw += int(l.split()[1])
        except FileNotFoundError:
            pass
    st = dict((k, v.split()[0] if v.split() else "") for k, v in (l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l))
    return cpu, sw, int(st["VmRSS"]), int(st["RssAnon"]), int(st["Threads"])
time.sleep(5)  # past start-up
c0, s0, _, _, _ = snap(); t0 = time.monotonic()
time.sleep(secs)
c1, s1, rss, anon, thr = snap(); t1 = time.monotonic()
dt = t1 - t0
print(f"| {name} | {3600*(c1-c0)/dt:.2f} | {rss/1024:.1f} | {anon/1024:.1f} | {thr} | {(s1-s0)/dt:.1f} |")
PY
}
echo
echo "## Idle cost (no scrapes, ${IDLE_SECONDS}s each, measured side by side)"
echo "| daemon | CPU s/hour | RSS MiB | of it private (anonymous) MiB | threads | wakeups/s |"
echo "|---|---|---|---|---|---|"
read -r ne_pid _ < <(start_daemon node_exporter); pids+=("$ne_pid")
idle_states=(plateau_probe)
[ $have_jobs = 1 ] && idle_states=(plateau_skip)
read -r pe_pid _ < <(start_daemon "${idle_states[0]}"); pids+=("$pe_pid")
idle_cost node_exporter "$ne_pid" >"$work/ne.cost" &
ne_cost=$!
idle_cost "plateau_exporter (${idle_states[0]})" "$pe_pid" >"$work/pe.cost" &
wait "$ne_cost" $!
cat "$work/ne.cost" "$work/pe.cost"
