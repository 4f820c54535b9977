package probetest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
metrics:
	for _, m := range fams[name].GetMetric() {
		for k, v := range labels {
			if !hasLabel(m, k, v) {
				continue metrics
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == k && lp.GetValue() == v {
			return true
		}
	}
	return false
}
