package plateau

import (
	"math"
	"slices"
	"time"
)

// The change statistic compares a probe op's last few runs with its own
// recent normal, so that a verdict can tell "worse than this probe was
// yesterday" from "below a plateau characterized long ago". It is defined
// in runs, not in time, so it means the same whatever the probe's interval,
// and it is computed by the daemon (PromQL has no median absolute
// deviation over a rolling mean) and by the backtest, from the same code.
//
// On a year of production series (../shared/data) single runs of one
// series differ by 2x from one run to the next, and several series
// alternate between two levels (two shapes of one job a day). A median of
// the last runs jumps between those levels; a mean of their logarithms
// does not, so the recent value is a geometric mean. Its noise is measured
// on the same statistic (the rolling geometric mean over the normal
// window), which is small for a probe that is stable over ChangeRuns runs
// even when its single runs are not.
const (
	// ChangeRuns runs make the recent value: a 50% drop moves it by a
	// half after two runs, fully after four.
	ChangeRuns = 4
	// NormalRuns runs before the recent ones make the normal: long enough
	// that one bad evening is a minority of it, short enough that the
	// normal follows a file system that fills up or is upgraded (after
	// about NormalRuns/2 runs at a new level that level is normal, and a
	// lasting shortfall becomes the plateau comparison's business).
	NormalRuns = 30
	// MinNormalRuns runs of normal at least, or no statistic: a new probe
	// has no normal yet.
	MinNormalRuns = 10
	// HistoryRuns is how many results the statistic needs: the normal's
	// rolling means reach ChangeRuns-1 runs further back.
	HistoryRuns = NormalRuns + 2*ChangeRuns - 1
	// winsorSigmas bounds each run's weight: a run 100x slower than
	// normal (one wedged client) counts as a run this many robust
	// deviations below normal, so one run cannot page on its own. The
	// bound is never tighter than winsorFloor (a factor of two), so that
	// on a probe too steady to have any deviation a halving still counts
	// in full.
	winsorSigmas = 3
	winsorFloor  = math.Ln2
	// madToSigma makes the median absolute deviation estimate the
	// standard deviation of normally distributed data.
	madToSigma = 1.4826
)

// FastRuns runs make the fast statistic, the one that pages: after a
// sudden drop it is fully down after two runs, where the ChangeRuns mean
// is halfway. On its own a 2-run mean would page on one wedged run (the
// run is bounded, but to a factor of two, which moves a 2-run mean by
// 30%), so the verdict also asks that the last runs are each below the
// normal (LowRuns): a drop is then at least two runs long, never one.
const FastRuns = 2

// MaxLowRuns caps Change.LowRuns: the verdict reads only whether it
// reaches two.
const MaxLowRuns = ChangeRuns

// Change is the change statistic of a probe op after its latest run.
type Change struct {
	// Ratio is the geometric mean of the last ChangeRuns results over
	// the normal, the median of the same mean over the NormalRuns runs
	// before them: 1 is business as usual, 0.5 half of it.
	Ratio float64
	// Noise is how much that mean moves on its own: 1.4826 times the
	// median absolute deviation of its logarithm over the normal window,
	// about its relative standard deviation (0.1 = 10%).
	Noise float64
	// FastRatio and FastNoise are the same over the last FastRuns results.
	FastRatio, FastNoise float64
	// LowRuns is how many of the latest runs in a row were each below the
	// median of the NormalRuns runs before it, at most MaxLowRuns.
	LowRuns int
}

// ChangeOf computes the statistic from an op's results, oldest first (only
// the last HistoryRuns are read). ok is false while there are too few
// results or a result is not positive.
func ChangeOf(results []float64) (c Change, ok bool) {
	if len(results) > HistoryRuns {
		results = results[len(results)-HistoryRuns:]
	}
	for _, v := range results {
		if !(v > 0) || math.IsInf(v, 0) {
			return Change{}, false
		}
	}
	if c.Ratio, c.Noise, ok = meanChange(results, ChangeRuns); !ok {
		return Change{}, false
	}
	// The fast mean needs fewer runs than the slow one: ok as well.
	c.FastRatio, c.FastNoise, _ = meanChange(results, FastRuns)
	c.LowRuns = lowRuns(results)
	return c, true
}

// meanChange is the geometric mean of the last runs results over the
// median of that rolling mean across the NormalRuns runs before them, and
// the rolling mean's robust spread. results are positive.
func meanChange(results []float64, runs int) (ratio, noise float64, ok bool) {
	if keep := NormalRuns + 2*runs - 1; len(results) > keep {
		results = results[len(results)-keep:]
	}
	n := len(results)
	// Normal window: the runs [start, end) before the last runs, each
	// with the runs-1 runs before it for its rolling mean.
	end := n - runs
	start := max(runs-1, end-NormalRuns)
	if end-start < MinNormalRuns {
		return 0, 0, false
	}
	logs := make([]float64, n)
	for i, v := range results {
		logs[i] = math.Log(v)
	}
	center, sigma := medianMAD(logs[start:end])
	bound := max(winsorSigmas*sigma, winsorFloor)
	lo, hi := center-bound, center+bound
	for i := range logs {
		logs[i] = min(hi, max(lo, logs[i]))
	}
	mean := func(last int) float64 { // mean of the runs logs ending at last
		s := 0.0
		for _, l := range logs[last-runs+1 : last+1] {
			s += l
		}
		return s / float64(runs)
	}
	rolling := make([]float64, 0, end-start)
	for i := start; i < end; i++ {
		rolling = append(rolling, mean(i))
	}
	normal, noise := medianMAD(rolling)
	return math.Exp(mean(n-1) - normal), noise, true
}

// lowRuns counts the latest runs in a row that were each below the median
// of the (up to) NormalRuns runs before it, stopping at MaxLowRuns or
// where fewer than MinNormalRuns runs came before.
func lowRuns(results []float64) int {
	count := 0
	for last := len(results) - 1; count < MaxLowRuns; last-- {
		window := results[max(0, last-NormalRuns):max(0, last)]
		if len(window) < MinNormalRuns || !(results[last] < medianOf(window)) {
			break
		}
		count++
	}
	return count
}

// medianMAD returns the median of xs and madToSigma times their median
// absolute deviation.
func medianMAD(xs []float64) (median, sigma float64) {
	median = medianOf(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - median)
	}
	return median, madToSigma * medianOf(dev)
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// RecentComparison is how a probe op's runs in the daemon's history
// compare with an old and a new plateau: what `characterize` prints beside
// a new baseline, so that the administrator sees how far the old one had
// drifted from what the probe delivered.
type RecentComparison struct {
	Runs    int
	Median  float64
	Updated time.Time
	// ToOld and ToNew are Median over each plateau; 0 when there is none.
	ToOld, ToNew float64
}

// CompareRecent looks up the op in the history (measured with the same
// probe parameters as the new baseline) and compares its median with both
// plateaus; ok is false when the history has no runs of it.
func (h History) CompareRecent(c BaselineChange) (RecentComparison, bool) {
	if c.New == nil {
		return RecentComparison{}, false
	}
	e, ok := h[HistoryKey{Target: c.Key.Target, Probe: c.Key.Probe, Op: c.Key.Op, Params: c.New.Params}]
	if !ok || len(e.Results) == 0 {
		return RecentComparison{}, false
	}
	rc := RecentComparison{Runs: len(e.Results), Median: medianOf(e.Results), Updated: e.Updated}
	if c.Old != nil && c.Old.Value > 0 && c.Old.Unit == c.New.Unit {
		rc.ToOld = rc.Median / c.Old.Value
	}
	if c.New.Value > 0 {
		rc.ToNew = rc.Median / c.New.Value
	}
	return rc, true
}
