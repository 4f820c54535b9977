package plateau

import "math"

// The verdicts the alerts read, computed by the daemon once per probe run
// rather than by Prometheus once per rule evaluation over every series of
// the fleet: the sudden-regression verdict of the change statistic, and the
// medians of the ratio to plateau that the chronic shortfall is judged on.
// The store exports them (plateau_probe_regression,
// plateau_probe_ratio_median_3_runs, plateau_probe_ratio_median_24_runs)
// and the backtest synthesizes them, both through RunVerdicts, so that a
// backtest measures the verdict the daemon exports.

// Thresholds of the sudden-regression verdict (Change.Regression). A mean
// is low when it is under its normal by more than PageNoiseFactor times its
// own noise, clamped to [PageMinDrop, PageMaxDrop]: a probe so steady that
// its noise is nil still needs a drop worth a page, and the noisiest
// probes still page on a drop to 1-PageMaxDrop.
const (
	PageNoiseFactor = 2
	PageMinDrop     = 0.2
	PageMaxDrop     = 0.6
	// SlowPageFastRatio is how far under normal the two-run mean must be
	// for the four-run mean to page: a smaller drop, while it lasts.
	SlowPageFastRatio = 0.9
)

// Runs of the medians of the ratio to plateau. Counted in runs, not in
// time, so that they mean the same whatever the probe's interval (the
// recording rules they replace read 45m and 6h, three and 24 runs at the
// default 15m only).
const (
	// RecentMedianRuns runs make the recent median, the fleet panels' and
	// the per-node "below warning" measure.
	RecentMedianRuns = 3
	// LongMedianRuns runs make the chronic shortfall's median, which one
	// bad evening cannot move.
	LongMedianRuns = 24
	// MinLongMedianRuns runs at least, or no long median: a median of a
	// few runs is no long-term verdict, so a new probe (or one whose
	// parameters changed, which starts a new history) waits until its
	// runs fill half the window.
	MinLongMedianRuns = LongMedianRuns / 2
)

// PageThreshold is the ratio under which a mean with this noise is low:
// 1 - clamp(PageNoiseFactor*noise, PageMinDrop, PageMaxDrop), computed in
// the order PromQL's clamp computes it, so that the value is the same to
// the last bit as the recording rule it replaces.
func PageThreshold(noise float64) float64 {
	return 1 - math.Max(PageMinDrop, math.Min(PageMaxDrop, PageNoiseFactor*noise))
}

// Regression is the sudden-regression verdict, the one that pages. The
// geometric mean of the last FastRuns runs and that of the last ChangeRuns
// are compared with the probe's recent normal; a regression is
//   - the two-run mean low (PageThreshold of its noise) and both of its runs
//     below normal (LowRuns >= 2): a sharp drop, in full after two runs;
//     one wedged run, however slow, is one low run and never pages;
//   - or the four-run mean low, the latest run below normal and the
//     two-run mean SlowPageFastRatio under normal: a smaller drop, which
//     needs four runs to tell from noise, while it lasts.
//
// Either ends with the first run back at normal (LowRuns 0) rather than
// once a four-run mean has caught up. It is exactly the expression the
// recording rule instance_target_probe_op:plateau_probe_regression:bool
// computed before the daemon exported it (verdict_test.go evaluates both
// on the same inputs). Chosen by backtest on a year of production series:
// see dashboards/RUNBOOK.md, "How the verdicts were chosen".
func (c Change) Regression() bool {
	fast := c.FastRatio < PageThreshold(c.FastNoise) && c.LowRuns >= 2
	slow := c.Ratio < PageThreshold(c.Noise) && c.LowRuns >= 1 && c.FastRatio < SlowPageFastRatio
	return fast || slow
}

// Verdicts is what the daemon exports about a probe op after a run: the
// change statistic and its verdict, and the medians of its ratio to plateau.
type Verdicts struct {
	// Change and Regression are set when HasChange: the op has enough
	// runs for a recent normal (ChangeOf).
	Change     Change
	Regression bool
	HasChange  bool
	// RecentMedian and LongMedian are the median of the last
	// RecentMedianRuns and LongMedianRuns results over the plateau, set
	// when HasRecent and HasLong: the op has a plateau, a run, and for
	// the long median MinLongMedianRuns runs.
	RecentMedian, LongMedian float64
	HasRecent, HasLong       bool
	// LowScore is the node's evidence for the file-system verdict
	// (score.go), set when HasLowScore.
	LowScore    float64
	HasLowScore bool
	// NormalRatio is the latest run over its recent normal (score.go),
	// set with HasLowScore.
	NormalRatio float64
}

// RunVerdicts computes the verdicts from an op's results, oldest first, in
// the unit of its plateau's value; plateau is 0 (or not positive) when the
// op has none, and then only the change statistic is computed. The results
// span every run of the op's history whatever the baseline was at the
// time: a baseline replaced by a reload applies to the runs before it
// too, as it would to the next ones.
func RunVerdicts(results []float64, plateau float64) Verdicts {
	var v Verdicts
	if v.Change, v.HasChange = ChangeOf(results); v.HasChange {
		v.Regression = v.Change.Regression()
	}
	v.LowScore, v.HasLowScore = LowScore(results)
	v.NormalRatio, _ = NormalRatio(results)
	if !(plateau > 0) || math.IsInf(plateau, 0) {
		return v
	}
	if n := len(results); n > 0 {
		v.RecentMedian, v.HasRecent = medianOf(results[max(0, n-RecentMedianRuns):])/plateau, true
	}
	if n := len(results); n >= MinLongMedianRuns {
		v.LongMedian, v.HasLong = medianOf(results[max(0, n-LongMedianRuns):])/plateau, true
	}
	return v
}
