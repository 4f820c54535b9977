package ruleeval

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestSeek compares seek with a binary search over the whole series,
// for every hint, including ones out of range, and every time around
// the samples'.
func TestSeek(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 40 {
		var s memSamples
		ts := int64(rng.IntN(5))
		for range n {
			s = append(s, memSample{t: ts})
			ts += 1 + int64(rng.IntN(4))
		}
		var times []int64
		for i := int64(-2); i <= ts+2; i++ {
			times = append(times, i)
		}
		times = append(times, math.MinInt64, math.MaxInt64)
		for _, target := range times {
			want := sort.Search(len(s), func(i int) bool { return s[i].t >= target })
			for hint := int64(-3); hint <= int64(n)+3; hint++ {
				if got := s.seek(target, hint); got != want {
					t.Fatalf("%d samples %v: seek(%d, hint %d) = %d, want %d", n, s, target, hint, got, want)
				}
			}
		}
	}
}

// referenceSelect is Select as it was before the series kept their
// cursors: every series in creation order, all matchers checked, the
// window found by two binary searches.
func referenceSelect(st *Store, mint, maxt int64, sortSeries bool, matchers []*labels.Matcher) []selectedSeries {
	var found []*StoreSeries
	var windows []memSamples
	for _, s := range st.all {
		ok := true
		for _, mt := range matchers {
			ok = ok && mt.Matches(s.labels.Get(mt.Name))
		}
		if !ok {
			continue
		}
		lo := sort.Search(len(s.samples), func(i int) bool { return s.samples[i].t >= mint })
		hi := sort.Search(len(s.samples), func(i int) bool { return s.samples[i].t > maxt })
		if lo >= hi {
			continue
		}
		found = append(found, s)
		windows = append(windows, s.samples[lo:hi])
	}
	idx := make([]int, len(found))
	for i := range idx {
		idx[i] = i
	}
	if sortSeries {
		slices.SortFunc(idx, func(i, j int) int { return labels.Compare(found[i].labels, found[j].labels) })
	}
	var out []selectedSeries
	for _, i := range idx {
		out = append(out, selectedSeries{found[i].labels, windows[i]})
	}
	return out
}

// selectedSeries is a series as Select returns it: its labels and the
// samples in the window.
type selectedSeries struct {
	labels  labels.Labels
	samples memSamples
}

func sameSelection(a, b []selectedSeries) bool {
	return slices.EqualFunc(a, b, func(a, b selectedSeries) bool {
		return labels.Equal(a.labels, b.labels) && slices.Equal(a.samples, b.samples)
	})
}

// selected reads a SeriesSet through the iterator the engine reuses and
// through a new one.
func selected(ss storage.SeriesSet, reuse chunkenc.Iterator) ([]selectedSeries, chunkenc.Iterator, error) {
	var out []selectedSeries
	for ss.Next() {
		s := ss.At()
		var got [2]memSamples
		for k, it := range []chunkenc.Iterator{s.Iterator(reuse), s.Iterator(nil)} {
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				got[k] = append(got[k], memSample{t: ts, f: v})
			}
			if err := it.Err(); err != nil {
				return nil, nil, err
			}
			reuse = it
		}
		if !slices.Equal(got[0], got[1]) {
			return nil, nil, fmt.Errorf("%s: a reused iterator reads %v, a new one %v", s.Labels(), got[0], got[1])
		}
		out = append(out, selectedSeries{s.Labels(), got[0]})
	}
	return out, reuse, ss.Err()
}

// randomStore returns a store of series under a few names and labels,
// some without a name, some without samples, some dense, each with samples at random gaps
// (some of one millisecond) up to about until, and the times of all the
// samples.
func randomStore(t *testing.T, rng *rand.Rand, until int64) (*Store, []int64) {
	t.Helper()
	st := NewStore()
	var times []int64
	for i := range 30 {
		ls := labels.FromStrings("__name__", fmt.Sprintf("m%d", i%3), "instance", fmt.Sprintf("n%d", i%4), "target", fmt.Sprint(i))
		if i%8 == 4 {
			ls = labels.NewBuilder(ls).Del("__name__").Labels()
		}
		s := st.Series(ls)
		if i%7 == 3 {
			continue // no samples
		}
		gap := 1 + rng.Int64N(until/20)
		if i%5 == 0 {
			gap = 4
		}
		for ts := rng.Int64N(until / 2); ts < until; ts += 1 + rng.Int64N(gap) {
			if err := s.Add(ts, rng.Float64()); err != nil {
				t.Fatal(err)
			}
			times = append(times, ts)
		}
	}
	return st, times
}

var selectMatchers = [][]*labels.Matcher{
	nil,
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m1")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m2"), labels.MustNewMatcher(labels.MatchEqual, "instance", "n1")},
	{labels.MustNewMatcher(labels.MatchEqual, "instance", "n3"), labels.MustNewMatcher(labels.MatchNotEqual, "__name__", "m0")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m0"), labels.MustNewMatcher(labels.MatchRegexp, "target", "1.*")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m1"), labels.MustNewMatcher(labels.MatchEqual, "absent", "")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "none")},
	{labels.MustNewMatcher(labels.MatchEqual, "target", "5"), labels.MustNewMatcher(labels.MatchEqual, "__name__", "m2")},
	{labels.MustNewMatcher(labels.MatchEqual, "instance", "n1"), labels.MustNewMatcher(labels.MatchEqual, "target", "new")},
	{labels.MustNewMatcher(labels.MatchRegexp, "__name__", "m[12]"), labels.MustNewMatcher(labels.MatchEqual, "instance", "n2"), labels.MustNewMatcher(labels.MatchNotEqual, "target", "6")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m0"), labels.MustNewMatcher(labels.MatchEqual, "instance", "n0"), labels.MustNewMatcher(labels.MatchEqual, "target", "4")},
	{labels.MustNewMatcher(labels.MatchEqual, "nolabel", "x")},
	{labels.MustNewMatcher(labels.MatchEqual, "__name__", ""), labels.MustNewMatcher(labels.MatchEqual, "instance", "n0")},
}

// TestSelectMatchesReference queries the same store at windows moving
// forward, then backward, then at random, and compares every answer
// with referenceSelect's.
func TestSelectMatchesReference(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const until = 20_000
	st, times := randomStore(t, rng, until)
	var reuse chunkenc.Iterator
	check := func(q storage.Querier, hints *storage.SelectHints, mint, maxt int64) {
		t.Helper()
		for _, sortSeries := range []bool{false, true} {
			for _, ms := range selectMatchers {
				got, it, err := selected(q.Select(ctx, sortSeries, hints, ms...), reuse)
				if err != nil {
					t.Fatal(err)
				}
				reuse = it
				if want := referenceSelect(st, mint, maxt, sortSeries, ms); !sameSelection(got, want) {
					t.Fatalf("[%d, %d] %v sorted %v:\ngot  %v\nwant %v", mint, maxt, ms, sortSeries, got, want)
				}
			}
		}
	}
	q, err := st.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	at := func(mint, maxt int64) {
		t.Helper()
		check(q, &storage.SelectHints{Start: mint, End: maxt}, mint, maxt)
	}
	// The querier's own range, when the engine gives no hints.
	check(q, nil, math.MinInt64, math.MaxInt64)
	for _, r := range [][2]int64{{-10, until + 10}, {-10, -1}, {until + 1, until + 10}, {5, 4}, {0, 0}} {
		mq, err := st.Querier(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		check(mq, nil, r[0], r[1])
	}
	// Windows of several widths moving forward and back, from before
	// the first sample to after the last, in steps that land on sample
	// times and between them; then windows with an edge on a sample.
	for _, width := range []int64{0, 1, 37, 600, until / 10} {
		for ts := int64(-width - 50); ts < until+50; ts += 97 {
			at(ts-width, ts)
		}
		for ts := int64(until + 50); ts > -width-50; ts -= 89 {
			at(ts-width, ts)
		}
	}
	for range 300 {
		ts := times[rng.IntN(len(times))]
		at(ts, ts+rng.Int64N(300))
		at(ts-rng.Int64N(300), ts)
		at(ts, ts)
	}
	for range 500 {
		mint := rng.Int64N(until+200) - 100
		at(mint, mint+rng.Int64N(until/10)-until/50)
	}
	at(math.MinInt64, math.MaxInt64)
	at(math.MinInt64, 100)
	at(100, math.MaxInt64)

	// Samples appended after queries, and a new series, are read too.
	s := st.Series(labels.FromStrings("__name__", "m1", "instance", "n1", "target", "new"))
	for i := range int64(20) {
		for _, s := range []*StoreSeries{s, st.all[1]} {
			if err := s.Add(until+100+i*10, float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		at(until+100+i*10-25, until+100+i*10)
	}
}

// TestSelectConcurrent queries one store from several goroutines at
// once: their cursors must not race (go test -race) and their answers
// must not depend on each other's.
func TestSelectConcurrent(t *testing.T) {
	ctx := context.Background()
	const until = 50_000
	st, _ := randomStore(t, rand.New(rand.NewPCG(5, 6)), until)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(7, uint64(g)))
			q, err := st.Querier(math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 300 {
				// Half the goroutines move forward, half jump about.
				maxt := int64(i) * until / 300
				if g%2 == 1 {
					maxt = rng.Int64N(until)
				}
				mint := maxt - rng.Int64N(2000)
				ms := selectMatchers[rng.IntN(len(selectMatchers))]
				got, _, err := selected(q.Select(ctx, false, &storage.SelectHints{Start: mint, End: maxt}, ms...), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if want := referenceSelect(st, mint, maxt, false, ms); !sameSelection(got, want) {
					t.Errorf("[%d, %d] %v:\ngot  %v\nwant %v", mint, maxt, ms, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestLabelQueries compares LabelValues and LabelNames with every
// series checked against every matcher.
func TestLabelQueries(t *testing.T) {
	ctx := context.Background()
	st, _ := randomStore(t, rand.New(rand.NewPCG(8, 9)), 1000)
	st.Series(labels.FromStrings("__name__", "m1", "extra", "e"))
	st.Series(labels.FromStrings("instance", "n0", "extra", "no name"))
	q, err := st.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range selectMatchers {
		values := map[string]map[string]bool{}
		names := map[string]bool{}
		for _, s := range st.all {
			if !matchesAll(s.labels, ms) {
				continue
			}
			s.labels.Range(func(l labels.Label) {
				names[l.Name] = true
				if values[l.Name] == nil {
					values[l.Name] = map[string]bool{}
				}
				values[l.Name][l.Value] = true
			})
		}
		gotNames, _, err := q.LabelNames(ctx, nil, ms...)
		if err != nil {
			t.Fatal(err)
		}
		if want := slices.Sorted(maps.Keys(names)); !slices.Equal(gotNames, want) {
			t.Errorf("%v: label names %v, want %v", ms, gotNames, want)
		}
		for _, name := range []string{"__name__", "instance", "target", "extra", "nolabel"} {
			got, _, err := q.LabelValues(ctx, name, nil, ms...)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Sorted(maps.Keys(values[name])); !slices.Equal(got, want) {
				t.Errorf("%v: values of %s %v, want %v", ms, name, got, want)
			}
		}
	}
}
