package backtest

import (
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
		cases = append(cases, &fleetCase{id: "trial", drop: 0.5, onset: day(tr.onset), counted: day(tr.onset), to: day(tr.to)})
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
	cases = append(cases, &fleetCase{id: "late", drop: 0.5, onset: day(100), counted: day(100), to: day(110)})
	figs = append(figs, fleetFigures{notifications: 9, firedBeforeOnset: true})
	gt.judge(&f, g, 0, cases, figs)
	if c := f.DetectCalm["0.5"]; c.Trials != 4 || c.NotificationsAddedMedian != 1 {
		t.Errorf("with a trial paged before its onset: %+v, want the same 4 calm trials", c)
	}
}
