#!/usr/bin/env bash
# Scale of the fleet rules (issue 16): the evaluation time and memory of the
# shipped rules (dashboards/rules.yml, alerts.yml and fleet_alerts.yml) on a fleet of
# N nodes. For each N given (default 5000), bench/fleetgen writes
# synthetic OpenMetrics text of every series the rules read, for
# node0001..nodeNNNN with the 7 probes (20 probe ops) of
# packaging/plateau.yml (its active "local" target and its GPFS example
# "scratch"), GPFS, InfiniBand and NVMe; `promtool tsdb create-blocks-from
# openmetrics` backfills it into a fresh TSDB; the Debian Prometheus starts
# on that TSDB with the rules and no scrape target; after FLEET_EVALS
# evaluations of every group the script reads prometheus_rule_group_*,
# the per-rule times of /api/v1/rules and the process's memory, and prints
# one table with a column per N:
#   bench/fleet_rules.sh 500 5000
#
# What the synthetic data is and is not (see bench/fleetgen/main.go):
# - FLEET_STEP (default 60s) is the scrape interval of the data. A fleet
#   scraped every 15s has 4x the samples in each range the rules read
#   ([45m], [6h], [1d], [1h], [5m]), so the range functions
#   (quantile_over_time, changes, max_over_time, rate, increase) cost up
#   to 4x what is measured here; the instant selectors, joins and
#   aggregations cost the same. 60s keeps the backfill to ~90M samples at
#   5000 nodes on a shared 2-core machine.
# - Only the series read over a range carry history (6h15m for the 6h
#   ranges; the 1d ranges read the same 6h15m, so max_over_time(...[1d])
#   and the [7d:1h] subquery read a quarter or less of what they read in
#   production); the series read only at the instant carry only the head
#   window (below).
# - Where the samples are, as in production: the last FLEET_HEAD_MINUTES
#   (default 50) of every series is sent to Prometheus's remote-write receiver,
#   so it sits in the head as a scrape would have put it, and only what is
#   older is backfilled into blocks. Instant selectors and the short
#   ranges then read the head, the long ones ([6h], [1d]) the blocks too,
#   as on a Prometheus that scrapes the fleet. (Backfilling everything,
#   as this script did at first, made every instant selector read the
#   blocks' index; Prometheus 2.42 checks the CRC of each postings list it
#   reads there, which took a third of its CPU on 5000 nodes, a cost a
#   real deployment pays only for its long ranges.)
# - The data runs on past the measurement: it ends FLEET_LEAD seconds
#   after the script starts (default 25m plus the time the backfill is
#   expected to take), and the head already holds those future samples;
#   each evaluation sees the samples up to its own time, so the [5m]
#   windows of rate() are full at every evaluation. The rules are loaded
#   (a reload) only once the remote write is done, and the report says how
#   long before the data's end that was; it must stay positive.
# - The head holds N x ~430 series, and the rules' output, so the RSS is
#   that of a Prometheus that ingests the fleet, less the scrapes.
# - promtool holds a whole block in memory and maps its input file: at
#   5000 nodes its last block (every series) peaked at 11 GB RSS, ~5 GB of
#   it the mapped input.
# - FLEET_EVAL (default 30s) is the evaluation interval, shorter than
#   the usual 1m to finish sooner; a group's duration does not depend on
#   it unless it exceeds it (then iterations are missed, which the table
#   shows). The first evaluation (cold page cache) is left out of the
#   median.
# - plateau:filesystem_plateau_bytes_per_second for target scratch is
#   added as the constant recording rules that `characterize --slurm`
#   writes, so that the busy-versus-broken rules have their input; that
#   group is reported too.
#
# - FLEET_REF=<git revision> measures the rule files of that
#   revision too, on a copy of the same blocks, after the worktree's rules
#   (so later after the data's end: see the comment where it runs), and
#   adds a column per N for them, e.g.
#     FLEET_REF=3602e13 bench/fleet_rules.sh 500 5000
# - Wall times of groups that run at once on a shared 2-core machine
#   measure the machine's load as much as the rules; the table adds the
#   CPU time Prometheus used per evaluation interval (utime + stime from
#   /proc), which says what a cycle of every group costs, and the sum of
#   the groups' median durations.
#
# - FLEET_TOP=N lists the N slowest rules of each group (default 3).
# - FLEET_PPROF=DIR saves a 60s CPU profile of each Prometheus after its
#   measured evaluations; FLEET_HOLD=SECONDS keeps it running that long
#   afterwards, for queries by hand.
#
# Runs at nice 10 (FLEET_NICE). Removes its temporary directory and stops
# Prometheus on exit. Needs go, promtool, prometheus, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 5000
step=${FLEET_STEP:-60s}
head_span=$((${FLEET_HEAD_MINUTES:-50} * 60))
# The head takes remote-written samples only within half a block range (1h
# here) of its newest one; older ones fail the write as "out of bounds".
if [ "$head_span" -gt 3600 ]; then
	echo "FLEET_HEAD_MINUTES must be at most 60: Prometheus's head refuses older samples"
	exit 1
fi
eval_interval=${FLEET_EVAL:-30s}
evals=${FLEET_EVALS:-5}
nice_level=${FLEET_NICE:-10}
ref=${FLEET_REF:-}
for c in go promtool prometheus curl python3; do command -v $c >/dev/null || { echo "missing $c (.ci/packages.txt)"; exit 1; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/fleet_rules.XXXXXX")
prom_pid=""
stop_prometheus() {
	if [ -n "$prom_pid" ]; then
		kill -TERM "$prom_pid" 2>/dev/null || true
		for _ in $(seq 1 60); do kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$prom_pid" 2>/dev/null || true
		wait "$prom_pid" 2>/dev/null || true
		prom_pid=""
	fi
}
cleanup() {
	stop_prometheus
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$work/fleetgen" ./bench/fleetgen
mkdir "$work/rules"
cp dashboards/rules.yml dashboards/alerts.yml dashboards/fleet_alerts.yml "$work/rules/"
echo "rules: $(cd dashboards && sha256sum rules.yml alerts.yml fleet_alerts.yml | awk '{printf "%s %.12s  ", $2, $1}')(git $(git rev-parse --short HEAD)$(git diff --quiet -- dashboards/rules.yml dashboards/alerts.yml dashboards/fleet_alerts.yml || echo ', with uncommitted changes'))"
sets=rules
if [ -n "$ref" ]; then
	mkdir "$work/ref"
	git show "$ref:dashboards/rules.yml" >"$work/ref/rules.yml"
	git show "$ref:dashboards/alerts.yml" >"$work/ref/alerts.yml"
	# Before the fleet's alerts had a file of their own, alerts.yml held them.
	git show "$ref:dashboards/fleet_alerts.yml" >"$work/ref/fleet_alerts.yml" 2>/dev/null || echo 'groups: []' >"$work/ref/fleet_alerts.yml"
	echo "reference rules: dashboards/rules.yml, alerts.yml of $ref ($(git rev-parse --short "$ref"))"
	sets="rules ref"
fi
cat >"$work/rules/filesystem_plateau.yml" <<'YML'
groups:
  - name: plateau.filesystem_plateau
    rules:
      - record: plateau:filesystem_plateau_bytes_per_second
        expr: vector(4.0e10)
        labels: {target: scratch, op: read}
      - record: plateau:filesystem_plateau_bytes_per_second
        expr: vector(3.2e10)
        labels: {target: scratch, op: write}
YML
[ -z "$ref" ] || cp "$work/rules/filesystem_plateau.yml" "$work/ref/"
# A group with its own, longer interval (rules.yml's plateau.causes.day, 5m)
# would make the FLEET_EVALS evaluations of every group take half an hour:
# it runs at FLEET_EVAL like the others here, which overstates its cost per
# interval (it is that cost every 5m in production) and keeps its duration
# per evaluation, the figure the table reports, as it is.
for set in $sets; do sed -i "s/^    interval: .*/    interval: $eval_interval/" "$work/$set"/*.yml; done
for set in $sets; do promtool check rules "$work/$set"/*.yml >/dev/null; done

for n in "$@"; do
	echo "== $n nodes"
	run="$work/run$n"
	mkdir -p "$run/om" "$run/data"
	lead=${FLEET_LEAD:-$((1500 + 60 + n / 10))}
	end=$(($(date +%s) + lead))
	if [ "$lead" -ge "$head_span" ]; then
		echo "FLEET_LEAD ${lead}s must be shorter than FLEET_HEAD_MINUTES (${head_span}s): the blocks must end before the rules start"
		exit 1
	fi
	t0=$(date +%s)
	/usr/bin/time -f "fleetgen: %es, max RSS %MKiB" nice -n "$nice_level" "$work/fleetgen" -nodes "$n" -end "$end" -step "$step" -head "${head_span}s" -out "$run/om" | tee "$run/gen.txt"
	echo "synthetic text: $(du -sh "$run/om" | cut -f1)"
	t1=$(date +%s)
	for f in "$run"/om/*.om; do
		/usr/bin/time -a -o "$run/promtool.time" -f "%e %M" \
			nice -n "$nice_level" promtool tsdb create-blocks-from openmetrics "$f" "$run/data" >>"$run/promtool.log" 2>&1 ||
			{ tail -20 "$run/promtool.log"; exit 1; }
		rm -f "$f"
	done
	t2=$(date +%s)
	awk '{s+=$1; if ($2>m) m=$2} END {printf "promtool: %d blocks, %.0fs, max RSS %dKiB\n", NR, s, m}' "$run/promtool.time"
	echo "TSDB: $(du -sh "$run/data" | cut -f1); generate $((t1 - t0))s, backfill $((t2 - t1))s"
	# The reference set runs on a pristine copy of the same blocks, after
	# the current set: its evaluations are later after the data's end, so
	# its [5m] windows are emptier and it is measured cheaper, never dearer,
	# than it would be in the current set's place.
	[ -z "$ref" ] || cp -a "$run/data" "$run/data_ref"
	for set in $sets; do
	data="$run/data"
	[ "$set" = rules ] || data="$run/data_ref"
	label=$n
	[ "$set" = rules ] || label="$n ($ref)"
	echo "-- rules of $([ "$set" = rules ] && echo the worktree || echo "$ref")"
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	# First without rules, to receive the head's samples; then the rules,
	# by a reload, so that no evaluation sees a half-written head.
	cat >"$run/prometheus.yml" <<YML
global:
  evaluation_interval: $eval_interval
YML
	# min = max block duration: no compaction of the backfilled blocks
	# while the rules are measured.
	nice -n "$nice_level" prometheus --config.file="$run/prometheus.yml" --storage.tsdb.path="$data" \
		--web.listen-address="127.0.0.1:$port" --web.enable-remote-write-receiver --web.enable-lifecycle \
		--storage.tsdb.min-block-duration=2h --storage.tsdb.max-block-duration=2h \
		--storage.tsdb.retention.time=30d >"$run/prometheus.log" 2>&1 &
	prom_pid=$!
	for _ in $(seq 1 1800); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 1; done
	/usr/bin/time -f "remote write: %es, fleetgen max RSS %MKiB" nice -n "$nice_level" "$work/fleetgen" -nodes "$n" -end "$end" -step "$step" \
		-head "${head_span}s" -remote-write "http://127.0.0.1:$port/api/v1/write" || { tail -30 "$run/prometheus.log"; exit 1; }
	cat >>"$run/prometheus.yml" <<YML
rule_files:
  - $work/$set/rules.yml
  - $work/$set/alerts.yml
  - $work/$set/fleet_alerts.yml
  - $work/$set/filesystem_plateau.yml
YML
	curl -sf -X POST "http://127.0.0.1:$port/-/reload" || { tail -30 "$run/prometheus.log"; exit 1; }
	python3 - "$port" "$evals" "$end" "$prom_pid" "$label" "$work/results.json" "$eval_interval" <<'PY' || { tail -30 "$run/prometheus.log"; exit 1; }
import json, os, statistics, sys, time, urllib.parse, urllib.request
port, evals, end, pid, nodes, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
interval = float(sys.argv[7].rstrip("s"))  # FLEET_EVAL, in seconds
top = int(os.environ.get("FLEET_TOP", "3"))  # slowest rules listed per group
base = "http://127.0.0.1:%s" % port

def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read().decode()

def metrics():
    from collections import defaultdict
    m = defaultdict(dict)
    for line in get("/metrics").splitlines():
        if not line or line[0] == "#":
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, labels = name_labels.partition("{")
        m[name][labels.rstrip("}")] = float(value)
    return m

def cpu_seconds():
    # utime + stime of Prometheus: the work the rules cost, which a shared
    # machine's other load inflates far less than it does wall times.
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def rss_hwm():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0

deadline = time.time() + 3600
while True:
    try:
        get("/-/ready")
        break
    except Exception:
        if time.time() > deadline:
            sys.exit("prometheus not ready")
        time.sleep(1)
print("rules loaded %.0fs before the data's end" % (end - time.time()), flush=True)

seen = {}  # group -> {lastEvaluation: (evaluationTime, {rule: time})}
first_eval = None
mem = []
while True:
    data = json.loads(get("/api/v1/rules"))["data"]["groups"]
    for g in data:
        key = os.path.basename(g["file"]) + ";" + g["name"]
        if g["lastEvaluation"].startswith("0001"):
            continue
        if first_eval is None:
            first_eval = time.time()
            cpu_first = cpu_seconds()
        rules = {}
        for r in g["rules"]:
            name = r.get("name")
            if r["type"] == "recording":
                label = name
            else:
                label = "alert " + name
            rules.setdefault(label, 0.0)
            rules[label] += r.get("evaluationTime", 0.0)
        seen.setdefault(key, {})[g["lastEvaluation"]] = (g["evaluationTime"], rules, len(g["rules"]))
    m = metrics()
    mem.append((m["process_resident_memory_bytes"][""], m["go_memstats_heap_inuse_bytes"][""]))
    if data and all(len(seen.get(os.path.basename(g["file"]) + ";" + g["name"], {})) >= evals for g in data):
        break
    if time.time() > deadline:
        sys.exit("rule groups did not evaluate %d times within the deadline" % evals)
    time.sleep(2)

# CPU per evaluation interval, from the first evaluation seen to the last.
cpu_per_interval = (cpu_seconds() - cpu_first) / max(1e-9, (time.time() - first_eval) / interval)
# What the rules found, so that a fast group is not one that found nothing.
found = {}
for q in ["sum(target:plateau_probe_regression:sum)", "sum(target:plateau_probe_regression_nodes:count)",
          "sum(target:plateau_probe_below_warning:sum)", "count(instance_target:plateau_slow_cause:rank)",
          "count(target_op:plateau_filesystem_utilization:ratio)"]:
    r = json.loads(get("/api/v1/query?query=" + urllib.parse.quote(q)))["data"]["result"]
    found[q] = r[0]["value"][1] if r else "none"
r = json.loads(get("/api/v1/query?query=" + urllib.parse.quote("count by (alertname, alertstate) (ALERTS)")))["data"]["result"]
found["ALERTS"] = ", ".join("%s/%s=%s" % (x["metric"]["alertname"], x["metric"]["alertstate"], x["value"][1]) for x in sorted(r, key=lambda x: x["metric"]["alertname"]))
for k, v in found.items():
    print("  %s: %s" % (k, v))
m = metrics()
def by_group(name):
    r = {}
    for labels, v in m.get(name, {}).items():
        for kv in labels.split(","):
            if kv.startswith("rule_group="):
                r[kv.split("=", 1)[1].strip('"').split("/")[-1]] = v
    return r
samples = by_group("prometheus_rule_group_last_evaluation_samples")
missed = by_group("prometheus_rule_group_iterations_missed_total")
failures = {}
for labels, v in m.get("prometheus_rule_evaluation_failures_total", {}).items():
    g = labels.split('rule_group="', 1)[1].split('"', 1)[0].split("/")[-1]
    failures[g] = v
groups = {}
for key, evs in seen.items():
    ordered = [evs[k] for k in sorted(evs)]
    warm = ordered[1:] if len(ordered) > 1 else ordered
    durs = [e[0] for e in warm]
    # The slowest rules, by their median over the warm evaluations.
    per_rule = {}
    for e in warm:
        for rule, t in e[1].items():
            per_rule.setdefault(rule, []).append(t)
    slow = sorted(((statistics.median(v), r) for r, v in per_rule.items()), reverse=True)[:top]
    groups[key] = {
        "median": statistics.median(durs), "max": max(durs), "first": ordered[0][0],
        "evals": len(ordered), "rules": ordered[-1][2],
        "samples": samples.get(key, float("nan")), "missed": missed.get(key, 0), "failures": failures.get(key, 0),
        "slowest": slow,
    }
quant = {k: v for k, v in m.get("prometheus_rule_evaluation_duration_seconds", {}).items()}
res = {
    "nodes": nodes,
    "groups": groups,
    "rule_eval_quantiles": quant,
    "rss": mem[-1][0], "rss_max_sampled": max(x[0] for x in mem), "rss_hwm": rss_hwm(),
    "heap_inuse": mem[-1][1], "heap_inuse_max_sampled": max(x[1] for x in mem),
    "found": found,
    "series_in_head": m.get("prometheus_tsdb_head_series", {}).get("", 0),
    "cpu_per_interval": cpu_per_interval,
    "groups_total": sum(g["median"] for g in groups.values()),
}
allres = json.load(open(out)) if os.path.exists(out) else []
allres.append(res)
json.dump(allres, open(out, "w"))
for k in sorted(groups):
    g = groups[k]
    print("%-40s median %.3fs max %.3fs first %.3fs (%d evals) samples %d missed %d failures %d" % (
        k, g["median"], g["max"], g["first"], g["evals"], g["samples"], g["missed"], g["failures"]))
    for t, r in g["slowest"]:
        print("    %.3fs  %s" % (t, r))
print("RSS %.0f MiB (high-water %.0f MiB), Go heap in use %.0f MiB (max seen %.0f MiB)" % (
    res["rss"] / 2**20, res["rss_hwm"] / 2**20, res["heap_inuse"] / 2**20, res["heap_inuse_max_sampled"] / 2**20))
print("Prometheus CPU %.2fs per %.0fs evaluation interval; sum of the groups' median durations %.3fs" % (
    cpu_per_interval, interval, res["groups_total"]))
PY
	if [ -n "${FLEET_PPROF:-}" ]; then
		# A CPU profile of Prometheus over two evaluation intervals, to say
		# which rules' work (or the engine's) the time goes to.
		mkdir -p "$FLEET_PPROF"
		curl -sf -o "$FLEET_PPROF/cpu.$n.$set.pb.gz" "http://127.0.0.1:$port/debug/pprof/profile?seconds=60" &&
			echo "CPU profile: $FLEET_PPROF/cpu.$n.$set.pb.gz"
	fi
	if [ -n "${FLEET_HOLD:-}" ]; then
		echo "holding Prometheus on 127.0.0.1:$port for ${FLEET_HOLD}s (data ended at $end)"
		sleep "$FLEET_HOLD"
	fi
	stop_prometheus
	done
	rm -rf "$run"
done

python3 - "$work/results.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))
cols = [r["nodes"] for r in res]
keys = sorted({k for r in res for k in r["groups"]}, key=lambda k: -max(r["groups"].get(k, {}).get("median", 0) for r in res))
print()
print("Rule-group evaluation time (median of the warm evaluations; max in parentheses), rules, samples of the last evaluation")
hdr = "%-40s %5s" % ("file;group", "rules") + "".join("  %22s %9s" % ("%s nodes: last dur" % c, "samples") for c in cols)
print(hdr)
for k in keys:
    row = None
    line = ""
    for r in res:
        g = r["groups"].get(k)
        if g is None:
            line += "  %22s %9s" % ("-", "-")
            continue
        row = g
        flag = " !" if g["median"] >= 1 or g["missed"] else ""
        line += "  %22s %9d" % ("%.3fs (%.3fs)%s" % (g["median"], g["max"], flag), g["samples"])
    print("%-40s %5s" % (k, "/".join(str(r["groups"][k]["rules"]) for r in res if k in r["groups"])) + line)
print("%-46s" % "RSS / high-water RSS" + "".join("  %32s" % ("%.0f / %.0f MiB" % (r["rss"] / 2**20, r["rss_hwm"] / 2**20)) for r in res))
print("%-46s" % "Go heap in use (last / max seen)" + "".join("  %32s" % ("%.0f / %.0f MiB" % (r["heap_inuse"] / 2**20, r["heap_inuse_max_sampled"] / 2**20)) for r in res))
print("%-46s" % "sum of the groups' median durations" + "".join("  %32s" % ("%.3fs" % r["groups_total"]) for r in res))
print("%-46s" % "Prometheus CPU per evaluation interval" + "".join("  %32s" % ("%.2fs" % r["cpu_per_interval"]) for r in res))
for r in res:
    q = r["rule_eval_quantiles"]
    print("%s nodes: prometheus_rule_evaluation_duration_seconds %s" % (
        r["nodes"], ", ".join("%s=%.4fs" % (k.split('"')[1], v) for k, v in sorted(q.items()) if "quantile" in k)))
PY
