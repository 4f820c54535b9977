#!/usr/bin/env bash
# Scrape cost of the real daemon over HTTP, on the node BenchmarkScrape
# builds from fixtures: 8 InfiniBand ports, 24 NVMe controllers, 4 GPFS file
# systems (fake mmpmon, mmgetstate, mmhealth), 40 NFS mounts and a Lustre
# client of 512 OSTs (--collector.lustre; debugfs read directly). It scrapes
# /metrics $SCRAPES times (default 300) one after another, as plain text
# and gzipped as Prometheus asks for it, and prints the
# latency quantiles, the body size and the daemon's own per-collector
# durations. No root needed. PLATEAU_FLAGS adds daemon flags, e.g.
# PLATEAU_FLAGS=--runtime.gomaxprocs=0 to compare with Go's default.
set -euo pipefail
cd "$(dirname "$0")/.."
scrapes=${SCRAPES:-300}
for c in curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
make -s build

work=$(mktemp -d)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
	return 0
}
trap cleanup EXIT

go test ./collector -run '^TestWriteBenchTree$' -count=1 -args -bench.tree="$work/node" >/dev/null
mkdir "$work/target"
# One light probe an hour: the scrapes measure the collectors, not a probe.
cat >"$work/plateau.yml" <<YML
targets:
  - name: bench
    path: $work/target
    probes:
      - {name: seq, kind: sequential, interval: 1h, timeout: 1m, file_size: 1MiB, block_size: 1MiB}
YML
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
g=$work/node/gpfs
./plateau_exporter --config.file="$work/plateau.yml" --web.listen-address="127.0.0.1:$port" \
	--path.sysfs="$work/node/sys" --path.procfs="$work/node/proc" \
	--collector.gpfs.mmpmon-path="$g/mmpmon" --collector.gpfs.mmgetstate-path="$g/mmgetstate" \
	--collector.gpfs.mmhealth-path="$g/mmhealth" --collector.gpfs.nsd --collector.lustre ${PLATEAU_FLAGS:-} 2>"$work/daemon.log" &
pid=$!
url="http://127.0.0.1:$port/metrics"
for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/-/ready" && break; sleep 0.1; done
# The first scrape starts the GPFS and Lustre loops and waits for their first answers.
curl -fs -o "$work/first.prom" "$url"

# Plain text, then gzip as Prometheus asks for it, alternating.
for _ in $(seq "$scrapes"); do
	curl -fs -o /dev/null -w 'plain %{time_total} %{size_download}\n' "$url"
	curl -fs --compressed -o /dev/null -w 'gzip %{time_total} %{size_download}\n' "$url"
done >"$work/times"
curl -fs -o "$work/last.prom" "$url"

python3 - "$work/times" "$work/last.prom" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1])]
for enc in ("plain", "gzip"):
    rs = [r for r in rows if r[0] == enc]
    t = sorted(float(r[1]) * 1000 for r in rs)
    q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
    print(f"{len(t)} {enc} scrapes of {int(rs[-1][2]) / 1024:.0f} KiB: p50 {q(0.5):.2f} ms, p90 {q(0.9):.2f} ms, p99 {q(0.99):.2f} ms, max {t[-1]:.2f} ms")
series = 0
for line in open(sys.argv[2]):
    if line.startswith("#"):
        continue
    series += 1
    if line.startswith("plateau_scrape_collector_duration_seconds"):
        print("  " + line.strip())
print(f"  {series} series in all")
PY
