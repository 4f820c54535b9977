package plateau

import (
	"math"
	"testing"
)

func TestChangeOfNeedsANormal(t *testing.T) {
	results := make([]float64, MinNormalRuns+2*ChangeRuns-2)
	for i := range results {
		results[i] = 100
	}
	if _, ok := ChangeOf(results); ok {
		t.Fatalf("%d results gave a statistic; %d are needed", len(results), MinNormalRuns+2*ChangeRuns-1)
	}
	if c, ok := ChangeOf(append(results, 100)); !ok || c.Ratio != 1 || c.Noise != 0 {
		t.Fatalf("steady results: got %+v ok=%v, want ratio 1, noise 0", c, ok)
	}
	if _, ok := ChangeOf(append(results, 100, 0)); ok {
		t.Fatal("a result of 0 gave a statistic")
	}
}

// A steady probe that halves shows a halving once its last ChangeRuns
// runs are at the new level: the run bound never hides a factor of two.
func TestChangeOfSteadyProbeHalving(t *testing.T) {
	var results []float64
	for range HistoryRuns {
		results = append(results, 1000)
	}
	for i := 1; i <= ChangeRuns; i++ {
		results = append(results, 500)
		c, ok := ChangeOf(results)
		if !ok {
			t.Fatal("no statistic")
		}
		want := math.Pow(0.5, float64(i)/ChangeRuns)
		if math.Abs(c.Ratio-want) > 1e-9 {
			t.Errorf("after %d halved runs: ratio %.4f, want %.4f", i, c.Ratio, want)
		}
	}
}

// A probe that alternates between two levels (two job shapes a day, as
// the production series do) has a steady geometric mean: its noise is
// small although single runs differ by 2x, and a halving shows in full.
func TestChangeOfAlternatingLevels(t *testing.T) {
	var results []float64
	for i := range HistoryRuns {
		results = append(results, float64(1000*(1+i%2)))
	}
	c, ok := ChangeOf(results)
	if !ok || math.Abs(c.Ratio-1) > 1e-9 || c.Noise > 1e-9 {
		t.Fatalf("alternating levels: %+v ok=%v, want ratio 1 and no noise", c, ok)
	}
	for i := range ChangeRuns {
		results = append(results, float64(500*(1+(HistoryRuns+i)%2)))
	}
	c, _ = ChangeOf(results)
	if math.Abs(c.Ratio-0.5) > 1e-9 {
		t.Fatalf("halved alternating levels: ratio %.4f, want 0.5", c.Ratio)
	}
}

// One catastrophic run among normal ones counts as a bounded slow run, so
// it cannot take the four-run mean below a page threshold on its own.
func TestChangeOfOneTerribleRun(t *testing.T) {
	var results []float64
	for i := range HistoryRuns - 1 {
		results = append(results, 1000*(1+0.1*float64(i%3-1)))
	}
	results = append(results, 1) // 1000x slower
	c, _ := ChangeOf(results)
	if c.Ratio < 0.7 {
		t.Fatalf("one run 1000x slower took the ratio to %.3f", c.Ratio)
	}
}

// The fast mean is fully down after FastRuns halved runs, and LowRuns
// counts them; the slow mean is then only halfway.
func TestChangeOfFastStatistic(t *testing.T) {
	var results []float64
	for i := range HistoryRuns { // ends on a run above the median
		results = append(results, 1000*(1+0.05*float64((i+2)%3-1)))
	}
	c, ok := ChangeOf(results)
	if !ok || c.LowRuns != 0 || math.Abs(c.FastRatio-1) > 0.06 {
		t.Fatalf("steady: %+v ok=%v, want fast ratio about 1 and at most one low run", c, ok)
	}
	for i := 1; i <= MaxLowRuns+1; i++ {
		results = append(results, 500)
		c, _ = ChangeOf(results)
		if want := min(i, MaxLowRuns); c.LowRuns != want {
			t.Errorf("after %d halved runs: %d low runs, want %d", i, c.LowRuns, want)
		}
		if i == FastRuns && (c.FastRatio > 0.55 || c.Ratio < 0.65) {
			t.Errorf("after %d halved runs: fast ratio %.3f (want about 0.5), slow %.3f (want about 0.71)", i, c.FastRatio, c.Ratio)
		}
	}
	results = append(results, 1000)
	if c, _ = ChangeOf(results); c.LowRuns != 0 {
		t.Errorf("a run back at normal still counts %d low runs", c.LowRuns)
	}
}

// One catastrophic run takes the fast mean down (bounded to a factor of
// two, it moves a 2-run mean by 30%) but is one low run: the verdict,
// which asks for two, cannot page on it, before or after the next run.
func TestChangeOfOneTerribleRunIsOneLowRun(t *testing.T) {
	var results []float64
	for i := range HistoryRuns - 1 {
		results = append(results, 1000*(1+0.1*float64(i%3-1)))
	}
	results = append(results, 1)
	c, _ := ChangeOf(results)
	if c.LowRuns != 1 || c.FastRatio < 0.7 {
		t.Fatalf("one run 1000x slower: %+v, want one low run and the fast ratio bounded at 0.71", c)
	}
	results = append(results, 1050)
	if c, _ = ChangeOf(results); c.LowRuns != 0 {
		t.Fatalf("the run after it is normal, yet %d low runs", c.LowRuns)
	}
}

func TestCompareRecent(t *testing.T) {
	key := BaselineKey{Target: "scratch", Probe: "seq", Op: "read"}
	h := History{
		{Target: "scratch", Probe: "seq", Op: "read", Params: "p1"}: {Results: []float64{60, 40, 50}},
	}
	ch := BaselineChange{Key: key, Old: &Baseline{Unit: "bytes_per_second", Value: 100}, New: &Baseline{Unit: "bytes_per_second", Value: 50, Params: "p1"}}
	rc, ok := h.CompareRecent(ch)
	if !ok || rc.Runs != 3 || rc.Median != 50 || rc.ToOld != 0.5 || rc.ToNew != 1 {
		t.Fatalf("got %+v ok=%v", rc, ok)
	}
	ch.New.Params = "p2" // measured otherwise: the history is of another probe
	if _, ok := h.CompareRecent(ch); ok {
		t.Fatal("history of other parameters compared")
	}
}
