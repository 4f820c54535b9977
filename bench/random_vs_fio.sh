#!/usr/bin/env bash
# Random probe vs fio, side by side on one loop-mounted ext4 file system:
# fio --ioengine=libaio --iodepth=16 --direct=1 randread and randwrite on
# the probe's own kept file (<mnt>/bench/keep.rand/random.dat), same block
# size, depth and time, run alternately A B B A ... so drift in the machine
# affects both. fio runs with norandommap so that, like the probe, it draws
# offsets uniformly with replacement. Prints per-round IOPS and mean
# latency, and the median probe/fio ratios.
#
# Usage (root): bench/random_vs_fio.sh [rounds] [seconds] [file_size] [block_size] [queue_depth]
# BENCH_IMG_DIR puts the loop device's backing file elsewhere: on a tmpfs
# (/dev/shm) the "device" is RAM, so the ratio shows the engines' own
# overhead instead of a shared disk's noise.
# Needs: fio, mkfs.ext4, losetup, python3; builds ./plateau_exporter.
set -euo pipefail
rounds=${1:-6}
secs=${2:-5}
size=${3:-1GiB}
bs=${4:-4KiB}
depth=${5:-16}
cd "$(dirname "$0")/.."
. bench/lib.sh
results="$work/results"
size_b=$(bytes "$size")
bsbytes=$(bytes "$bs")
request=$(printf '{"target":"bench","path":"%s","hostname":"bench","probe":{"name":"rand","kind":"random","file_size":%d,"block_size":%d,"queue_depth":%d,"duration":%d,"interval":3600000000000,"timeout":600000000000}}' \
	"$mnt" "$size_b" "$bsbytes" "$depth" "$((secs * 1000000000))")
file="$mnt/bench/keep.rand/random.dat"

# Prints read IOPS, write IOPS, read and write mean latency (s).
probe_run() {
	echo "$request" | ./plateau_exporter probe-worker | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert not r.get("reason"), r
assert r["direct"] and r["engine"] == "libaio", ("probe did not run O_DIRECT with libaio", r["direct"], r["engine"])
ops = {o["op"]: o for o in r["ops"]}
rd, wr = ops["read"], ops["write"]
print(rd["operations"] / rd["seconds"], wr["operations"] / wr["seconds"],
      rd["latency"]["sum"] / rd["latency"]["count"], wr["latency"]["sum"] / wr["latency"]["count"])'
}
fio_one() {
	fio --name="$1" --filename="$file" --rw="$1" --bs="$bsbytes" --size="$size_b" --direct=1 \
		--ioengine=libaio --iodepth="$depth" --runtime="$secs" --time_based --norandommap \
		--output-format=json | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0][sys.argv[1]]
print(j["iops"], j["lat_ns"]["mean"] / 1e9)' "$2"
}
fio_run() {
	local r w
	r=$(fio_one randread read)
	w=$(fio_one randwrite write)
	set -- $r $w
	echo "$1 $3 $2 $4"
}

# The first run preallocates the file (untimed here) so that every round,
# probe or fio, works on the same complete file.
echo "$request" | ./plateau_exporter probe-worker >/dev/null
[ "$(stat -c %s "$file")" = "$size_b" ] || { echo "probe did not preallocate $file"; exit 1; }

alternate "$rounds" "$results"
# fio must not have changed what makes the kept file valid for the probe.
[ "$(stat -c '%s %a' "$file")" = "$size_b 600" ] || { echo "kept file changed: $(stat -c '%s %a' "$file")"; exit 1; }

python3 - "$results" "$size" "$bs" "$depth" "$secs" "$(findmnt -n -o FSTYPE -T "$(dirname "$img")" | head -1)" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
print(f"random probe (libaio engine) vs fio --ioengine=libaio on loop ext4 (direct-io loop on {sys.argv[6]}), file {sys.argv[2]}, "
      f"block {sys.argv[3]}, depth {sys.argv[4]}, {sys.argv[5]}s per phase, O_DIRECT")
print(f"{'round':>5} {'probe rd IOPS':>14} {'fio rd IOPS':>12} {'ratio':>6} {'probe wr IOPS':>14} {'fio wr IOPS':>12} {'ratio':>6}"
      f" {'rd lat µs p/f':>14} {'wr lat µs p/f':>14}")
rd, wr = [], []
for i, pr, pw, plr, plw, fr, fw, flr, flw in rows:
    rd.append(pr / fr); wr.append(pw / fw)
    print(f"{int(i):>5} {pr:>14.0f} {fr:>12.0f} {pr/fr:>6.3f} {pw:>14.0f} {fw:>12.0f} {pw/fw:>6.3f}"
          f" {plr*1e6:>6.0f}/{flr*1e6:<7.0f} {plw*1e6:>6.0f}/{flw*1e6:<7.0f}")
print(f"median ratio probe/fio: read {statistics.median(rd):.3f}, write {statistics.median(wr):.3f}")
PY
