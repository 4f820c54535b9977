package ruleeval

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// The benchmarks query a Store as the backtest's rule evaluation does:
// one Select per selector, at evaluation times 5 minutes apart, each
// window ending at the evaluation time. They use only what the Store
// exports, so that they run unchanged on earlier versions of it.

const (
	benchStep  = 5 * time.Minute
	benchProbe = 15 * time.Minute
)

// benchSelect runs one Select per iteration, the window [t-window, t]
// moving on by benchStep and starting over at the end of [start, end):
// one step back in time per pass, as a new evaluator would take.
func benchSelect(b *testing.B, st *Store, start, end int64, window time.Duration, matchers ...*labels.Matcher) {
	b.Helper()
	ctx := context.Background()
	q, err := st.Querier(start, end)
	if err != nil {
		b.Fatal(err)
	}
	step, w := benchStep.Milliseconds(), window.Milliseconds()
	t := start
	series, queries := 0, 0
	for b.Loop() {
		queries++
		hints := &storage.SelectHints{Start: t - w + 1, End: t}
		ss := q.Select(ctx, false, hints, matchers...)
		for ss.Next() {
			series++
		}
		if t += step; t >= end {
			t = start
		}
	}
	b.ReportMetric(float64(series)/float64(queries), "series/op")
}

// BenchmarkSelectLongSeries: 60 series of 10,000 samples a probe
// interval apart (104 days) under 3 metric names, a 30-day range
// selector with an equality matcher on the name and one on another
// label.
func BenchmarkSelectLongSeries(b *testing.B) {
	st := NewStore()
	const samples = 10_000
	for name := range 3 {
		for inst := range 20 {
			ls := labels.FromStrings("__name__", fmt.Sprintf("metric_%d", name), "instance", fmt.Sprintf("node%02d", inst), "job", "plateau")
			for i := range samples {
				if err := st.Append(ls, int64(i)*benchProbe.Milliseconds(), float64(i)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	benchSelect(b, st, 0, samples*benchProbe.Milliseconds(), 30*24*time.Hour,
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "metric_1"),
		labels.MustNewMatcher(labels.MatchEqual, "instance", "node07"))
}

// BenchmarkSelectManyShortSeries is what the fleet backtest's profile
// showed: thousands of series of about a hundred samples each under a
// metric name, one per trial, laid out one after the other in
// simulated time so that most are outside any one window; instant
// selectors (a 10-minute lookback) with only the name matcher.
func BenchmarkSelectManyShortSeries(b *testing.B) {
	st := NewStore()
	const series, samples = 2000, 100
	probe := benchProbe.Milliseconds()
	// Trials overlap 20 at a time.
	offset := samples * probe / 20
	for name := range 4 {
		for i := range series {
			ls := labels.FromStrings("__name__", fmt.Sprintf("metric_%d", name), "target", fmt.Sprintf("trial%04d", i), "instance", fmt.Sprintf("node%02d", i%20))
			for j := range samples {
				if err := st.Append(ls, int64(i)*offset+int64(j)*probe, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	benchSelect(b, st, 0, series*offset, 10*time.Minute,
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "metric_2"))
}
