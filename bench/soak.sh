#!/usr/bin/env bash
# Soak: runs the daemon with every probe kind on short intervals for a while
# and samples its resident memory, threads, open descriptors and goroutines,
# so a leak of any of them (a worker not reaped, a descriptor not closed, a
# goroutine per run) shows as growth between the first and last rows.
#
# Usage: bench/soak.sh [seconds (default 600)] [sample every N seconds (default 60)]
# Needs no root: the probes run in a temporary directory, removed on exit.
set -euo pipefail
duration=${1:-600}
every=${2:-60}
cd "$(dirname "$0")/.."
for c in go curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done

work=$(mktemp -d)
pid=""
soak_cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap soak_cleanup EXIT

# Built apart from ./plateau_exporter so a concurrent `make build` does not
# swap the binary under the running daemon.
go build -o "$work/plateau_exporter" ./cmd/plateau_exporter
mkdir "$work/a" "$work/b"
# Two targets so that probes of different kinds overlap in time, as on a
# node probing scratch and home; every kind, and the cold-read keep set.
cat >"$work/plateau.yml" <<EOF
defaults:
  interval: 3s
  timeout: 2500ms
  splay: true
targets:
  - name: a
    path: $work/a
    probes:
      - {name: seq, kind: sequential, workers: 2, file_size: 4MiB, block_size: 1MiB, interval: 2s, timeout: 1800ms}
      - {name: cold, kind: sequential, workers: 1, file_size: 2MiB, block_size: 1MiB, read_after: 6s, interval: 4s, timeout: 3s}
      - {name: rand, kind: random, file_size: 8MiB, block_size: 4KiB, queue_depth: 8, duration: 300ms, interval: 5s, timeout: 3s}
  - name: b
    path: $work/b
    probes:
      - {name: shared, kind: shared_file, workers: 2, block_size: 1MiB, segment_size: 2MiB}
      - {name: md, kind: metadata, workers: 2, files: 64, file_size: 0, interval: 4s}
      - {name: md4k, kind: metadata, workers: 2, files: 64, file_size: 4KiB, interval: 5s}
EOF
"$work/plateau_exporter" check-config --config.file="$work/plateau.yml" --probe.hostname=soak >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
"$work/plateau_exporter" --config.file="$work/plateau.yml" --probe.hostname=soak --collector.disable-defaults \
	--web.listen-address="127.0.0.1:$port" --log.level=info 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 300); do curl -sf "$url/-/healthy" >/dev/null && break; sleep 0.1; done
curl -sf "$url/-/healthy" >/dev/null || { echo "daemon did not come up:"; cat "$work/daemon.log"; exit 1; }

metric_sum() { # NAME [LABEL_MATCH]: sum of the samples of NAME whose line contains LABEL_MATCH
	curl -sf "$url/metrics" | awk -v n="$1" -v m="${2:-}" 'index($0, n) == 1 && (m == "" || index($0, m)) { s += $NF } END { printf "%d", s }'
}
sample() {
	kill -0 "$pid" 2>/dev/null || { echo "daemon died:"; tail -20 "$work/daemon.log"; exit 1; }
	local rss threads fds gor ok
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
	threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
	fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
	gor=$(metric_sum 'go_goroutines ')
	ok=$(metric_sum 'plateau_probe_runs_total{' 'result="success"')
	printf '%8s %10s %8s %6s %11s %10s\n' "$1" "$rss" "$threads" "$fds" "$gor" "$ok"
}

echo "soak: $duration s, 6 probes of every kind on 2 targets, intervals 2-5 s, pid $pid"
printf '%8s %10s %8s %6s %11s %10s\n' "t (s)" "RSS (KiB)" "threads" "fds" "goroutines" "successes"
start=$(date +%s)
sample 0
next=$every
while :; do
	now=$(($(date +%s) - start))
	[ "$now" -ge "$duration" ] && break
	if [ "$now" -ge "$next" ]; then
		sample "$now"
		next=$((next + every))
	fi
	sleep 1
done
sample "$(($(date +%s) - start))"

echo
echo "runs by result over the soak:"
for r in success failure timeout skipped; do
	printf '  %-8s %s\n' "$r" "$(metric_sum 'plateau_probe_runs_total{' "result=\"$r\"")"
done
echo "  failures logged: $(grep -c 'msg="probe failed"' "$work/daemon.log" || true)"
grep 'msg="probe failed"' "$work/daemon.log" | tail -3 || true
left=$(find "$work/a" "$work/b" -mindepth 2 -maxdepth 2 -name 'run.*' | wc -l)
echo "  run directories present at the end: $left (at most one per target may be live)"
