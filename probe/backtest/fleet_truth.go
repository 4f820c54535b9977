package backtest

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// What really happened on the recorded series, beside what the rules did
// (package groundtruth): a file-system page is judged against the
// group's real falls, and the injected drops are counted over the calm
// onsets only, where the group was seen, neither falling nor paged, and
// only where the drop made a real fall.

// detectableD is the detectability from which a group is judged on
// speed: a drop of fewer fleet-wide deviations cannot be paged at once
// without paging as often on the group's own noise.
const detectableD = 3

// FleetRealFall is how a rule set paged the group's real-fall incidents
// at one level: paged when a file-system page starts within the incident
// or one interval before it, or fires during it; within 1 when it does
// by the end of the incident's first interval. The fractions are null
// without incidents.
type FleetRealFall struct {
	IncidentsPerMonth    float64  `json:"incidents_per_month"`
	PagedFraction        *float64 `json:"paged_fraction"`
	PagedWithin1Fraction *float64 `json:"paged_within_1_fraction"`
}

// FleetCalmDetection is FleetDetection over the calm onsets only (the
// group seen, no real fall and no firing page in the two intervals
// before the onset; groundtruth.Truth.Calm) whose drop makes a real fall
// (fleetCase.fall).
type FleetCalmDetection struct {
	FSPageWithin1 float64 `json:"fs_page_within_1"`
	FSPageWithin2 float64 `json:"fs_page_within_2"`
	FSPageWithin3 float64 `json:"fs_page_within_3"`
	// NotificationsMedian is the median over the calm trials of the
	// drop's notifications: the first notifications of the trial's window
	// (onset to an interval after the last dropped run) that the drop
	// made (groupTruth.dropsNotifications). A 20-run drop's window spans
	// weeks of a daily-run group; the file system's own falls in it are
	// paged as they should be, and its nodes page and warn on their own
	// now and then: those are not this incident's notifications.
	NotificationsMedian float64 `json:"notifications_median"`
	// NotificationsAllMedian counts every first notification of the
	// window, the file system's own included.
	NotificationsAllMedian float64 `json:"notifications_all_median"`
	// Notifications2OrMore is the fraction of the calm trials whose drop
	// notified twice or more: one incident told twice.
	Notifications2OrMore float64 `json:"notifications_2_or_more"`
	Trials               int     `json:"trials"`
	// TrialsWithoutFall counts the calm trials left out because their
	// drop made no real fall: the group's median node stayed over
	// 1 - groundtruth.TrueLevel of its recent normal through interval 3.
	// A group that stands well above its normal (after a change that
	// made its runs faster, before the normal catches up: 1.25) falls 30%
	// to 0.875 of the normal; a page there would be judged false on the
	// unmodified series, so it cannot be required here.
	TrialsWithoutFall int `json:"trials_without_fall"`
}

// makesFall says whether the trial's drop makes a real fall: the ground
// truth, read on the dropped runs, sees the median node at or under
// 1 - groundtruth.TrueLevel of its recent normal, for a step or more,
// by the end of interval 3 (an onset is calm only without a fall in the
// two intervals before, so any fall it sees is the drop's).
func (c *fleetCase) makesFall(g *fleetGroup) bool {
	end := c.intervalEnd[2]
	if end.IsZero() {
		end = c.onset.Add(3 * g.period)
	}
	tg := g.truthClock()
	tg.Start, tg.End = c.onset, end
	for si, s := range g.series {
		// The runs from the normal of the last one before the onset to
		// the end: the ratios of those after the onset, and the latest
		// node state at the onset.
		i := sort.Search(len(s.times), func(i int) bool { return !s.times[i].Before(c.onset) })
		j := sort.Search(len(s.times), func(i int) bool { return s.times[i].After(end) })
		from := max(0, i-1-plateau.NormalRuns)
		tg.Nodes = append(tg.Nodes, groundtruth.Node{Times: s.times[from:j], Values: c.values[si][from:j]})
	}
	return len(groundtruth.Falls(tg.MedianRatios(), g.period/groundtruth.StepsPerPeriod, groundtruth.TrueLevel)) > 0
}

// groupTruth is one group's ground truth and detectability by drop.
type groupTruth struct {
	truth         groundtruth.Truth
	detectability map[string]float64
}

func newGroupTruth(g *fleetGroup, drops []float64) groupTruth {
	gt := groupTruth{truth: groundtruth.NewTruth(g.truthGroup().MedianRatios(), g.period), detectability: map[string]float64{}}
	var values [][]float64
	for _, s := range g.series {
		values = append(values, s.replay)
	}
	for _, d := range drops {
		gt.detectability[dropKey(d)] = round(groundtruth.Detectability(values, d), 2)
	}
	return gt
}

// judge adds the ground-truth figures of one rule set on group gi to f,
// and returns its calm trials and its page episodes on the unmodified
// series, as --trace-trials and --trace-pages write them.
func (gt groupTruth) judge(f *FleetFigures, g *fleetGroup, gi int, cases []*fleetCase, figs []fleetFigures) ([]CalmTrial, []PageEpisode) {
	var tl groundtruth.Timeline
	type calm struct {
		n      int
		within [3]int
		// drops and all are the drop's notifications and all of them,
		// per trial; twice counts the trials the drop notified 2+ times.
		drops, all []float64
		twice      int
		// noFall counts the calm trials whose drop made no real fall.
		noFall int
	}
	byDrop := map[string]*calm{}
	var trials []CalmTrial
	var pages []PageEpisode
	var unmodified []notice
	for ci, c := range cases {
		if c.group == gi && c.onset.IsZero() {
			cf := figs[ci]
			tl.Steps += cf.steps
			tl.Firing = append(tl.Firing, cf.firingAt...)
			for _, e := range cf.pageEpisodes {
				if !e.continued {
					tl.Starts = append(tl.Starts, e.start)
				}
			}
			unmodified = append(unmodified, cf.notices...)
			pages = append(pages, gt.pageEpisodes(g, c, cf)...)
		}
	}
	slices.SortStableFunc(unmodified, func(a, b notice) int { return a.at.Compare(b.at) })
	for ci, c := range cases {
		if c.group != gi || c.onset.IsZero() {
			continue
		}
		cf := figs[ci]
		k := dropKey(c.drop)
		if byDrop[k] == nil {
			byDrop[k] = &calm{}
		}
		if !gt.truth.Calm(c.onset, cf.firedBeforeOnset || cf.firingAtOnset) {
			continue
		}
		t := byDrop[k]
		if !c.fall {
			t.noFall++
			continue
		}
		t.n++
		for w := 1; w <= 3; w++ {
			if cf.detectedWithin >= 1 && cf.detectedWithin <= w {
				t.within[w-1]++
			}
		}
		trial := newCalmTrial(g, c, cf, gt.noticeCauses(cf.notices, unmodified))
		trials = append(trials, trial)
		own := trial.DropsNotifications
		t.drops = append(t.drops, float64(own))
		t.all = append(t.all, float64(cf.notifications))
		if own >= 2 {
			t.twice++
		}
	}
	slices.SortFunc(tl.Starts, func(a, b time.Time) int { return a.Compare(b) })
	j := gt.truth.Judge(tl)
	if g.months > 0 {
		f.FalsePageEpisodesPerMonth = round(float64(j.FalseEpisodes)/g.months, 3)
	}
	if j.Steps > 0 {
		f.ExcessFiringFraction = round(float64(j.ExcessSteps)/float64(j.Steps), 4)
	}
	rf := FleetRealFall{}
	if g.months > 0 {
		rf.IncidentsPerMonth = round(float64(j.Incidents)/g.months, 3)
	}
	if j.Incidents > 0 {
		p, p1 := round(float64(j.Paged)/float64(j.Incidents), 3), round(float64(j.PagedWithin1)/float64(j.Incidents), 3)
		rf.PagedFraction, rf.PagedWithin1Fraction = &p, &p1
	}
	f.RealFalls = map[string]FleetRealFall{dropKey(groundtruth.IncidentLevel): rf}
	f.DetectCalm = map[string]FleetCalmDetection{}
	for k, t := range byDrop {
		d := FleetCalmDetection{Trials: t.n, TrialsWithoutFall: t.noFall}
		if t.n > 0 {
			d.FSPageWithin1 = round(float64(t.within[0])/float64(t.n), 3)
			d.FSPageWithin2 = round(float64(t.within[1])/float64(t.n), 3)
			d.FSPageWithin3 = round(float64(t.within[2])/float64(t.n), 3)
			d.NotificationsMedian = groundtruth.Median(t.drops)
			d.NotificationsAllMedian = groundtruth.Median(t.all)
			d.Notifications2OrMore = round(float64(t.twice)/float64(t.n), 3)
		}
		f.DetectCalm[k] = d
	}
	f.Detectability = gt.detectability
	return trials, pages
}

// Why a trial's notification counts, or does not, as its drop's
// (noticeCauses; --trace-trials writes them).
const (
	causeDrop       = "drop"       // the drop's own
	causeRealFall   = "real_fall"  // in a real fall of the file system's own, or within an interval of one
	causeUnmodified = "unmodified" // the unmodified series sent one of the same group within an interval
)

// dropsNotifications is how many of a trial's notifications are its
// drop's (noticeCauses).
func (gt groupTruth) dropsNotifications(trial, unmodified []notice) int {
	return dropsOf(gt.noticeCauses(trial, unmodified))
}

// dropsOf counts the causes that are the drop's.
func dropsOf(causes []string) int {
	n := 0
	for _, c := range causes {
		if c == causeDrop {
			n++
		}
	}
	return n
}

// noticeCauses says, per notification of a trial, whether it is the
// drop's. Neither those that start in a real fall of the file system's
// own, or within an interval of one (as TruePage judges a page), nor
// those an unmodified notification of the same group matches, one to
// one, within an interval: the rules send those with or without the
// drop (a node's own noise, a warning of its own). unmodified is sorted
// by time.
func (gt groupTruth) noticeCauses(trial, unmodified []notice) []string {
	used := make([]bool, len(unmodified))
	causes := make([]string, len(trial))
	for ti, t := range trial {
		if gt.truth.TruePage(t.at) {
			causes[ti] = causeRealFall
			continue
		}
		causes[ti] = causeDrop
		i, _ := slices.BinarySearchFunc(unmodified, t.at.Add(-gt.truth.Period), func(u notice, at time.Time) int { return u.at.Compare(at) })
		for ; i < len(unmodified) && !unmodified[i].at.After(t.at.Add(gt.truth.Period)); i++ {
			if !used[i] && unmodified[i].group == t.group {
				used[i], causes[ti] = true, causeUnmodified
				break
			}
		}
	}
	return causes
}

// summarizeTruth adds the ground truth's summary of one rule set's
// figures over the groups: the worst false pages and excess firing, the
// least paged fraction of incidents and the median of the calm
// detection over the groups where the drop is detectable (d ≥ 3), and
// the most notifications per drop over all groups (the drop's, all of
// them, and the share of trials told twice).
func summarizeTruth(s FleetSummary, figs []FleetFigures, drops []float64) {
	var falsePages, excess, paged []float64
	incidentKey := dropKey(groundtruth.IncidentLevel)
	for _, f := range figs {
		falsePages = append(falsePages, f.FalsePageEpisodesPerMonth)
		excess = append(excess, f.ExcessFiringFraction)
		if rf := f.RealFalls[incidentKey]; rf.PagedFraction != nil && f.Detectability[incidentKey] >= detectableD {
			paged = append(paged, *rf.PagedFraction)
		}
	}
	s["false_page_episodes_per_month_max"] = slices.Max(falsePages)
	s["excess_firing_fraction_max"] = slices.Max(excess)
	rf := map[string]any{"paged_fraction_min_detectable": nil}
	if len(paged) > 0 {
		rf["paged_fraction_min_detectable"] = slices.Min(paged)
	}
	s["real_falls"] = map[string]any{incidentKey: rf}
	calm := map[string]map[string]any{}
	for _, d := range drops {
		k := dropKey(d)
		var w [3][]float64
		var notif, all, twice []float64
		for _, f := range figs {
			c, ok := f.DetectCalm[k]
			if !ok || c.Trials == 0 {
				continue
			}
			notif = append(notif, c.NotificationsMedian)
			all = append(all, c.NotificationsAllMedian)
			twice = append(twice, c.Notifications2OrMore)
			if f.Detectability[k] >= detectableD {
				w[0] = append(w[0], c.FSPageWithin1)
				w[1] = append(w[1], c.FSPageWithin2)
				w[2] = append(w[2], c.FSPageWithin3)
			}
		}
		m := map[string]any{}
		for i, name := range []string{"fs_page_within_1", "fs_page_within_2", "fs_page_within_3"} {
			m[name+"_median_detectable"] = nil
			if len(w[i]) > 0 {
				m[name+"_median_detectable"] = round(groundtruth.Median(w[i]), 4)
			}
		}
		m["notifications_median_max"], m["notifications_all_median_max"], m["notifications_2_or_more_max"] = nil, nil, nil
		if len(notif) > 0 {
			m["notifications_median_max"] = slices.Max(notif)
			m["notifications_all_median_max"] = slices.Max(all)
			m["notifications_2_or_more_max"] = slices.Max(twice)
		}
		calm[k] = m
	}
	s["detect_calm"] = calm
}

// writeTruthTable writes the ground-truth figures, the current rules
// beside the reference, per group and over the groups.
func (r *FleetReport) writeTruthTable(w io.Writer, drops []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	incidentKey := dropKey(groundtruth.IncidentLevel)
	header := []string{"group", "false eps/mo", "excess", "incidents/mo", "paged", "paged ≤1"}
	for _, d := range drops {
		header = append(header, "-"+d+" d", "calm ≤1", "≤2", "≤3", "notif", "all", "+2", "n", "no fall")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	pair := func(cur, ref any, digits int) string {
		f := func(v any) string {
			switch x := v.(type) {
			case float64:
				return strconv.FormatFloat(x, 'f', digits, 64)
			case *float64:
				if x != nil {
					return strconv.FormatFloat(*x, 'f', digits, 64)
				}
			case int:
				return strconv.Itoa(x)
			}
			return "-"
		}
		return f(cur) + " (" + f(ref) + ")"
	}
	for _, g := range r.Groups {
		c, ref := g.Current, g.Reference
		cf, rf := c.RealFalls[incidentKey], ref.RealFalls[incidentKey]
		row := []string{g.Key, pair(c.FalsePageEpisodesPerMonth, ref.FalsePageEpisodesPerMonth, 2), pair(c.ExcessFiringFraction, ref.ExcessFiringFraction, 3),
			fmt.Sprintf("%.2f", cf.IncidentsPerMonth), pair(cf.PagedFraction, rf.PagedFraction, 2), pair(cf.PagedWithin1Fraction, rf.PagedWithin1Fraction, 2)}
		for _, d := range drops {
			cc, rc := c.DetectCalm[d], ref.DetectCalm[d]
			row = append(row, fmt.Sprintf("%.1f", c.Detectability[d]), pair(cc.FSPageWithin1, rc.FSPageWithin1, 2), pair(cc.FSPageWithin2, rc.FSPageWithin2, 2),
				pair(cc.FSPageWithin3, rc.FSPageWithin3, 2), pair(cc.NotificationsMedian, rc.NotificationsMedian, 0),
				pair(cc.NotificationsAllMedian, rc.NotificationsAllMedian, 1), pair(cc.Notifications2OrMore, rc.Notifications2OrMore, 2), fmt.Sprint(cc.Trials), fmt.Sprint(cc.TrialsWithoutFall))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	cur, ref := r.Summary[RuleSetCurrent], r.Summary[RuleSetReference]
	sub := func(s FleetSummary, keys ...string) any {
		var v any = map[string]any(s)
		for _, k := range keys {
			switch m := v.(type) {
			case map[string]any:
				v = m[k]
			case map[string]map[string]any:
				v = m[k]
			default:
				return nil
			}
		}
		return v
	}
	row := []string{"worst/median", pair(cur["false_page_episodes_per_month_max"], ref["false_page_episodes_per_month_max"], 2),
		pair(cur["excess_firing_fraction_max"], ref["excess_firing_fraction_max"], 3), "",
		pair(sub(cur, "real_falls", incidentKey, "paged_fraction_min_detectable"), sub(ref, "real_falls", incidentKey, "paged_fraction_min_detectable"), 2), ""}
	for _, d := range drops {
		get := func(s FleetSummary, k string) any { return sub(s, "detect_calm", d, k) }
		row = append(row, "", pair(get(cur, "fs_page_within_1_median_detectable"), get(ref, "fs_page_within_1_median_detectable"), 2),
			pair(get(cur, "fs_page_within_2_median_detectable"), get(ref, "fs_page_within_2_median_detectable"), 2),
			pair(get(cur, "fs_page_within_3_median_detectable"), get(ref, "fs_page_within_3_median_detectable"), 2),
			pair(get(cur, "notifications_median_max"), get(ref, "notifications_median_max"), 0),
			pair(get(cur, "notifications_all_median_max"), get(ref, "notifications_all_median_max"), 1),
			pair(get(cur, "notifications_2_or_more_max"), get(ref, "notifications_2_or_more_max"), 2), "", "")
	}
	fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "ground truth, current rules (reference rules): false eps/mo = page episodes per month that start more than an interval away from a real fall (median node %g%% under its recent normal); excess = fraction of the time paging outside one while the group is seen; incidents = real falls of %g%% for %d intervals or more, paged = a page started from an interval before one to its end, or firing in it; d = the drop in fleet-wide deviations; calm ≤k = calm onsets (the group seen, no fall, no page in the 2 intervals before) paged within k intervals, n of them, less the no-fall ones whose drop made no fall by interval 3; notif = the drop's notifications (neither in a real fall of the file system's own nor sent by the unmodified series within an interval), all = every notification of the drop's window, median, and +2 the fraction the drop notified twice or more. Last row: worst group, incidents paged and calm ≤k the least resp. median over groups with d ≥ %d, notif the most.\n",
		100*groundtruth.TrueLevel, 100*groundtruth.IncidentLevel, groundtruth.IncidentIntervals, detectableD)
	return err
}
