package collector

import (
	"errors"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
)

type fakeCollector struct{ err error }

func (f fakeCollector) Update(ch chan<- prometheus.Metric) error {
	if f.err != nil {
		return f.err
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("plateau_fake_total", "A fake counter.", nil, nil), prometheus.CounterValue, 1)
	return nil
}

// Tracked passes every metric on unchanged and remembers what the
// per-collector metrics said, for the status page.
func TestTrackedRemembersTheLastScrape(t *testing.T) {
	r := NewRegistryFrom(log.NewNopLogger(), map[string]Collector{
		"good": fakeCollector{}, "absent": fakeCollector{err: ErrNoData}, "broken": fakeCollector{err: errors.New("mmpmon: exit 1")},
	})
	tr := Track(r)
	at := time.Unix(1_700_000_000, 0)
	tr.now = func() time.Time { return at }
	for _, s := range tr.States() {
		if s.Scraped {
			t.Fatalf("%s scraped before any scrape: %+v", s.Name, s)
		}
	}
	// Two present collectors' presence, success and duration, the absent
	// one's presence alone, and the good one's counter, through an
	// unchecked registry as the daemon's is.
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.Metric)
	}
	if n != 8 {
		t.Errorf("%d metrics passed on, want 8", n)
	}
	states := tr.States()
	if len(states) != 3 || states[0].Name != "absent" || states[1].Name != "broken" || states[2].Name != "good" {
		t.Fatalf("states not one per collector, sorted: %+v", states)
	}
	for _, s := range states {
		if !s.Scraped || s.Success != (s.Name == "good") || s.Absent != (s.Name == "absent") || !s.At.Equal(at) || s.Duration < 0 {
			t.Errorf("%s: %+v", s.Name, s)
		}
	}
}
