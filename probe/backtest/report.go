package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
)

// Report is what `backtest` prints: per series and over all series, the
// figures of both rule sets on the same trials.
type Report struct {
	Series  []SeriesReport    `json:"series"`
	Summary map[string]Figure `json:"summary"`
	// Not in the JSON contract's top level, but useful: how it was run.
	WarmupRuns int      `json:"warmup_runs"`
	Skipped    []string `json:"skipped,omitempty"`
	Options    Options  `json:"-"`
	// charts keeps, per series, what the SVG draws.
	charts []chartData
}

// SeriesReport is one series' figures under each rule set.
type SeriesReport struct {
	Key       string  `json:"key"`
	Runs      int     `json:"runs"`
	Months    float64 `json:"months"`
	Current   Figures `json:"current"`
	Reference Figures `json:"reference"`
}

// Figures are one rule set's figures on one series.
type Figures struct {
	// PageFiringFraction is the fraction of the replayed time during which
	// a page fired on the unmodified series, PageEpisodesPerMonth how many
	// separate pages started per month of the series' real time span.
	PageFiringFraction    float64 `json:"page_firing_fraction"`
	PageEpisodesPerMonth  float64 `json:"page_episodes_per_month"`
	WarningFiringFraction float64 `json:"warning_firing_fraction"`
	// Detect is keyed by drop size ("0.3").
	Detect map[string]Detection `json:"detect"`
}

// Detection is how a rule set caught one drop size on one series' trials.
type Detection struct {
	// Fractions of the trials with a new page (none firing just before
	// the onset) within 3 and 10 runs of it, the onset's run counting as
	// the first.
	NewPageWithin3  float64 `json:"new_page_within_3"`
	NewPageWithin10 float64 `json:"new_page_within_10"`
	// MedianDelayRuns over the trials with a new page during the drop;
	// null when none had one.
	MedianDelayRuns *float64 `json:"median_delay_runs"`
	// FiringAtOnset: trials lost because a page was already firing.
	FiringAtOnset float64 `json:"firing_at_onset"`
}

// Figure is the summary of one rule set: each figure's median and 80th
// percentile over the series, keyed "page_firing_fraction_median" and so
// on; detect's are keyed by drop size.
type Figure map[string]any

type chartData struct {
	values   []float64
	baseline float64
	pages    map[string][][2]float64
}

func (r *Report) build(series []prepared, cases []replayCase, perSet map[string][]caseFigures, o Options) {
	r.Summary = map[string]Figure{}
	figs := map[string][]Figures{}
	for si, s := range series {
		sr := SeriesReport{Key: s.Key, Runs: len(s.Values), Months: round(s.months, 2)}
		cd := chartData{values: s.replay, baseline: s.baseline, pages: map[string][][2]float64{}}
		for _, set := range []string{RuleSetCurrent, RuleSetReference} {
			f := Figures{Detect: map[string]Detection{}}
			// An unmodified series is replayed in segments, in order.
			var steps, pageSteps, warningSteps, episodes int
			for ci, c := range cases {
				if c.series != si || c.onset >= 0 {
					continue
				}
				cf := perSet[set][ci]
				steps += cf.steps
				pageSteps += cf.pageSteps
				warningSteps += cf.warningSteps
				episodes += cf.pageEpisodes
				cd.pages[set] = append(cd.pages[set], cf.pageSpans...)
			}
			if steps > 0 {
				f.PageFiringFraction = float64(pageSteps) / float64(steps)
				f.WarningFiringFraction = float64(warningSteps) / float64(steps)
			}
			if s.months > 0 {
				f.PageEpisodesPerMonth = float64(episodes) / s.months
			}
			for _, drop := range o.Drops {
				var within3, within10, atOnset, trials int
				var delays []float64
				for ci, c := range cases {
					if c.series != si || c.onset < 0 || c.drop != drop {
						continue
					}
					cf := perSet[set][ci]
					trials++
					if cf.firingAtOnset {
						atOnset++
					}
					if cf.detected {
						delays = append(delays, float64(cf.delayRuns))
						if cf.delayRuns <= 3 {
							within3++
						}
						if cf.delayRuns <= 10 {
							within10++
						}
					}
				}
				d := Detection{}
				if trials > 0 {
					d.NewPageWithin3 = float64(within3) / float64(trials)
					d.NewPageWithin10 = float64(within10) / float64(trials)
					d.FiringAtOnset = float64(atOnset) / float64(trials)
				}
				if len(delays) > 0 {
					m := groundtruth.Median(delays)
					d.MedianDelayRuns = &m
				}
				f.Detect[dropKey(drop)] = d
			}
			figs[set] = append(figs[set], f)
			if set == RuleSetCurrent {
				sr.Current = f
			} else {
				sr.Reference = f
			}
		}
		r.Series = append(r.Series, sr)
		r.charts = append(r.charts, cd)
	}
	for set, fs := range figs {
		sum := Figure{}
		add := func(name string, get func(Figures) (float64, bool)) {
			var xs []float64
			for _, f := range fs {
				if v, ok := get(f); ok {
					xs = append(xs, v)
				}
			}
			sum[name+"_median"] = quantileOrNil(xs, 0.5)
			sum[name+"_p80"] = quantileOrNil(xs, 0.8)
		}
		add("page_firing_fraction", func(f Figures) (float64, bool) { return f.PageFiringFraction, true })
		add("page_episodes_per_month", func(f Figures) (float64, bool) { return f.PageEpisodesPerMonth, true })
		add("warning_firing_fraction", func(f Figures) (float64, bool) { return f.WarningFiringFraction, true })
		detect := map[string]Figure{}
		for _, drop := range o.Drops {
			k := dropKey(drop)
			dsum := Figure{}
			dadd := func(name string, get func(Detection) (float64, bool)) {
				var xs []float64
				for _, f := range fs {
					if v, ok := get(f.Detect[k]); ok {
						xs = append(xs, v)
					}
				}
				dsum[name+"_median"] = quantileOrNil(xs, 0.5)
				dsum[name+"_p80"] = quantileOrNil(xs, 0.8)
			}
			dadd("new_page_within_3", func(d Detection) (float64, bool) { return d.NewPageWithin3, true })
			dadd("new_page_within_10", func(d Detection) (float64, bool) { return d.NewPageWithin10, true })
			dadd("median_delay_runs", func(d Detection) (float64, bool) {
				if d.MedianDelayRuns == nil {
					return 0, false
				}
				return *d.MedianDelayRuns, true
			})
			dadd("firing_at_onset", func(d Detection) (float64, bool) { return d.FiringAtOnset, true })
			detect[k] = dsum
		}
		sum["detect"] = detect
		r.Summary[set] = sum
	}
}

func dropKey(d float64) string { return strconv.FormatFloat(d, 'f', -1, 64) }

// quantile interpolates linearly between order statistics (R's type 7,
// numpy's default), so that the figures are easy to check by hand.
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

func quantileOrNil(xs []float64, q float64) any {
	if len(xs) == 0 {
		return nil
	}
	return round(quantile(xs, q), 4)
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteJSON writes the report in the JSON contract of `backtest --output json`.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the summary of both rule sets side by side, then each
// series' figures.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	num := func(v any) string {
		f, ok := v.(float64)
		if !ok {
			return "-"
		}
		return strconv.FormatFloat(f, 'f', 3, 64)
	}
	cur, ref := r.Summary[RuleSetCurrent], r.Summary[RuleSetReference]
	fmt.Fprintln(tw, "figure (over series)\treference median\treference p80\tcurrent median\tcurrent p80\t")
	for _, name := range []string{"page_firing_fraction", "page_episodes_per_month", "warning_firing_fraction"} {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", name, num(ref[name+"_median"]), num(ref[name+"_p80"]), num(cur[name+"_median"]), num(cur[name+"_p80"]))
	}
	for _, drop := range r.Options.Drops {
		k := dropKey(drop)
		rd, _ := ref["detect"].(map[string]Figure)
		cd, _ := cur["detect"].(map[string]Figure)
		for _, name := range []string{"new_page_within_3", "new_page_within_10", "median_delay_runs", "firing_at_onset"} {
			fmt.Fprintf(tw, "drop %s %s\t%s\t%s\t%s\t%s\t\n", k, name, num(rd[k][name+"_median"]), num(rd[k][name+"_p80"]), num(cd[k][name+"_median"]), num(cd[k][name+"_p80"]))
		}
	}
	fmt.Fprintln(tw, "\t\t\t\t\t")
	head := []string{"series", "runs", "months", "ref page", "cur page", "ref ep/mo", "cur ep/mo", "ref warn", "cur warn"}
	for _, drop := range r.Options.Drops {
		k := dropKey(drop)
		head = append(head, "ref "+k+"≤3", "cur "+k+"≤3", "ref "+k+"≤10", "cur "+k+"≤10")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, s := range r.Series {
		row := []string{s.Key, strconv.Itoa(s.Runs), strconv.FormatFloat(s.Months, 'f', 1, 64),
			num(s.Reference.PageFiringFraction), num(s.Current.PageFiringFraction),
			num(s.Reference.PageEpisodesPerMonth), num(s.Current.PageEpisodesPerMonth),
			num(s.Reference.WarningFiringFraction), num(s.Current.WarningFiringFraction)}
		for _, drop := range r.Options.Drops {
			k := dropKey(drop)
			row = append(row, num(s.Reference.Detect[k].NewPageWithin3), num(s.Current.Detect[k].NewPageWithin3),
				num(s.Reference.Detect[k].NewPageWithin10), num(s.Current.Detect[k].NewPageWithin10))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(tw, "skipped: %s\t\t\t\t\t\n", s)
	}
	return tw.Flush()
}
