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
	logs, ok := scoredLogs(results)
	if !ok {
		return 0, false
	}
	n := len(logs)
	score = math.Inf(-1)
	for last := n - ScoreRuns; last < n; last++ {
		normal := logs[max(0, last-NormalRuns):last]
		center, sigma := medianMAD(normal)
		z := (logs[last] - center) / math.Max(sigma, ScoreNoiseFloor)
		score = math.Max(score, math.Max(-ScoreBound, math.Min(ScoreBound, z)))
	}
	return score, true
}

// TargetScore combines the low scores of a target's ops on one node into
// the node's score for the target: their sum over the square root of
// their number, bounded to ±ScoreBound, and never further from 0 than its
// most extreme op. A fault of the storage may lower only some ops (reads,
// or metadata): a read-only fault of a target with a read and a write op
// scores (-4 + 0)/√2 = -2.8, where the median of the two would halve it
// to -2 and a fleet of such nodes would need half as many again to page.
// One odd op among eight calm ones scores -4/√8 = -1.4, so one op cannot
// make the node low. But ops that fall together are one cause, not k
// independent ones: a metadata server slowed by a fifth lowers a node's
// creates, stats, reads and removes alike, and four ops at -2.5 summed
// over √4 would score -5, bounded to -4, where the node is 2.5 deviations
// low. So the sum over √k counts only what the ops disagree on: the
// score stays within the most extreme op's (here -2.5), and the fleet
// rules' sum counts each node's deviation once.
func TargetScore(scores []float64) float64 {
	if len(scores) == 0 {
		return 0
	}
	sum, extreme := 0.0, 0.0
	for _, s := range scores {
		sum += s
		extreme = math.Max(extreme, math.Abs(s))
	}
	limit := math.Min(ScoreBound, extreme)
	return math.Max(-limit, math.Min(limit, sum/math.Sqrt(float64(len(scores)))))
}

// NormalRatio is the latest of results over its recent normal, the
// median of the NormalRuns runs before it (the center LowScore measures
// from): 0.8 is 20% under normal. The low score says how sure a drop is,
// this says how large: on a probe that wobbles by 1%, a 5% dip is four
// deviations, and a fleet of such nodes is overwhelming evidence of a dip
// nobody needs paged for. ok as for LowScore with ScoreRuns 1.
func NormalRatio(results []float64) (ratio float64, ok bool) {
	logs, ok := scoredLogs(results)
	if !ok {
		return 0, false
	}
	n := len(logs)
	center, _ := medianMAD(logs[max(0, n-1-NormalRuns) : n-1])
	return math.Exp(logs[n-1] - center), true
}

// scoredLogs are the logarithms of the latest NormalRuns+ScoreRuns of
// results, the runs the low score reads; ok is false while there are
// fewer than MinNormalRuns+ScoreRuns, or one of them is not positive.
func scoredLogs(results []float64) ([]float64, bool) {
	if keep := NormalRuns + ScoreRuns; len(results) > keep {
		results = results[len(results)-keep:]
	}
	if len(results) < MinNormalRuns+ScoreRuns {
		return nil, false
	}
	logs := make([]float64, len(results))
	for i, v := range results {
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, false
		}
		logs[i] = math.Log(v)
	}
	return logs, true
}
