// Package scrape reads a daemon's /metrics the way Prometheus does (the
// text format, through the exposition parser of prometheus/common) and
// looks up series in what it read: the one /metrics reader of
// plateau_exporter's tests. Only tests import it.
package scrape

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultClient bounds a scrape as a Prometheus scrape timeout would.
var DefaultClient = &http.Client{Timeout: 10 * time.Second}

// Families is the parsed exposition of the page at url, its metric
// families by name, and how long the scrape took. client may be nil
// (DefaultClient).
func Families(client *http.Client, url string) (map[string]*dto.MetricFamily, time.Duration, error) {
	if client == nil {
		client = DefaultClient
	}
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		return nil, time.Since(start), err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return nil, took, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, took, fmt.Errorf("%s: HTTP %d: %.300s", url, resp.StatusCode, body)
	}
	fams, err := Parse(body)
	if err != nil {
		return nil, took, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, took, nil
}

// Parse reads a text exposition into its metric families by name.
func Parse(text []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(text))
}

// Value is the value of the first series of name, among fams, whose
// labels include labels: a gauge's, a counter's or an untyped one's. ok
// is false when there is none.
func Value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		if !Matches(m, labels) {
			continue
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

// Matches says whether m carries every label of labels with its value.
func Matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
