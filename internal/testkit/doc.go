// Package testkit is the parent of what tests share and the daemon never
// runs: wait (polling a condition to a deadline), procgroup (a child
// process in a group of its own, stopped whole at cleanup), scrape
// (reading a daemon's /metrics), alertstack (daemons, Prometheus with
// the shipped rules, Alertmanager and a webhook, for the alerting tests)
// and probetest (free ports, missing tools, loop and tmpfs file systems,
// cgroups, for the probe and daemon tests).
// Only _test.go files, other test helpers and bench/cluster import its
// packages; internal/README.md lists which internal
// packages ship in the binary and which are for tests.
package testkit
