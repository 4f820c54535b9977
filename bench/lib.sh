# Shared set-up for the bench/*_vs_fio.sh scripts: a loop-mounted ext4 with
# direct I/O to its backing file, the probe run through its worker command,
# the alternating rounds, and sizes in the config's units. Source it; it
# sets $work, $mnt and $img and removes everything on exit.
# BENCH_IMG_DIR puts the backing file elsewhere: on a tmpfs (/dev/shm) the
# "device" is RAM, so a ratio shows the engines' own overhead rather than a
# shared disk's noise.

[ "$(id -u)" = 0 ] || { echo "needs root (loop device, mount)"; exit 1; }
for c in fio mkfs.ext4 losetup python3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
make -s build

work=$(mktemp -d)
mnt="$work/mnt"
img="${BENCH_IMG_DIR:-$work}/plateau-bench.$$.img"
dev=""
bench_cleanup() {
	mountpoint -q "$mnt" && umount "$mnt"
	[ -n "$dev" ] && losetup -d "$dev"
	rm -rf "$work"
	rm -f "$img"
	return 0
}
trap bench_cleanup EXIT
truncate -s "${BENCH_FS_SIZE:-8G}" "$img"
dev=$(losetup --find --show --direct-io=on "$img")
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev"
mkdir "$mnt"
mount "$dev" "$mnt"
mkdir "$mnt/fio"

# bytes SIZE: 4KiB, 8MiB, 1GiB -> bytes
bytes() {
	python3 -c "import sys; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}; s=sys.argv[1]; print(int(s[:-3])*u[s[-3:]])" "$1"
}

# probe_rates PROBE_JSON: runs one probe (the "probe" object of a request)
# through `plateau_exporter probe-worker` on $mnt and prints
# "op:bytes_per_second:operations_per_second" for each op.
probe_rates() {
	printf '{"target":"bench","path":"%s","hostname":"bench","probe":%s}' "$mnt" "$1" |
		./plateau_exporter probe-worker | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert not r.get("reason"), r
for o in r["ops"]:
    print("%s:%f:%f" % (o["op"], o["bytes"] / o["seconds"], o["operations"] / o["seconds"]))'
}

# probe_write_read PROBE_JSON: prints "write_bps read_bps" of one probe run.
probe_write_read() {
	local out
	out=$(probe_rates "$1")
	echo "$(grep ^write: <<<"$out" | cut -d: -f2) $(grep ^read: <<<"$out" | cut -d: -f2)"
}

# alternate ROUNDS RESULTS: runs probe_run and fio_run (defined by the
# script) ROUNDS times, alternating which goes first so drift in the
# machine affects both, and appends "round <probe_run output> <fio_run
# output>" lines to RESULTS.
alternate() {
	local rounds=$1 results=$2 i p f
	for i in $(seq 1 "$rounds"); do
		if [ $((i % 2)) = 1 ]; then p=$(probe_run); f=$(fio_run); else f=$(fio_run); p=$(probe_run); fi
		echo "$i $p $f" >>"$results"
	done
}

# fio_bw RW ARGS...: runs fio with JSON output and prints the job's bytes/s.
fio_bw() {
	local rw=$1
	shift
	fio --output-format=json "$@" | python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$rw']['bw_bytes'])"
}

# ratio_table TITLE FILE: FILE has lines "round probe_write probe_read fio_write fio_read";
# prints per-round MB/s and the median probe/fio ratios.
ratio_table() {
	python3 - "$1" "$2" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[2])]
print(sys.argv[1])
print(f"{'round':>5} {'probe wr MB/s':>14} {'fio wr MB/s':>12} {'ratio':>6} {'probe rd MB/s':>14} {'fio rd MB/s':>12} {'ratio':>6}")
wr, rd = [], []
for i, pw, pr, fw, fr in rows:
    wr.append(pw / fw); rd.append(pr / fr)
    print(f"{int(i):>5} {pw/1e6:>14.0f} {fw/1e6:>12.0f} {pw/fw:>6.3f} {pr/1e6:>14.0f} {fr/1e6:>12.0f} {pr/fr:>6.3f}")
print(f"median ratio probe/fio: write {statistics.median(wr):.3f}, read {statistics.median(rd):.3f}")
PY
}
