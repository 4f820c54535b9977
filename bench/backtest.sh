#!/usr/bin/env bash
# Detection backtest (issue 14): replays the shared year of production
# series through the shipped rules and the reference rules (the rules as
# they were before the sudden-regression verdict) with Prometheus's PromQL
# engine and a Prometheus server's rule semantics, prints both side by side and checks the summary against the
# goals. No root needed. INPUT overrides the series file; extra arguments
# go to `plateau_exporter backtest` (e.g. --trials 20 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
input=${INPUT:-../shared/data/tokio-nersc-2017.csv}
[ -f "$input" ] || { echo "no series file $input (set INPUT)"; exit 1; }
command -v python3 >/dev/null || { echo "missing python3"; exit 1; }
make -s build
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
./plateau_exporter backtest --input "$input" --output json "$@" >"$out"
echo "backtest of $input took $(( $(date +%s) - start ))s"
python3 - "$out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
s = doc["summary"]
rows = [("page firing fraction", "page_firing_fraction"), ("page episodes / series-month", "page_episodes_per_month"),
        ("warning firing fraction", "warning_firing_fraction")]
fmt = lambda v: "-" if v is None else f"{v:.3f}"
print(f"{'figure':44} {'reference median':>16} {'reference p80':>13} {'current median':>14} {'current p80':>11}")
for name, k in rows:
    print(f"{name:44} {fmt(s['reference'][k+'_median']):>16} {fmt(s['reference'][k+'_p80']):>13} {fmt(s['current'][k+'_median']):>14} {fmt(s['current'][k+'_p80']):>11}")
for drop in sorted(s["current"]["detect"]):
    for name, k in [("new page within 3 runs", "new_page_within_3"), ("new page within 10 runs", "new_page_within_10"),
                    ("median delay (runs)", "median_delay_runs"), ("trials lost: page already firing", "firing_at_onset")]:
        r, c = s["reference"]["detect"][drop], s["current"]["detect"][drop]
        print(f"{'drop '+drop+': '+name:44} {fmt(r[k+'_median']):>16} {fmt(r[k+'_p80']):>13} {fmt(c[k+'_median']):>14} {fmt(c[k+'_p80']):>11}")
cur = s["current"]
goals = [
    ("page firing p80 <= 5%", cur["page_firing_fraction_p80"] <= 0.05),
    ("page episodes p80 <= 1 per series-month", cur["page_episodes_per_month_p80"] <= 1),
    ("50% drop: new page within 10 runs >= 90% (median series)", cur["detect"].get("0.5", {}).get("new_page_within_10_median", 0) >= 0.9),
    ("30% drop: new page within 10 runs >= 60% (median series)", cur["detect"].get("0.3", {}).get("new_page_within_10_median", 0) >= 0.6),
    ("50% drop: new page within 3 runs >= 75% (median series)", cur["detect"].get("0.5", {}).get("new_page_within_3_median", 0) >= 0.75),
]
print()
for g, ok in goals:
    print(("MET     " if ok else "NOT MET ") + g)
sys.exit(0 if all(ok for _, ok in goals) else 1)
PY
