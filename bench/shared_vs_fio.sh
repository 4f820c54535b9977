#!/usr/bin/env bash
# shared_file probe (IOR N-to-1) vs fio, side by side on one loop-mounted
# ext4: the same total bytes, number of workers (fio numjobs) and block
# size, every worker writing its own segment of one shared file
# (offset_increment), O_DIRECT, fsync in the timing, alternating order.
#
# Usage (root): bench/shared_vs_fio.sh [rounds] [workers] [segment_size] [block_size]
set -euo pipefail
rounds=${1:-6}
workers=${2:-4}
seg=${3:-256MiB}
bs=${4:-8MiB}
cd "$(dirname "$0")/.."
. bench/lib.sh
seg_b=$(bytes "$seg")
bs_b=$(bytes "$bs")
probe_json=$(printf '{"name":"shared","kind":"shared_file","workers":%d,"segment_size":%d,"block_size":%d,"interval":3600000000000,"timeout":600000000000}' "$workers" "$seg_b" "$bs_b")

probe_run() { probe_write_read "$probe_json"; }
fio_run() {
	local f="$mnt/fio/shared" w r
	rm -f "$f"
	local common=(--filename="$f" --bs="$bs_b" --size="$seg_b" --offset_increment="$seg_b" --numjobs="$workers"
		--group_reporting --direct=1 --ioengine=psync --fallocate=none)
	w=$(fio_bw write --name=w --rw=write --end_fsync=1 "${common[@]}")
	r=$(fio_bw read --name=r --rw=read "${common[@]}")
	rm -f "$f"
	echo "$w $r"
}

results="$work/results"
alternate "$rounds" "$results"
ratio_table "shared_file probe vs fio, loop ext4, $workers workers x $seg segments, block $bs, O_DIRECT" "$results"
