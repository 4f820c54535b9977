package promfetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest"
)

// The metrics FetchPrometheus reads, as the daemon exports them (probe/store).
const (
	metricThroughput  = "plateau_probe_throughput_bytes_per_second"
	metricOpsRate     = "plateau_probe_operations_per_second"
	metricLastSuccess = "plateau_probe_last_success_timestamp_seconds"
)

// DefaultPrometheusStep is the query resolution a zero PrometheusQuery.Step
// stands for: a minute, well under the default probe interval of 15m, so
// every run is seen at least once at the usual scrape intervals.
const DefaultPrometheusStep = time.Minute

// maxPointsPerSeries is how many steps one range query may span: Prometheus
// refuses a query whose (end-start)/step exceeds 11,000 ("exceeded maximum
// resolution of 11,000 points per timeseries"), and a year at 1m is 525,600.
const maxPointsPerSeries = 11000

// joinLabels are the labels a result gauge shares with its probe's
// plateau_probe_last_success_timestamp_seconds, which has no op label.
var joinLabels = []model.LabelName{"job", "instance", "target", "probe"}

// PrometheusQuery says where and what FetchPrometheus reads.
type PrometheusQuery struct {
	// URL is the Prometheus server, e.g. http://prometheus:9090.
	URL string
	// Selector selects the result series, e.g.
	// plateau_probe_throughput_bytes_per_second{target="scratch"}. Every
	// series it selects must be plateau_probe_throughput_bytes_per_second
	// or plateau_probe_operations_per_second, with instance, target, probe
	// and op labels.
	Selector string
	// Start and End bound the runs returned: a run is returned when its
	// last-success timestamp is within [Start, End] and a step of the range
	// saw it.
	Start, End time.Time
	// Step is the query resolution; zero means DefaultPrometheusStep. It
	// must be well under the probe interval: a run whose result was
	// replaced by the next run's between two steps is never seen.
	Step time.Duration
	// Client makes the HTTP requests; nil means http.DefaultClient.
	Client *http.Client
	// Warn receives, when some runs were found, each distinct warning
	// Prometheus returned (prefixed "Prometheus: "; say, a remote-read
	// source that did not answer, so the history may have holes), and a
	// line for each selected series left out because its probe has no
	// plateau_probe_last_success_timestamp_seconds with the same job,
	// instance, target and probe. Nil logs them with slog.Default().
	// When no run was found they are part of FetchPrometheus's error
	// instead.
	Warn func(warning string)
}

// FetchPrometheus reads the probe runs of q.Selector between q.Start and
// q.End from a Prometheus server, one Series per probe op sorted by key.
//
// The daemon's result gauges hold a run's value until the next run, so a
// range query sees the same run at many steps, and two runs in a row may
// have the same value. A run is therefore one change of its probe's
// plateau_probe_last_success_timestamp_seconds (joined on job, instance,
// target and probe): each change is one entry, timed at that timestamp,
// with the result gauge's value at the step where the change is seen.
//
// Keys are instance/target/probe/op, prefixed with job/ when the result
// spans several jobs, and suffixed with /bytes_per_second or
// /operations_per_second when it holds both metrics (a data probe exports
// both for each op).
func FetchPrometheus(ctx context.Context, q PrometheusQuery) ([]backtest.Series, error) {
	return fetchPrometheus(ctx, q, maxPointsPerSeries)
}

// fetchPrometheus is FetchPrometheus with at most maxPoints steps a query,
// smaller in tests so that a short history still crosses query boundaries.
func fetchPrometheus(ctx context.Context, q PrometheusQuery, maxPoints int) ([]backtest.Series, error) {
	if q.Step == 0 {
		q.Step = DefaultPrometheusStep
	}
	if err := q.validate(); err != nil {
		return nil, err
	}
	hc := q.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	client, err := api.NewClient(api.Config{Address: q.URL, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", q.URL, err)
	}
	promAPI := v1.NewAPI(client)

	resultQuery := q.Selector
	// "and on" keeps only the last-success series of probes the selector
	// selects, so a narrow selector does not pull every probe's timestamps.
	lastSuccessQuery := fmt.Sprintf("%s and on(%s) (%s)", metricLastSuccess, joinList(), q.Selector)

	sp := newRunSplitter(q.Start)
	var warnings []string
	seenWarning := map[string]bool{}
	query := func(expr string, r v1.Range) (model.Matrix, error) {
		val, warns, _, err := promAPI.QueryRange(ctx, expr, r)
		// Infos (the third value) are PromQL's hints, such as a metric name
		// that does not look like a counter; they say nothing about whether
		// the history is complete, so they are dropped.
		for _, w := range warns {
			if !seenWarning[w] {
				seenWarning[w] = true
				warnings = append(warnings, w)
			}
		}
		if err != nil {
			var apiErr *v1.Error
			if errors.As(err, &apiErr) && apiErr.Detail != "" {
				err = fmt.Errorf("%w (%s)", err, apiErr.Detail)
			}
			return nil, fmt.Errorf("prometheus %s: query %q: %w", q.URL, expr, err)
		}
		m, ok := val.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("prometheus %s: query %q: got a %s, want a range vector (matrix)", q.URL, expr, val.Type())
		}
		return m, nil
	}
	pending := chunks(q.Start, q.End, q.Step, maxPoints)
	for len(pending) > 0 {
		r := pending[0]
		pending = pending[1:]
		results, err := query(resultQuery, r)
		if err == nil && len(results) == 0 {
			continue
		}
		var lastSuccess model.Matrix
		if err == nil {
			lastSuccess, err = query(lastSuccessQuery, r)
		}
		if err != nil {
			// A selector of many nodes can pass --query.max-samples (50
			// million by default) long before 11,000 steps; fewer steps a
			// query then fit. Halves are queried in order, so the runs
			// still come oldest first.
			if halves, ok := halve(r); ok && tooManySamples(err) {
				pending = append(halves, pending...)
				continue
			}
			return nil, err
		}
		if err := sp.add(results, lastSuccess); err != nil {
			return nil, fmt.Errorf("prometheus %s: selector %q: %w", q.URL, q.Selector, err)
		}
	}
	series, err := sp.finish()
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: selector %q: %w", q.URL, q.Selector, err)
	}
	unjoined := sp.unjoined()
	if len(series) == 0 {
		what := "matched no series"
		if sp.matched() {
			what = fmt.Sprintf("matched series, but no change of their probes' %s was seen", metricLastSuccess)
		}
		err := fmt.Errorf("prometheus %s: selector %q %s between %s and %s", q.URL, q.Selector, what,
			q.Start.Format(time.RFC3339), q.End.Format(time.RFC3339))
		if len(unjoined) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.Join(unjoined, "; "))
		}
		if len(warnings) > 0 {
			// With nothing returned, the warnings may be the reason.
			err = fmt.Errorf("%w; Prometheus warned: %s", err, strings.Join(warnings, "; "))
		}
		return nil, err
	}
	warn := q.Warn
	if warn == nil {
		warn = func(w string) {
			slog.Default().Warn("the probe history from Prometheus may be incomplete", "url", q.URL, "selector", q.Selector, "warning", w)
		}
	}
	for _, w := range warnings {
		warn("Prometheus: " + w)
	}
	for _, w := range unjoined {
		warn(w)
	}
	return series, nil
}

func (q PrometheusQuery) validate() error {
	u, err := url.Parse(q.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("prometheus URL %q: want http://host:port or https://host:port", q.URL)
	}
	if strings.TrimSpace(q.Selector) == "" {
		return fmt.Errorf("prometheus %s: empty selector; give one of %s or %s", q.URL, metricThroughput, metricOpsRate)
	}
	if q.Start.IsZero() || q.End.IsZero() || !q.Start.Before(q.End) {
		return fmt.Errorf("prometheus %s: range %s to %s: want a start before the end", q.URL,
			q.Start.Format(time.RFC3339), q.End.Format(time.RFC3339))
	}
	if q.Step < 0 {
		return fmt.Errorf("prometheus %s: step %s: want a positive step", q.URL, q.Step)
	}
	return nil
}

func joinList() string {
	s := make([]string, len(joinLabels))
	for i, l := range joinLabels {
		s[i] = string(l)
	}
	return strings.Join(s, ", ")
}

// chunks splits [start, end] into ranges of at most maxPoints steps each,
// on the grid start + k*step, so that no step is queried twice or skipped
// at a boundary.
func chunks(start, end time.Time, step time.Duration, maxPoints int) []v1.Range {
	span := time.Duration(maxPoints-1) * step
	var out []v1.Range
	for s := start; !s.After(end); s = s.Add(span + step) {
		e := s.Add(span)
		if e.After(end) {
			e = end
		}
		out = append(out, v1.Range{Start: s, End: e, Step: step})
	}
	return out
}

// halve splits a range of two or more steps in two on its grid.
func halve(r v1.Range) ([]v1.Range, bool) {
	n := int(r.End.Sub(r.Start)/r.Step) + 1
	if n < 2 {
		return nil, false
	}
	mid := r.Start.Add(time.Duration(n/2) * r.Step)
	return []v1.Range{
		{Start: r.Start, End: mid.Add(-r.Step), Step: r.Step},
		{Start: mid, End: r.End, Step: r.Step},
	}, true
}

// tooManySamples tells whether Prometheus refused a query for the samples
// it would load or read (--query.max-samples).
func tooManySamples(err error) bool {
	var apiErr *v1.Error
	return errors.As(err, &apiErr) && strings.Contains(apiErr.Msg, "too many samples")
}

// runSplitter turns range-query results into runs, a chunk at a time,
// remembering across chunks the last timestamp each series was seen at.
type runSplitter struct {
	start  time.Time
	series map[string]*splitSeries // by the result series' labels
}

type splitSeries struct {
	metric model.Metric
	// last is the last-success timestamp of the run last seen, and seen
	// whether there was one: a run before start is remembered so that it
	// is not taken for a new run, but not returned.
	last model.SampleValue
	seen bool
	// joined tells whether any step had a last-success sample of the
	// series' probe: without one, its runs cannot be told apart.
	joined bool
	times  []time.Time
	values []float64
}

func newRunSplitter(start time.Time) *runSplitter {
	return &runSplitter{start: start, series: map[string]*splitSeries{}}
}

// matched tells whether any result series was seen at all.
func (sp *runSplitter) matched() bool { return len(sp.series) > 0 }

func joinKey(m model.Metric) string {
	var b strings.Builder
	for _, l := range joinLabels {
		// Label values cannot hold a NUL byte in the text or protobuf
		// exposition formats, so it separates them unambiguously.
		b.WriteString(string(m[l]))
		b.WriteByte(0)
	}
	return b.String()
}

// add takes one chunk's result series and the last-success series of their
// probes, over the same steps, and records each run first seen in it.
func (sp *runSplitter) add(results, lastSuccess model.Matrix) error {
	// Last-success timestamp by probe and step. Two series of one probe
	// (say, its kind changed) may overlap only where they agree.
	ls := map[string]map[model.Time]model.SampleValue{}
	for _, s := range lastSuccess {
		k := joinKey(s.Metric)
		byTime := ls[k]
		if byTime == nil {
			byTime = map[model.Time]model.SampleValue{}
			ls[k] = byTime
		}
		for _, p := range s.Values {
			if v, ok := byTime[p.Timestamp]; ok && v != p.Value {
				return fmt.Errorf("two %s series for one probe disagree at %s (%v and %v): narrow the selector to one, e.g. by kind",
					metricLastSuccess, p.Timestamp.Time().Format(time.RFC3339), v, p.Value)
			}
			byTime[p.Timestamp] = p.Value
		}
	}
	for _, s := range results {
		if err := checkResultSeries(s.Metric); err != nil {
			return err
		}
		id := s.Metric.String()
		st := sp.series[id]
		if st == nil {
			st = &splitSeries{metric: s.Metric}
			sp.series[id] = st
		}
		byTime := ls[joinKey(s.Metric)]
		for _, p := range s.Values {
			// A step with no last-success sample cannot be told apart from
			// the run before; the next step that has one will show a change.
			t, ok := byTime[p.Timestamp]
			st.joined = st.joined || ok
			if !ok || (st.seen && t == st.last) {
				continue
			}
			st.last, st.seen = t, true
			at := unixSeconds(float64(t))
			if at.Before(sp.start) {
				continue
			}
			st.times = append(st.times, at)
			st.values = append(st.values, float64(p.Value))
		}
	}
	return nil
}

func checkResultSeries(m model.Metric) error {
	name := m[model.MetricNameLabel]
	if name != metricThroughput && name != metricOpsRate {
		if name == "" {
			name = "a series without a metric name"
		}
		return fmt.Errorf("selects %s (%v); want only %s or %s series", name, m, metricThroughput, metricOpsRate)
	}
	for _, l := range []model.LabelName{"instance", "target", "probe", "op"} {
		if m[l] == "" {
			return fmt.Errorf("series %v has no %s label", m, l)
		}
	}
	return nil
}

// unixSeconds converts a Unix time in float seconds, rounded to the
// microsecond: a float64 near 1.7e9 carries about a quarter of a
// microsecond of noise, which would otherwise show in the times.
func unixSeconds(s float64) time.Time {
	return time.UnixMicro(int64(math.Round(s * 1e6)))
}

// unjoined names the result series whose probe never had a last-success
// sample: their results are left out, which the caller is told, since a
// relabeling that treats the two metrics differently would otherwise make
// a probe vanish from the backtest without a word.
func (sp *runSplitter) unjoined() []string {
	var out []string
	for _, st := range sp.series {
		if !st.joined {
			out = append(out, fmt.Sprintf("%v: no %s of the same job, instance, target and probe at any step; its results are left out",
				st.metric, metricLastSuccess))
		}
	}
	sort.Strings(out)
	return out
}

// finish returns the series with at least one run, keyed and sorted.
func (sp *runSplitter) finish() ([]backtest.Series, error) {
	jobs := map[model.LabelValue]bool{}
	names := map[model.LabelValue]bool{}
	for _, st := range sp.series {
		jobs[st.metric["job"]] = true
		names[st.metric[model.MetricNameLabel]] = true
	}
	byKey := map[string]*splitSeries{}
	var out []backtest.Series
	for _, st := range sp.series {
		if len(st.times) == 0 {
			continue
		}
		m := st.metric
		key := fmt.Sprintf("%s/%s/%s/%s", m["instance"], m["target"], m["probe"], m["op"])
		if len(jobs) > 1 {
			key = string(m["job"]) + "/" + key
		}
		if len(names) > 1 {
			if m[model.MetricNameLabel] == metricThroughput {
				key += "/bytes_per_second"
			} else {
				key += "/operations_per_second"
			}
		}
		if other, ok := byKey[key]; ok {
			return nil, fmt.Errorf("series %v and %v both have key %s: narrow the selector to one of them", other.metric, m, key)
		}
		byKey[key] = st
		s := backtest.Series{Key: key, Times: st.times, Values: st.values, Labels: map[string]string{}}
		for name, value := range m {
			s.Labels[string(name)] = string(value)
		}
		// A clock stepped back on the probed node makes a timestamp go down;
		// that is still a run, put in its place.
		if !sort.SliceIsSorted(s.Times, func(i, j int) bool { return s.Times[i].Before(s.Times[j]) }) {
			sort.Stable(byTime(s))
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// byTime sorts a Series' entries by time, keeping times and values paired.
type byTime backtest.Series

func (s byTime) Len() int           { return len(s.Times) }
func (s byTime) Less(i, j int) bool { return s.Times[i].Before(s.Times[j]) }
func (s byTime) Swap(i, j int) {
	s.Times[i], s.Times[j] = s.Times[j], s.Times[i]
	s.Values[i], s.Values[j] = s.Values[j], s.Values[i]
}
