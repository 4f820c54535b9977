package probetest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/scrape"
)

// MetricValue is the value of the counter or gauge name, among what c
// collects, of the first series with the given labels; -1 when there is
// none.
func MetricValue(t *testing.T, c prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	if v, ok := FamilyValue(fams, name, labels); ok {
		return v
	}
	return -1
}

// FamilyValue is the value of the first series of name, among fams (a
// parsed or gathered exposition), whose labels include labels: a gauge's,
// a counter's or an untyped one's. ok is false when there is none.
func FamilyValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, ok bool) {
	return scrape.Value(fams, name, labels)
}

// NativeBuckets decodes the positive native buckets of a histogram as
// client_golang writes them (spans of bucket indexes, counts as deltas)
// into each non-empty bucket's count by index: what a test compares a
// histogram it built against.
func NativeBuckets(h *dto.Histogram) map[int]int64 {
	out := map[int]int64{}
	idx, count, di := int32(0), int64(0), 0
	for _, s := range h.GetPositiveSpan() {
		idx += s.GetOffset()
		for j := uint32(0); j < s.GetLength(); j++ {
			count += h.GetPositiveDelta()[di]
			di++
			if count != 0 {
				out[int(idx)] = count
			}
			idx++
		}
	}
	return out
}
