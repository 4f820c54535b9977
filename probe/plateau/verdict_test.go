package plateau_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// regressionRuleExpr is the recording rule
// instance_target_probe_op:plateau_probe_regression:bool as rules.yml had
// it before the daemon exported the verdict (git history of
// dashboards/rules.yml), the definition Change.Regression must keep.
const regressionRuleExpr = `
clamp_max(
  (
    plateau_probe_change_fast_ratio
      < bool
    1 - clamp(2 * plateau_probe_change_fast_noise_ratio, 0.2, 0.6)
  )
  *
  (plateau_probe_change_low_runs >= bool 2)
  +
  (
    plateau_probe_change_ratio
      < bool
    1 - clamp(2 * plateau_probe_change_noise_ratio, 0.2, 0.6)
  )
  *
  (plateau_probe_change_low_runs >= bool 1)
  *
  (plateau_probe_change_fast_ratio < bool 0.9),
  1
)`

// TestRegressionEqualsTheRecordingRule evaluates the old recording rule
// with Prometheus's engine and Change.Regression on the same statistics:
// values on and either side of every threshold, and the statistics of
// random series as ChangeOf computes them.
func TestRegressionEqualsTheRecordingRule(t *testing.T) {
	var cases []plateau.Change
	// On the thresholds, and a hair either side, for each way to page.
	for _, noise := range []float64{0, 0.05, 0.1, 0.2, 0.3, 0.31, 0.5} {
		th := plateau.PageThreshold(noise)
		for _, r := range []float64{th, math.Nextafter(th, 0), math.Nextafter(th, 2), 0.9, math.Nextafter(0.9, 0), 0.3, 1.2} {
			for _, low := range []int{0, 1, 2, 3, 4} {
				cases = append(cases,
					plateau.Change{FastRatio: r, FastNoise: noise, Ratio: 1, Noise: noise, LowRuns: low},
					plateau.Change{FastRatio: 0.85, FastNoise: 0.3, Ratio: r, Noise: noise, LowRuns: low},
					plateau.Change{FastRatio: r, FastNoise: noise, Ratio: r, Noise: noise, LowRuns: low},
					plateau.Change{FastRatio: r, FastNoise: noise, Ratio: 0.3, Noise: noise, LowRuns: low})
			}
		}
	}
	// The statistics of random series, with drops of random depth.
	rng := rand.New(rand.NewPCG(1, 2))
	for len(cases) < 2000 {
		results := make([]float64, plateau.HistoryRuns)
		drop := 1 - rng.Float64()*0.7
		dropRuns := rng.IntN(6)
		spread := rng.Float64() * 0.4
		for i := range results {
			results[i] = 1e9 * math.Exp(spread*rng.NormFloat64())
			if i >= len(results)-dropRuns {
				results[i] *= drop
			}
		}
		if c, ok := plateau.ChangeOf(results); ok {
			cases = append(cases, c)
		}
	}

	var load strings.Builder
	load.WriteString("load 1m\n")
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for i, c := range cases {
		for _, m := range []struct {
			name string
			v    float64
		}{
			{"plateau_probe_change_ratio", c.Ratio}, {"plateau_probe_change_noise_ratio", c.Noise},
			{"plateau_probe_change_fast_ratio", c.FastRatio}, {"plateau_probe_change_fast_noise_ratio", c.FastNoise},
			{"plateau_probe_change_low_runs", float64(c.LowRuns)},
		} {
			fmt.Fprintf(&load, "  %s{case=\"%d\"} %s\n", m.name, i, f(m.v))
		}
	}
	storage := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
	q, err := engine.NewInstantQuery(context.Background(), storage, nil, regressionRuleExpr, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	vec, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	if len(vec) != len(cases) {
		t.Fatalf("the rule returned %d series for %d cases", len(vec), len(cases))
	}
	pages := 0
	for _, s := range vec {
		i, err := strconv.Atoi(s.Metric.Get("case"))
		if err != nil {
			t.Fatal(err)
		}
		c := cases[i]
		want := s.F == 1
		if got := c.Regression(); got != want {
			t.Errorf("%+v: Regression() = %v, the recording rule says %v", c, got, s.F)
		}
		if want {
			pages++
		}
	}
	// Both outcomes must be well represented, or the test proves little.
	if pages < len(cases)/10 || pages > len(cases)*9/10 {
		t.Errorf("%d of %d cases page: the cases do not exercise both outcomes", pages, len(cases))
	}
}

func TestRunVerdictsMedians(t *testing.T) {
	results := make([]float64, 30)
	for i := range results {
		results[i] = float64(100 + i)
	}
	v := plateau.RunVerdicts(results, 200)
	if !v.HasRecent || v.RecentMedian != 128.0/200 {
		t.Errorf("recent median %v (%v), want %v", v.RecentMedian, v.HasRecent, 128.0/200)
	}
	// The last 24 are 106..129: median (117+118)/2.
	if !v.HasLong || v.LongMedian != 117.5/200 {
		t.Errorf("long median %v (%v), want %v", v.LongMedian, v.HasLong, 117.5/200)
	}
	if !v.HasChange {
		t.Error("30 runs have no change statistic")
	}
	// Fewer runs than half the long window: no long median yet.
	v = plateau.RunVerdicts(results[:plateau.MinLongMedianRuns-1], 200)
	if v.HasLong || !v.HasRecent || v.HasChange {
		t.Errorf("%d runs: %+v, want a recent median only", plateau.MinLongMedianRuns-1, v)
	}
	v = plateau.RunVerdicts(results[:plateau.MinLongMedianRuns], 200)
	if !v.HasLong || v.LongMedian != 105.5/200 {
		t.Errorf("%d runs: long median %v (%v), want %v", plateau.MinLongMedianRuns, v.LongMedian, v.HasLong, 105.5/200)
	}
	// One run: its own ratio.
	if v = plateau.RunVerdicts(results[:1], 200); !v.HasRecent || v.RecentMedian != 0.5 {
		t.Errorf("one run: %+v", v)
	}
	// No plateau: no medians, the change statistic all the same.
	if v = plateau.RunVerdicts(results, 0); v.HasRecent || v.HasLong || !v.HasChange {
		t.Errorf("no plateau: %+v", v)
	}
}
