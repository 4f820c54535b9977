// Package alertstack is test machinery: the alert stack the alerting
// integration tests run the shipped rules on. Only tests import it (the
// dashboards alerting and fleet tests, the MooseFS cluster suite beside
// internal/mfscluster); the daemon never does.
//
// A Stack is one or more real plateau_exporter daemons, each from inside
// a blkio cgroup of its own, probing one loop-mounted ext4 (or, started
// piece by piece with StartDaemons and StartMonitoring, a MooseFS
// cluster's mounts), with a baseline characterized there; the Prometheus
// of the Debian package scraping them with the rule files of dashboards/
// (only their `for`, keep_firing_for and group intervals shortened, which
// the stack checks), alone or split into racks under a global server as
// federate.yml says; the Alertmanager of the Debian package with the
// shipped route and inhibitions, posting to a Webhook that records every
// notification. Proms asks every Prometheus for firing alerts and query
// results, a RunWatcher follows a daemon's probe runs on its /metrics,
// and a Timeline logs what the pipeline did, with times, for a failure to
// be read off the log. A failure raised through Stack.Errorf, Fatalf or
// WaitFor is repeated in a digest printed after every other cleanup's
// output (ReportFailuresLast), with the last step and the scrape health:
// CI keeps only the lines just before "--- FAIL".
//
// Everything runs on free 127.0.0.1 ports with its own storage, never on
// a system service, and is torn down in t.Cleanup in reverse order of
// set-up, also when the test fails. The shipped files are found from the
// module root (ModuleRoot), so a test of any package can run the stack.
package alertstack
