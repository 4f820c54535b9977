package plateau

import (
	"math"
	"testing"
)

func TestLowScoreNeedsANormal(t *testing.T) {
	results := make([]float64, MinNormalRuns+ScoreRuns-1)
	// MinNormalRuns runs, and the scored run after them.
	for i := range results {
		results[i] = 100
	}
	if _, ok := LowScore(results); ok {
		t.Fatalf("a score after %d runs, fewer than %d runs of normal before each scored run", len(results), MinNormalRuns)
	}
	if _, ok := LowScore(append(results, 100)); !ok {
		t.Fatal("no score once both scored runs have MinNormalRuns runs before them")
	}
	if _, ok := LowScore(append(results, 0)); ok {
		t.Fatal("a score with a result of 0")
	}
}

// steady is a probe whose runs wobble by ±2% around 100.
func steady(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 100 * (1 + 0.02*math.Sin(float64(i)))
	}
	return out
}

func TestLowScoreSteadyProbeDrop(t *testing.T) {
	runs := steady(40)
	s, _ := LowScore(runs)
	if s < -1 || s > 1 {
		t.Errorf("steady probe scores %.2f, want within ±1", s)
	}
	// A 30% drop of a probe that wobbles by 2%: far below, bounded.
	if s, _ := LowScore(append(runs, 70)); s != -ScoreBound {
		t.Errorf("a run 30%% low on a steady probe scores %.2f, want the bound %d", s, -ScoreBound)
	}
	// 10% low is several of its 2% deviations, under the bound.
	if s, _ := LowScore(append(runs, 90)); s > -2 || s <= -ScoreBound {
		t.Errorf("a run 10%% low on a steady probe scores %.2f, want between %d and -2", s, -ScoreBound)
	}
}

func TestLowScoreOneWedgedRunIsBounded(t *testing.T) {
	// One run 100x slower than usual counts as ScoreBound deviations, no
	// more: one node cannot outweigh a fleet.
	s, _ := LowScore(append(steady(40), 1))
	if s != -ScoreBound {
		t.Errorf("a wedged run scores %.2f, want the bound %d", s, -ScoreBound)
	}
	// And the run after it, back at normal, is normal again.
	if s, _ := LowScore(append(steady(40), 1, 100)); s < -1 {
		t.Errorf("a normal run after a wedged one scores %.2f", s)
	}
}

func TestLowScoreNoisyProbeScoresLittle(t *testing.T) {
	// A probe alternating between two levels a factor of two apart has
	// a wide deviation: a run 30% under the middle of its levels (141)
	// is well under one deviation of it.
	var runs []float64
	for i := 0; i < 40; i++ {
		runs = append(runs, []float64{100, 200}[i%2])
	}
	s, ok := LowScore(append(runs, 99))
	if !ok || s < -1 || s > 0 {
		t.Errorf("noisy probe 30%% low scores %.2f (ok %v), want between -1 and 0", s, ok)
	}
}

func TestTargetScore(t *testing.T) {
	for _, tc := range []struct {
		scores []float64
		want   float64
	}{
		{[]float64{-3}, -3},
		{[]float64{-4, 0}, -4 / math.Sqrt2},
		{[]float64{-4, -4, -4, -4}, -ScoreBound},
		{[]float64{-4, 0, 0, 0, 0, 0, 0, 0}, -4 / math.Sqrt(8)},
		{[]float64{4, 4}, ScoreBound},
		// Ops that fall together (a metadata server slowed by a fifth)
		// are one deviation: four at -2.5 score -2.5, not -5 bounded to
		// -4; two at -2 score -2, not -2.8.
		{[]float64{-2.5, -2.5, -2.5, -2.5}, -2.5},
		{[]float64{-2, -2}, -2},
		// Ops that disagree keep their sum over √k: -3.5 and -1 make
		// -3.18, within the lower's -3.5.
		{[]float64{-3.5, -1}, -4.5 / math.Sqrt2},
		{[]float64{-3, 1}, -2 / math.Sqrt2},
	} {
		if got := TargetScore(tc.scores); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("TargetScore(%v) = %g, want %g", tc.scores, got, tc.want)
		}
	}
}

func TestNormalRatioIsTheDropsSize(t *testing.T) {
	runs := steady(40)
	if _, ok := NormalRatio(runs[:MinNormalRuns]); ok {
		t.Fatalf("a ratio after %d runs, with fewer than %d runs of normal before the latest", MinNormalRuns, MinNormalRuns)
	}
	// 10% under a normal that wobbles by 2% around 100: about 0.9, while
	// its low score is several deviations.
	r, ok := NormalRatio(append(runs, 90))
	if !ok || r < 0.88 || r > 0.92 {
		t.Errorf("a run 10%% low scores ratio %.3f (ok %v), want about 0.9", r, ok)
	}
	if s, _ := LowScore(append(runs, 90)); s > -2 {
		t.Errorf("and its low score %.2f, want -2 or lower", s)
	}
	// Its size does not depend on how noisy the probe is: on a probe that
	// alternates between 50 and 150, the median of the normal's logs is
	// midway, at √(50·150) ≈ 86.6, and a run of 70 is 0.81 of it, where
	// its low score is well under one deviation.
	noisy := make([]float64, 40)
	for i := range noisy {
		noisy[i] = 100 + 50*float64(1-2*(i%2))
	}
	if r, _ := NormalRatio(append(noisy, 70)); math.Abs(r-70/math.Sqrt(50*150)) > 0.005 {
		t.Errorf("a run of 70 on an alternating probe: ratio %.3f, want %.3f", r, 70/math.Sqrt(50*150))
	}
	if _, ok := NormalRatio(append(runs, 0)); ok {
		t.Error("a ratio with a result of 0")
	}
}
