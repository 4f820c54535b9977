package backtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/backtest/ruleeval"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/groundtruth"
)

// Options say how series are replayed.
type Options struct {
	// Interval is the simulated probe interval: run i of a series is
	// exported at i*Interval. EvaluationInterval is both the scrape and
	// the rule evaluation interval.
	Interval, EvaluationInterval time.Duration
	// BaselineRuns runs at the start of each series are its
	// characterization (median and spread, as `characterize --runs`
	// writes them); the rest is replayed.
	BaselineRuns int
	// Drops are the injected drop sizes (0.5 multiplies the runs by 0.5),
	// each InjectRuns runs long, Trials times per series and drop, with
	// onsets drawn with Seed from OnsetAfter runs after the baseline to
	// the last run that leaves InjectRuns runs.
	Drops              []float64
	InjectRuns, Trials int
	OnsetAfter         int
	Seed               uint64
	// WarmupRuns runs before each onset are replayed with the trial, so
	// that the rules' windows, `for` and `keep_firing_for` are in the
	// state they would be; 0 derives it from the rules.
	WarmupRuns int
	// PageSeverity is the severity label of the alerts that page.
	PageSeverity string
	// Unit is the unit of the series' values once multiplied by Scale
	// (probe.UnitBytesPerSecond: a MiB/s column has Scale 1<<20).
	Unit  string
	Scale float64
	// Current and Reference are the rule files of the two rule sets
	// compared on the same trials.
	Current, Reference []string
	Logger             *slog.Logger
}

// RuleSetCurrent and RuleSetReference name the two rule sets in reports.
const (
	RuleSetCurrent   = "current"
	RuleSetReference = "reference"
)

// simulationStart is the simulated time of every series' first replayed
// run: any fixed instant works, as nothing compares it with the clock.
var simulationStart = time.Unix(1_000_000_000, 0).UTC()

// replayCase is what one rule set evaluates on one stretch of a series:
// the whole unmodified series, or a trial's window with its drop.
type replayCase struct {
	id     string
	series int
	// values are the replayed results of the whole series, the trial's
	// drop applied; from and to bound the runs written (to exclusive),
	// counted from the first run that is counted in the figures: the runs
	// before it only bring the rules to the state they would be in.
	values            []float64
	from, counted, to int
	// onset is the trial's first dropped run, -1 on an unmodified series.
	onset int
	drop  float64
}

// at is when run i of the case is exported in simulated time. Every
// case's window starts at simulationStart, so that all are evaluated at
// once over a short span instead of each at its own place in a long one
// (the cost of each query grows with the length of each series): the
// rules read only the window, and the change statistic, which the daemon
// computes from its own history, from the whole history before it.
func (c replayCase) at(i int, o Options) time.Time {
	return simulationStart.Add(time.Duration(i-c.from) * o.Interval)
}

// segmentRuns is the length of the segments an unmodified series is
// replayed in, each after its own warm-up.
const segmentRuns = 60

// prepared is a series ready to replay.
type prepared struct {
	Series
	baseline, spread float64
	op               string
	replay           []float64
	times            []time.Time
	months           float64
}

// Run replays the series through both rule sets and reports the figures.
func Run(ctx context.Context, input []Series, o Options) (*Report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	var series []prepared
	var skipped []string
	minRuns := o.BaselineRuns + o.OnsetAfter + o.InjectRuns + 1
	for _, s := range input {
		if len(s.Values) < minRuns {
			skipped = append(skipped, fmt.Sprintf("%s (%d runs, fewer than the %d a trial needs)", s.Key, len(s.Values), minRuns))
			continue
		}
		p, err := prepare(s, o)
		if err != nil {
			return nil, err
		}
		series = append(series, p)
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("backtest: no series to replay: %s", strings.Join(skipped, "; "))
	}
	warmup := o.WarmupRuns
	if warmup == 0 {
		w1, err := warmupRuns(o.Current, o.Interval)
		if err != nil {
			return nil, err
		}
		w2, err := warmupRuns(o.Reference, o.Interval)
		if err != nil {
			return nil, err
		}
		warmup = max(w1, w2)
	}
	cases := buildCases(series, o, warmup)

	all := make([]int, len(cases))
	for i := range all {
		all[i] = i
	}
	type job struct {
		set   string
		files []string
		cases []int
	}
	var jobs []job
	for _, set := range []string{RuleSetCurrent, RuleSetReference} {
		files := map[string][]string{RuleSetCurrent: o.Current, RuleSetReference: o.Reference}[set]
		jobs = append(jobs, job{set, files, all})
	}
	perSet := map[string][]caseFigures{RuleSetCurrent: make([]caseFigures, len(cases)), RuleSetReference: make([]caseFigures, len(cases))}
	errs := make([]error, len(jobs))
	// At most two evaluations at once: each is single-threaded and holds
	// its own store, so two use two cores without doubling peak memory more.
	sem := make(chan struct{}, 2)
	done := make(chan struct{})
	for ji, j := range jobs {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- struct{}{} }()
			subset := make([]replayCase, len(j.cases))
			for k, ci := range j.cases {
				subset[k] = cases[ci]
			}
			figs, err := evaluate(ctx, series, subset, j.files, o)
			if err != nil {
				errs[ji] = fmt.Errorf("backtest: rule set %s (%s): %w", j.set, strings.Join(j.files, ", "), err)
				return
			}
			for k, ci := range j.cases {
				perSet[j.set][ci] = figs[k]
			}
		}()
	}
	for range jobs {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	report := &Report{Options: o, WarmupRuns: warmup, Skipped: skipped}
	report.build(series, cases, perSet, o)
	return report, nil
}

func (o Options) check() error {
	switch {
	case o.Interval <= 0 || o.EvaluationInterval <= 0:
		return errors.New("backtest: --interval and --evaluation-interval must be positive")
	case o.EvaluationInterval > o.Interval:
		return fmt.Errorf("backtest: --evaluation-interval %s is longer than the probe --interval %s", o.EvaluationInterval, o.Interval)
	case o.BaselineRuns < 1:
		return errors.New("backtest: --baseline-runs must be at least 1")
	case o.InjectRuns < 1 || o.Trials < 0:
		return errors.New("backtest: --inject-runs must be at least 1 and --trials not negative")
	case len(o.Current) == 0 || len(o.Reference) == 0:
		return errors.New("backtest: --rules and --reference-rules need at least one file each")
	}
	for _, d := range o.Drops {
		if !(d > 0 && d < 1) {
			return fmt.Errorf("backtest: --inject-drops: %v is not a drop between 0 and 1 (0.3 = 30%% lower)", d)
		}
	}
	return nil
}

// prepare characterizes a series from its first runs as `characterize`
// would (median, spread) and keeps the rest to replay.
func prepare(s Series, o Options) (prepared, error) {
	p := prepared{Series: s, op: opOf(s.Key)}
	base := make([]float64, o.BaselineRuns)
	for i := range base {
		base[i] = s.Values[i] * o.Scale
	}
	p.baseline = groundtruth.Median(base)
	if !(p.baseline > 0) {
		return p, fmt.Errorf("backtest: series %s: the median of its first %d runs is %v, no plateau", s.Key, o.BaselineRuns, p.baseline)
	}
	p.spread = (slices.Max(base) - slices.Min(base)) / (2 * p.baseline)
	for _, v := range s.Values[o.BaselineRuns:] {
		p.replay = append(p.replay, v*o.Scale)
	}
	p.times = s.Times[o.BaselineRuns:]
	p.months = p.times[len(p.times)-1].Sub(p.times[0]).Hours() / 24 / (365.25 / 12)
	return p, nil
}

// opOf takes the op from a series key that ends in one ("…/ior/read"),
// and calls anything else a read.
func opOf(key string) string {
	parts := strings.Split(key, "/")
	last := parts[len(parts)-1]
	if slices.Contains(probe.OpsOf(probe.KindSequential), last) {
		return last
	}
	return "read"
}

// buildCases lays out the unmodified series and every trial. Onsets are
// drawn once, so both rule sets see the same trials.
func buildCases(series []prepared, o Options, warmup int) []replayCase {
	rng := rand.New(rand.NewPCG(o.Seed, 0x706c6174656175)) // "plateau"
	var cases []replayCase
	for si, s := range series {
		for start := 0; start < len(s.replay); start += segmentRuns {
			cases = append(cases, replayCase{
				id: fmt.Sprintf("s%d-r%d", si, start), series: si, values: s.replay,
				from: max(0, start-warmup), counted: start, to: min(len(s.replay), start+segmentRuns), onset: -1,
			})
		}
	}
	for si, s := range series {
		first, last := o.OnsetAfter, len(s.replay)-o.InjectRuns
		for _, drop := range o.Drops {
			for t := 0; t < o.Trials; t++ {
				onset := first + rng.IntN(last-first+1)
				values := slices.Clone(s.replay)
				for j := onset; j < onset+o.InjectRuns; j++ {
					values[j] *= 1 - drop
				}
				cases = append(cases, replayCase{
					id:     fmt.Sprintf("s%d-d%s-t%d", si, strconv.FormatFloat(drop, 'f', -1, 64), t),
					series: si, values: values, from: max(0, onset-warmup), counted: onset, to: onset + o.InjectRuns,
					onset: onset, drop: drop,
				})
			}
		}
	}
	return cases
}

// warmupRuns is how many runs before an onset decide the rules' state at
// it: the longest range or offset through which a rule reads the metrics
// the replay writes (directly or through recording rules of them), plus
// the longest `for` and `keep_firing_for`, in runs, and two runs more.
// Rules on metrics the replay does not write (InfiniBand, NVMe…) read
// nothing and do not count, or their week-long windows would make every
// trial a week long.
func warmupRuns(files []string, interval time.Duration) (int, error) {
	written := map[string]bool{}
	for _, name := range writtenMetrics() {
		written[name] = true
	}
	var longest, hold time.Duration
	p := parser.NewParser(parser.Options{})
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return 0, fmt.Errorf("backtest: %s: %w", f, errors.Join(errs...))
		}
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					return 0, fmt.Errorf("backtest: %s: %s: %w", f, r.Alert+r.Record, err)
				}
				reads, relevant := lookback(expr, written)
				if !relevant {
					continue
				}
				if r.Record != "" {
					written[r.Record] = true
				}
				longest = max(longest, reads)
				hold = max(hold, time.Duration(r.For)+time.Duration(r.KeepFiringFor))
			}
		}
	}
	return int((longest+hold+interval-1)/interval) + 2, nil
}

// lookback is how far back in time an expression reads the metrics in
// written, and whether it reads any.
func lookback(expr parser.Expr, written map[string]bool) (time.Duration, bool) {
	var longest time.Duration
	relevant := false
	selects := func(vs *parser.VectorSelector) bool {
		if vs.Name != "" {
			return written[vs.Name]
		}
		return true // a selector without a name may select anything
	}
	var walk func(n parser.Node, offset time.Duration)
	walk = func(n parser.Node, offset time.Duration) {
		switch e := n.(type) {
		case *parser.MatrixSelector:
			vs := e.VectorSelector.(*parser.VectorSelector)
			if selects(vs) {
				relevant = true
				longest = max(longest, offset+vs.OriginalOffset+e.Range)
			}
			return
		case *parser.VectorSelector:
			if selects(e) {
				relevant = true
				longest = max(longest, offset+e.OriginalOffset+5*time.Minute)
			}
			return
		case *parser.SubqueryExpr:
			walk(e.Expr, offset+e.OriginalOffset+e.Range)
			return
		}
		for _, c := range parser.Children(n) {
			walk(c, offset)
		}
	}
	walk(expr, 0)
	return longest, relevant
}

// writtenMetrics are the names of the series writeCase writes.
func writtenMetrics() []string {
	return []string{
		"plateau_probe_success", "plateau_probe_in_progress", "plateau_probe_interval_seconds",
		"plateau_probe_last_run_timestamp_seconds", "plateau_probe_last_success_timestamp_seconds", "plateau_probe_runs_total",
		"plateau_probe_throughput_bytes_per_second", "plateau_baseline_throughput_bytes_per_second",
		"plateau_probe_operations_per_second", "plateau_baseline_operations_per_second",
		"plateau_probe_ratio", "plateau_probe_change_ratio", "plateau_probe_change_noise_ratio",
		"plateau_probe_change_fast_ratio", "plateau_probe_change_fast_noise_ratio", "plateau_probe_change_low_runs",
		"plateau_probe_regression", "plateau_probe_ratio_median_3_runs", "plateau_probe_ratio_median_24_runs",
		"plateau_probe_target_regression", "plateau_probe_target_low_score", "plateau_probe_target_normal_ratio", "plateau_probe_target_below_warning", "plateau_probe_target_below_plateau", "plateau_probe_failing", "plateau_probe_not_run",
		"plateau_alert_threshold_ratio", "plateau_probe_hung", "plateau_probe_abandoned_workers", "up",
	}
}

// caseFigures is what one rule set did on one case, in evaluation steps.
type caseFigures struct {
	steps, pageSteps, warningSteps, pageEpisodes int
	// pageSpans are the [start, end) run indexes of the page episodes,
	// for the chart; only kept on unmodified series.
	pageSpans [][2]float64
	// detected is set when a page started at or after the onset while no
	// page was firing just before it; delayRuns counts the run during
	// which it started as 1.
	firingAtOnset bool
	detected      bool
	delayRuns     int
}

// evaluate writes every case into a fresh store, evaluates the rule files
// over the whole simulated time and returns what the alerts did per case.
func evaluate(ctx context.Context, series []prepared, cases []replayCase, files []string, o Options) ([]caseFigures, error) {
	store := ruleeval.NewStore()
	end := time.Time{}
	start := time.Time{}
	for i, c := range cases {
		if err := writeCase(store, series[c.series], c, o); err != nil {
			return nil, err
		}
		cs, ce := c.at(c.from, o), c.at(c.to, o)
		if i == 0 || cs.Before(start) {
			start = cs
		}
		if ce.After(end) {
			end = ce
		}
	}

	rules, err := newEvaluator(files, store, o)
	if err != nil {
		return nil, err
	}

	byID := map[string]int{}
	figures := make([]caseFigures, len(cases))
	for i, c := range cases {
		byID[c.id] = i
	}
	page := make([]bool, len(cases))
	prevPage := make([]bool, len(cases))
	warning := make([]bool, len(cases))
	for ts := start; ts.Before(end); ts = ts.Add(o.EvaluationInterval) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := rules.Eval(ctx, ts); err != nil {
			return nil, fmt.Errorf("at %s: %w", ts.Sub(simulationStart), err)
		}
		clear(page)
		clear(warning)
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				for _, a := range r.Active {
					if a.State != ruleeval.AlertFiring {
						continue
					}
					id := a.Labels.Get("target")
					if id == "" {
						id = a.Labels.Get("instance")
					}
					i, ok := byID[id]
					if !ok {
						continue
					}
					switch a.Labels.Get("severity") {
					case o.PageSeverity:
						page[i] = true
					case "warning":
						warning[i] = true
					}
				}
			}
		}
		for i, c := range cases {
			if ts.Before(c.at(c.from, o)) || !ts.Before(c.at(c.to, o)) {
				continue
			}
			f := &figures[i]
			counted := c.at(c.counted, o)
			if ts.Before(counted) {
				// Warm-up: only the state just before the counted runs matters.
				f.firingAtOnset = page[i]
				prevPage[i] = page[i]
				continue
			}
			run := float64(c.from) + float64(ts.Sub(c.at(c.from, o)))/float64(o.Interval)
			f.steps++
			if page[i] {
				f.pageSteps++
				if !prevPage[i] {
					f.pageEpisodes++
					if c.onset < 0 {
						f.pageSpans = append(f.pageSpans, [2]float64{run, run})
					}
				}
				if c.onset < 0 {
					if len(f.pageSpans) == 0 { // firing since before the segment
						f.pageSpans = append(f.pageSpans, [2]float64{run, run})
					}
					f.pageSpans[len(f.pageSpans)-1][1] = run + float64(o.EvaluationInterval)/float64(o.Interval)
				}
			}
			if warning[i] {
				f.warningSteps++
			}
			if c.onset >= 0 && page[i] && !prevPage[i] && !f.firingAtOnset && !f.detected {
				f.detected = true
				f.delayRuns = int(ts.Sub(counted)/o.Interval) + 1
			}
			prevPage[i] = page[i]
		}
	}
	return figures, nil
}

// writeCase appends the metrics the daemon would have exported for each
// run of the case, one sample per evaluation step while the run is the
// latest.
func writeCase(store *ruleeval.Store, s prepared, c replayCase, o Options) error {
	// The daemon's verdicts after each run, from the same function the
	// store exports them with (plateau.RunVerdicts), over every run before.
	verdicts := make([]plateau.Verdicts, len(c.values))
	for j := c.from; j < c.to; j++ {
		verdicts[j] = plateau.RunVerdicts(c.values[:j+1], s.baseline)
	}
	metrics := nodeMetrics(store, nodeParams{
		series: s, values: c.values, verdicts: verdicts, instance: c.id, target: c.id,
		runTime: func(j int) time.Time { return c.at(j, o) },
	}, o)
	for j := c.from; j < c.to; j++ {
		for ts := c.at(j, o); ts.Before(c.at(j+1, o)); ts = ts.Add(o.EvaluationInterval) {
			if err := writeRun(metrics, j, ts); err != nil {
				return fmt.Errorf("backtest: case %s: %w", c.id, err)
			}
		}
	}
	return nil
}

// metric is one series the daemon exports about a node's probe, and how
// its value follows from the run that is the latest.
type metric struct {
	ls    labels.Labels
	value func(run int) (float64, bool)
	// series is where the metric's samples go; written says whether the
	// latest step wrote one.
	series  *ruleeval.StoreSeries
	written bool
}

// nodeParams say what one node's daemon exports about one series.
type nodeParams struct {
	series   prepared
	values   []float64
	verdicts []plateau.Verdicts
	// instance and target label the node's metrics.
	instance, target string
	// runTime is when run j ended, the daemon's last-run timestamp.
	runTime func(j int) time.Time
}

// nodeMetrics are the series a node's daemon exports about its probe of
// one op, as functions of the latest run.
func nodeMetrics(store *ruleeval.Store, p nodeParams, o Options) []*metric {
	s, verdicts := p.series, p.verdicts
	kind := probe.KindSequential
	resultName, baselineName := "plateau_probe_throughput_bytes_per_second", "plateau_baseline_throughput_bytes_per_second"
	if o.Unit == probe.UnitOpsPerSecond {
		kind = probe.KindMetadata
		resultName, baselineName = "plateau_probe_operations_per_second", "plateau_baseline_operations_per_second"
	}
	base := func(name string, extra ...string) labels.Labels {
		kv := []string{"__name__", name, "job", "backtest", "instance", p.instance, "target", p.target, "probe", "probe", "kind", kind}
		return labels.FromStrings(append(kv, extra...)...)
	}
	perTarget := func(name string, extra ...string) labels.Labels {
		kv := []string{"__name__", name, "job", "backtest", "instance", p.instance, "target", p.target}
		return labels.FromStrings(append(kv, extra...)...)
	}
	change := func(f func(plateau.Change) float64) func(int) (float64, bool) {
		return func(j int) (float64, bool) { return f(verdicts[j].Change), verdicts[j].HasChange }
	}
	constant := func(v float64) func(int) (float64, bool) { return func(int) (float64, bool) { return v, true } }
	at := func(run int) float64 { return float64(p.runTime(run).Unix()) }
	metrics := []*metric{
		{ls: base("plateau_probe_success"), value: constant(1)},
		{ls: base("plateau_probe_in_progress"), value: constant(0)},
		{ls: base("plateau_probe_interval_seconds"), value: constant(o.Interval.Seconds())},
		{ls: base("plateau_probe_last_run_timestamp_seconds"), value: func(j int) (float64, bool) { return at(j), true }},
		{ls: base("plateau_probe_last_success_timestamp_seconds"), value: func(j int) (float64, bool) { return at(j), true }},
		// Every replayed run succeeds, on time.
		{ls: base("plateau_probe_failing"), value: constant(0)},
		{ls: base("plateau_probe_not_run"), value: constant(0)},
		{ls: base("plateau_probe_runs_total", "result", "success"), value: func(j int) (float64, bool) { return float64(o.BaselineRuns + j + 1), true }},
		{ls: base(resultName, "op", s.op), value: func(j int) (float64, bool) { return p.values[j], true }},
		{ls: base(baselineName, "op", s.op), value: constant(s.baseline)},
		{ls: base("plateau_probe_ratio", "op", s.op), value: func(j int) (float64, bool) { return p.values[j] / s.baseline, true }},
		{ls: base("plateau_probe_change_ratio", "op", s.op), value: change(func(c plateau.Change) float64 { return c.Ratio })},
		{ls: base("plateau_probe_change_noise_ratio", "op", s.op), value: change(func(c plateau.Change) float64 { return c.Noise })},
		{ls: base("plateau_probe_change_fast_ratio", "op", s.op), value: change(func(c plateau.Change) float64 { return c.FastRatio })},
		{ls: base("plateau_probe_change_fast_noise_ratio", "op", s.op), value: change(func(c plateau.Change) float64 { return c.FastNoise })},
		{ls: base("plateau_probe_change_low_runs", "op", s.op), value: change(func(c plateau.Change) float64 { return float64(c.LowRuns) })},
		{ls: base("plateau_probe_regression", "op", s.op), value: func(j int) (float64, bool) { return b2f(verdicts[j].Regression), verdicts[j].HasChange }},
		{ls: base("plateau_probe_ratio_median_3_runs", "op", s.op), value: func(j int) (float64, bool) { return verdicts[j].RecentMedian, verdicts[j].HasRecent }},
		{ls: base("plateau_probe_ratio_median_24_runs", "op", s.op), value: func(j int) (float64, bool) { return verdicts[j].LongMedian, verdicts[j].HasLong }},
		// The per-target figures of the verdicts, of this one op.
		{ls: perTarget("plateau_probe_target_regression"), value: func(j int) (float64, bool) { return b2f(verdicts[j].Regression), verdicts[j].HasChange }},
		{ls: perTarget("plateau_probe_target_low_score"), value: func(j int) (float64, bool) { return verdicts[j].LowScore, verdicts[j].HasLowScore }},
		{ls: perTarget("plateau_probe_target_normal_ratio"), value: func(j int) (float64, bool) { return verdicts[j].NormalRatio, verdicts[j].HasLowScore }},
		{ls: perTarget("plateau_probe_target_below_warning"), value: func(j int) (float64, bool) {
			return b2f(verdicts[j].RecentMedian < probe.DefaultWarningRatio), verdicts[j].HasRecent
		}},
		{ls: perTarget("plateau_probe_target_below_plateau"), value: func(j int) (float64, bool) {
			return b2f(verdicts[j].LongMedian < probe.DefaultWarningRatio), verdicts[j].HasLong
		}},
		{ls: perTarget("plateau_alert_threshold_ratio", "probe", "probe", "severity", "warning"), value: constant(probe.DefaultWarningRatio)},
		{ls: perTarget("plateau_alert_threshold_ratio", "probe", "probe", "severity", "critical"), value: constant(probe.DefaultCriticalRatio)},
		{ls: perTarget("plateau_probe_hung"), value: constant(0)},
		{ls: perTarget("plateau_probe_abandoned_workers"), value: constant(0)},
		{ls: labels.FromStrings("__name__", "up", "job", "backtest", "instance", p.instance), value: constant(1)},
	}
	for _, m := range metrics {
		m.series = store.Series(m.ls)
	}
	return metrics
}

// writeRun appends, at ts, the value each metric has after run j, or
// none with j < 0 (the node is gone). A metric written at the step
// before but not now gets a staleness marker, as Prometheus marks a
// series that vanishes from a scrape, so that it ends here whatever the
// engine's lookback.
func writeRun(metrics []*metric, j int, ts time.Time) error {
	stale := math.Float64frombits(value.StaleNaN)
	for _, m := range metrics {
		v, ok := 0.0, false
		if j >= 0 {
			v, ok = m.value(j)
		}
		if !ok || math.IsNaN(v) {
			if m.written {
				if err := m.series.Add(ts.UnixMilli(), stale); err != nil {
					return err
				}
			}
			m.written = false
			continue
		}
		if err := m.series.Add(ts.UnixMilli(), v); err != nil {
			return err
		}
		m.written = true
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newEvaluator loads the rule files and evaluates them over store as
// Prometheus would at o.EvaluationInterval: the single-node and the fleet
// backtests run their rules through the same engine settings.
func newEvaluator(files []string, store *ruleeval.Store, o Options) (*ruleeval.Evaluator, error) {
	groups, err := ruleeval.LoadRuleGroups(files)
	if err != nil {
		return nil, err
	}
	logger := o.Logger
	if logger == nil {
		logger = discardLogger()
	}
	return &ruleeval.Evaluator{
		Groups: groups,
		Store:  store,
		Logger: logger,
		Engine: promql.NewEngine(promql.EngineOpts{
			MaxSamples:               50_000_000,
			Timeout:                  5 * time.Minute,
			NoStepSubqueryIntervalFn: func(int64) int64 { return o.EvaluationInterval.Milliseconds() },
			// Two evaluation intervals: a rule that reads its own output
			// of the previous evaluation (an alert's ALERTS) sees it, as
			// on a Prometheus evaluating at its default 1m. At 5m, the
			// default lookback (also 5m) leaves out the sample exactly
			// one step old. The replayed series are written at every
			// step, so nothing else reads further back.
			LookbackDelta:        2 * o.EvaluationInterval,
			EnableAtModifier:     true,
			EnableNegativeOffset: true,
		}),
	}, nil
}
