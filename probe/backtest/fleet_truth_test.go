package backtest

import (
	"slices"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
)

// A trial's window spans weeks of a daily-run group. Its notifications
// that start in a real fall of the file system's own, or within an
// interval of one, are that fall's; those the unmodified series sends
// too, in the same group within an interval, are the file system's own
// noise; only the others are the drop's.
func TestCalmNotificationsOfTheDropAreThoseItMade(t *testing.T) {
	// Every node at 60% of its normal from day 80 to 82: the file
	// system's own fall. Every onset before day 78 is calm.
	g := dropGroup(5, 5, 120, 80, 3)
	gt := newGroupTruth(g, []float64{0.5})
	day := func(d float64) time.Time { return g.start.Add(time.Duration(d * float64(24*time.Hour))) }
	page, node := "alertname=Page", "alertname=Node"
	// The unmodified series: a node pages by itself on day 50, and the
	// file system's fall is paged.
	cases := []*fleetCase{{id: "segment", counted: g.start, to: day(120)}}
	figs := []fleetFigures{{steps: 100, notices: []notice{{day(50), node}, {day(80.5), page}}}}
	for _, tr := range []struct {
		onset    int
		notified []notice
		drops    int
	}{
		{20, []notice{{day(20.5), page}}, 1},                                     // the drop's page, once
		{30, []notice{{day(30.5), page}, {day(36), page}}, 2},                    // paged, and again within the drop: told twice
		{60, []notice{{day(60.5), page}, {day(80.5), page}}, 1},                  // its own and the fall's page
		{70, []notice{{day(70.5), page}, {day(79.2), node}, {day(84), page}}, 1}, // an interval either side of the fall is the fall's
		{45, []notice{{day(45.5), page}, {day(50.9), node}}, 1},                  // the node's own page, a little later
		{40, nil, 0}, // never paged
	} {
		cases = append(cases, trialOn(g, day(float64(tr.onset)), 0.5, 20))
		figs = append(figs, fleetFigures{notifications: len(tr.notified), notices: tr.notified})
		if got := gt.dropsNotifications(tr.notified, figs[0].notices); got != tr.drops {
			t.Errorf("trial from day %d notified %v: %d of them the drop's, want %d", tr.onset, tr.notified, got, tr.drops)
		}
	}
	// The fall's median is low from day 80.08 to 83.08: more than a day
	// after it, a notification is the drop's again. The node's own page
	// matches one of the trial's in its group, within a day, once.
	for _, tr := range []struct {
		what     string
		notified []notice
		drops    int
	}{
		{"more than an interval from the fall", []notice{{day(84.5), page}, {day(78.5), page}}, 2},
		{"another group than the node's", []notice{{day(50), page}}, 1},
		{"more than an interval from the node's", []notice{{day(51.5), node}}, 1},
		{"twice within the node's interval", []notice{{day(49.5), node}, {day(50.5), node}}, 1},
	} {
		if got := gt.dropsNotifications(tr.notified, figs[0].notices); got != tr.drops {
			t.Errorf("%s: %d of %v the drop's, want %d", tr.what, got, tr.notified, tr.drops)
		}
	}
	var f FleetFigures
	trials, _ := gt.judge(&f, g, 0, cases, figs)
	// --trace-trials writes each calm trial with its notifications' causes.
	if len(trials) != 6 {
		t.Fatalf("%d calm trials traced, want 6", len(trials))
	}
	for _, want := range []struct {
		onset  int
		alerts []string
		after  []float64
		causes []string
	}{
		{30, []string{"Page", "Page"}, []float64{0.5, 6}, []string{causeDrop, causeDrop}},
		{70, []string{"Page", "Node", "Page"}, []float64{0.5, 9.2, 14}, []string{causeDrop, causeRealFall, causeRealFall}},
		{45, []string{"Page", "Node"}, []float64{0.5, 5.9}, []string{causeDrop, causeUnmodified}},
		{40, nil, nil, nil},
	} {
		i := slices.IndexFunc(trials, func(tr CalmTrial) bool { return tr.Onset.Equal(day(float64(want.onset))) })
		if i < 0 {
			t.Errorf("no trace of the trial from day %d", want.onset)
			continue
		}
		var alerts, causes []string
		var after []float64
		drops := 0
		for _, n := range trials[i].Notifications {
			alerts, after, causes = append(alerts, n.Alert), append(after, n.After), append(causes, n.Cause)
			if n.Cause == causeDrop {
				drops++
			}
		}
		if !slices.Equal(alerts, want.alerts) || !slices.Equal(after, want.after) || !slices.Equal(causes, want.causes) || trials[i].DropsNotifications != drops || trials[i].Group != "sys/fs" || trials[i].Drop != 0.5 {
			t.Errorf("trace of the trial from day %d: %+v, want alerts %v after %v intervals, causes %v", want.onset, trials[i], want.alerts, want.after, want.causes)
		}
	}
	c := f.DetectCalm["0.5"]
	if c.Trials != 6 || c.NotificationsMedian != 1 || c.NotificationsAllMedian != 2 || c.Notifications2OrMore != round(1.0/6, 3) {
		t.Errorf("calm trials %+v, want 6, the drop's notifications median 1 (of 1, 2, 1, 1, 1, 0), all median 2 (of 1, 2, 2, 3, 2, 0), one in six told twice", c)
	}
	// A page firing before the onset makes the trial not calm, and its
	// notifications count nowhere.
	cases = append(cases, trialOn(g, day(100), 0.5, 10))
	figs = append(figs, fleetFigures{notifications: 9, notices: slices.Repeat([]notice{{day(101), page}}, 9), firedBeforeOnset: true})
	gt.judge(&f, g, 0, cases, figs)
	if c := f.DetectCalm["0.5"]; c.Trials != 6 || c.Notifications2OrMore != round(1.0/6, 3) {
		t.Errorf("with a trial paged before its onset: %+v, want the same 6 calm trials", c)
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

// --trace-pages judges each page episode on the unmodified series as the
// figures do: false unless it starts within an interval of a real fall,
// and its steps outside one, where the group is seen, excess. Their sums
// are the figures'.
func TestPageEpisodesAreJudgedAsTheFiguresAre(t *testing.T) {
	// Every node at 60% of its normal from day 80 to 82.
	g := dropGroup(5, 5, 120, 80, 3)
	gt := newGroupTruth(g, []float64{0.5})
	day := func(d float64) time.Time { return g.start.Add(time.Duration(d * float64(24*time.Hour))) }
	segment := &fleetCase{id: "segment", counted: g.start, to: day(120)}
	var cf fleetFigures
	fire := func(from, to float64, ended, continued bool) {
		e := pageEpisode{start: day(from), continued: continued}
		if ended {
			e.end = day(to)
		}
		cf.pageEpisodes = append(cf.pageEpisodes, e)
		for d := from; d < to; d += 0.25 {
			cf.firingAt = append(cf.firingAt, day(d))
		}
	}
	fire(10, 11, true, true)     // firing since the warm-up: not judged false, its steps excess
	fire(50, 50.5, true, false)  // no fall anywhere near: false, all excess
	fire(80.25, 85, true, false) // the fall's page, held two days past it
	fire(110, 120, false, false) // still firing as the segment ends
	cf.steps = 480
	var f FleetFigures
	_, pages := gt.judge(&f, g, 0, []*fleetCase{segment}, []fleetFigures{cf})
	if len(pages) != 4 {
		t.Fatalf("%d episodes traced, want 4: %+v", len(pages), pages)
	}
	want := []struct {
		false      bool
		steps      int
		intervals  float64
		end        bool
		someExcess bool
		allExcess  bool
	}{
		{false, 4, 1, true, true, false},
		{true, 2, 0.5, true, true, true},
		{false, 19, 4.75, true, true, false},
		{true, 40, 10, false, true, false},
	}
	falses, excess := 0, 0
	for i, p := range pages {
		w := want[i]
		if p.False != w.false || p.Continues != (i == 0) || p.Steps != w.steps || p.Intervals != w.intervals || (p.End != nil) != w.end ||
			(p.ExcessSteps > 0) != w.someExcess || (p.ExcessSteps == p.Steps) != w.allExcess || p.Group != "sys/fs" {
			t.Errorf("episode %d: %+v, want %+v", i, p, w)
		}
		if p.False {
			falses++
		}
		excess += p.ExcessSteps
	}
	// Judged as the figures judge them: every start but the continuing one.
	j := gt.truth.Judge(groundtruth.Timeline{Steps: cf.steps, Firing: cf.firingAt, Starts: []time.Time{day(50), day(80.25), day(110)}})
	if falses != j.FalseEpisodes || excess != j.ExcessSteps {
		t.Errorf("traced %d false episodes and %d excess steps, the figures %d and %d", falses, excess, j.FalseEpisodes, j.ExcessSteps)
	}
	// judge reads the starts off the same episodes: the continuing one
	// is no new start.
	if f.FalsePageEpisodesPerMonth != round(float64(falses)/g.months, 3) || f.ExcessFiringFraction != round(float64(excess)/float64(cf.steps), 4) {
		t.Errorf("judge's figures: %v false pages a month, %v excess; the trace's %d false of %.2f months, %d excess of %d steps",
			f.FalsePageEpisodesPerMonth, f.ExcessFiringFraction, falses, g.months, excess, cf.steps)
	}
}
