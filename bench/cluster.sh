#!/usr/bin/env bash
# The MooseFS bench cluster, by hand (issue 27): one master, CHUNKSERVERS
# chunkservers on RAM-backed loop devices and CLIENTS clients, each a host
# in network namespaces of its own on this machine (internal/mfscluster,
# the harness of TestClusterFaults in `make integration`), and a
# plateau_exporter on every client probing a directory of its own through
# that client's mount. It prints each host's address, role, mount point
# and exporter URL, and the commands that put each fault on one host by
# hand; then it waits. Ctrl-C (SIGINT) or SIGTERM tears everything down
# and lists what is left, which must be nothing.
#
# Usage: sudo bench/cluster.sh
# Settings (environment): CHUNKSERVERS (default 3), CLIENTS (4),
# DISK_SIZE (each chunkserver's device, held in RAM: 1GiB), INTERVAL (each
# probe's: 30s), HOLD (tear down by itself after this long up, e.g.
# HOLD=10m; default: wait for a signal).
# Needs root, go, and the Debian packages moosefs-master,
# moosefs-chunkserver, moosefs-client and moosefs-cli (.ci/packages.txt).
#
# The set-up is a Go test behind the build tag benchcluster
# (bench/cluster/cluster_test.go), built here and run by exec, so that a
# signal sent to this script's process reaches it and its cleanups run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, loop devices, mounts, cgroups): sudo $0"; exit 1; }
missing=$(for c in mfsmaster:moosefs-master mfschunkserver:moosefs-chunkserver mfsmount:moosefs-client \
	mfsscadmin:moosefs-client mfscli:moosefs-cli ip:iproute2 tc:iproute2 nsenter:util-linux \
	losetup:util-linux mkfs.ext4:e2fsprogs; do
	command -v "${c%%:*}" >/dev/null || echo "$c"
done)
if [ -n "$missing" ]; then
	echo "not found in PATH ($PATH): $(echo "$missing" | cut -d: -f1 | tr '\n' ' ')"
	echo "install the Debian packages: apt-get install $(echo "$missing" | cut -d: -f2 | sort -u | tr '\n' ' ')"
	exit 1
fi
command -v go >/dev/null || { echo "missing go (the Go toolchain; under sudo: sudo env PATH=\"\$PATH\" $0)"; exit 1; }

make -s build
go test -c -tags benchcluster -o bench/cluster/cluster.test ./bench/cluster/
cd bench/cluster
exec ./cluster.test -test.run '^TestBenchCluster$' -test.v -test.count 1 -test.timeout 0
