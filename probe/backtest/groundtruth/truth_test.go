package groundtruth

import (
	"math"
	"sort"
	"testing"
	"time"
)

var t0 = time.Date(2017, 4, 1, 0, 0, 0, 0, time.UTC)

func hours(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }

// samples looks every quarter of an hour (a cadence of one hour) from 0
// to 30 h; the median ratio is low (0.6) from `from` to `to` hours.
func samples(from, to float64) []Sample {
	var out []Sample
	for q := 0; q <= 30*StepsPerPeriod; q++ {
		h := float64(q) / StepsPerPeriod
		r := 1.0
		if h >= from && h < to {
			r = 0.6
		}
		out = append(out, Sample{hours(h), r})
	}
	return out
}

// unseen drops the looks from `from` to `to` hours: no two nodes fresh.
func unseen(looks []Sample, from, to float64) []Sample {
	var out []Sample
	for _, s := range looks {
		if s.At.Before(hours(from)) || !s.At.Before(hours(to)) {
			out = append(out, s)
		}
	}
	return out
}

// steps are the looks of the judged timeline, every quarter hour from
// `from` to `to` hours.
func steps(from, to float64) []time.Time {
	var out []time.Time
	for h := from; h < to; h += 1.0 / StepsPerPeriod {
		out = append(out, hours(h))
	}
	return out
}

// A fall of 3 intervals at 40% is one fall and one incident; paged 2
// intervals after it starts, it is paged, but not within 1, and the page
// is true.
func TestRealFallPagedLate(t *testing.T) {
	truth := NewTruth(samples(10, 13), time.Hour)
	if len(truth.Falls) != 1 || !truth.Falls[0].From.Equal(hours(10)) || !truth.Falls[0].To.Equal(hours(13)) {
		t.Fatalf("falls %v, want one from 10 h to 13 h", truth.Falls)
	}
	if len(truth.Incidents) != 1 || truth.Incidents[0].Intervals(time.Hour) != 3 {
		t.Fatalf("incidents %v, want one of 3 intervals", truth.Incidents)
	}
	j := truth.Judge(Timeline{Steps: 120, Starts: []time.Time{hours(12)}, Firing: steps(12, 13)})
	want := Judgement{Steps: 120, Incidents: 1, Paged: 1}
	if j != want {
		t.Fatalf("judged %+v, want %+v", j, want)
	}
	// Paged at the end of its first interval: within 1.
	if j := truth.Judge(Timeline{Starts: []time.Time{hours(11)}}); j.PagedWithin1 != 1 || j.Paged != 1 {
		t.Fatalf("a page 1 interval in: %+v, want paged within 1", j)
	}
	// Paged after it ended: not paged, and false unless within an
	// interval of the end.
	if j := truth.Judge(Timeline{Starts: []time.Time{hours(13.5), hours(14.25)}}); j.Paged != 0 || j.FalseEpisodes != 1 {
		t.Fatalf("pages after the fall: %+v, want 0 paged and the later of the two false", j)
	}
}

// A page that holds 5 intervals past a fall's end fires 5 intervals in
// excess; its start is true.
func TestPageHeldPastTheFall(t *testing.T) {
	truth := NewTruth(samples(10, 13), time.Hour)
	j := truth.Judge(Timeline{Steps: 120, Starts: []time.Time{hours(10.25)}, Firing: steps(10.25, 18)})
	if j.ExcessSteps != 5*StepsPerPeriod || j.FalseEpisodes != 0 || j.PagedWithin1 != 1 {
		t.Fatalf("judged %+v, want %d excess steps (5 intervals), no false episode, paged within 1", j, 5*StepsPerPeriod)
	}
}

// A page held past a fall while the group is not seen (its runs paused
// from 14 to 16 h) is excess only where it is seen: nobody can say the
// fall was over while nobody looked.
func TestExcessOnlyWhereTheGroupIsSeen(t *testing.T) {
	truth := NewTruth(unseen(samples(10, 13), 14, 16), time.Hour)
	j := truth.Judge(Timeline{Steps: 120, Starts: []time.Time{hours(10.25)}, Firing: steps(10.25, 18)})
	// Seen and past the fall: 13 h to 14 h (its last look, at 13.75 h,
	// sees up to 14 h) and 16 h to 18 h.
	if want := 3*StepsPerPeriod + 1; j.ExcessSteps != want {
		t.Fatalf("judged %+v, want %d excess steps (13-14 h and 16-18 h)", j, want)
	}
}

// One low interval is a fall but no incident; 20% down is a fall at the
// true level but not at the incident level.
func TestShortAndShallowFallsAreNoIncidents(t *testing.T) {
	if truth := NewTruth(samples(10, 11), time.Hour); len(truth.Falls) != 1 || len(truth.Incidents) != 0 {
		t.Fatalf("one low interval: falls %v incidents %v, want a fall and no incident", truth.Falls, truth.Incidents)
	}
	s := samples(10, 14)
	for i := range s {
		if s[i].Ratio < 1 {
			s[i].Ratio = 0.75
		}
	}
	if truth := NewTruth(s, time.Hour); len(truth.Falls) != 1 || len(truth.Incidents) != 0 {
		t.Fatalf("25%% down: falls %v incidents %v, want a fall and no incident", truth.Falls, truth.Incidents)
	}
}

// An onset far from any fall and page is calm; one inside a fall, or
// within two intervals after it, or with the page firing, is not.
func TestCalmOnsets(t *testing.T) {
	truth := NewTruth(samples(10, 13), time.Hour)
	for _, tc := range []struct {
		onset       float64
		firedBefore bool
		want        bool
	}{
		{20, false, true},
		{11, false, false},   // inside the fall
		{14.5, false, false}, // 1.5 intervals after it
		{15.5, false, true},  // 2.5 intervals after it
		{20, true, false},    // the page fired in the two intervals before
	} {
		if got := truth.Calm(hours(tc.onset), tc.firedBefore); got != tc.want {
			t.Errorf("onset at %g h (page fired before: %v): calm %v, want %v", tc.onset, tc.firedBefore, got, tc.want)
		}
	}
}

// An onset after a gap in the looks (no two nodes fresh from 15
// to 19 h) is not calm until the group has been seen in each of the two
// intervals before it.
func TestCalmNeedsTheGroupSeen(t *testing.T) {
	truth := NewTruth(unseen(samples(100, 100), 15, 19), time.Hour)
	for _, tc := range []struct {
		onset float64
		want  bool
	}{
		{14, true},   // seen in both intervals before
		{19, false},  // the first look after the gap
		{20, false},  // seen in the last interval only
		{20.5, true}, // seen in both again, at 19 h and from 19.5 h
		{17, false},  // inside the gap
	} {
		if got := truth.Calm(hours(tc.onset), false); got != tc.want {
			t.Errorf("onset at %g h around a gap from 15 to 19 h: calm %v, want %v", tc.onset, got, tc.want)
		}
	}
}

// A fall that deepens into an incident while the page it started holds
// is paged, within 1, though no page starts within an interval of the
// incident: a second start would tell the site twice.
func TestIncidentUnderAHoldingPage(t *testing.T) {
	s := samples(10, 16)
	for i := range s {
		if h := s[i].At.Sub(t0).Hours(); h >= 10 && h < 12 || h >= 15 && h < 16 {
			s[i].Ratio = 0.75
		}
	}
	truth := NewTruth(s, time.Hour)
	if len(truth.Falls) != 1 || len(truth.Incidents) != 1 || !truth.Incidents[0].From.Equal(hours(12)) {
		t.Fatalf("falls %v incidents %v, want one fall from 10 h, one incident from 12 h", truth.Falls, truth.Incidents)
	}
	held := Timeline{Starts: []time.Time{hours(10.25)}, Firing: steps(10.25, 16)}
	if j := truth.Judge(held); j.Paged != 1 || j.PagedWithin1 != 1 || j.FalseEpisodes != 0 {
		t.Fatalf("page held from 10.25 h over the incident: %+v, want paged within 1, not false", j)
	}
	// The same page ended at 11 h, before the incident: not paged.
	ended := Timeline{Starts: []time.Time{hours(10.25)}, Firing: steps(10.25, 11)}
	if j := truth.Judge(ended); j.Paged != 0 {
		t.Fatalf("page ended before the incident: %+v, want not paged", j)
	}
}

// The median ratio follows the median node: two of three nodes at 60%
// for three runs is a 3-interval fall; one node alone is none.
func TestMedianRatios(t *testing.T) {
	node := func(low ...int) Node {
		var n Node
		for i := 0; i < 40; i++ {
			v := 100.0
			for _, l := range low {
				if i == l {
					v = 60
				}
			}
			n.Times = append(n.Times, hours(float64(i)+0.1))
			n.Values = append(n.Values, v)
		}
		return n
	}
	g := Group{Nodes: []Node{node(30, 31, 32), node(30, 31, 32), node()}, Period: time.Hour, Start: hours(0), End: hours(40), Stale: 3 * time.Hour}
	truth := NewTruth(g.MedianRatios(), time.Hour)
	if len(truth.Incidents) != 1 || truth.Incidents[0].Intervals(time.Hour) != 3 {
		t.Fatalf("two nodes of three down 3 runs: incidents %v, want one of 3 intervals", truth.Incidents)
	}
	g.Nodes = []Node{node(30, 31, 32), node(), node()}
	if truth := NewTruth(g.MedianRatios(), time.Hour); len(truth.Falls) != 0 {
		t.Fatalf("one node of three down: falls %v, want none", truth.Falls)
	}
	// Six nodes, four of which stop running after 26 h; the two that go
	// on fall to 5% from 30 h: the median of the nodes that report falls,
	// two of six. One node alone reporting is not looked at.
	stopped := func(n Node) Node {
		i := sort.Search(len(n.Times), func(i int) bool { return n.Times[i].After(hours(26)) })
		return Node{Times: n.Times[:i], Values: n.Values[:i]}
	}
	down := node()
	for i := 30; i < 34; i++ {
		down.Values[i] = 5
	}
	g.Nodes = []Node{down, down, stopped(node()), stopped(node()), stopped(node()), stopped(node())}
	if truth := NewTruth(g.MedianRatios(), time.Hour); len(truth.Incidents) != 1 || !truth.Incidents[0].From.Equal(hours(30.1)) {
		t.Fatalf("the two nodes still running down from 30.1 h: incidents %v, want one from 30.1 h", truth.Incidents)
	}
	g.Nodes = []Node{down, stopped(node()), stopped(node())}
	if truth := NewTruth(g.MedianRatios(), time.Hour); len(truth.Falls) != 0 {
		t.Fatalf("the one node still running down: falls %v, want none", truth.Falls)
	}
}

// Four series alternating ±0.1 in log have a robust deviation of
// 1.4826·0.1; a 30% drop over them is |ln 0.7|·2/0.148 = 4.8 deviations.
func TestDetectability(t *testing.T) {
	var series [][]float64
	for range 4 {
		var v []float64
		for i := 0; i < 60; i++ {
			v = append(v, 100*math.Exp(0.1*float64(1-2*(i%2))))
		}
		series = append(series, v)
	}
	want := math.Abs(math.Log(0.7)) * 2 / (1.4826 * 0.1)
	if d := Detectability(series, 0.3); math.Abs(d-want) > 1e-6 {
		t.Fatalf("d = %g, want %g", d, want)
	}
	// A steady series is measured against the noise floor, not zero.
	flat := [][]float64{make([]float64, 40)}
	for i := range flat[0] {
		flat[0][i] = 100
	}
	if d := Detectability(flat, 0.5); math.Abs(d-math.Ln2/0.05) > 1e-9 {
		t.Fatalf("steady series: d = %g, want ln 2 / 0.05", d)
	}
}

// A fall starts and ends at runs, not at the looks between them; and a
// burst of low runs that the next runs contradict minutes later is no
// fall, whether or not a look between them happens to see it.
func TestFallsFollowTheRuns(t *testing.T) {
	// Two nodes of three have runs at x.1 h; at burst h, a run at half
	// speed comes first, 3 minutes (or longer) before the regular one.
	node := func(burst float64, low bool, until float64) Node {
		var n Node
		for i := 0; i < 40; i++ {
			at := float64(i) + 0.1
			if low && at >= burst && at < until {
				n.Times = append(n.Times, hours(at-0.05))
				n.Values = append(n.Values, 50)
			}
			n.Times = append(n.Times, hours(at))
			n.Values = append(n.Values, 100)
		}
		return n
	}
	for _, tc := range []struct {
		name     string
		start    float64 // the grid's phase
		nodes    []Node
		falls    int
		from, to float64
	}{
		{"burst between looks", 0, []Node{node(30.1, true, 30.2), node(30.1, true, 30.2), node(0, false, 0)}, 0, 0, 0},
		// The grid at x.06 h looks between the burst and the next run: still none.
		{"burst at a look", 0.06, []Node{node(30.1, true, 30.2), node(30.1, true, 30.2), node(0, false, 0)}, 0, 0, 0},
	} {
		g := Group{Nodes: tc.nodes, Period: time.Hour, Start: hours(tc.start), End: hours(40), Stale: 3 * time.Hour}
		if falls := NewTruth(g.MedianRatios(), time.Hour).Falls; len(falls) != tc.falls {
			t.Errorf("%s: falls %v, want %d", tc.name, falls, tc.falls)
		}
	}
	// Two nodes of three at half from 30.1 h to 33.1 h, their runs at
	// x.1 h: the fall is from the first low run to the first that is not.
	low := func() Node {
		var n Node
		for i := 0; i < 40; i++ {
			v := 100.0
			if i >= 30 && i < 33 {
				v = 50
			}
			n.Times = append(n.Times, hours(float64(i)+0.1))
			n.Values = append(n.Values, v)
		}
		return n
	}
	g := Group{Nodes: []Node{low(), low(), node(0, false, 0)}, Period: time.Hour, Start: hours(0), End: hours(40), Stale: 3 * time.Hour}
	falls := NewTruth(g.MedianRatios(), time.Hour).Falls
	if len(falls) != 1 || !falls[0].From.Equal(hours(30.1)) || !falls[0].To.Equal(hours(33.1)) {
		t.Fatalf("two nodes of three at half for three runs: falls %v, want one from 30.1 h to 33.1 h", falls)
	}
}
