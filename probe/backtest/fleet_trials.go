package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// CalmTrial is one calm trial that the ground-truth figures count, as one
// rule set treated it: what `backtest --fleet --trace-trials FILE` writes,
// one JSON object per line, to find why a drop notified twice (the page
// ended and fired again, a node paged before the file system, a node of
// its own weeks into the drop) without a build of one's own. Times after
// the onset are in the group's intervals (its cadence).
type CalmTrial struct {
	RuleSet string    `json:"rule_set"`
	Group   string    `json:"group"`
	Trial   string    `json:"trial"`
	Drop    float64   `json:"drop"`
	Onset   time.Time `json:"onset"`
	// PagedWithin is the interval by whose end the file-system page
	// started (1-3), -1 later, 0 never.
	PagedWithin int `json:"paged_within"`
	// PageEpisodes are the file-system page's episodes in the window.
	PageEpisodes []TrialEpisode `json:"page_episodes"`
	// Notifications are the first notifications of the window, each
	// with why it counts as the drop's or not.
	Notifications []TrialNotification `json:"notifications"`
	// DropsNotifications counts those that are the drop's: the figure
	// notifications_median takes the median of.
	DropsNotifications int `json:"drops_notifications"`
}

// TrialEpisode is one page episode, in intervals after the onset; End is
// null while it fires at the end of the window.
type TrialEpisode struct {
	Start float64  `json:"start"`
	End   *float64 `json:"end"`
}

// TrialNotification is one first notification of a notification group:
// its alert, when (intervals after the onset), and its cause: "drop" (the
// drop's own), "real_fall" (in a real fall of the file system's own, or
// within an interval of one) or "unmodified" (the unmodified series sent
// one of the same group within an interval).
type TrialNotification struct {
	Alert string  `json:"alert"`
	After float64 `json:"after"`
	Cause string  `json:"cause"`
}

// newCalmTrial is trial c's record; causes are its notices' (noticeCauses).
func newCalmTrial(g *fleetGroup, c *fleetCase, cf fleetFigures, causes []string) CalmTrial {
	after := func(t time.Time) float64 {
		return round(float64(t.Sub(c.onset))/float64(g.period), 2)
	}
	t := CalmTrial{Group: g.key, Trial: c.id, Drop: c.drop, Onset: c.onset.UTC(), PagedWithin: cf.detectedWithin,
		PageEpisodes: []TrialEpisode{}, Notifications: []TrialNotification{}}
	for _, e := range cf.pageEpisodes {
		ep := TrialEpisode{Start: after(e.start)}
		if !e.end.IsZero() {
			end := after(e.end)
			ep.End = &end
		}
		t.PageEpisodes = append(t.PageEpisodes, ep)
	}
	for i, n := range cf.notices {
		t.Notifications = append(t.Notifications, TrialNotification{Alert: alertOfGroup(n.group), After: after(n.at), Cause: causes[i]})
	}
	t.DropsNotifications = dropsOf(causes)
	return t
}

// PageEpisode is one episode of the file-system page on the unmodified
// series, as one rule set fired it, judged by the ground truth: what
// `backtest --fleet --trace-pages FILE` writes, one JSON object per line,
// to find where false pages and excess firing come from.
type PageEpisode struct {
	RuleSet string    `json:"rule_set"`
	Group   string    `json:"group"`
	Start   time.Time `json:"start"`
	// End is null while it fires at the end of the stretch replayed.
	End *time.Time `json:"end"`
	// Continues: it fired before this stretch (the stretch before ends
	// with it open), and is not judged false here; Start is where the
	// stretch begins.
	Continues bool `json:"continues"`
	// Intervals is how long it fired, in the group's intervals.
	Intervals float64 `json:"intervals"`
	// False: it starts more than an interval from any real fall
	// (false_page_episodes_per_month counts these).
	False bool `json:"false"`
	// Steps are its evaluation steps, ExcessSteps those outside a real
	// fall while the group is seen (excess_firing_fraction counts these).
	Steps       int `json:"steps"`
	ExcessSteps int `json:"excess_steps"`
}

// pageEpisodes are the page episodes of the unmodified segment c.
func (gt groupTruth) pageEpisodes(g *fleetGroup, c *fleetCase, cf fleetFigures) []PageEpisode {
	var out []PageEpisode
	for _, e := range cf.pageEpisodes {
		p := PageEpisode{Group: g.key, Start: e.start.UTC(), Continues: e.continued, False: !e.continued && !gt.truth.TruePage(e.start)}
		end := c.to
		if !e.end.IsZero() {
			end = e.end
			t := e.end.UTC()
			p.End = &t
		}
		p.Intervals = round(float64(end.Sub(e.start))/float64(g.period), 2)
		for _, at := range cf.firingAt {
			if !at.Before(e.start) && at.Before(end) {
				p.Steps++
				if gt.truth.Excess(at) {
					p.ExcessSteps++
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// alertOfGroup is the alertname in a notification group's key
// ("alertname=X,job=…"), or the key itself without one.
func alertOfGroup(key string) string {
	for _, kv := range strings.Split(key, ",") {
		if name, value, ok := strings.Cut(kv, "="); ok && name == "alertname" {
			return strings.Trim(value, `"`)
		}
	}
	return key
}

// WriteCalmTrials writes the report's calm trials, one JSON object per
// line, in the order of the groups, both rule sets.
func (r *FleetReport) WriteCalmTrials(w io.Writer) error {
	return writeLines(w, r.CalmTrials)
}

// WritePageEpisodes writes the page's episodes on the unmodified series,
// one JSON object per line, in the order of the groups, both rule sets.
func (r *FleetReport) WritePageEpisodes(w io.Writer) error {
	return writeLines(w, r.PageEpisodes)
}

func writeLines[T any](w io.Writer, lines []T) error {
	enc := json.NewEncoder(w)
	for i, l := range lines {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("backtest: line %d: %w", i+1, err)
		}
	}
	return nil
}
