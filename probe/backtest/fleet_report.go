package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
)

// FleetReport is what `backtest --fleet` prints: per group, the figures of
// both rule sets on the same trials, and their median and maximum over
// the groups.
type FleetReport struct {
	Groups  []FleetGroupReport      `json:"groups"`
	Summary map[string]FleetSummary `json:"summary"`
	// How it was run.
	WarmupRuns int      `json:"warmup_runs"`
	Skipped    []string `json:"skipped,omitempty"`
	// CalmTrials are the calm trials the figures count, and PageEpisodes
	// the page's episodes on the unmodified series, per rule set
	// (WriteCalmTrials, WritePageEpisodes); not in the report's JSON.
	CalmTrials   []CalmTrial   `json:"-"`
	PageEpisodes []PageEpisode `json:"-"`
}

// FleetGroupReport is one group's figures under each rule set.
type FleetGroupReport struct {
	Key    string  `json:"key"`
	Series int     `json:"series"`
	Months float64 `json:"months"`
	// PeriodHours is the group's cadence, replayed as one probe interval.
	PeriodHours float64 `json:"period_hours"`
	// FSPlateau is the aggregate plateau per op (bytes/s) the utilization
	// is computed against; absent where the input records no load.
	FSPlateau map[string]float64 `json:"fs_plateau_bytes_per_second,omitempty"`
	// FileDrops is, per injected drop size, how often the unmodified
	// series fall together by that much on their own (fleet_drops.go).
	FileDrops map[string]FleetFileDrop `json:"file_drops"`
	Current   FleetFigures             `json:"current"`
	Reference FleetFigures             `json:"reference"`
}

// FleetFigures are one rule set's figures on one group.
type FleetFigures struct {
	// On the unmodified series: the fraction of the time a file-system
	// page (a page-severity alert without an instance label) fired, its
	// episodes per month, and the node pages' episodes per node-month.
	FSPageFiringFraction     float64 `json:"fs_page_firing_fraction"`
	FSPageEpisodesPerMonth   float64 `json:"fs_page_episodes_per_month"`
	NodePageEpisodesPerMonth float64 `json:"node_page_episodes_per_month"`
	// Detect is keyed by drop size ("0.3").
	Detect map[string]FleetDetection `json:"detect"`
	// Judged against the ground truth (fleet_truth.go): page episodes
	// that start away from any real fall, per month; the fraction of the
	// time the page fires while the group is seen and no real fall is in
	// progress; the real
	// falls' incidents by level; the drops over the calm onsets and the
	// drops' detectability, both keyed by drop size.
	FalsePageEpisodesPerMonth float64                       `json:"false_page_episodes_per_month"`
	ExcessFiringFraction      float64                       `json:"excess_firing_fraction"`
	RealFalls                 map[string]FleetRealFall      `json:"real_falls"`
	DetectCalm                map[string]FleetCalmDetection `json:"detect_calm"`
	Detectability             map[string]float64            `json:"detectability"`
}

// FleetDetection is how a rule set caught one fleet-wide drop size.
type FleetDetection struct {
	// Fractions of the trials whose file-system page started within k
	// intervals of the onset (by the first evaluation after every node
	// had k runs since it); a page firing at the onset is a miss.
	FSPageWithin1 float64 `json:"fs_page_within_1"`
	FSPageWithin2 float64 `json:"fs_page_within_2"`
	FSPageWithin3 float64 `json:"fs_page_within_3"`
	// NotificationsMedian is the median over trials of the notification
	// groups that started after the onset, after inhibition.
	NotificationsMedian float64 `json:"notifications_median"`
	// NotificationsWithin3Median counts only those that started within
	// 3 intervals of the onset: the file-system page and whatever came
	// before it; later ones are, on a long drop, the chronic warning
	// or node pages once the page has resolved.
	NotificationsWithin3Median float64 `json:"notifications_within_3_median"`
	FiringAtOnset              float64 `json:"firing_at_onset"`
	Trials                     int     `json:"trials"`
}

// FleetSummary holds each figure's median and maximum over groups,
// suffixed _median and _max; detect's are keyed by drop size.
type FleetSummary map[string]any

func (r *FleetReport) build(groups []fleetGroup, cases []*fleetCase, perSet map[string][]fleetFigures, o FleetOptions) {
	r.Summary = map[string]FleetSummary{}
	all := map[string][]FleetFigures{}
	for gi, g := range groups {
		gr := FleetGroupReport{Key: g.key, Series: len(g.series), Months: round(g.months, 2), PeriodHours: round(g.period.Hours(), 2),
			FileDrops: fileDrops(&groups[gi], o.Drops)}
		for op, v := range g.fsPlateau {
			if v > 0 {
				if gr.FSPlateau == nil {
					gr.FSPlateau = map[string]float64{}
				}
				gr.FSPlateau[op] = round(v, 0)
			}
		}
		truth := newGroupTruth(&groups[gi], o.Drops)
		for _, set := range []string{RuleSetCurrent, RuleSetReference} {
			f := FleetFigures{Detect: map[string]FleetDetection{}}
			calm, pages := truth.judge(&f, &groups[gi], gi, cases, perSet[set])
			for _, t := range calm {
				t.RuleSet = set
				r.CalmTrials = append(r.CalmTrials, t)
			}
			for _, p := range pages {
				p.RuleSet = set
				r.PageEpisodes = append(r.PageEpisodes, p)
			}
			var steps, pageSteps, episodes, nodeEpisodes int
			type trials struct {
				n, atOnset   int
				within       [3]int
				notification []float64
				early        []float64
			}
			byDrop := map[string]*trials{}
			for ci, c := range cases {
				if c.group != gi {
					continue
				}
				cf := perSet[set][ci]
				if c.onset.IsZero() {
					steps += cf.steps
					pageSteps += cf.fsPageSteps
					episodes += cf.fsPageEpisodes
					nodeEpisodes += cf.nodePageEpisodes
					continue
				}
				k := dropKey(c.drop)
				if byDrop[k] == nil {
					byDrop[k] = &trials{}
				}
				t := byDrop[k]
				t.n++
				if cf.firingAtOnset {
					t.atOnset++
				}
				for w := 1; w <= 3; w++ {
					if cf.detectedWithin >= 1 && cf.detectedWithin <= w {
						t.within[w-1]++
					}
				}
				t.notification = append(t.notification, float64(cf.notifications))
				t.early = append(t.early, float64(cf.notificationsEarly))
			}
			if steps > 0 {
				f.FSPageFiringFraction = round(float64(pageSteps)/float64(steps), 4)
			}
			if g.months > 0 {
				f.FSPageEpisodesPerMonth = round(float64(episodes)/g.months, 3)
				f.NodePageEpisodesPerMonth = round(float64(nodeEpisodes)/g.months/float64(len(g.series)), 3)
			}
			for k, t := range byDrop {
				f.Detect[k] = FleetDetection{
					FSPageWithin1:              round(float64(t.within[0])/float64(t.n), 3),
					FSPageWithin2:              round(float64(t.within[1])/float64(t.n), 3),
					FSPageWithin3:              round(float64(t.within[2])/float64(t.n), 3),
					NotificationsMedian:        groundtruth.Median(t.notification),
					NotificationsWithin3Median: groundtruth.Median(t.early),
					FiringAtOnset:              round(float64(t.atOnset)/float64(t.n), 3),
					Trials:                     t.n,
				}
			}
			if set == RuleSetCurrent {
				gr.Current = f
			} else {
				gr.Reference = f
			}
			all[set] = append(all[set], f)
		}
		r.Groups = append(r.Groups, gr)
	}
	for set, figs := range all {
		s := FleetSummary{}
		summarize := func(into map[string]any, name string, values []float64) {
			into[name+"_median"] = round(groundtruth.Median(values), 4)
			into[name+"_max"] = round(slices.Max(values), 4)
		}
		pick := func(f func(FleetFigures) float64) []float64 { return column(figs, f) }
		summarize(s, "fs_page_firing_fraction", pick(func(f FleetFigures) float64 { return f.FSPageFiringFraction }))
		summarize(s, "fs_page_episodes_per_month", pick(func(f FleetFigures) float64 { return f.FSPageEpisodesPerMonth }))
		summarize(s, "node_page_episodes_per_month", pick(func(f FleetFigures) float64 { return f.NodePageEpisodesPerMonth }))
		detect := map[string]map[string]any{}
		for _, d := range o.Drops {
			k := dropKey(d)
			m := map[string]any{}
			var have []FleetDetection
			for _, fig := range figs {
				if det, ok := fig.Detect[k]; ok {
					have = append(have, det)
				}
			}
			if len(have) == 0 {
				continue
			}
			get := func(f func(FleetDetection) float64) []float64 { return column(have, f) }
			summarize(m, "fs_page_within_1", get(func(d FleetDetection) float64 { return d.FSPageWithin1 }))
			summarize(m, "fs_page_within_2", get(func(d FleetDetection) float64 { return d.FSPageWithin2 }))
			summarize(m, "fs_page_within_3", get(func(d FleetDetection) float64 { return d.FSPageWithin3 }))
			summarize(m, "notifications_median", get(func(d FleetDetection) float64 { return d.NotificationsMedian }))
			summarize(m, "notifications_within_3_median", get(func(d FleetDetection) float64 { return d.NotificationsWithin3Median }))
			summarize(m, "firing_at_onset", get(func(d FleetDetection) float64 { return d.FiringAtOnset }))
			detect[k] = m
		}
		s["detect"] = detect
		summarizeTruth(s, figs, o.Drops)
		r.Summary[set] = s
	}
}

// WriteJSON writes the report as the JSON contract.
func (r *FleetReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes each group's figures and the summary, the current
// rules beside the reference.
func (r *FleetReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	var drops []string
	if len(r.Groups) > 0 {
		drops = slices.Sorted(maps.Keys(r.Groups[0].Current.Detect))
	}
	header := []string{"group", "series", "fs firing", "fs eps/mo", "node eps/mo"}
	for _, d := range drops {
		header = append(header, "-"+d+" ≤1", "≤2", "≤3", "notif")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	pair := func(cur, ref float64, digits int) string {
		f := "%." + fmt.Sprint(digits) + "f"
		return fmt.Sprintf(f+" ("+f+")", cur, ref)
	}
	for _, g := range r.Groups {
		row := []string{g.Key, fmt.Sprint(g.Series),
			pair(g.Current.FSPageFiringFraction, g.Reference.FSPageFiringFraction, 4),
			pair(g.Current.FSPageEpisodesPerMonth, g.Reference.FSPageEpisodesPerMonth, 2),
			pair(g.Current.NodePageEpisodesPerMonth, g.Reference.NodePageEpisodesPerMonth, 2)}
		for _, d := range drops {
			c, ref := g.Current.Detect[d], g.Reference.Detect[d]
			row = append(row, pair(c.FSPageWithin1, ref.FSPageWithin1, 2), pair(c.FSPageWithin2, ref.FSPageWithin2, 2),
				pair(c.FSPageWithin3, ref.FSPageWithin3, 2), pair(c.NotificationsMedian, ref.NotificationsMedian, 0))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	cur, ref := r.Summary[RuleSetCurrent], r.Summary[RuleSetReference]
	for _, stat := range []string{"median", "max"} {
		num := func(s FleetSummary, k string) float64 { v, _ := s[k].(float64); return v }
		row := []string{stat, "",
			pair(num(cur, "fs_page_firing_fraction_"+stat), num(ref, "fs_page_firing_fraction_"+stat), 4),
			pair(num(cur, "fs_page_episodes_per_month_"+stat), num(ref, "fs_page_episodes_per_month_"+stat), 2),
			pair(num(cur, "node_page_episodes_per_month_"+stat), num(ref, "node_page_episodes_per_month_"+stat), 2)}
		for _, d := range drops {
			dc, _ := cur["detect"].(map[string]map[string]any)
			dr, _ := ref["detect"].(map[string]map[string]any)
			get := func(m map[string]map[string]any, k string) float64 { v, _ := m[d][k+"_"+stat].(float64); return v }
			row = append(row, pair(get(dc, "fs_page_within_1"), get(dr, "fs_page_within_1"), 2), pair(get(dc, "fs_page_within_2"), get(dr, "fs_page_within_2"), 2),
				pair(get(dc, "fs_page_within_3"), get(dr, "fs_page_within_3"), 2), pair(get(dc, "notifications_median"), get(dr, "notifications_median"), 0))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "current rules (reference rules in parentheses); fs = file-system page, node eps/mo per node-month; ≤k = fraction of fleet-wide drops paged within k intervals; notif = median notifications per drop. Warm-up %d intervals.\n", r.WarmupRuns)
	if err != nil {
		return err
	}
	// What no rule set can beat on this file: how often its own nodes
	// fall together as far as each injected drop.
	for _, g := range r.Groups {
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(g.FileDrops)) {
			f := g.FileDrops[d]
			parts = append(parts, fmt.Sprintf("-%s: %.1f%% of the time, %.2f episodes/month", d, 100*f.Fraction, f.EpisodesPerMonth))
		}
		if _, err := fmt.Fprintf(w, "%s falls by itself (median node under its recent normal) %s\n", g.Key, strings.Join(parts, "; ")); err != nil {
			return err
		}
	}
	if err := r.writeTruthTable(w, drops); err != nil {
		return err
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	return nil
}

// column is f of each of rows, in order: one figure over the groups.
func column[T any](rows []T, f func(T) float64) []float64 {
	out := make([]float64, 0, len(rows))
	for _, r := range rows {
		out = append(out, f(r))
	}
	return out
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
