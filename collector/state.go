package collector

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// State is how one collector fared at the last scrape that ran it: what
// plateau_scrape_collector_success and _duration_seconds said then.
type State struct {
	Name string
	// Scraped is false until a scrape has run the collector; the other
	// fields are then zero.
	Scraped bool
	// Absent is true when that scrape found the collector's subject
	// missing from the node: the collector is idle, Success and Duration
	// are zero and mean nothing.
	Absent   bool
	Success  bool
	Duration time.Duration
	// At is when that scrape began.
	At time.Time
}

// Tracked is a Registry that remembers each collector's success and
// duration at the last scrape, for the status page. The page must not run
// the collectors itself: a GPFS command can take seconds, and a page that
// an administrator opens during an incident has to answer at once, so it
// shows what the last scrape saw instead.
type Tracked struct {
	r   *Registry
	now func() time.Time

	mu   sync.Mutex
	last map[string]State
}

// Track wraps r; register the Tracked in place of r.
func Track(r *Registry) *Tracked {
	return &Tracked{r: r, now: time.Now, last: map[string]State{}}
}

// Describe implements prometheus.Collector.
func (t *Tracked) Describe(ch chan<- *prometheus.Desc) { t.r.Describe(ch) }

// Collect implements prometheus.Collector: it passes every metric of the
// registry on and reads the per-collector success and duration metrics as
// they go by, rather than changing how the registry runs collectors.
func (t *Tracked) Collect(ch chan<- prometheus.Metric) {
	at := t.now()
	seen := map[string]State{}
	inner := make(chan prometheus.Metric, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range inner {
			observe(seen, m)
			ch <- m
		}
	}()
	t.r.Collect(inner)
	close(inner)
	<-done
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, s := range seen {
		s.Name, s.Scraped, s.At = name, true, at
		// Two scrapes that overlap may finish out of order: keep the
		// newer one's.
		if prev, ok := t.last[name]; !ok || !prev.At.After(at) {
			t.last[name] = s
		}
	}
}

// observe records m in seen when it is one of the per-collector metrics.
func observe(seen map[string]State, m prometheus.Metric) {
	desc := m.Desc()
	if desc != scrapeSuccessDesc && desc != scrapeDurationDesc && desc != scrapePresentDesc {
		return
	}
	var d dto.Metric
	if m.Write(&d) != nil || len(d.Label) != 1 || d.Gauge == nil {
		return
	}
	name := d.Label[0].GetValue()
	s := seen[name]
	switch desc {
	case scrapePresentDesc:
		s.Absent = d.Gauge.GetValue() == 0
	case scrapeSuccessDesc:
		s.Success = d.Gauge.GetValue() == 1
	default:
		s.Duration = time.Duration(d.Gauge.GetValue() * float64(time.Second))
	}
	seen[name] = s
}

// States lists every collector the registry runs, sorted by name, each as
// the last scrape left it.
func (t *Tracked) States() []State {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := t.r.Enabled()
	out := make([]State, 0, len(names))
	for _, n := range names {
		s, ok := t.last[n]
		if !ok {
			s = State{Name: n}
		}
		out = append(out, s)
	}
	return out
}
