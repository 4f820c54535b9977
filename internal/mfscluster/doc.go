// Package mfscluster owns the MooseFS test cluster: it brings up a real
// MooseFS 3.0 file system from Debian's packages (moosefs-master,
// moosefs-chunkserver, moosefs-client, moosefs-cli) on this one machine,
// each server and each client a host of its own, and gives tests handles
// to put a fault on exactly one host.
//
// A host is a network namespace with one address on a veth pair, a UTS
// namespace with its own hostname, and cgroups holding its one daemon
// (mfsmaster, mfschunkserver or mfsmount). The hosts' veths meet on a
// bridge in a "switch" namespace of the cluster's own; every address
// (10.231.0.0/24) lives only in namespaces the cluster created, so no
// traffic leaves them. Each chunkserver stores its chunks on an ext4 (or
// xfs) file system of its own on a loop device backed in RAM, and carries
// a one-letter label ("A", "B", ...) that storage classes can name to pin
// a directory's chunks to it (Client.PinDir). Clients are mfsmount FUSE
// mounts made from the client's network namespace but in the host's mount
// namespace, so tests on the host read and write them directly.
//
// Faults (methods of Host, promoted to ChunkServer and Client):
// ThrottleNetwork (tbf on both directions of the host's veth),
// Freeze/Thaw (SIGSTOP/SIGCONT of the daemon's process group),
// ThrottleCPU (cgroup v1 cpu.cfs_quota_us) and, for chunkservers,
// ThrottleDisk (blkio throttle on the chunkserver's own device, with its
// file system remounted sync while throttled; see its doc for what it
// does and does not slow). NetworkByHand, CPUByHand, FreezeByHand and
// DiskByHand give the shell commands that do the same, built from the
// same arguments, for a person at the bench cluster (bench/cluster.sh).
//
// Start registers every teardown with t.Cleanup, so daemons, mounts,
// loop devices, cgroups and namespaces are removed even when a test
// fails; Cluster.Leftovers says what, if anything, survived. Everything
// here needs root; only tests import the package.
//
// The cluster suite runs the product on this cluster, in the
// cluster_*_integration_test.go files beside it (package mfscluster_test,
// so they use the package as any test does): TestClusterFaults, one
// subtest and one file per fault, with the shipped rules of dashboards/
// on the alert stack of internal/testkit/alertstack, and
// TestClusterCharacterizeSlurm, characterize --slurm on the cluster's
// clients under a real Slurm.
package mfscluster
