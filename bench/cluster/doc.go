// Package cluster owns the bench MooseFS cluster that bench/cluster.sh
// brings up for a person: the cluster of internal/mfscluster (a master,
// chunkservers on RAM-backed loop devices, clients, each a host in
// network namespaces of its own), one plateau_exporter per client probing
// a directory of its own through that client's mount, the table that says
// where everything is and which commands put each fault on one host by
// hand, and the teardown on SIGINT or SIGTERM (or after HOLD), which ends
// by listing what is left (nothing, when it worked).
//
// It is a test, TestBenchCluster in cluster_test.go, only because
// mfscluster.Start takes a testing.TB. Its build tag (benchcluster) keeps
// `make test` and `make integration` from running it; bench/cluster.sh
// builds the test binary with the tag and becomes it (exec), so that a
// signal sent to the script reaches it. The settings and the exporters'
// config (settings_test.go) have no tag: their tests need no root and run
// under `make test`.
//
// Settings come from the environment: CHUNKSERVERS (default 3), CLIENTS
// (4), DISK_SIZE (each chunkserver's device, 1GiB), INTERVAL (each probe's,
// 30s), HOLD (tear down by itself after this long up; default: wait for
// a signal) and PLATEAU_EXPORTER (the binary, default the one `make
// build` leaves at the top of the repository).
package cluster
