package backtest

import (
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// FleetFileDrop is how often the unmodified series of a group fall
// together by at least one injected drop size, whatever the rules: the
// fraction of the time, and the episodes per month, in which the median
// node's latest run is at or under (1 - drop) times its recent normal
// (the median of the plateau.NormalRuns runs before it, as the low
// score's). An injected fleet-wide drop looks like that to any verdict
// that reads the probes' results alone, so a verdict that pages on the
// injected drops within an interval also pages, on the same file, on
// about this much of the unmodified time: the floor under the
// file-system page's firing fraction and episodes that detecting that
// drop size costs on this file.
type FleetFileDrop struct {
	Fraction         float64 `json:"fraction"`
	EpisodesPerMonth float64 `json:"episodes_per_month"`
}

// fileDropsStepsPerPeriod is how many times per cadence the median is
// taken: often enough that no run's effect is missed between two looks.
const fileDropsStepsPerPeriod = 4

// fileDrops measures FleetFileDrop for each drop size on group g's
// unmodified series, keyed by dropKey. A step counts when at least half
// of the group's nodes have a run with a recent normal that is not stale
// (staleIntervals cadences, as the replay's).
func fileDrops(g *fleetGroup, drops []float64) map[string]FleetFileDrop {
	type point struct {
		at    time.Time
		ratio float64
	}
	perNode := make([][]point, len(g.series))
	for si, s := range g.series {
		for i := plateau.MinNormalRuns; i < len(s.replay); i++ {
			normal := median(s.replay[max(0, i-plateau.NormalRuns):i])
			if normal > 0 {
				perNode[si] = append(perNode[si], point{s.times[i], s.replay[i] / normal})
			}
		}
	}
	step := g.period / fileDropsStepsPerPeriod
	stale := time.Duration(staleIntervals) * g.period
	next := make([]int, len(perNode))
	low := make([]int, len(drops))
	episodes := make([]int, len(drops))
	was := make([]bool, len(drops))
	steps := 0
	for t := g.start; !t.After(g.end) && step > 0; t = t.Add(step) {
		var ratios []float64
		for si, pts := range perNode {
			for next[si] < len(pts) && !pts[next[si]].at.After(t) {
				next[si]++
			}
			if latest := next[si] - 1; latest >= 0 && t.Sub(pts[latest].at) < stale {
				ratios = append(ratios, pts[latest].ratio)
			}
		}
		if 2*len(ratios) < len(perNode) {
			continue
		}
		steps++
		m := median(ratios)
		for di, d := range drops {
			now := m <= 1-d
			if now {
				low[di]++
				if !was[di] {
					episodes[di]++
				}
			}
			was[di] = now
		}
	}
	out := map[string]FleetFileDrop{}
	for di, d := range drops {
		f := FleetFileDrop{}
		if steps > 0 {
			f.Fraction = round(float64(low[di])/float64(steps), 4)
		}
		if g.months > 0 {
			f.EpisodesPerMonth = round(float64(episodes[di])/g.months, 3)
		}
		out[dropKey(d)] = f
	}
	return out
}
