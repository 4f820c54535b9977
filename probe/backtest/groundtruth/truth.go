package groundtruth

import (
	"math"
	"slices"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Stretch is a stretch of real time, From included, To not.
type Stretch struct {
	From, To time.Time
}

// Intervals is the stretch's length in cadences, rounded to whole ones.
func (s Stretch) Intervals(period time.Duration) int {
	return int(math.Round(float64(s.To.Sub(s.From)) / float64(period)))
}

// Falls are the real falls at level: the stretches of looks at which the
// median node is at or under 1 - level of its recent normal, lasting a
// step or more. A stretch ends at the first look that is not low, or one
// step after its last low one where the group has no look. A shorter one
// is a burst of low runs that the next runs, minutes later, contradict
// (the nodes' runs of one day, some low and the rest not): no fall.
func Falls(samples []Sample, step time.Duration, level float64) []Stretch {
	var out []Stretch
	open := false
	closeAt := func(t time.Time) {
		open = false
		if last := &out[len(out)-1]; t.Sub(last.From) < step {
			out = out[:len(out)-1]
		} else {
			last.To = t
		}
	}
	for i, s := range samples {
		low := s.Ratio <= 1-level
		switch {
		case low && !open:
			out = append(out, Stretch{From: s.At})
			open = true
		case !low && open:
			closeAt(s.At)
		}
		if open && (i+1 == len(samples) || samples[i+1].At.Sub(s.At) > step) {
			closeAt(s.At.Add(step))
		}
	}
	return out
}

// IncidentLevel is the depth of a fall a site wants paged, and
// IncidentIntervals how many cadences it must last: one low interval is
// a bad day, two in a row are an incident.
const (
	IncidentLevel     = 0.3
	IncidentIntervals = 2
)

// TrueLevel is the depth of a fall during which (or within an interval of
// which) a page is true, and outside which its firing is excess.
const TrueLevel = 0.2

// Truth is a group's real falls, ready to judge pages against.
type Truth struct {
	Period time.Duration
	// Falls are the real falls at TrueLevel; Incidents those at
	// IncidentLevel that last IncidentIntervals or more.
	Falls, Incidents []Stretch
	// looks are the times the group was seen (two nodes fresh),
	// in order.
	looks []time.Time
}

// NewTruth finds a group's real falls in its median ratios.
func NewTruth(samples []Sample, period time.Duration) Truth {
	step := period / StepsPerPeriod
	t := Truth{Period: period, Falls: Falls(samples, step, TrueLevel)}
	for _, s := range samples {
		t.looks = append(t.looks, s.At)
	}
	for _, f := range Falls(samples, step, IncidentLevel) {
		if f.Intervals(period) >= IncidentIntervals {
			t.Incidents = append(t.Incidents, f)
		}
	}
	return t
}

// InFall says whether a real fall at TrueLevel is in progress at at.
func (t Truth) InFall(at time.Time) bool {
	return t.overlaps(at, at)
}

// overlaps says whether a real fall at TrueLevel overlaps [from, to].
func (t Truth) overlaps(from, to time.Time) bool {
	for _, f := range t.Falls {
		if !to.Before(f.From) && from.Before(f.To) {
			return true
		}
	}
	return false
}

// TruePage says whether a page episode that starts at start is true: it
// starts during a real fall, or within one interval before or after one.
func (t Truth) TruePage(start time.Time) bool {
	return t.overlaps(start.Add(-t.Period), start.Add(t.Period))
}

// Calm says whether an injected drop's onset is calm: the group seen in
// each of the two intervals before it, with no real fall and no firing
// page then (firedBefore says whether the page fired). Unseen is not
// calm: after a gap in the runs (a file system down for a fortnight, the
// benchmarks paused) nobody knows what the group was doing, and the runs
// after it often start a new normal that a drop measured against the old
// one hides.
func (t Truth) Calm(onset time.Time, firedBefore bool) bool {
	before, last := onset.Add(-2*t.Period), onset.Add(-t.Period)
	return !firedBefore && t.seen(before, last) && t.seen(last, onset) && !t.overlaps(before, onset)
}

// seenAt says whether the group is seen at at: a look within the quarter
// interval up to it (the looks' grid, while two nodes are fresh).
func (t Truth) seenAt(at time.Time) bool {
	return t.seen(at.Add(-t.Period/StepsPerPeriod), at.Add(time.Nanosecond))
}

// seen says whether the group has a look in [from, to).
func (t Truth) seen(from, to time.Time) bool {
	i, _ := slices.BinarySearchFunc(t.looks, from, func(a, b time.Time) int { return a.Compare(b) })
	return i < len(t.looks) && t.looks[i].Before(to)
}

// Excess says whether a page firing at at fires in excess: no real fall
// is in progress while the group is seen (the hold's tail past the
// fall's end; see Judge).
func (t Truth) Excess(at time.Time) bool {
	return !t.InFall(at) && t.seenAt(at)
}

// Timeline is what a file-system page did over some counted stretch of
// the unmodified series.
type Timeline struct {
	// Steps counts the evaluation steps.
	Steps int
	// Firing are the steps at which the page fired, Starts those at which
	// an episode started.
	Firing, Starts []time.Time
}

// Judgement is a page's timeline judged against the truth.
type Judgement struct {
	Steps, FalseEpisodes, ExcessSteps int
	// Incidents counts the real-fall incidents; Paged those a page
	// started within, or within one interval before, or fired during;
	// PagedWithin1 those paged by the end of the incident's first
	// interval.
	Incidents, Paged, PagedWithin1 int
}

// Judge judges a page's timeline: an episode is false unless TruePage;
// a firing step is excess unless a real fall is in progress (the hold's
// tail past the fall's end is excess) or the group is not seen then (no
// two nodes fresh: nobody can say the fall is over, and a page that
// holds while its file system's runs pause has not paged in vain); an
// incident is paged when an
// episode starts from one interval before it to its end, or the page
// fires during it.
func (t Truth) Judge(tl Timeline) Judgement {
	j := Judgement{Steps: tl.Steps, Incidents: len(t.Incidents)}
	for _, s := range tl.Starts {
		if !t.TruePage(s) {
			j.FalseEpisodes++
		}
	}
	for _, f := range tl.Firing {
		if t.Excess(f) {
			j.ExcessSteps++
		}
	}
	for _, inc := range t.Incidents {
		early, first := inc.From.Add(-t.Period), inc.From.Add(t.Period)
		paged, within1 := false, false
		for _, s := range tl.Starts {
			if !s.Before(early) && s.Before(inc.To) {
				paged = true
				within1 = within1 || !s.After(first)
			}
		}
		// A page already firing when the incident begins (it started
		// for the shallower fall this one deepens, and held) has told
		// the site: a second start would be the same incident told
		// twice, which the hold is there to prevent.
		for _, f := range tl.Firing {
			if !f.Before(inc.From) && f.Before(inc.To) {
				paged = true
				within1 = within1 || !f.After(first)
			}
		}
		if paged {
			j.Paged++
		}
		if within1 {
			j.PagedWithin1++
		}
	}
	return j
}

// Detectability is how many fleet-wide standard deviations a drop of
// drop moves the group's mean log result: |ln(1 - drop)|·√n / σ, where n
// is the number of series and σ the median over them of each series'
// median robust deviation of log runs (1.4826 times the median absolute
// deviation over the plateau.NormalRuns runs before each run, at least
// plateau.ScoreNoiseFloor, as the low score measures a run). Under 3, no
// verdict can page on the drop at once without paging as often on the
// group's own noise.
func Detectability(series [][]float64, drop float64) float64 {
	var sigmas []float64
	for _, v := range series {
		if s, ok := RobustDeviation(v); ok {
			sigmas = append(sigmas, s)
		}
	}
	if len(sigmas) == 0 {
		return 0
	}
	return math.Abs(math.Log(1-drop)) * math.Sqrt(float64(len(sigmas))) / Median(sigmas)
}

// RobustDeviation is the median over a series' runs of the robust
// deviation of the log runs before each (see Detectability); ok is false
// when no run has plateau.MinNormalRuns positive runs before it.
func RobustDeviation(values []float64) (float64, bool) {
	logs := make([]float64, 0, len(values))
	for _, v := range values {
		if v > 0 && !math.IsInf(v, 0) {
			logs = append(logs, math.Log(v))
		}
	}
	var devs []float64
	for i := plateau.MinNormalRuns; i < len(logs); i++ {
		window := logs[max(0, i-plateau.NormalRuns):i]
		c := Median(window)
		abs := make([]float64, len(window))
		for k, x := range window {
			abs[k] = math.Abs(x - c)
		}
		devs = append(devs, max(1.4826*Median(abs), plateau.ScoreNoiseFloor))
	}
	if len(devs) == 0 {
		return 0, false
	}
	return Median(devs), true
}
