package probe

import (
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// LatencyBuckets are the classic histogram bounds, 50 µs to 10 s: from an
// NVMe read to a GPFS token revoke under contention.
var LatencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

// LatencyHistogram is a histogram with both the classic buckets and native
// (sparse, exponential) buckets. Workers fill one per op and send it as
// JSON; the daemon adds each run's into a running total.
type LatencyHistogram struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	// Classic holds cumulative counts, one per LatencyBuckets bound.
	Classic       []uint64      `json:"classic"`
	Schema        int32         `json:"schema"`
	ZeroThreshold float64       `json:"zero_threshold"`
	ZeroCount     uint64        `json:"zero_count"`
	Native        map[int]int64 `json:"native"`
}

// latencyRecorder observes latencies in a worker. It wraps client_golang's
// histogram so the native bucketing is exactly what Prometheus expects.
type latencyRecorder struct {
	h prometheus.Histogram
}

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{h: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "latency",
		Help:    "probe-internal",
		Buckets: LatencyBuckets,
		// Factor 1.1 selects schema 3: buckets ~9% wide, fine enough for
		// percentiles of a latency distribution.
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  0,
		NativeHistogramMinResetDuration: 0,
	})}
}

func (r *latencyRecorder) Observe(seconds float64) { r.h.Observe(seconds) }

// Snapshot converts the recorder into the transferable form.
func (r *latencyRecorder) Snapshot() *LatencyHistogram {
	var m dto.Metric
	if err := r.h.Write(&m); err != nil {
		return nil
	}
	h := m.GetHistogram()
	out := &LatencyHistogram{
		Count:         h.GetSampleCount(),
		Sum:           h.GetSampleSum(),
		Schema:        h.GetSchema(),
		ZeroThreshold: h.GetZeroThreshold(),
		ZeroCount:     h.GetZeroCount(),
		Native:        map[int]int64{},
	}
	for _, b := range h.GetBucket() {
		out.Classic = append(out.Classic, b.GetCumulativeCount())
	}
	idx := int32(0)
	count := int64(0)
	deltas := h.GetPositiveDelta()
	di := 0
	for _, span := range h.GetPositiveSpan() {
		idx += span.GetOffset()
		for j := uint32(0); j < span.GetLength(); j++ {
			count += deltas[di]
			di++
			if count != 0 {
				out.Native[int(idx)] = count
			}
			idx++
		}
	}
	return out
}

// Add merges another histogram (a later run) into h.
func (h *LatencyHistogram) Add(o *LatencyHistogram) error {
	if o == nil {
		return nil
	}
	if len(o.Classic) != len(LatencyBuckets) {
		return fmt.Errorf("latency histogram has %d classic buckets, want %d", len(o.Classic), len(LatencyBuckets))
	}
	if h.Classic == nil {
		h.Classic = make([]uint64, len(LatencyBuckets))
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

// histogramMetric exports a LatencyHistogram with classic and native
// buckets in one sample, which client_golang's const histograms cannot do.
type histogramMetric struct {
	desc   *prometheus.Desc
	h      *LatencyHistogram
	labels []*dto.LabelPair
}

func newHistogramMetric(desc *prometheus.Desc, h *LatencyHistogram, labelValues ...string) prometheus.Metric {
	return &histogramMetric{desc: desc, h: h, labels: prometheus.MakeLabelPairs(desc, labelValues)}
}

func (m *histogramMetric) Desc() *prometheus.Desc { return m.desc }

func (m *histogramMetric) Write(out *dto.Metric) error {
	h := m.h
	dh := &dto.Histogram{
		SampleCount:   proto.Uint64(h.Count),
		SampleSum:     proto.Float64(h.Sum),
		Schema:        proto.Int32(h.Schema),
		ZeroThreshold: proto.Float64(h.ZeroThreshold),
		ZeroCount:     proto.Uint64(h.ZeroCount),
	}
	for i, ub := range LatencyBuckets {
		var c uint64
		if i < len(h.Classic) {
			c = h.Classic[i]
		}
		dh.Bucket = append(dh.Bucket, &dto.Bucket{UpperBound: proto.Float64(ub), CumulativeCount: proto.Uint64(c)})
	}
	dh.PositiveSpan, dh.PositiveDelta = encodeSpans(h.Native)
	if len(dh.PositiveSpan) == 0 && h.ZeroCount == 0 {
		// An empty span marks the histogram as native even with no samples.
		dh.PositiveSpan = []*dto.BucketSpan{{Offset: proto.Int32(0), Length: proto.Uint32(0)}}
	}
	out.Histogram = dh
	out.Label = m.labels
	return nil
}

// encodeSpans turns absolute bucket counts into the span/delta encoding of
// the native histogram protobuf.
func encodeSpans(buckets map[int]int64) ([]*dto.BucketSpan, []int64) {
	if len(buckets) == 0 {
		return nil, nil
	}
	keys := make([]int, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var spans []*dto.BucketSpan
	var deltas []int64
	prevCount := int64(0)
	nextIdx := 0
	for i, k := range keys {
		// Gaps of one or two empty buckets are cheaper inline than a new span.
		switch {
		case i == 0:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(int32(k)), Length: proto.Uint32(0)})
		case k-nextIdx > 2:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(int32(k - nextIdx)), Length: proto.Uint32(0)})
		default:
			for ; nextIdx < k; nextIdx++ {
				deltas = append(deltas, -prevCount)
				prevCount = 0
				*spans[len(spans)-1].Length++
			}
		}
		deltas = append(deltas, buckets[k]-prevCount)
		prevCount = buckets[k]
		*spans[len(spans)-1].Length++
		nextIdx = k + 1
	}
	return spans, deltas
}
