#!/usr/bin/env bash
# A site's first day with one busy core: characterize on a loop-mounted ext4
# while a busy loop keeps one core at 100%, then run `probe` RUNS times
# under the same load, as a Slurm prolog or an NHC check would, and count
# the non-zero exits (each one drains a node that has not changed). Prints
# what characterize said, the spreads it wrote, and the exit statuses.
#
# Usage (root: loop device and mount):
#   bench/first_day.sh                 # the binary built from this tree
#   BIN=/path/to/plateau_exporter bench/first_day.sh   # another build
#   RUNS=30 CHAR_RUNS=3 SPACING=5s
# To compare with an older commit:
#   git archive f254482 | tar -x -C /tmp/old && (cd /tmp/old && go build -o pe ./cmd/plateau_exporter)
#   BIN=/tmp/old/pe bench/first_day.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
CHAR_RUNS=${CHAR_RUNS:-3}
SPACING=${SPACING:-5s}
[ "$(id -u)" = 0 ] || { echo "needs root (loop mount)"; exit 1; }
for c in mkfs.ext4 mount losetup python3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done

work=$(mktemp -d)
busy=""
mnt="$work/mnt"
cleanup() {
	[ -n "$busy" ] && kill "$busy" 2>/dev/null || true
	mountpoint -q "$mnt" && umount "$mnt" || true
	rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${BIN:-}" ]; then
	go build -o "$work/pe" ./cmd/plateau_exporter
	BIN=$work/pe
fi

# A RAM-backed image (the VM's disk moves by ±40% within minutes, which
# would be the disk's noise, not the node's).
img=/dev/shm/first_day.$$.img
truncate -s 1G "$img"
trap 'cleanup; rm -f "$img"' EXIT
mkfs.ext4 -q -F "$img"
mkdir -p "$mnt"
mount -o loop "$img" "$mnt"
mkdir -p "$mnt/plateau"

cat >"$work/plateau.yml" <<EOF
defaults:
  interval: 1m
  timeout: 30s
targets:
  - name: loop
    path: $mnt/plateau
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 64MiB, block_size: 4MiB}
      - {name: md, kind: metadata, workers: 2, files: 4096, file_size: 0}
baselines_file: $work/baselines.yml
EOF

# One core busy, as other work on the node.
sh -c 'while :; do :; done' &
busy=$!

echo "## $BIN"
echo "### characterize --runs $CHAR_RUNS --run-spacing $SPACING (one core busy)"
set +e
"$BIN" --config.file="$work/plateau.yml" --probe.hostname=bench characterize --runs "$CHAR_RUNS" --run-spacing "$SPACING" >"$work/char.out" 2>"$work/char.err"
char_code=$?
set -e
grep -v '^ts=' "$work/char.out" | sed 's/^/    /' || true
echo "characterize exit status: $char_code"
echo "### spreads written"
if [ -f "$work/baselines.yml" ]; then
	grep -E '^\s+[a-z]+: \{' "$work/baselines.yml" | sed 's/^/    /'
else
	echo "    (no baselines file written)"
fi

echo "### $RUNS x probe (one core busy)"
declare -A exits=()
: >"$work/probe.log"
for i in $(seq "$RUNS"); do
	set +e
	# --allow-missing-baselines: where characterize refused every op, the
	# results show without plateaus (exit 0) rather than exit 2 for the
	# missing file, so that exits count verdicts only.
	"$BIN" --config.file="$work/plateau.yml" --probe.hostname=bench probe --allow-missing-baselines >>"$work/probe.log" 2>&1
	code=$?
	set -e
	exits[$code]=$(( ${exits[$code]:-0} + 1 ))
done
nonzero=0
for c in "${!exits[@]}"; do
	echo "    exit $c: ${exits[$c]}"
	[ "$c" != 0 ] && nonzero=$((nonzero + exits[$c]))
done
echo "non-zero exits: $nonzero of $RUNS (1: below the plateau, 2: error)"
echo "critical lines: $(grep -c ' critical' "$work/probe.log" || true) (the first of a confirmed pair included)"
