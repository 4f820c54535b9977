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
// score's) for a quarter interval or longer: the ground truth's falls
// (groundtruth.Falls) at that level. An injected fleet-wide drop looks
// like that to any verdict that reads the probes' results alone, so a
// verdict that pages on the injected drops within an interval also
// pages, on the same file, on about this much of the unmodified time:
// the floor under the file-system page's firing fraction and episodes
// that detecting that drop size costs on this file.
type FleetFileDrop struct {
	Fraction         float64 `json:"fraction"`
	EpisodesPerMonth float64 `json:"episodes_per_month"`
}

// fileDrops measures FleetFileDrop for each drop size on group g's
// unmodified series, keyed by dropKey, from the median ratios the ground
// truth takes (groundtruth.Group.MedianRatios).
func fileDrops(g *fleetGroup, drops []float64) map[string]FleetFileDrop {
	samples := g.truthGroup().MedianRatios()
	// The time the looks cover: each holds until the next, or for a step
	// where the group has no next look (they are not evenly spaced: one
	// at every run, besides the grid).
	step := g.period / groundtruth.StepsPerPeriod
	var covered time.Duration
	for i, s := range samples {
		if i+1 < len(samples) {
			covered += min(step, samples[i+1].At.Sub(s.At))
		} else {
			covered += step
		}
	}
	out := map[string]FleetFileDrop{}
	for _, d := range drops {
		falls := groundtruth.Falls(samples, step, d)
		var low time.Duration
		for _, f := range falls {
			low += f.To.Sub(f.From)
		}
		f := FleetFileDrop{}
		if covered > 0 {
			f.Fraction = round(float64(low)/float64(covered), 4)
		}
		if g.months > 0 {
			f.EpisodesPerMonth = round(float64(len(falls))/g.months, 3)
		}
		out[dropKey(d)] = f
	}
	return out
}

// truthGroup is g as the ground truth reads it: its nodes' replayed
// runs on their own times.
func (g *fleetGroup) truthGroup() *groundtruth.Group {
	tg := g.truthClock()
	for _, s := range g.series {
		tg.Nodes = append(tg.Nodes, groundtruth.Node{Times: s.times, Values: s.replay})
	}
	return tg
}

// truthClock is g's cadence, span and staleness as the ground truth
// reads them, without nodes.
func (g *fleetGroup) truthClock() *groundtruth.Group {
	return &groundtruth.Group{Period: g.period, Start: g.start, End: g.end, Stale: time.Duration(staleIntervals) * g.period}
}
