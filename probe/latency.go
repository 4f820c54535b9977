package probe

import (
	"fmt"
	"slices"
)

// latencyBuckets are the classic histogram bounds, 50 µs to 10 s: from an
// NVMe read to a GPFS token revoke under contention.
var latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

// LatencyBuckets returns the classic histogram bounds, in seconds.
func LatencyBuckets() []float64 { return slices.Clone(latencyBuckets) }

// The native (exponential) buckets of every latency histogram. Schema 3
// makes buckets 2^(1/8), about 9%, wide: fine enough for percentiles of a
// latency distribution, and what client_golang picks for a bucket factor
// of 1.1. The zero threshold is client_golang's default, 2^-128.
const (
	LatencySchema        = 3
	LatencyZeroThreshold = 0x1p-128
)

// LatencyHistogram is a histogram with both the classic buckets and native
// (sparse, exponential) buckets. Workers fill one per op and send it as
// JSON; the daemon adds each run's into a running total.
type LatencyHistogram struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	// Classic holds cumulative counts, one per LatencyBuckets bound.
	Classic       []uint64 `json:"classic"`
	Schema        int32    `json:"schema"`
	ZeroThreshold float64  `json:"zero_threshold"`
	ZeroCount     uint64   `json:"zero_count"`
	// Native maps a native bucket's index to its count (not cumulative).
	Native map[int]int64 `json:"native"`
}

// Add merges another histogram (a later run) into h.
func (h *LatencyHistogram) Add(o *LatencyHistogram) error {
	if o == nil {
		return nil
	}
	if len(o.Classic) != len(latencyBuckets) {
		return fmt.Errorf("latency histogram has %d classic buckets, want %d", len(o.Classic), len(latencyBuckets))
	}
	if h.Classic == nil {
		h.Classic = make([]uint64, len(latencyBuckets))
		h.Native = map[int]int64{}
		h.ZeroThreshold = o.ZeroThreshold
		h.Schema = o.Schema
	}
	if o.Schema != h.Schema {
		return fmt.Errorf("latency histogram schema %d does not match %d", o.Schema, h.Schema)
	}
	h.Count += o.Count
	h.Sum += o.Sum
	h.ZeroCount += o.ZeroCount
	for i, c := range o.Classic {
		h.Classic[i] += c
	}
	for k, v := range o.Native {
		h.Native[k] += v
	}
	return nil
}
