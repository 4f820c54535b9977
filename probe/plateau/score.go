package plateau

import "math"

// The low score is one node's evidence for the file-system verdict
// (PlateauFileSystemRegression): how far below its own recent normal the
// node's latest run is, in units of its own run-to-run noise. One node's
// score proves little (a node on a bad evening scores -3 by itself); the
// fleet rules add the scores of every node of a target up, and many nodes
// low in the same interval are evidence no single node gives (see
// dashboards/RUNBOOK.md, "How the file-system page decides").
//
// It is measured on the latest single run, not on the rolling means of the
// change statistic, because the fleet has to decide within one interval:
// a run's distance from the median of the NormalRuns runs before it, over
// 1.4826 times their median absolute deviation (about a standard deviation
// for normal noise; robust to the bad evenings the normal contains). A
// probe whose runs alternate between two levels has a wide deviation and
// scores little; a steady probe scores a 30% drop as many deviations.
// Scoring the higher of the last two runs instead (a node low only when
// two runs in a row are) was measured with `backtest --fleet` on the
// shared year: as few false pages, but a fleet-wide drop was paged within
// one interval in 5% of the trials instead of 45% (RUNBOOK.md).
const (
	// ScoreRuns latest runs each count, and the score is the higher
	// (less low) of them.
	ScoreRuns = 1
	// ScoreBound bounds each run's score to ±ScoreBound deviations: one
	// node 100x slower than usual (a wedged client) counts as four
	// deviations, so that it cannot stand for a fleet.
	ScoreBound = 4
	// ScoreNoiseFloor is the least deviation a run is measured in (5%):
	// a probe so steady that its deviation is nil would otherwise score
	// a 1% wobble as a fault.
	ScoreNoiseFloor = 0.05
)

// LowScore is the node's low score after the latest of results (oldest
// first, in one unit): the higher of the scores of its last ScoreRuns
// runs (with ScoreRuns 1, the latest run's), each its log distance from the median of the NormalRuns runs
// before it over their robust deviation, bounded to ±ScoreBound. Negative
// is below normal. ok is false while the earliest of those runs has fewer
// than MinNormalRuns runs before it, or a result is not positive.
func LowScore(results []float64) (score float64, ok bool) {
	if keep := NormalRuns + ScoreRuns; len(results) > keep {
		results = results[len(results)-keep:]
	}
	n := len(results)
	if n < MinNormalRuns+ScoreRuns {
		return 0, false
	}
	logs := make([]float64, n)
	for i, v := range results {
		if !(v > 0) || math.IsInf(v, 0) {
			return 0, false
		}
		logs[i] = math.Log(v)
	}
	score = math.Inf(-1)
	for last := n - ScoreRuns; last < n; last++ {
		normal := logs[max(0, last-NormalRuns):last]
		center, sigma := medianMAD(normal)
		z := (logs[last] - center) / math.Max(sigma, ScoreNoiseFloor)
		score = math.Max(score, math.Max(-ScoreBound, math.Min(ScoreBound, z)))
	}
	return score, true
}
