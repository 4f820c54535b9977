package backtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/ruleeval"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
)

// The fleet replay (`backtest --fleet`): the series of one group (one file
// system of one system) are the nodes of a fleet probing it, replayed
// together on one clock by their own timestamps, so that the fleet rules
// see what a fleet's Prometheus would have seen, run by run. Real time is
// compressed so that the group's cadence (the slowest node's median gap
// between runs, a day on the shared file) is one probe Interval: the
// rules' windows, `for` and `keep_firing_for` then mean as many probe
// intervals as they do in production.

// FleetOptions say how groups of series are replayed as fleets.
type FleetOptions struct {
	Options
	// GroupColumns name the labels (CSV columns) whose values together
	// name a group: its series are the nodes of one file system.
	GroupColumns []string
	// FSPlateau gives a group's aggregate plateau (bytes/s, both
	// directions) instead of the 95th percentile of the summed rates the
	// input records, keyed by group key ("cori/cscratch").
	FSPlateau map[string]float64
	// Alertmanager is the alertmanager.yml whose inhibitions and grouping
	// count the notifications.
	Alertmanager string
}

// staleIntervals: a node whose last run is more than this many of its
// group's cadences old no longer exports its probe (its series ended);
// the fleet rules then count one node less, as they would for a node
// that left the fleet.
const staleIntervals = 3

// fleetGroup is one group ready to replay.
type fleetGroup struct {
	key    string
	series []prepared
	// others is each series' others' load, replay-aligned (nil: none).
	others [][]float64
	// period is the group's cadence in real time: one probe interval.
	period     time.Duration
	start, end time.Time
	// fsPlateau is the aggregate plateau per op ("read", "write"); 0 for
	// none (no utilization, no contention).
	fsPlateau map[string]float64
	months    float64
}

// fleetCase is one stretch of a group replayed: a segment of the
// unmodified series, or a trial with its drop. Times are real times.
type fleetCase struct {
	id                string
	group             int
	from, counted, to time.Time
	// onset is zero on an unmodified segment.
	onset time.Time
	drop  float64
	// values are the series' replayed results, the drop applied.
	values [][]float64
	// intervalEnd[k-1] is when interval k after the onset ends: when
	// every node that runs during the trial has had k runs since it.
	intervalEnd [3]time.Time
	// fall says whether the drop makes a real fall (makesFall), as
	// both rule sets' calm figures count it.
	fall bool
}

// sim is when real time t is in the case's simulated time.
func (c *fleetCase) sim(g *fleetGroup, t time.Time, o Options) time.Time {
	return simulationStart.Add(time.Duration(float64(t.Sub(c.from)) * float64(o.Interval) / float64(g.period)))
}

// real is the real time of simulated time ts.
func (c *fleetCase) real(g *fleetGroup, ts time.Time, o Options) time.Time {
	return c.from.Add(time.Duration(float64(ts.Sub(simulationStart)) * float64(g.period) / float64(o.Interval)))
}

// RunFleet replays the groups of series through both rule sets.
func RunFleet(ctx context.Context, input []Series, o FleetOptions) (*FleetReport, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if len(o.GroupColumns) == 0 {
		return nil, errors.New("backtest: --fleet needs --group-columns")
	}
	notify, err := ruleeval.LoadNotifier(o.Alertmanager)
	if err != nil {
		return nil, err
	}
	groups, skipped, err := fleetGroups(input, o)
	if err != nil {
		return nil, err
	}
	warmup := o.WarmupRuns
	if warmup == 0 {
		for _, files := range [][]string{o.Current, o.Reference} {
			w, err := warmupRuns(files, o.Interval)
			if err != nil {
				return nil, err
			}
			warmup = max(warmup, w)
		}
	}
	cases := fleetCases(groups, o, warmup)
	perSet := map[string][]fleetFigures{}
	errs := make([]error, 2)
	done := make(chan struct{})
	for i, set := range []string{RuleSetCurrent, RuleSetReference} {
		files := map[string][]string{RuleSetCurrent: o.Current, RuleSetReference: o.Reference}[set]
		perSet[set] = make([]fleetFigures, len(cases))
		go func() {
			defer func() { done <- struct{}{} }()
			figs, err := evaluateFleet(ctx, groups, cases, files, notify, o)
			if err != nil {
				errs[i] = fmt.Errorf("backtest: rule set %s (%s): %w", set, strings.Join(files, ", "), err)
				return
			}
			copy(perSet[set], figs)
		}()
	}
	<-done
	<-done
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &FleetReport{WarmupRuns: warmup, Skipped: skipped}
	r.build(groups, cases, perSet, o)
	return r, nil
}

// fleetGroups groups and prepares the series. A group needs two series
// that each have enough runs for a trial: one node is no fleet.
func fleetGroups(input []Series, o FleetOptions) ([]fleetGroup, []string, error) {
	byKey := map[string][]Series{}
	for _, s := range input {
		var parts []string
		for _, c := range o.GroupColumns {
			v, ok := s.Labels[c]
			if !ok {
				return nil, nil, fmt.Errorf("backtest: series %s has no %q to group by (--group-columns)", s.Key, c)
			}
			parts = append(parts, v)
		}
		k := strings.Join(parts, "/")
		byKey[k] = append(byKey[k], s)
	}
	for k := range o.FSPlateau {
		if _, ok := byKey[k]; !ok {
			return nil, nil, fmt.Errorf("backtest: --fs-plateau names group %q, which the input does not have", k)
		}
	}
	var groups []fleetGroup
	var skipped []string
	minRuns := o.BaselineRuns + o.OnsetAfter + o.InjectRuns + 1
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		g := fleetGroup{key: key, fsPlateau: map[string]float64{}}
		summed := map[string][]float64{}
		for _, s := range byKey[key] {
			if len(s.Values) < minRuns {
				skipped = append(skipped, fmt.Sprintf("%s (%d runs, fewer than the %d a trial needs)", s.Key, len(s.Values), minRuns))
				continue
			}
			p, err := prepare(s, o.Options)
			if err != nil {
				return nil, nil, err
			}
			g.series = append(g.series, p)
			var others []float64
			if s.Others != nil {
				others = s.Others[o.BaselineRuns:]
				for i, v := range others {
					if !math.IsNaN(v) {
						summed[p.op] = append(summed[p.op], v+p.replay[i])
					}
				}
			}
			g.others = append(g.others, others)
		}
		if len(g.series) < 2 {
			skipped = append(skipped, fmt.Sprintf("group %s (%d series with enough runs; a fleet needs two)", key, len(g.series)))
			continue
		}
		var gaps []time.Duration
		for _, s := range g.series {
			var own []float64
			for i := 1; i < len(s.times); i++ {
				own = append(own, float64(s.times[i].Sub(s.times[i-1])))
			}
			gaps = append(gaps, time.Duration(groundtruth.Median(own)))
			if g.start.IsZero() || s.times[0].Before(g.start) {
				g.start = s.times[0]
			}
			if last := s.times[len(s.times)-1]; last.After(g.end) {
				g.end = last
			}
		}
		g.period = slices.Max(gaps)
		if g.period <= 0 {
			return nil, nil, fmt.Errorf("backtest: group %s: its runs have no time between them", key)
		}
		for op, rates := range summed {
			g.fsPlateau[op] = quantile(rates, 0.95)
		}
		if v, ok := o.FSPlateau[key]; ok {
			g.fsPlateau = map[string]float64{"read": v, "write": v}
		}
		g.months = g.end.Sub(g.start).Hours() / 24 / (365.25 / 12)
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil, skipped, fmt.Errorf("backtest: no group to replay as a fleet: %s", strings.Join(skipped, "; "))
	}
	return groups, skipped, nil
}

// fleetCases lays out, per group, the unmodified timeline in segments and
// the trials, onsets drawn once for both rule sets.
func fleetCases(groups []fleetGroup, o FleetOptions, warmup int) []*fleetCase {
	rng := rand.New(rand.NewPCG(o.Seed, 0x666c656574)) // "fleet"
	var cases []*fleetCase
	for gi := range groups {
		g := &groups[gi]
		values := make([][]float64, len(g.series))
		for si, s := range g.series {
			values[si] = s.replay
		}
		seg := time.Duration(segmentRuns) * g.period
		for start, n := g.start, 0; start.Before(g.end); start, n = start.Add(seg), n+1 {
			cases = append(cases, &fleetCase{
				id: fmt.Sprintf("g%d-r%d", gi, n), group: gi, values: values,
				from: start.Add(-time.Duration(warmup) * g.period), counted: start, to: minTime(start.Add(seg), g.end.Add(g.period)),
			})
		}
	}
	for gi := range groups {
		g := &groups[gi]
		first := g.start.Add(time.Duration(o.OnsetAfter) * g.period)
		last := g.end.Add(-time.Duration(o.InjectRuns) * g.period)
		if !last.After(first) {
			continue
		}
		for _, drop := range o.Drops {
			for t := 0; t < o.Trials; t++ {
				onset := first.Add(time.Duration(rng.Int64N(int64(last.Sub(first)))))
				c := &fleetCase{
					id: fmt.Sprintf("g%d-d%s-t%d", gi, dropKey(drop), t), group: gi, onset: onset, drop: drop,
					from: onset.Add(-time.Duration(warmup) * g.period), counted: onset,
				}
				to := onset
				var kth [3][]time.Time
				for _, s := range g.series {
					v := slices.Clone(s.replay)
					i := sort.Search(len(s.times), func(i int) bool { return !s.times[i].Before(onset) })
					for j := i; j < min(len(v), i+o.InjectRuns); j++ {
						v[j] *= 1 - drop
					}
					c.values = append(c.values, v)
					// A node counts towards the intervals when it runs
					// during the trial: three runs within its InjectRuns
					// intervals of the onset.
					if i+2 < len(s.times) && s.times[i+2].Sub(onset) <= time.Duration(o.InjectRuns)*g.period {
						for k := range 3 {
							kth[k] = append(kth[k], s.times[i+k])
						}
					}
					if end := i + o.InjectRuns - 1; end < len(s.times) {
						to = maxTime(to, s.times[end])
					} else {
						to = maxTime(to, s.times[len(s.times)-1])
					}
				}
				for k := range 3 {
					if len(kth[k]) > 0 {
						c.intervalEnd[k] = slices.MaxFunc(kth[k], func(a, b time.Time) int { return a.Compare(b) })
					}
				}
				// The window ends an interval after the last node's
				// last dropped run, and no earlier than interval 3.
				c.to = maxTime(to, c.intervalEnd[2]).Add(g.period)
				c.fall = c.makesFall(g)
				cases = append(cases, c)
			}
		}
	}
	return cases
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fleetFigures is what one rule set did on one fleet case.
type fleetFigures struct {
	// steps counted, and those with a file-system page firing.
	steps, fsPageSteps, fsPageEpisodes int
	// nodePageEpisodes counts the starts of node pages, over all nodes.
	nodePageEpisodes int
	// On trials: whether a file-system page fired at the onset, and
	// after how many intervals a new one started (0: none).
	firingAtOnset  bool
	detectedWithin int
	// notifications counts the first notifications of groups after the
	// onset (notificationLog), notificationsEarly those of them by the end
	// of interval 3: what the on-call sees as the incident starts. A page
	// that ends while the fall goes on and fires again is two
	// notifications of one incident.
	notifications, notificationsEarly int
	// notices are the first notifications counted, one per group: a
	// trial's are judged beside the unmodified series' to tell the drop's
	// from the file system's own (groupTruth.dropsNotifications).
	notices []notice
	// On unmodified segments: the real times of the counted steps at
	// which the file-system page fired, for the ground truth to judge.
	// On trials: whether it fired in the two intervals before the onset
	// (the onset is then not calm).
	firingAt         []time.Time
	firedBeforeOnset bool
	// The file-system page's episodes in the counted steps (on trials
	// after the onset): their starts are what the ground truth judges
	// false or true, and --trace-trials and --trace-pages write them.
	pageEpisodes []pageEpisode
}

// pageEpisode is one episode of the file-system page, in real time; end
// is zero while it fires at the end of the window. A continued one fired
// already in the warm-up: on an unmodified segment, the one before ends
// with it open.
type pageEpisode struct {
	start, end time.Time
	continued  bool
}

// evaluateFleet writes every case into a fresh store and evaluates the
// rules over it; returns the figures per case.
func evaluateFleet(ctx context.Context, groups []fleetGroup, cases []*fleetCase, files []string, notify *ruleeval.Notifier, o FleetOptions) ([]fleetFigures, error) {
	store := ruleeval.NewStore()
	var end time.Time
	for _, c := range cases {
		g := &groups[c.group]
		if err := writeFleetCase(store, g, c, o.Options); err != nil {
			return nil, err
		}
		end = maxTime(end, c.sim(g, c.to, o.Options))
	}
	rules, err := newEvaluator(files, store, o.Options)
	if err != nil {
		return nil, err
	}
	byID := map[string]int{}
	for i, c := range cases {
		byID[c.id] = i
	}
	figures := make([]fleetFigures, len(cases))
	type state struct {
		fsPage    bool
		nodePages map[string]bool
		notified  notificationLog
		firing    []labels.Labels
	}
	states := make([]state, len(cases))
	for i := range states {
		states[i] = state{nodePages: map[string]bool{}, notified: notificationLog{}}
	}
	for ts := simulationStart; ts.Before(end); ts = ts.Add(o.EvaluationInterval) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := rules.Eval(ctx, ts); err != nil {
			return nil, fmt.Errorf("at %s: %w", ts.Sub(simulationStart), err)
		}
		for i := range states {
			states[i].firing = states[i].firing[:0]
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				for _, a := range r.Active {
					if a.State != ruleeval.AlertFiring {
						continue
					}
					if i, ok := byID[a.Labels.Get("target")]; ok {
						states[i].firing = append(states[i].firing, a.Labels)
					}
				}
			}
		}
		for i, c := range cases {
			g := &groups[c.group]
			if ts.Before(c.sim(g, c.from, o.Options)) || !ts.Before(c.sim(g, c.to, o.Options)) {
				continue
			}
			st, f := &states[i], &figures[i]
			fsPage := false
			nodePages := map[string]bool{}
			for _, a := range st.firing {
				if a.Get("severity") != o.PageSeverity {
					continue
				}
				if inst := a.Get("instance"); inst != "" {
					nodePages[inst] = true
				} else {
					fsPage = true
				}
			}
			notified := notify.Route(st.firing)
			counted := c.sim(g, c.counted, o.Options)
			if ts.Before(counted) {
				// Warm-up: only the state at the onset matters.
				f.firingAtOnset = fsPage
				if fsPage && !c.onset.IsZero() && !ts.Before(c.sim(g, c.onset.Add(-2*g.period), o.Options)) {
					f.firedBeforeOnset = true
				}
				st.fsPage, st.nodePages = fsPage, nodePages
				st.notified.first(notified)
				continue
			}
			f.steps++
			if fsPage {
				f.fsPageSteps++
				if c.onset.IsZero() {
					f.firingAt = append(f.firingAt, c.real(g, ts, o.Options))
				}
				if !st.fsPage {
					f.fsPageEpisodes++
					f.pageEpisodes = append(f.pageEpisodes, pageEpisode{start: c.real(g, ts, o.Options)})
					if !c.onset.IsZero() && !f.firingAtOnset && f.detectedWithin == 0 {
						f.detectedWithin = -1 // after interval 3 unless below
						for k := 2; k >= 0; k-- {
							if e := c.intervalEnd[k]; !e.IsZero() && ts.Before(c.sim(g, e, o.Options).Add(o.EvaluationInterval)) {
								f.detectedWithin = k + 1
							}
						}
					}
				} else if f.steps == 1 {
					f.pageEpisodes = append(f.pageEpisodes, pageEpisode{start: c.real(g, ts, o.Options), continued: true})
				}
			}
			if n := len(f.pageEpisodes); !fsPage && st.fsPage && n > 0 && f.pageEpisodes[n-1].end.IsZero() {
				f.pageEpisodes[n-1].end = c.real(g, ts, o.Options)
			}
			for inst := range nodePages {
				if !st.nodePages[inst] {
					f.nodePageEpisodes++
				}
			}
			if firsts := st.notified.first(notified); len(firsts) > 0 {
				n := len(firsts)
				f.notifications += n
				for _, k := range firsts {
					// Matched across cases by the group less the case's
					// id, which its target label carries.
					f.notices = append(f.notices, notice{at: c.real(g, ts, o.Options), group: strings.ReplaceAll(k, c.id, "")})
				}
				if e := c.intervalEnd[2]; !e.IsZero() && ts.Before(c.sim(g, e, o.Options).Add(o.EvaluationInterval)) {
					f.notificationsEarly += n
				}
			}
			st.fsPage, st.nodePages = fsPage, nodePages
		}
	}
	return figures, nil
}

// notice is one first notification: when (real time) and of which
// notification group.
type notice struct {
	at    time.Time
	group string
}

// notificationLog is Alertmanager's notification log for the groups of
// one case: per group, the alerts its last notification sent as firing.
type notificationLog map[string]map[string]bool

// first says which groups send a first notification now (their keys),
// and logs what each group sends. As Alertmanager's DedupStage decides
// (notify/notify.go, needsUpdate): a group notifies when it has alerts to
// send that its last notification did not; that is its first
// notification when the log holds none firing (never notified, or all
// its alerts resolved since), else an update of the same one, which the
// on-call's pager files under the incident it opened. A group whose
// alerts are all inhibited sends nothing and keeps its log (the pipeline
// stops before the DedupStage), so it does not notify again when the
// inhibition ends. Its log clears when none of its alerts fires. (An
// alert that resolves while inhibited leaves Alertmanager's log as it
// was; here it clears it, so the count is, if anything, high.)
func (l notificationLog) first(groups []ruleeval.GroupAlerts) []string {
	firing := map[string]bool{}
	var firsts []string
	for _, g := range groups {
		firing[g.Key] = true
		logged := l[g.Key]
		news := false
		for _, a := range g.Sent {
			if !logged[a] {
				news = true
			}
		}
		if !news {
			continue
		}
		if len(logged) == 0 {
			firsts = append(firsts, g.Key)
		}
		sent := map[string]bool{}
		for _, a := range g.Sent {
			sent[a] = true
		}
		l[g.Key] = sent
	}
	for k := range l {
		if !firing[k] {
			delete(l, k)
		}
	}
	return firsts
}

// writeFleetCase writes what each node's daemon would have exported at
// every evaluation step of the case (the values after its latest run),
// and the others' load and the file system's aggregate plateau.
func writeFleetCase(store *ruleeval.Store, g *fleetGroup, c *fleetCase, o Options) error {
	simFrom, simTo := c.sim(g, c.from, o), c.sim(g, c.to, o)
	stale := time.Duration(staleIntervals) * g.period
	for si, s := range g.series {
		values := c.values[si]
		verdicts := make([]plateau.Verdicts, len(values))
		have := make([]bool, len(values))
		metrics := nodeMetrics(store, nodeParams{
			series: s, values: values, verdicts: verdicts,
			instance: c.id + "/" + s.Key, target: c.id,
			runTime: func(j int) time.Time { return c.sim(g, s.times[j], o) },
		}, o)
		j := -1
		for ts := simFrom; ts.Before(simTo); ts = ts.Add(o.EvaluationInterval) {
			t := c.real(g, ts, o)
			for j+1 < len(s.times) && !s.times[j+1].After(t) {
				j++
			}
			if j < 0 || t.Sub(s.times[j]) > stale {
				// Gone from the fleet: its series end here.
				if err := writeRun(metrics, -1, ts); err != nil {
					return fmt.Errorf("backtest: case %s, series %s: %w", c.id, s.Key, err)
				}
				continue
			}
			if !have[j] {
				verdicts[j] = plateau.RunVerdicts(values[:j+1], s.baseline)
				have[j] = true
			}
			if err := writeRun(metrics, j, ts); err != nil {
				return fmt.Errorf("backtest: case %s, series %s: %w", c.id, s.Key, err)
			}
		}
	}
	return writeFleetLoad(store, g, c, o)
}

// writeFleetLoad writes the file system's load from everyone but the
// probes, as a GPFS client's mmpmon counters would count it
// (plateau_gpfs_fs_{read,write}_bytes_total of a node "others"), at the
// rate the latest run of each direction saw, and the aggregate plateau
// the site writes (plateau:filesystem_plateau_bytes_per_second), so that
// the shipped utilization rules compute busy-or-broken from them. The
// counters get two samples per evaluation step, for rate()'s window.
func writeFleetLoad(store *ruleeval.Store, g *fleetGroup, c *fleetCase, o Options) error {
	simFrom, simTo := c.sim(g, c.from, o), c.sim(g, c.to, o)
	type sample struct {
		t    time.Time
		rate float64
	}
	byOp := map[string][]sample{}
	for si, s := range g.series {
		if g.others[si] == nil || g.fsPlateau[s.op] <= 0 {
			continue
		}
		for j, v := range g.others[si] {
			if !math.IsNaN(v) && !s.times[j].Before(c.from.Add(-g.period)) && s.times[j].Before(c.to) {
				byOp[s.op] = append(byOp[s.op], sample{s.times[j], v})
			}
		}
	}
	for _, op := range slices.Sorted(maps.Keys(byOp)) {
		samples := byOp[op]
		sort.Slice(samples, func(a, b int) bool { return samples[a].t.Before(samples[b].t) })
		counter := store.Series(labels.FromStrings("__name__", "plateau_gpfs_fs_"+op+"_bytes_total", "job", "backtest", "instance", "others", "filesystem", c.id))
		plateauSeries := store.Series(labels.FromStrings("__name__", "plateau:filesystem_plateau_bytes_per_second", "target", c.id, "op", op))
		total, k, step := 0.0, -1, o.EvaluationInterval/2
		for ts := simFrom; ts.Before(simTo); ts = ts.Add(step) {
			t := c.real(g, ts, o)
			for k+1 < len(samples) && !samples[k+1].t.After(t) {
				k++
			}
			if k >= 0 {
				total += samples[k].rate * step.Seconds()
			}
			if err := counter.Add(ts.UnixMilli(), total); err != nil {
				return fmt.Errorf("backtest: case %s, load: %w", c.id, err)
			}
			if (ts.Sub(simFrom)/step)%2 == 0 {
				if err := plateauSeries.Add(ts.UnixMilli(), g.fsPlateau[op]); err != nil {
					return fmt.Errorf("backtest: case %s, plateau: %w", c.id, err)
				}
			}
		}
	}
	return nil
}
