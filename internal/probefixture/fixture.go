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

// BaselinesYAML is a baselines file for the sequential probe "s" of
// target "t" (as SmallSeq with two workers measures it) and a metadata
// probe "md".
const BaselinesYAML = `targets:
  t:
    s:
      kind: sequential
      params: sequential workers=2 file_size=1MiB block_size=256KiB
      direct: true
      engine: sync
      host: node1
      measured_at: 2026-11-30T10:00:00Z
      method: "characterize --runs 5"
      ops:
        write: {bytes_per_second: 1000, spread: 0.03, runs: 5}
        read: {bytes_per_second: 2000, spread: 0.02, runs: 5}
    md:
      kind: metadata
      ops:
        create: {operations_per_second: 5e4}
`
