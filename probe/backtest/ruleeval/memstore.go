package ruleeval

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	tsdbchunks "github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// Store holds a replay's float samples in memory, for the PromQL
// engine to read: what writeCase writes and what the rules record. A
// replay is written once, read at increasing times and thrown away, so a
// TSDB's blocks, compression and write-ahead log buy it nothing, and
// linking the TSDB package put Prometheus's remote-write and service
// discovery dependencies (cloud SDKs) into the daemon's binary: pages
// that every idle daemon kept resident for a command it never runs.
//
// Appends follow the TSDB head's rules, which Prometheus's rule
// evaluation relies on: a series takes samples in time order only, and a
// second sample at the same time is refused unless it is the same value.
type Store struct {
	// all holds the series in the order they were created, which is the
	// order the TSDB's postings return them in; byName indexes them by
	// metric name, in the same order.
	all    []*StoreSeries
	byName map[string][]*StoreSeries
	byKey  map[string]*StoreSeries
	buf    []byte
}

// StoreSeries is one series of a Store.
type StoreSeries struct {
	labels  labels.Labels
	samples memSamples
	// lo and hi are where the last Select found the first sample of its
	// window and the first one past it. Rules are evaluated at
	// increasing times, so the next window starts and ends a sample or
	// two further on, and a search from there costs a few comparisons
	// where one over the whole series costs log2 of its length. Any
	// value is only a place to start from, never a result; atomic as a
	// storage.Queryable may be queried from several goroutines at once
	// (the backtest queries each Store from one).
	lo, hi atomic.Int64
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{byName: map[string][]*StoreSeries{}, byKey: map[string]*StoreSeries{}}
}

// Series returns the series of ls, creating it if it is new.
func (m *Store) Series(ls labels.Labels) *StoreSeries {
	m.buf = ls.Bytes(m.buf[:0])
	s := m.byKey[string(m.buf)]
	if s == nil {
		s = &StoreSeries{labels: ls}
		m.byKey[string(m.buf)] = s
		m.all = append(m.all, s)
		name := ls.Get(model.MetricNameLabel)
		m.byName[name] = append(m.byName[name], s)
	}
	return s
}

// Append adds the sample at t (milliseconds) to the series of ls.
func (m *Store) Append(ls labels.Labels, t int64, v float64) error {
	return m.Series(ls).Add(t, v)
}

// Add appends the sample at t (milliseconds), refusing one before the
// series' last sample, and another value at the same time.
func (s *StoreSeries) Add(t int64, v float64) error {
	if n := len(s.samples); n > 0 {
		switch last := s.samples[n-1].t; {
		case t < last:
			return fmt.Errorf("%s at %d: %w", s.labels, t, storage.ErrOutOfOrderSample)
		case t == last:
			if math.Float64bits(v) == math.Float64bits(s.samples[n-1].f) {
				return nil
			}
			return fmt.Errorf("%s at %d: %w", s.labels, t, storage.ErrDuplicateSampleForTimestamp)
		}
	}
	s.samples = append(s.samples, memSample{t: t, f: v})
	return nil
}

// Querier implements storage.Queryable.
func (m *Store) Querier(mint, maxt int64) (storage.Querier, error) {
	return &memQuerier{store: m, mint: mint, maxt: maxt}, nil
}

type memQuerier struct {
	store      *Store
	mint, maxt int64
}

// candidates are the series that may match: those of the metric name
// when a matcher fixes it, else every series. matched is the index of
// that matcher, -1 if none: the candidates need not be checked against
// it.
func (q *memQuerier) candidates(matchers []*labels.Matcher) (series []*StoreSeries, matched int) {
	for i, mt := range matchers {
		if mt.Name == model.MetricNameLabel && mt.Type == labels.MatchEqual {
			return q.store.byName[mt.Value], i
		}
	}
	return q.store.all, -1
}

func matchesAll(ls labels.Labels, matchers []*labels.Matcher) bool {
	return matchesBut(ls, matchers, -1)
}

// matchesBut tells whether ls matches every matcher but the one at
// index skip, which the candidates match already.
func matchesBut(ls labels.Labels, matchers []*labels.Matcher, skip int) bool {
	for i, mt := range matchers {
		if i != skip && !mt.Matches(ls.Get(mt.Name)) {
			return false
		}
	}
	return true
}

// Select returns the matching series that have samples in the querier's
// range, narrowed by the hints' range as the TSDB's querier narrows it.
func (q *memQuerier) Select(_ context.Context, sortSeries bool, hints *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = hints.Start, hints.End
	}
	var out []storage.Series
	candidates, matched := q.candidates(matchers)
	for _, s := range candidates {
		if !matchesBut(s.labels, matchers, matched) {
			continue
		}
		lo, hi := s.window(mint, maxt)
		if lo >= hi {
			continue
		}
		out = append(out, &memSeries{labels: s.labels, samples: s.samples[lo:hi]})
	}
	if sortSeries {
		sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
	}
	return &memSeriesSet{series: out, i: -1}
}

// LabelValues implements storage.LabelQuerier.
func (q *memQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	candidates, matched := q.candidates(matchers)
	for _, s := range candidates {
		if v := s.labels.Get(name); v != "" && matchesBut(s.labels, matchers, matched) {
			seen[v] = true
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil, nil
}

// LabelNames implements storage.LabelQuerier.
func (q *memQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	candidates, matched := q.candidates(matchers)
	for _, s := range candidates {
		if matchesBut(s.labels, matchers, matched) {
			s.labels.Range(func(l labels.Label) { seen[l.Name] = true })
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil, nil
}

// Close implements storage.LabelQuerier.
func (q *memQuerier) Close() error { return nil }

// memSeries is a series' samples in a query's window: a
// storage.SeriesEntry with its iterator function in one allocation
// rather than three, one per series a query returns.
type memSeries struct {
	labels  labels.Labels
	samples memSamples
}

func (s *memSeries) Labels() labels.Labels { return s.labels }

// Iterator reuses it, the iterator the engine read its last series
// with, when it can.
func (s *memSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if r, ok := it.(interface{ Reset(storage.Samples) }); ok {
		r.Reset(s.samples)
		return it
	}
	return storage.NewListSeriesIterator(s.samples)
}

type memSeriesSet struct {
	series []storage.Series
	i      int
}

func (s *memSeriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *memSeriesSet) At() storage.Series                { return s.series[s.i] }
func (s *memSeriesSet) Err() error                        { return nil }
func (s *memSeriesSet) Warnings() annotations.Annotations { return nil }

// memSample is one float sample; *memSample is the chunks.Sample that
// storage.NewListSeriesIterator reads, handed out without a copy.
type memSample struct {
	t int64
	f float64
}

func (s *memSample) T() int64                      { return s.t }
func (s *memSample) ST() int64                     { return 0 }
func (s *memSample) F() float64                    { return s.f }
func (s *memSample) H() *histogram.Histogram       { return nil }
func (s *memSample) FH() *histogram.FloatHistogram { return nil }
func (s *memSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s *memSample) Copy() tsdbchunks.Sample       { c := *s; return &c }

// window returns the bounds of the series' samples from mint to maxt,
// both included: they are s.samples[lo:hi], none if lo >= hi.
func (s *StoreSeries) window(mint, maxt int64) (lo, hi int) {
	n := len(s.samples)
	if n == 0 || s.samples[0].t > maxt || s.samples[n-1].t < mint {
		// Most series of a backtest are another trial's, over
		// another stretch of time: no need to move their cursors.
		return 0, 0
	}
	lastLo, lastHi := s.lo.Load(), s.hi.Load()
	lo, hi = s.samples.seek(mint, lastLo), n
	if maxt < math.MaxInt64 {
		// The first sample after maxt is the first at or after maxt+1.
		hi = s.samples.seek(maxt+1, lastHi)
	}
	// Stored only when moved: an atomic store costs more than a load.
	if int64(lo) != lastLo {
		s.lo.Store(int64(lo))
	}
	if int64(hi) != lastHi {
		s.hi.Store(int64(hi))
	}
	return lo, hi
}

// memSamples is a series' samples in time order.
type memSamples []memSample

// seek returns the index of the first sample at or after t, len(s) if
// none, searching from hint: it steps away from the hint by 1, 2, 4, …
// samples until it passes t, then searches the last step by halves. A
// hint a few samples off costs a few comparisons; one far off, about
// twice a binary search's.
func (s memSamples) seek(t int64, hint int64) int {
	h := int(min(max(hint, 0), int64(len(s))))
	// The answer is in [lo, hi]: s[lo-1] is before t (or lo is 0) and
	// s[hi] is not (or hi is len(s)).
	lo, hi := 0, len(s)
	if h < len(s) && s[h].t < t {
		lo = h + 1
		for step := 1; h+step < len(s); step *= 2 {
			if s[h+step].t >= t {
				hi = h + step
				break
			}
			lo = h + step + 1
		}
	} else {
		hi = h
		for step := 1; h-step >= 0; step *= 2 {
			if s[h-step].t < t {
				lo = h - step + 1
				break
			}
			hi = h - step
		}
	}
	return lo + sort.Search(hi-lo, func(i int) bool { return s[lo+i].t >= t })
}

func (s memSamples) Get(i int) tsdbchunks.Sample { return &s[i] }
func (s memSamples) Len() int                    { return len(s) }

// EachSample calls f with every sample of the store, series by series in
// the order they were created, each in time order; it stops at f's first
// error and returns it.
func (m *Store) EachSample(f func(ls labels.Labels, t int64, v float64) error) error {
	for _, s := range m.all {
		for _, smp := range s.samples {
			if err := f(s.labels, smp.t, smp.f); err != nil {
				return err
			}
		}
	}
	return nil
}
