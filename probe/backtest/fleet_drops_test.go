package backtest

import (
	"testing"
	"time"
)

// dropGroup is a group of n daily series at 100, of which the first
// `falling` fall to 60 for runs [from, from+runs).
func dropGroup(n, falling, total, from, runs int) *fleetGroup {
	start := time.Date(2017, 3, 1, 0, 0, 0, 0, time.UTC)
	g := &fleetGroup{key: "sys/fs", period: 24 * time.Hour, start: start}
	for si := 0; si < n; si++ {
		p := prepared{}
		for i := 0; i < total; i++ {
			v := 100.0
			if si < falling && i >= from && i < from+runs {
				v = 60
			}
			// Each node runs at its own hour of the day, as a splayed
			// fleet's nodes do.
			p.replay = append(p.replay, v)
			p.times = append(p.times, start.Add(time.Duration(i)*24*time.Hour+time.Duration(si)*time.Hour))
		}
		g.series = append(g.series, p)
	}
	g.end = g.series[n-1].times[total-1]
	g.months = g.end.Sub(g.start).Hours() / 24 / (365.25 / 12)
	return g
}

func TestFileDropsCountsTheFleetFallingTogether(t *testing.T) {
	drops := []float64{0.2, 0.3, 0.5}
	// Every node at 60% of its normal for 3 runs: a 40% fleet-wide drop,
	// as deep as an injected 0.2 or 0.3 and shallower than 0.5.
	got := fileDrops(dropGroup(5, 5, 120, 60, 3), drops)
	for _, d := range []string{"0.2", "0.3"} {
		f := got[d]
		if f.Fraction <= 0 || f.Fraction > 4.0/100 {
			t.Errorf("drop %s: fraction %v, want the ~3 days of 120 that the fleet was down", d, f.Fraction)
		}
		if want := round(1/(119.0/(365.25/12)), 3); f.EpisodesPerMonth < want*0.9 || f.EpisodesPerMonth > want*1.1 {
			t.Errorf("drop %s: %v episodes per month, want one episode in the span (%v)", d, f.EpisodesPerMonth, want)
		}
	}
	if f := got["0.5"]; f.Fraction != 0 || f.EpisodesPerMonth != 0 {
		t.Errorf("drop 0.5: %+v, want none: the fleet fell by 40%%", f)
	}
	// Two nodes of five down is not the fleet: the median node holds.
	for d, f := range fileDrops(dropGroup(5, 2, 120, 60, 3), drops) {
		if f.Fraction != 0 || f.EpisodesPerMonth != 0 {
			t.Errorf("two nodes of five down, drop %s: %+v, want none", d, f)
		}
	}
	// Calm: nothing.
	for d, f := range fileDrops(dropGroup(5, 0, 120, 60, 3), drops) {
		if f.Fraction != 0 || f.EpisodesPerMonth != 0 {
			t.Errorf("calm, drop %s: %+v, want none", d, f)
		}
	}
}
