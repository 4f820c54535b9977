// Package groundtruth says what really happened on a group's recorded
// series, whatever the rules: when the group's nodes fell together (its
// median node under its own recent normal), which of those falls are
// incidents a site wants paged, how far an injected drop stands out of the
// group's noise (detectability), and it judges a file-system page's
// timeline against that: true and false page episodes, firing in excess of
// the falls, incidents paged. It reads times and results only, never the
// rules or the PromQL engine, so that `backtest --fleet` measures every
// rule set against the same truth.
package groundtruth

import (
	"math"
	"slices"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Node is one series of a group: its runs' start times and results,
// oldest first.
type Node struct {
	Times  []time.Time
	Values []float64
}

// Group is the nodes of one file system, replayed on one clock.
type Group struct {
	Nodes []Node
	// Period is the group's cadence: one probe interval.
	Period time.Duration
	// Start and End bound the group's runs.
	Start, End time.Time
	// Stale is how old a node's latest run may be and still count.
	Stale time.Duration
}

// StepsPerPeriod is how many times per cadence the median is taken
// between runs, so that a node going stale is seen within a quarter
// interval; it is also taken at every run.
const StepsPerPeriod = 4

// Sample is the median node's latest run over its recent normal at one
// look.
type Sample struct {
	At    time.Time
	Ratio float64
}

// MedianRatios is, every Period/StepsPerPeriod from Start to End and at
// every run, the median over the nodes of their latest run over its
// recent normal (the median of the plateau.NormalRuns runs before it, as
// the low score's). A look counts when at least two nodes (or the only
// one) have a run with a recent normal that is not older than Stale: the
// median of the nodes that report, as the file-system page reads it (it
// asks for two low nodes). When most nodes stop running for days and
// the two still running write at a twentieth of their normal (Edison's
// scratch1, 2017-12-06 to -11, only its IOR writes ran), that is a fall
// a site wants paged, and asking for half the nodes called the page on
// it false. The looks at
// the runs put a fall's start and end at the runs that make them, and
// see every state the rules may see, whatever the grid's phase: where
// nodes run in bursts (Cori's benchmarks two to four times within an
// hour), the grid alone saw the state between two runs of one burst or
// not by chance. Falls decides which low stretches last long enough.
func (g *Group) MedianRatios() []Sample {
	type point struct {
		at    time.Time
		ratio float64
	}
	perNode := make([][]point, len(g.Nodes))
	for si, s := range g.Nodes {
		for i := plateau.MinNormalRuns; i < len(s.Values); i++ {
			normal := Median(s.Values[max(0, i-plateau.NormalRuns):i])
			if normal > 0 {
				perNode[si] = append(perNode[si], point{s.Times[i], s.Values[i] / normal})
			}
		}
	}
	step := g.Period / StepsPerPeriod
	var looks []time.Time
	for t := g.Start; !t.After(g.End) && step > 0; t = t.Add(step) {
		looks = append(looks, t)
	}
	for _, pts := range perNode {
		for _, p := range pts {
			if !p.at.Before(g.Start) && !p.at.After(g.End) {
				looks = append(looks, p.at)
			}
		}
	}
	slices.SortFunc(looks, func(a, b time.Time) int { return a.Compare(b) })
	looks = slices.CompactFunc(looks, func(a, b time.Time) bool { return a.Equal(b) })
	next := make([]int, len(perNode))
	var out []Sample
	for _, t := range looks {
		var ratios []float64
		for si, pts := range perNode {
			for next[si] < len(pts) && !pts[next[si]].at.After(t) {
				next[si]++
			}
			if latest := next[si] - 1; latest >= 0 && t.Sub(pts[latest].at) < g.Stale {
				ratios = append(ratios, pts[latest].ratio)
			}
		}
		if len(ratios) < min(2, len(perNode)) {
			continue
		}
		out = append(out, Sample{t, Median(ratios)})
	}
	return out
}

// Median is the middle value of xs (the mean of the two middle ones for an
// even count), NaN for none; xs is left as it was.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
