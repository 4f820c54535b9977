package plateau

import (
	"math"
	"testing"
)

func TestLowScoreNeedsANormal(t *testing.T) {
	results := make([]float64, MinNormalRuns+ScoreRuns-1)
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
	dropped := append(runs, 70, 70)
	if s, _ := LowScore(dropped); s != -ScoreBound {
		t.Errorf("two runs 30%% low on a steady probe score %.2f, want the bound %d", s, -ScoreBound)
	}
}

func TestLowScoreOneRunIsNotLow(t *testing.T) {
	// One wedged run, the latest or the one before it, scores no lower
	// than the other of the two.
	runs := steady(40)
	for _, tail := range [][]float64{{1, 100}, {100, 1}} {
		s, _ := LowScore(append(runs, tail...))
		if s < -1 {
			t.Errorf("runs %v score %.2f: one stalled run alone made the node low", tail, s)
		}
	}
}

func TestLowScoreNoisyProbeScoresLittle(t *testing.T) {
	// A probe alternating between two levels a factor of two apart has
	// a wide deviation: a 30% drop is well under one deviation of it.
	var runs []float64
	for i := 0; i < 40; i++ {
		runs = append(runs, []float64{100, 200}[i%2])
	}
	s, ok := LowScore(append(runs, 140, 70))
	if !ok || s < -1 || s > 0 {
		t.Errorf("noisy probe 30%% low scores %.2f (ok %v), want between -1 and 0", s, ok)
	}
}
