#!/usr/bin/env bash
# Metadata probe (mdtest -F -u -L) vs IOR's mdtest itself, side by side on one
# loop-mounted ext4: one task/worker, FILES empty files in a directory of its
# own (mdtest -u, -z 1 -b 1 -L: the files sit in the one leaf directory),
# create, stat, read (open+close: mdtest -e 0) and remove, run alternately
# A B A B ... so that drift in the machine affects both. Prints each round's
# rates and the median ratio probe/mdtest per op.
#
# Usage (root): bench/metadata_vs_mdtest.sh MDTEST [rounds] [files]
#
#   MDTEST   the mdtest binary, built from https://github.com/hpc/ior
#            (./bootstrap && ./configure && make; src/mdtest). Never
#            committed here.
#   rounds   default 5; files default 4096 (mdtest -I).
#
# On a shared machine (issue 17's numbers, 2 cores at load 2 to 8):
#   BENCH_REPEAT=3 BENCH_IMG_DIR=/dev/shm BENCH_NICE=-20 \
#       bench/metadata_vs_mdtest.sh /tmp/ior/src/mdtest 5
#
# Environment:
#   MPIRUN            how to start one mdtest task. Default: Open MPI's
#                     "mpirun --allow-run-as-root -np 1 --bind-to none"
#                     (--bind-to none: the probe is not pinned to a core, so
#                     neither is mdtest), or MPICH's "mpiexec -n 1".
#   PLATEAU_EXPORTER  a built plateau_exporter; default: go build of this tree.
#   BENCH_IMG_DIR     where the backing image goes (default a directory under
#                     /tmp; /dev/shm puts the "device" in RAM).
#   BENCH_FS_SIZE     size of the image (default 2G), written in full
#                     (fallocate, else dd) so that no block of it is
#                     allocated during a run.
#   BENCH_REPEAT      runs of each side per round (default 1), interleaved
#                     in the round's order (A B A B ... or B A B A ...); the
#                     round keeps each op's best rate of each side ("best of
#                     N", as noise on a shared machine only ever slows a run
#                     down).
#   BENCH_NICE        nice value both run at (default 0). The stat and read
#                     phases last about 10ms each: on a shared machine one
#                     time slice of someone else's job inside one of them
#                     halves its rate, for mdtest as for the probe; -10 (as
#                     root) keeps ordinary jobs out of them.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
mdtest=$(readlink -f "$1")
rounds=${2:-5}
files=${3:-4096}
nice=${BENCH_NICE:-0}
repeat=${BENCH_REPEAT:-1}
[ "$(id -u)" = 0 ] || { echo "needs root (loop device, mount)" >&2; exit 1; }
[ -x "$mdtest" ] || { echo "$1: not an executable mdtest" >&2; exit 1; }
for c in mkfs.ext4 losetup mount python3; do command -v $c >/dev/null || { echo "missing $c" >&2; exit 1; }; done
cd "$(dirname "$0")/.."

if [ -z "${MPIRUN:-}" ]; then
	if command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q "Open MPI"; then
		MPIRUN="mpirun --allow-run-as-root -np 1 --bind-to none"
	elif command -v mpiexec >/dev/null; then
		MPIRUN="mpiexec -n 1"
	else
		echo "no mpirun/mpiexec: install openmpi-bin or mpich, or set MPIRUN" >&2
		exit 1
	fi
fi

work=$(mktemp -d /tmp/plateau-mdbench.XXXXXX)
mnt="$work/mnt"
img="${BENCH_IMG_DIR:-$work}/plateau-mdbench.$$.img"
dev=""
cleanup() {
	if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
	if [ -n "$dev" ]; then losetup -d "$dev" || true; fi
	rm -f "$img"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bin=${PLATEAU_EXPORTER:-}
if [ -z "$bin" ]; then
	bin="$work/plateau_exporter"
	go build -o "$bin" ./cmd/plateau_exporter
fi

size=${BENCH_FS_SIZE:-2G}
if ! fallocate -l "$size" "$img" 2>/dev/null; then
	rm -f "$img"
	dd if=/dev/zero of="$img" bs=1M count=$(($(numfmt --from=iec "$size") >> 20)) status=none
fi
dev=$(losetup --find --show --direct-io=on "$img")
# Inode tables and journal initialized now, not by ext4lazyinit during a run.
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$dev"
mkdir "$mnt"
mount "$dev" "$mnt"
mkdir "$mnt/probe" "$mnt/mdtest"
chmod 0700 "$mnt/probe"

request=$(printf '{"target":"bench","path":"%s","hostname":"bench","probe":{"name":"md","kind":"metadata","workers":1,"files":%d,"file_size":0,"interval":3600000000000,"timeout":600000000000}}' "$mnt/probe" "$files")

# Each prints "create stat read remove" in operations per second.
probe_run() {
	sync
	# The daemon starts its workers with asynchronous preemption off
	# (probe/worker); so does this.
	printf '%s' "$request" | GODEBUG=asyncpreemptoff=1 nice -n "$nice" "$bin" probe-worker | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert not r.get("reason"), r
ops = {o["op"]: o["operations"] / o["seconds"] for o in r["ops"]}
print(" ".join("%.1f" % ops[k] for k in ("create", "stat", "read", "remove")))'
}
mdtest_run() {
	sync
	# shellcheck disable=SC2086
	nice -n "$nice" $MPIRUN "$mdtest" -F -u -L -z 1 -b 1 -I "$files" -d "$mnt/mdtest/run" 2>&1 | python3 -c '
import re, sys
text = sys.stdin.read()
rates = {}
for name, key in (("File creation", "create"), ("File stat", "stat"), ("File read", "read"), ("File removal", "remove")):
    m = re.search(r"^\s*" + name + r"\s*:?\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", text, re.M)
    if not m:
        sys.exit("mdtest printed no %r rate:\n%s" % (name, text))
    rates[key] = float(m.group(3))  # mean of the one iteration
print(" ".join("%.1f" % rates[k] for k in ("create", "stat", "read", "remove")))'
	rm -rf "$mnt/mdtest/run"
}

# best A B: each op's higher rate of two "create stat read remove" lines.
best() {
	python3 -c 'import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); print(" ".join(max(x, y, key=float) for x, y in zip(a, b)))' "$1" "$2"
}

results="$work/results"
for i in $(seq 1 "$rounds"); do
	p="0 0 0 0" m="0 0 0 0"
	for _ in $(seq 1 "$repeat"); do
		if [ $((i % 2)) = 1 ]; then
			p=$(best "$p" "$(probe_run)")
			m=$(best "$m" "$(mdtest_run)")
		else
			m=$(best "$m" "$(mdtest_run)")
			p=$(best "$p" "$(probe_run)")
		fi
	done
	echo "$i $p $m" | tee -a "$results" >&2
done

python3 - "$results" "$files" "$rounds" "$repeat" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
ops = ("create", "stat", "read", "remove")
best = f", each the best of {sys.argv[4]} runs" if sys.argv[4] != "1" else ""
print(f"metadata probe vs mdtest -F -u -L -z 1 -b 1 -I {sys.argv[2]}, 1 task, empty files, loop ext4, {sys.argv[3]} alternating rounds{best}")
print(f"{'round':>5} " + " ".join(f"{op + ' probe/s':>14} {op + ' mdtest/s':>15} {'ratio':>6}" for op in ops))
ratios = {op: [] for op in ops}
for r in rows:
    cells = []
    for j, op in enumerate(ops):
        p, m = r[1 + j], r[5 + j]
        ratios[op].append(p / m)
        cells.append(f"{p:>14.0f} {m:>15.0f} {p / m:>6.3f}")
    print(f"{int(r[0]):>5} " + " ".join(cells))
print("median ratio probe/mdtest: " + ", ".join(f"{op} {statistics.median(ratios[op]):.3f}" for op in ops))
print("min ratio probe/mdtest:    " + ", ".join(f"{op} {min(ratios[op]):.3f}" for op in ops))
PY
