package store

import (
	"maps"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// latencyBounds are the classic bucket bounds every histogram carries.
var latencyBounds = probe.LatencyBuckets()

// histogramMetric exports a LatencyHistogram with classic and native
// buckets in one sample, which client_golang's const histograms cannot do.
type histogramMetric struct {
	desc   *prometheus.Desc
	h      *probe.LatencyHistogram
	labels []*dto.LabelPair
}

// newHistogramMetric exports a copy of h. The registry calls Write after
// Collect has sent the metric, possibly after Collect returned and
// released the store's lock, while a run's Record merges into h: reading
// h itself there was a concurrent map read and write, which killed a
// daemon of TestClusterFaults in the middle of a scrape. Collect calls
// this under the store's read lock, so the copy is consistent.
func newHistogramMetric(desc *prometheus.Desc, h *probe.LatencyHistogram, labelValues ...string) prometheus.Metric {
	c := *h
	c.Classic = slices.Clone(h.Classic)
	c.Native = maps.Clone(h.Native)
	return &histogramMetric{desc: desc, h: &c, labels: prometheus.MakeLabelPairs(desc, labelValues)}
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
	for i, ub := range latencyBounds {
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
