// Package probefixture gives tests of several packages the same probes and
// requests, small enough for a unit test.
package probefixture

import (
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// SmallSeq is a sequential probe small enough for a unit test: two
// workers, 1 MiB each.
func SmallSeq(name string) probe.ProbeConfig {
	return probe.ProbeConfig{Name: name, Kind: probe.KindSequential, Workers: 2, FileSize: 1 << 20, BlockSize: 256 << 10, Interval: time.Minute, Timeout: 30 * time.Second}
}

// Request is the request for probe p of a target "t" at path, probed as
// host node1.
func Request(path string, p probe.ProbeConfig) probe.Request {
	return probe.Request{Target: "t", Path: path, Hostname: "node1", Probe: p}
}
