#!/usr/bin/env bash
# Sequential probe vs fio, side by side on one loop-mounted ext4 file system:
# same file size, block size and O_DIRECT, one writer, close and fsync in
# the timing (fio: end_fsync=1), run alternately A B B A ... so drift in the
# machine affects both. Prints per-round throughput and the probe/fio ratio.
#
# Usage (root): bench/seq_vs_fio.sh [rounds] [file_size] [block_size]
# Needs: fio, mkfs.ext4, losetup, python3; builds ./plateau_exporter.
set -euo pipefail
rounds=${1:-6}
size=${2:-1GiB}
bs=${3:-4MiB}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (loop device, mount)"; exit 1; }
for c in fio mkfs.ext4 losetup python3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
make -s build

work=$(mktemp -d)
dev=""
cleanup() {
	mountpoint -q "$work/mnt" && umount "$work/mnt"
	[ -n "$dev" ] && losetup -d "$dev"
	rm -rf "$work"
}
trap cleanup EXIT
truncate -s 8G "$work/ext4.img"
dev=$(losetup --find --show --direct-io=on "$work/ext4.img")
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev"
mkdir "$work/mnt"
mount "$dev" "$work/mnt"
mkdir "$work/mnt/fio"

bytes=$(python3 -c "import sys; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}; s=sys.argv[1]; print(int(s[:-3])*u[s[-3:]])" "$size")
bsbytes=$(python3 -c "import sys; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}; s=sys.argv[1]; print(int(s[:-3])*u[s[-3:]])" "$bs")
request=$(printf '{"target":"bench","path":"%s","hostname":"bench","probe":{"name":"seq","kind":"sequential","workers":1,"file_size":%d,"block_size":%d,"interval":3600000000000,"timeout":600000000000}}' "$work/mnt" "$bytes" "$bsbytes")

probe_run() {
	echo "$request" | ./plateau_exporter probe-worker | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert not r.get("reason"), r
assert r["direct"], "probe did not use O_DIRECT"
ops = {o["op"]: o["bytes"] / o["seconds"] for o in r["ops"]}
print(ops["write"], ops["read"])'
}
fio_run() {
	rm -f "$work/mnt/fio/f0"
	local w r
	w=$(fio --name=w --filename="$work/mnt/fio/f0" --rw=write --bs="${bsbytes}" --size="${bytes}" --direct=1 \
		--ioengine=psync --end_fsync=1 --fallocate=none --output-format=json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"])')
	r=$(fio --name=r --filename="$work/mnt/fio/f0" --rw=read --bs="${bsbytes}" --size="${bytes}" --direct=1 \
		--ioengine=psync --output-format=json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"])')
	rm -f "$work/mnt/fio/f0"
	echo "$w $r"
}

results=$(mktemp)
for i in $(seq 1 "$rounds"); do
	if [ $((i % 2)) = 1 ]; then
		p=$(probe_run); f=$(fio_run)
	else
		f=$(fio_run); p=$(probe_run)
	fi
	echo "$i $p $f" >> "$results"
done

python3 - "$results" "$size" "$bs" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
print(f"sequential probe vs fio on loop ext4 (direct-io loop), file {sys.argv[2]}, block {sys.argv[3]}, O_DIRECT, 1 worker")
print(f"{'round':>5} {'probe wr MB/s':>14} {'fio wr MB/s':>12} {'ratio':>6} {'probe rd MB/s':>14} {'fio rd MB/s':>12} {'ratio':>6}")
wr, rd = [], []
for i, pw, pr, fw, fr in rows:
    wr.append(pw / fw); rd.append(pr / fr)
    print(f"{int(i):>5} {pw/1e6:>14.0f} {fw/1e6:>12.0f} {pw/fw:>6.3f} {pr/1e6:>14.0f} {fr/1e6:>12.0f} {pr/fr:>6.3f}")
print(f"median ratio probe/fio: write {statistics.median(wr):.3f}, read {statistics.median(rd):.3f}")
PY
rm -f "$results"
