package backtest

import (
	"slices"
	"testing"
	"time"
)

// A trial's notifications are judged beside what the unmodified series
// sent over the same stretch: a window of weeks holds the file system's
// own pages, and only what the drop adds is the drop's.
func TestCalmNotificationsAddedAreTheDropsOwn(t *testing.T) {
	g := dropGroup(5, 0, 120, 60, 3) // calm: every onset is calm
	gt := newGroupTruth(g, []float64{0.5})
	day := func(d int) time.Time { return g.start.Add(time.Duration(d) * 24 * time.Hour) }
	cases := []*fleetCase{{id: "segment", counted: g.start, to: day(120)}}
	figs := []fleetFigures{{steps: 100, notifiedAt: []time.Time{day(40), day(45), day(80)}}}
	for _, tr := range []struct {
		onset, to, notifications, added int
	}{
		{38, 50, 3, 1}, // the two the file system sent, and the drop's
		{60, 72, 1, 1}, // nothing of its own: the drop's one
		{75, 80, 2, 2}, // the window ends before day 80's: both are the drop's
		{80, 92, 1, 0}, // day 80's own page, which the drop's held on
	} {
		cases = append(cases, trialOn(g, day(tr.onset), 0.5, 20))
		cases[len(cases)-1].to = day(tr.to)
		figs = append(figs, fleetFigures{notifications: tr.notifications})
		if got := tr.notifications - countWithin(figs[0].notifiedAt, day(tr.onset), day(tr.to)); got != tr.added {
			t.Errorf("trial from day %d to %d: added %d, want %d", tr.onset, tr.to, got, tr.added)
		}
	}
	var f FleetFigures
	gt.judge(&f, g, 0, cases, figs)
	c := f.DetectCalm["0.5"]
	if c.Trials != 4 || c.NotificationsMedian != 1.5 || c.NotificationsAddedMedian != 1 || c.NotificationsAdded2OrMore != 0.25 {
		t.Errorf("calm trials %+v, want 4 with notifications median 1.5, added median 1 (of 1, 1, 2, 0), one in four told twice", c)
	}
	// A page firing before the onset makes the trial not calm, and its
	// notifications count nowhere.
	cases = append(cases, trialOn(g, day(100), 0.5, 10))
	figs = append(figs, fleetFigures{notifications: 9, firedBeforeOnset: true})
	gt.judge(&f, g, 0, cases, figs)
	if c := f.DetectCalm["0.5"]; c.Trials != 4 || c.NotificationsAddedMedian != 1 {
		t.Errorf("with a trial paged before its onset: %+v, want the same 4 calm trials", c)
	}
}

// trialOn is a trial of g: its nodes' runs from onset on, runs of them,
// multiplied by 1 - drop.
func trialOn(g *fleetGroup, onset time.Time, drop float64, runs int) *fleetCase {
	c := &fleetCase{id: "trial", drop: drop, onset: onset, counted: onset, to: onset.Add(time.Duration(runs) * g.period)}
	for _, s := range g.series {
		v := slices.Clone(s.replay)
		for i, at := range s.times {
			if !at.Before(onset) && at.Before(c.to) {
				v[i] *= 1 - drop
			}
		}
		c.values = append(c.values, v)
	}
	c.fall = c.makesFall(g)
	return c
}

// A drop counts towards detection only where it makes a real fall: on a
// fleet at its normal, 30% does and 15% does not; on a fleet that runs
// 30% over its normal (its runs sped up ten days ago, its 30-run normal
// has not caught up), 30% leaves the median node at 0.91 of the normal,
// which a page would be false on.
func TestDropsCountWhereTheyMakeAFall(t *testing.T) {
	steady := dropGroup(5, 0, 120, 60, 3)
	day := func(d int) time.Time { return steady.start.Add(time.Duration(d) * 24 * time.Hour) }
	faster := dropGroup(5, 0, 120, 60, 3)
	for si := range faster.series {
		for i := 50; i < 120; i++ {
			faster.series[si].replay[i] = 130
		}
	}
	for _, tc := range []struct {
		name string
		g    *fleetGroup
		drop float64
		want bool
	}{
		{"steady, 30%", steady, 0.3, true},
		{"steady, 15%", steady, 0.15, false},
		{"30% over its normal, 30%", faster, 0.3, false},
		{"30% over its normal, 50%", faster, 0.5, true},
	} {
		if got := trialOn(tc.g, day(60), tc.drop, 20).makesFall(tc.g); got != tc.want {
			t.Errorf("%s: makes a fall %v, want %v", tc.name, got, tc.want)
		}
	}
	// Judged, the trial without a fall is counted apart, not as missed.
	gt := newGroupTruth(faster, []float64{0.3})
	cases := []*fleetCase{{id: "segment", counted: faster.start, to: day(120)}, trialOn(faster, day(60), 0.3, 20)}
	var f FleetFigures
	gt.judge(&f, faster, 0, cases, []fleetFigures{{steps: 100}, {}})
	if c := f.DetectCalm["0.3"]; c.Trials != 0 || c.TrialsWithoutFall != 1 {
		t.Errorf("a 30%% drop from 30%% over the normal: %+v, want no calm trial and one without a fall", c)
	}
}
