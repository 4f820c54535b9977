#!/usr/bin/env bash
# Lists, and with -clean removes, what root-only tests leave on this machine
# when they are killed before their cleanups run (a CI run stopped, a test
# binary SIGKILLed, a timeout): the MooseFS cluster's daemons, mounts,
# network namespaces (mfsc-*) and cgroups, the RAM-backed loop devices and
# their directories (/dev/shm/plateau-test-*), the blkio and CPU cgroups of
# the throttling tests (plateau-test-*), FUSE and loop mounts in the tests'
# temporary directories, and the processes started there (Prometheus,
# Alertmanager, daemons, Slurm). A fresh machine has none; a developer's
# machine after an interrupted `make integration` may, and they skew the
# next run (a leftover mfsmount or daemon takes CPU, a stale netns keeps
# its addresses).
#
#   .ci/leftovers.sh           list them, one a line; exit 1 if any
#   .ci/leftovers.sh -clean    remove them: processes (SIGKILL), then
#                              mounts (lazy), loop devices, network
#                              namespaces, cgroups and directories; exit 1
#                              if any is left
#   -match STRING              only those whose line contains STRING
#
# While tests run their live resources look the same, so -clean refuses
# while a test binary (*.test) runs, unless -force is given as well.
# .ci/integration.sh runs it before and after the tests;
# TestLeftoversScript (internal/mfscluster) tests it.
set -uo pipefail

clean=false force=false match=
while (($#)); do
	case $1 in
	-clean) clean=true ;;
	-force) force=true ;;
	-match)
		match=${2:?-match needs a string}
		shift
		;;
	*)
		echo "usage: $0 [-clean [-force]] [-match STRING]" >&2
		exit 2
		;;
	esac
	shift
done

# only passes the lines that contain -match's string, or all.
only() {
	if [[ -n $match ]]; then
		grep -F -- "$match"
	else
		cat
	fi
}

# Paths the tests create: probetest.MemoryDir, slurmtest, the caps and
# end-to-end tests, and go test's t.TempDir (/tmp/TestName1234567/).
path_re='(/dev/shm/plateau-test-|/tmp/plateau-slurm-|/tmp/plateau-caps|/tmp/plateau-e2e-bin|/tmp/Test[A-Za-z0-9_]+[0-9]+/)'

processes() {
	local d pid cmd
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[[ $pid == "$$" || $pid == "$PPID" ]] && continue
		cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
		[[ $cmd =~ $path_re ]] && echo "$pid $cmd"
	done | only
}

# mounts prints mount points deepest first, so that inner mounts go first.
mounts() {
	awk '{ print $5 }' /proc/self/mountinfo | sed 's/\\040/ /g' | grep -E "^${path_re}" | only | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-
}

loops() {
	local f dev
	for f in /sys/block/loop*/loop/backing_file; do
		[[ -r $f ]] || continue
		if grep -qE "^${path_re}" "$f"; then
			dev=${f#/sys/block/}
			echo "/dev/${dev%%/*} $(cat "$f")"
		fi
	done | only
}

netns() {
	ip netns list 2>/dev/null | awk '$1 ~ /^mfsc-/ { print $1 }' | only
}

# cgroups prints the directories deepest first.
cgroups() {
	local d
	for d in /sys/fs/cgroup/plateau-test-* /sys/fs/cgroup/mfsc-* /sys/fs/cgroup/*/plateau-test-* /sys/fs/cgroup/*/mfsc-*; do
		[[ -d $d ]] && find "$d" -depth -type d
	done | only
}

dirs() {
	local d
	for d in /dev/shm/plateau-test-*; do
		[[ -e $d ]] && echo "$d"
	done | only
}

list() {
	processes | sed 's/^/process /'
	mounts | sed 's/^/mount /'
	loops | sed 's/^/loop device /'
	netns | sed 's/^/network namespace /'
	cgroups | sed 's/^/cgroup /'
	dirs | sed 's/^/directory /'
}

if ! $clean; then
	left=$(list)
	[[ -z $left ]] && exit 0
	echo "$left"
	exit 1
fi

if ! $force; then
	running=$(pgrep -a -f '\.test( |$)' | grep -v "^$$ ")
	if [[ -n $running ]]; then
		echo "leftovers.sh: a test binary is running; its live resources look like leftovers. Stop it, or add -force:" >&2
		echo "$running" >&2
		exit 2
	fi
fi

processes | while read -r pid _; do
	kill -KILL "$pid" 2>/dev/null
done
# A killed process leaves once its blocked requests are answered: a FUSE
# daemon's users get ENOTCONN when its mount is aborted below, so wait a
# little, not forever.
for _ in $(seq 50); do
	[[ -z $(processes) ]] && break
	sleep 0.1
done
mounts | while IFS= read -r m; do
	umount -l "$m" 2>/dev/null || umount -f -l "$m" 2>/dev/null
done
loops | while read -r dev _; do
	losetup -d "$dev" 2>/dev/null
done
netns | while read -r ns; do
	ip netns delete "$ns" 2>/dev/null
done
cgroups | while IFS= read -r d; do
	rmdir "$d" 2>/dev/null
done
dirs | while IFS= read -r d; do
	rm -rf --one-file-system "$d" 2>/dev/null
done

left=$(list)
[[ -z $left ]] && exit 0
echo "leftovers.sh: still there after -clean:" >&2
echo "$left" >&2
exit 1
