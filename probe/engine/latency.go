package engine

import (
	"math"
	"math/big"
	"sort"
	"sync"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// latencyRecorder observes latencies in a worker and hands them over as a
// probe.LatencyHistogram. It buckets them itself, as Prometheus defines
// classic and native buckets, rather than through client_golang: the engine
// runs inside the worker and imports no Prometheus code (client_golang's
// package brings the registry and net/http with it). A test holds its
// buckets to client_golang's for the same observations.
type latencyRecorder struct {
	mu        sync.Mutex
	count     uint64
	sum       float64
	classic   []uint64 // per bucket, not cumulative
	zeroCount uint64
	native    map[int]int64
}

// nativeBounds are the upper bounds, as fractions of a power of two, of
// the 2^LatencySchema native buckets within one octave:
// 2^(i/2^schema) / 2 for i = 0 .. 2^schema-1, each the float64 nearest the
// exact value. math.Exp2 is not correctly rounded, and a bound one ulp off
// puts a latency that falls on it in the neighbouring bucket, so the roots
// of 2 are taken in 256-bit arithmetic.
var nativeBounds = func() []float64 {
	n := 1 << probe.LatencySchema
	root := new(big.Float).SetPrec(256).SetInt64(2)
	for range probe.LatencySchema {
		root.Sqrt(root)
	}
	b := make([]float64, n)
	pow := new(big.Float).SetPrec(256).SetFloat64(0.5)
	for i := range b {
		b[i], _ = pow.Float64()
		pow.Mul(pow, root)
	}
	return b
}()

var classicBounds = probe.LatencyBuckets()

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{classic: make([]uint64, len(classicBounds)+1), native: map[int]int64{}}
}

// nativeKey is the index of the native bucket holding v > 0: bucket k
// holds (2^((k-1)/2^schema), 2^(k/2^schema)].
func nativeKey(v float64) int {
	frac, exp := math.Frexp(v)
	return sort.SearchFloat64s(nativeBounds, frac) + (exp-1)*len(nativeBounds)
}

// Observe adds one latency, in seconds.
func (r *latencyRecorder) Observe(seconds float64) {
	if math.IsNaN(seconds) {
		return
	}
	ci := sort.SearchFloat64s(classicBounds, seconds)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	r.sum += seconds
	r.classic[ci]++
	if math.Abs(seconds) <= probe.LatencyZeroThreshold {
		r.zeroCount++
		return
	}
	// Latencies are never negative; a clock step could make one so, and
	// it then counts in the zero bucket rather than a bucket of its own.
	if seconds < 0 {
		r.zeroCount++
		return
	}
	r.native[nativeKey(seconds)]++
}

// Snapshot converts the recorder into the transferable form.
func (r *latencyRecorder) Snapshot() *probe.LatencyHistogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &probe.LatencyHistogram{
		Count:         r.count,
		Sum:           r.sum,
		Schema:        probe.LatencySchema,
		ZeroThreshold: probe.LatencyZeroThreshold,
		ZeroCount:     r.zeroCount,
		Native:        make(map[int]int64, len(r.native)),
	}
	cum := uint64(0)
	for _, c := range r.classic[:len(classicBounds)] {
		cum += c
		out.Classic = append(out.Classic, cum)
	}
	for k, v := range r.native {
		out.Native[k] = v
	}
	return out
}
