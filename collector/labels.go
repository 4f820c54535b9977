package collector

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelPairs are the label pairs of one object (an NFS mount, an
// InfiniBand port) built once per scrape and shared by all of its metrics.
// prometheus.MustNewConstMetric builds a fresh, sorted set of pairs for
// every metric; with tens of metrics per object that was most of what a
// scrape allocated. The pairs come from prometheus.MakeLabelPairs, so names
// and order are the Desc's; they may only be used with descriptors that
// have the same variable label names and no constant labels.
type labelPairs []*dto.LabelPair

// newLabelPairs builds the pairs of desc for values, which must already be
// valid UTF-8 (see labelValue).
func newLabelPairs(desc *prometheus.Desc, values ...string) labelPairs {
	return prometheus.MakeLabelPairs(desc, values)
}

// labelValue makes a string read from the system usable as a label value.
// Mount points, file system names and device strings are bytes, not
// necessarily UTF-8, and prometheus.MustNewConstMetric panics on invalid
// UTF-8, which would take the whole exporter down with one odd mount.
func labelValue(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// metric returns a metric of d with these labels.
func (lp labelPairs) metric(d *typedDesc, value float64) prometheus.Metric {
	return &sharedLabelMetric{desc: d.desc, valueType: d.valueType, value: value, labels: lp}
}

// sharedLabelMetric is a constant metric whose label pairs are shared.
// Write hands out the shared slice, as client_golang's own constant
// metrics do; the registry reads it and does not modify it.
type sharedLabelMetric struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
	value     float64
	labels    labelPairs
}

func (m *sharedLabelMetric) Desc() *prometheus.Desc { return m.desc }

func (m *sharedLabelMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	v := m.value
	switch m.valueType {
	case prometheus.CounterValue:
		out.Counter = &dto.Counter{Value: &v}
	case prometheus.GaugeValue:
		out.Gauge = &dto.Gauge{Value: &v}
	default:
		out.Untyped = &dto.Untyped{Value: &v}
	}
	return nil
}
