package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// The recorder buckets latencies itself so that the engine imports no
// Prometheus code; its buckets must be exactly client_golang's, which is
// what Prometheus reads from /metrics.
func TestRecorderBucketsAsClientGolang(t *testing.T) {
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "latency", Help: "reference",
		Buckets:                         classicBounds,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  0,
		NativeHistogramMinResetDuration: 0,
	})
	rec := newLatencyRecorder()
	rng := rand.New(rand.NewPCG(3, 4))
	var values []float64
	// The classic bounds and the powers of two (native bounds that both
	// represent exactly), each with its neighbours, and zero: where an
	// off-by-one in either bucketing would show. The other native bounds
	// are irrational; client_golang's table of them is its own float64
	// approximation, ours the nearest float64 to the exact value, and the
	// two differ by an ulp at three of the eight, so only a value within an
	// ulp of such a bound could land in different buckets. Latencies are
	// whole nanoseconds, which never do, and that is what the rest is.
	for _, b := range classicBounds {
		values = append(values, b, math.Nextafter(b, 0), math.Nextafter(b, math.Inf(1)))
	}
	for e := -30; e <= 4; e++ {
		b := math.Exp2(float64(e))
		values = append(values, b, math.Nextafter(b, 0), math.Nextafter(b, math.Inf(1)))
	}
	values = append(values, 0)
	for i := 0; i < 200000; i++ {
		ns := rng.Int64N(int64(1) << (10 + rng.IntN(24))) // up to ~17 s
		values = append(values, time.Duration(ns).Seconds())
	}
	for _, v := range values {
		ref.Observe(v)
		rec.Observe(v)
	}
	var m dto.Metric
	if err := ref.Write(&m); err != nil {
		t.Fatal(err)
	}
	want := m.GetHistogram()
	got := rec.Snapshot()
	if got.Count != want.GetSampleCount() || got.Sum != want.GetSampleSum() || got.ZeroCount != want.GetZeroCount() ||
		got.Schema != want.GetSchema() || got.ZeroThreshold != want.GetZeroThreshold() {
		t.Fatalf("count/sum/zero/schema/threshold: got %d/%g/%d/%d/%g want %d/%g/%d/%d/%g",
			got.Count, got.Sum, got.ZeroCount, got.Schema, got.ZeroThreshold,
			want.GetSampleCount(), want.GetSampleSum(), want.GetZeroCount(), want.GetSchema(), want.GetZeroThreshold())
	}
	for i, b := range want.GetBucket() {
		if got.Classic[i] != b.GetCumulativeCount() {
			t.Errorf("classic bucket le=%g: got %d want %d", b.GetUpperBound(), got.Classic[i], b.GetCumulativeCount())
		}
	}
	wantNative := probetest.NativeBuckets(want)
	if len(got.Native) != len(wantNative) {
		t.Errorf("native buckets: got %d want %d", len(got.Native), len(wantNative))
	}
	for k, v := range wantNative {
		if got.Native[k] != v {
			t.Errorf("native bucket %d: got %d want %d", k, got.Native[k], v)
		}
	}
}
