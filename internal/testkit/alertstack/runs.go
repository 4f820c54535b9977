package alertstack

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/scrape"
)

// Run is one successful run of a probe (the stack's, unless a
// watcher follows another), as a daemon exported it.
type Run struct {
	End     time.Time
	Seconds float64
	// Ops are the probe's ops, in the order it runs them.
	Ops   []string
	Ratio map[string]float64 // to the baseline, by op
	// Rate is bytes per second by op, or operations per second for a
	// metadata probe's.
	Rate     map[string]float64
	metadata bool
	// Change and Noise are plateau_probe_change_fast_ratio and
	// plateau_probe_change_fast_noise_ratio (what the page reads) after the
	// run, by op; empty until
	// the probe has the runs for them.
	Change map[string]float64
	Noise  map[string]float64
}

func (r Run) Start() time.Time {
	return r.End.Add(-time.Duration(r.Seconds * float64(time.Second)))
}

func (r Run) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.2fs", r.Seconds)
	for _, op := range r.Ops {
		var about []string
		if ratio, ok := r.Ratio[op]; ok {
			about = append(about, fmt.Sprintf("%.2f of baseline", ratio))
		}
		if c, ok := r.Change[op]; ok {
			about = append(about, fmt.Sprintf("change %.2f noise %.3f", c, r.Noise[op]))
		}
		if r.metadata {
			fmt.Fprintf(&b, "; %s %.0f/s", op, r.Rate[op])
		} else {
			fmt.Fprintf(&b, "; %s %.0f MB/s", op, r.Rate[op]/1e6)
		}
		if len(about) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(about, ", "))
		}
	}
	return b.String()
}

// RunWatcher follows a daemon's /metrics and records every successful run
// of one probe. The daemon keeps only the last result, so it polls well
// inside one probe interval.
type RunWatcher struct {
	url   string
	probe WatchedProbe
	mu    sync.Mutex
	runs  []Run
	err   error
}

// WatchedProbe is the probe a RunWatcher follows: target and name, and
// whether it is a metadata probe (its ops and their unit).
type WatchedProbe struct {
	Target, Name string
	Metadata     bool
}

// Ops are the probe's ops, in the order it runs them.
func (p WatchedProbe) Ops() []string {
	if p.Metadata {
		return []string{"create", "stat", "read", "remove"}
	}
	return []string{"write", "read"}
}

// rateFamily is the family of the probe's rates.
func (p WatchedProbe) rateFamily() string {
	if p.Metadata {
		return "plateau_probe_operations_per_second"
	}
	return "plateau_probe_throughput_bytes_per_second"
}

// WatchProbeRuns follows the runs of p.
func WatchProbeRuns(t *testing.T, metricsURL string, p WatchedProbe, every time.Duration) *RunWatcher {
	w := &RunWatcher{url: metricsURL, probe: p}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-stopped })
	return w
}

func (w *RunWatcher) poll() {
	run, err := scrapeRun(w.url, w.probe)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	if err != nil || run == nil {
		return
	}
	if n := len(w.runs); n == 0 || run.End.After(w.runs[n-1].End) {
		w.runs = append(w.runs, *run)
	}
}

// Snapshot returns the runs seen so far and the last scrape error.
func (w *RunWatcher) Snapshot() ([]Run, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.runs), w.err
}

// Count is the number of runs seen so far.
func (w *RunWatcher) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// FirstRunStartedAfter waits for a run that started after t0, so that all
// of its I/O saw what was set at t0.
func (w *RunWatcher) FirstRunStartedAfter(t *testing.T, what string, t0 time.Time, interval time.Duration) Run {
	t.Helper()
	return w.RunsStartedAfter(t, what, t0, interval, 1)[0]
}

// RunsStartedAfter waits for the first n runs that started after t0: what
// a check of a fault's effect reads where one run is too noisy to judge,
// as the file-system page reads two.
func (w *RunWatcher) RunsStartedAfter(t *testing.T, what string, t0 time.Time, interval time.Duration, n int) []Run {
	t.Helper()
	var found []Run
	WaitFor(t, fmt.Sprintf("%d probe run(s) started after %s", n, what), time.Duration(9+n)*interval+time.Minute, func() (bool, error) {
		runs, err := w.Snapshot()
		found = found[:0]
		for _, r := range runs {
			if r.Start().After(t0) && len(found) < n {
				found = append(found, r)
			}
		}
		return len(found) == n, err
	})
	return found
}

// MedianRate is the median rate of op over the runs that ended before t0:
// a daemon's own unthrottled rate, which throttles and checks are
// relative to.
func (w *RunWatcher) MedianRate(op string, t0 time.Time) float64 {
	runs, _ := w.Snapshot()
	var rates []float64
	for _, r := range runs {
		if r.End.Before(t0) {
			rates = append(rates, r.Rate[op])
		}
	}
	if len(rates) == 0 {
		return 0
	}
	sort.Float64s(rates)
	return MedianOf(rates)
}

// ScrapeFamilies scrapes a daemon's /metrics and returns its families and
// how long the scrape took.
func ScrapeFamilies(metricsURL string) (map[string]*dto.MetricFamily, time.Duration, error) {
	return scrape.Families(HTTPClient, metricsURL)
}

// scrapeRun reads the last successful run of p from a daemon, or nil when
// there is none yet with a ratio (with a rate, for a metadata probe,
// which may have no baseline).
func scrapeRun(metricsURL string, p WatchedProbe) (*Run, error) {
	fams, _, err := ScrapeFamilies(metricsURL)
	if err != nil {
		return nil, err
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		return probetest.FamilyValue(fams, name, labels)
	}
	id := map[string]string{"target": p.Target, "probe": p.Name}
	lastSuccess, ok1 := value("plateau_probe_last_success_timestamp_seconds", id)
	lastRun, ok2 := value("plateau_probe_last_run_timestamp_seconds", id)
	seconds, ok3 := value("plateau_probe_duration_seconds", id)
	// The duration is the last run's: it belongs to the last success only
	// when the last run succeeded.
	if !ok1 || !ok2 || !ok3 || lastSuccess != lastRun {
		return nil, nil
	}
	run := &Run{
		End:      time.Unix(0, int64(lastSuccess*1e9)),
		Seconds:  seconds,
		Ops:      p.Ops(),
		Ratio:    map[string]float64{},
		Rate:     map[string]float64{},
		Change:   map[string]float64{},
		Noise:    map[string]float64{},
		metadata: p.Metadata,
	}
	for _, op := range run.Ops {
		l := map[string]string{"target": p.Target, "probe": p.Name, "op": op}
		if r, ok := value("plateau_probe_ratio", l); ok {
			run.Ratio[op] = r
		} else if !p.Metadata {
			return nil, nil
		}
		rate, ok := value(p.rateFamily(), l)
		if !ok {
			return nil, nil
		}
		run.Rate[op] = rate
		if c, ok := value("plateau_probe_change_fast_ratio", l); ok {
			run.Change[op] = c
			run.Noise[op], _ = value("plateau_probe_change_fast_noise_ratio", l)
		}
	}
	return run, nil
}

func MedianOf(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
