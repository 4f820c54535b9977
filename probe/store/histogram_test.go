package store

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// newReference is a client_golang histogram with the buckets the engine
// records: what Prometheus would expect from one histogram observing every
// sample.
func newReference() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "latency", Help: "reference", Buckets: probe.LatencyBuckets(),
		NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 0, NativeHistogramMinResetDuration: 0,
	})
}

// snapshotOf converts a client_golang histogram into the form a worker
// sends (the engine's own recorder is held to client_golang's buckets by
// its tests).
func snapshotOf(t *testing.T, h prometheus.Histogram) *probe.LatencyHistogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	dh := m.GetHistogram()
	out := &probe.LatencyHistogram{
		Count: dh.GetSampleCount(), Sum: dh.GetSampleSum(), Schema: dh.GetSchema(),
		ZeroThreshold: dh.GetZeroThreshold(), ZeroCount: dh.GetZeroCount(),
	}
	for _, b := range dh.GetBucket() {
		out.Classic = append(out.Classic, b.GetCumulativeCount())
	}
	out.Native = probetest.NativeBuckets(dh)
	return out
}

// Two runs' histograms merged in the daemon must export exactly what one
// client_golang histogram observing every sample would.
func TestMergedHistogramMatchesClientGolang(t *testing.T) {
	reference := newReference()
	var merged probe.LatencyHistogram
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 3; run++ {
		rec := newReference()
		for i := 0; i < 1000; i++ {
			v := 20e-6 * float64(int(1)<<rng.IntN(20)) * (1 + rng.Float64())
			rec.Observe(v)
			reference.Observe(v)
		}
		if err := merged.Add(snapshotOf(t, rec)); err != nil {
			t.Fatal(err)
		}
	}
	var want, got dto.Metric
	if err := reference.Write(&want); err != nil {
		t.Fatal(err)
	}
	desc := prometheus.NewDesc("x", "x", []string{"op"}, nil)
	if err := newHistogramMetric(desc, &merged, "read").Write(&got); err != nil {
		t.Fatal(err)
	}
	wh, gh := want.GetHistogram(), got.GetHistogram()
	if wh.GetSampleCount() != gh.GetSampleCount() || wh.GetSchema() != gh.GetSchema() {
		t.Fatalf("count/schema: got %d/%d want %d/%d", gh.GetSampleCount(), gh.GetSchema(), wh.GetSampleCount(), wh.GetSchema())
	}
	for i, b := range wh.GetBucket() {
		if gh.GetBucket()[i].GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("classic bucket le=%g: got %d want %d", b.GetUpperBound(), gh.GetBucket()[i].GetCumulativeCount(), b.GetCumulativeCount())
		}
	}
	if w, g := probetest.NativeBuckets(wh), probetest.NativeBuckets(gh); len(w) != len(g) {
		t.Errorf("native buckets: got %d want %d", len(g), len(w))
	} else {
		for k, v := range w {
			if g[k] != v {
				t.Errorf("native bucket %d: got %d want %d", k, g[k], v)
			}
		}
	}
}

func TestEncodeSpansGaps(t *testing.T) {
	in := map[int]int64{-3: 2, -2: 5, 0: 1, 10: 7}
	spans, deltas := encodeSpans(in)
	got := probetest.NativeBuckets(&dto.Histogram{PositiveSpan: spans, PositiveDelta: deltas})
	if len(got) != len(in) {
		t.Fatalf("round trip: got %v want %v", got, in)
	}
	for k, v := range in {
		if got[k] != v {
			t.Errorf("bucket %d: got %d want %d", k, got[k], v)
		}
	}
}

// The registry writes a collected metric after Collect may have released
// the store's lock, while a run's Record merges into the histogram: the
// metric must hold a copy, or a scrape reads the map a Record writes (a
// daemon died of "concurrent map read and map write" in TestClusterFaults).
func TestHistogramMetricIsACopy(t *testing.T) {
	rec := newReference()
	rec.Observe(0.001)
	var h probe.LatencyHistogram
	if err := h.Add(snapshotOf(t, rec)); err != nil {
		t.Fatal(err)
	}
	desc := prometheus.NewDesc("latency", "test", nil, nil)
	m := newHistogramMetric(desc, &h)
	later := newReference()
	later.Observe(10)
	if err := h.Add(snapshotOf(t, later)); err != nil {
		t.Fatal(err)
	}
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.GetHistogram().GetSampleCount(); got != 1 || len(out.GetHistogram().GetPositiveDelta()) != 1 {
		t.Fatalf("metric collected before a later run shows %d samples in %d native buckets, want the 1 sample it was collected with", got, len(out.GetHistogram().GetPositiveDelta()))
	}
}
