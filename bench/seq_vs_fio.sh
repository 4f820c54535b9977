#!/usr/bin/env bash
# Sequential probe (IOzone N-to-N) vs fio, side by side on one loop-mounted
# ext4: same file size, block size and O_DIRECT, one writer, close and
# fsync in the timing (fio: end_fsync=1, no fallocate, like the probe), run
# alternately A B B A ... so drift in the machine affects both.
#
# Usage (root): bench/seq_vs_fio.sh [rounds] [file_size] [block_size]
set -euo pipefail
rounds=${1:-6}
size=${2:-1GiB}
bs=${3:-4MiB}
cd "$(dirname "$0")/.."
. bench/lib.sh
size_b=$(bytes "$size")
bs_b=$(bytes "$bs")
probe_json=$(printf '{"name":"seq","kind":"sequential","workers":1,"file_size":%d,"block_size":%d,"interval":3600000000000,"timeout":600000000000}' "$size_b" "$bs_b")

probe_run() { probe_write_read "$probe_json"; }
fio_run() {
	local f="$mnt/fio/f0" w r
	rm -f "$f"
	w=$(fio_bw write --name=w --filename="$f" --rw=write --bs="$bs_b" --size="$size_b" --direct=1 --ioengine=psync --end_fsync=1 --fallocate=none)
	r=$(fio_bw read --name=r --filename="$f" --rw=read --bs="$bs_b" --size="$size_b" --direct=1 --ioengine=psync)
	rm -f "$f"
	echo "$w $r"
}

results="$work/results"
alternate "$rounds" "$results"
ratio_table "sequential probe vs fio, loop ext4, file $size, block $bs, O_DIRECT, 1 worker" "$results"
