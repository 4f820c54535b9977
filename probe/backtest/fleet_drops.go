package backtest

import (
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
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

// fileDrops measures FleetFileDrop for each drop size on group g's
// unmodified series, keyed by dropKey, from the median ratios the ground
// truth takes (groundtruth.Group.MedianRatios).
func fileDrops(g *fleetGroup, drops []float64) map[string]FleetFileDrop {
	samples := g.truthGroup().MedianRatios()
	low := make([]int, len(drops))
	episodes := make([]int, len(drops))
	was := make([]bool, len(drops))
	for _, s := range samples {
		for di, d := range drops {
			now := s.Ratio <= 1-d
			if now {
				low[di]++
				if !was[di] {
					episodes[di]++
				}
			}
			was[di] = now
		}
	}
	steps := len(samples)
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

// truthGroup is g as the ground truth reads it: its nodes' replayed
// runs on their own times.
func (g *fleetGroup) truthGroup() *groundtruth.Group {
	tg := &groundtruth.Group{Period: g.period, Start: g.start, End: g.end, Stale: time.Duration(staleIntervals) * g.period}
	for _, s := range g.series {
		tg.Nodes = append(tg.Nodes, groundtruth.Node{Times: s.times, Values: s.replay})
	}
	return tg
}
