// Package testkit is the parent of what tests share and the daemon never
// runs: wait (polling a condition to a deadline), procgroup (a child
// process in a group of its own, stopped whole at cleanup) and scrape
// (reading a daemon's /metrics). Only _test.go files and other test
// helpers import its packages; internal/README.md lists which internal
// packages ship in the binary and which are for tests.
package testkit
