package backtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/ruleeval"
)

// The replay's rule evaluator against Prometheus's own (its rules package
// over a TSDB, what the replay ran before): the same cases, written the
// same way, and the same rule files give the same alerts in the same
// states at every evaluation. The rule files are the shipped and the
// reference rules, and a file of the semantics they rely on less (see its
// comment).
func TestRuleEvaluatorMatchesPrometheusRules(t *testing.T) {
	o := testOptions()
	o.Drops = []float64{0.2, 0.5}
	o.Trials = 3
	// Noisy enough that the shipped rules pend, fire and resolve on the
	// unmodified series too, not only on the trials.
	var input []prepared
	for i, key := range []string{"a/read", "b/write", "c/read"} {
		s := noisySeries(key, 140, uint64(11+i))
		for j := range s.Values {
			s.Values[j] *= math.Exp(0.25 * math.Sin(float64(j)/3))
		}
		p, err := prepare(s, o)
		if err != nil {
			t.Fatal(err)
		}
		input = append(input, p)
	}
	sets := map[string][]string{
		"shipped":   shippedRules,
		"reference": referenceRules,
		"semantics": {filepath.Join("testdata", "rule-semantics.yml")},
	}
	for name, files := range sets {
		t.Run(name, func(t *testing.T) {
			o := o
			if name == "semantics" {
				// Evaluations closer than the engine's 5m lookback, so a
				// recorded series that vanishes without its staleness
				// marker would still be read for minutes.
				o.EvaluationInterval = time.Minute
			}
			warmup, err := warmupRuns(files, o.Interval)
			if err != nil {
				t.Fatal(err)
			}
			cases := buildCases(input, o, warmup)
			compareWithPrometheusRules(t, input, cases, files, o)
		})
	}
}

// replaySetup is what both evaluators need: the cases written into a
// store, and the span of simulated time they cover.
type replaySetup struct {
	store      *ruleeval.Store
	start, end time.Time
	files      []string
	o          Options
}

func writeCases(tb testing.TB, input []prepared, cases []replayCase, files []string, o Options) replaySetup {
	tb.Helper()
	r := replaySetup{store: ruleeval.NewStore(), files: files, o: o}
	for i, c := range cases {
		if err := writeCase(r.store, input[c.series], c, o); err != nil {
			tb.Fatal(err)
		}
		if cs := c.at(c.from, o); i == 0 || cs.Before(r.start) {
			r.start = cs
		}
		if ce := c.at(c.to, o); ce.After(r.end) {
			r.end = ce
		}
	}
	return r
}

func (r replaySetup) engineOpts() promql.EngineOpts {
	return promql.EngineOpts{
		MaxSamples: 50_000_000, Timeout: time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return r.o.EvaluationInterval.Milliseconds() },
	}
}

// ours is the replay's evaluator over the setup's store.
func (r replaySetup) ours(tb testing.TB) *ruleeval.Evaluator {
	tb.Helper()
	groups, err := ruleeval.LoadRuleGroups(r.files)
	if err != nil {
		tb.Fatal(err)
	}
	return &ruleeval.Evaluator{Groups: groups, Store: r.store, Engine: promql.NewEngine(r.engineOpts()), Logger: slog.New(slog.DiscardHandler)}
}

// theirs copies the setup's samples into a TSDB and returns a rule
// manager's groups over it, in evaluation order, restored as on a
// long-running server.
func (r replaySetup) theirs(tb testing.TB) []*rules.Group {
	tb.Helper()
	ctx := context.Background()
	opts := tsdb.DefaultOptions()
	opts.MinBlockDuration = (2000 * 24 * time.Hour).Milliseconds()
	opts.MaxBlockDuration = opts.MinBlockDuration
	opts.WALSegmentSize = -1
	db, err := tsdb.Open(tb.TempDir(), nil, nil, opts, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	app := db.AppenderV2(ctx)
	if err := r.store.EachSample(func(ls labels.Labels, t int64, v float64) error {
		_, err := app.Append(0, ls, 0, t, v, nil, nil, storage.AOptions{})
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		tb.Fatal(err)
	}
	mgr := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(promql.NewEngine(r.engineOpts()), db),
		AppendableV2: db,
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.DiscardHandler),
	})
	loaded, errs := mgr.LoadGroups(r.o.EvaluationInterval, labels.EmptyLabels(), "", nil, false, r.files...)
	if len(errs) > 0 {
		tb.Fatal(errors.Join(errs...))
	}
	groups := inFileOrder(tb, loaded, r.files)
	for _, g := range groups {
		for _, r := range g.AlertingRules() {
			r.SetRestored(true)
		}
	}
	return groups
}

func compareWithPrometheusRules(t *testing.T, input []prepared, cases []replayCase, files []string, o Options) {
	ctx := context.Background()
	setup := writeCases(t, input, cases, files, o)
	ours, theirs := setup.ours(t), setup.theirs(t)
	steps, alertSteps := 0, 0
	for ts := setup.start; ts.Before(setup.end); ts = ts.Add(o.EvaluationInterval) {
		if err := ours.Eval(ctx, ts); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, g := range theirs {
			g.Eval(ctx, ts)
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					t.Fatalf("Prometheus: rule %s at %s: %v", r.Name(), ts.Sub(simulationStart), err)
				}
			}
			for _, r := range g.AlertingRules() {
				for _, a := range r.ActiveAlerts() {
					want = append(want, fmt.Sprintf("%s %s", a.State, a.Labels))
				}
			}
		}
		var got []string
		for _, g := range ours.Groups {
			for _, r := range g.Rules {
				for _, a := range r.Active {
					if a.State != ruleeval.AlertInactive {
						got = append(got, fmt.Sprintf("%s %s", a.State, a.Labels))
					}
				}
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("at %s the alerts differ:\nthe replay's evaluator:\n  %s\nPrometheus's rules package:\n  %s",
				ts.Sub(simulationStart), strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		steps++
		if len(want) > 0 {
			alertSteps++
		}
	}
	// A comparison of two silences proves nothing.
	if alertSteps < steps/20 {
		t.Fatalf("alerts were active at %d of %d evaluations: too few to compare the evaluators", alertSteps, steps)
	}
	t.Logf("%d evaluations, alerts active at %d, the same in both", steps, alertSteps)
}

// The replay's evaluator beside Prometheus's rules package over a TSDB,
// on the shipped rules: each iteration writes the cases and evaluates
// every step, as one rule set of a backtest does.
//
//	go test -run '^$' -bench RuleEvaluation -benchmem -count 5 ./probe/backtest/
func BenchmarkRuleEvaluation(b *testing.B) {
	o := testOptions()
	o.Trials = 5
	var input []prepared
	for i, key := range []string{"a/read", "b/write"} {
		p, err := prepare(noisySeries(key, 200, uint64(21+i)), o)
		if err != nil {
			b.Fatal(err)
		}
		input = append(input, p)
	}
	warmup, err := warmupRuns(shippedRules, o.Interval)
	if err != nil {
		b.Fatal(err)
	}
	cases := buildCases(input, o, warmup)
	ctx := context.Background()
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			setup := writeCases(b, input, cases, shippedRules, o)
			ours := setup.ours(b)
			for ts := setup.start; ts.Before(setup.end); ts = ts.Add(o.EvaluationInterval) {
				if err := ours.Eval(ctx, ts); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		for b.Loop() {
			setup := writeCases(b, input, cases, shippedRules, o)
			theirs := setup.theirs(b)
			for ts := setup.start; ts.Before(setup.end); ts = ts.Add(o.EvaluationInterval) {
				for _, g := range theirs {
					g.Eval(ctx, ts)
				}
			}
		}
	})
}

// inFileOrder returns the rule manager's groups in the order of the files
// and of the groups in each, which is the order Prometheus evaluates them.
func inFileOrder(t testing.TB, loaded map[string]*rules.Group, files []string) []*rules.Group {
	t.Helper()
	var out []*rules.Group
	p := parser.NewParser(parser.Options{})
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		for _, g := range rgs.Groups {
			for _, lg := range loaded {
				if lg.Name() == g.Name && lg.File() == f {
					out = append(out, lg)
				}
			}
		}
	}
	if len(out) != len(loaded) {
		t.Fatalf("loaded %d rule groups, ordered %d", len(loaded), len(out))
	}
	return out
}
