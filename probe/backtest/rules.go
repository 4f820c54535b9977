package backtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
)

// This file evaluates rule files over a memStore as a Prometheus server
// does (its rules package, Group.Eval and AlertingRule.Eval): groups in
// file order and rules in group order, each rule's query run by the PromQL
// engine at the evaluation time and its output appended before the next
// rule runs; recorded series that vanish get a staleness marker; an
// alert pends, fires after `for`, keeps firing for `keep_firing_for`, and
// is written to ALERTS and ALERTS_FOR_STATE as on a server that has run
// for long (its state restored). Prometheus's rules package is not used
// because it imports its notifier, and with it the configuration and
// service discovery of every cloud: they doubled the daemon's binary and
// its resident memory on every node, for this one command. The replay's
// tests hold this evaluator against promtool, which runs the real one.

// alertState is where an alert is in its life.
type alertState int

const (
	alertInactive alertState = iota
	alertPending
	alertFiring
)

func (s alertState) String() string {
	return [...]string{"inactive", "pending", "firing"}[s]
}

// resolvedRetention is how long Prometheus keeps a resolved alert.
const resolvedRetention = 15 * time.Minute

type alert struct {
	labels                                labels.Labels
	state                                 alertState
	activeAt, resolvedAt, keepFiringSince time.Time
	value                                 float64
}

// rule is one recording or alerting rule.
type rule struct {
	name          string
	record        bool
	query         string
	hold, keepFor time.Duration
	labels        labels.Labels
	// active are an alerting rule's alerts by the hash of their labels.
	active map[uint64]*alert
	// previous are the series the rule wrote at its last evaluation, by
	// their labels' bytes, to mark those it no longer writes as stale.
	previous map[string]labels.Labels
}

type ruleGroup struct {
	name        string
	file        string
	limit       int
	queryOffset time.Duration
	rules       []*rule
}

// ruleEvaluator evaluates the groups of some rule files over one store.
type ruleEvaluator struct {
	groups []*ruleGroup
	engine *promql.Engine
	store  *memStore
	logger *slog.Logger
}

// loadRuleGroups parses the rule files, in order, as Prometheus loads
// them.
func loadRuleGroups(files []string) ([]*ruleGroup, error) {
	p := parser.NewParser(parser.Options{})
	var out []*ruleGroup
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", f, errors.Join(errs...))
		}
		for _, g := range rgs.Groups {
			rg := &ruleGroup{name: g.Name, file: f, limit: g.Limit}
			if g.QueryOffset != nil {
				rg.queryOffset = time.Duration(*g.QueryOffset)
			}
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					return nil, fmt.Errorf("%s: group %s: %s: %w", f, g.Name, r.Alert+r.Record, err)
				}
				out := &rule{
					name: r.Alert, record: r.Record != "", query: expr.String(),
					hold: time.Duration(r.For), keepFor: time.Duration(r.KeepFiringFor),
					labels: labels.FromMap(r.Labels), active: map[uint64]*alert{},
				}
				if out.record {
					out.name = r.Record
				}
				rg.rules = append(rg.rules, out)
			}
			out = append(out, rg)
		}
	}
	return out, nil
}

// query runs one instant query as Prometheus's rule manager does: a
// scalar becomes a one-sample vector, a string is an error.
func (e *ruleEvaluator) query(ctx context.Context, qs string, ts time.Time) (promql.Vector, error) {
	q, err := e.engine.NewInstantQuery(ctx, e.store, nil, qs, ts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		return v, nil
	case promql.Scalar:
		return promql.Vector{promql.Sample{T: v.T, F: v.V, Metric: labels.EmptyLabels()}}, nil
	default:
		return nil, errors.New("rule result is not a vector or scalar")
	}
}

// eval evaluates every group at ts. The first rule that fails ends the
// replay: its figures would be wrong.
func (e *ruleEvaluator) eval(ctx context.Context, ts time.Time) error {
	for _, g := range e.groups {
		for _, r := range g.rules {
			var out promql.Vector
			var err error
			if r.record {
				out, err = e.evalRecording(ctx, g, r, ts)
			} else {
				out, err = e.evalAlerting(ctx, g, r, ts)
			}
			if err != nil {
				return fmt.Errorf("%s: group %s: rule %s: %w", g.file, g.name, r.name, err)
			}
			e.write(g, r, out, ts)
		}
	}
	return nil
}

// write appends a rule's output and marks the series it wrote last time
// but not now as stale. Samples the store refuses as out of order or
// duplicate are dropped, as Prometheus drops them.
func (e *ruleEvaluator) write(g *ruleGroup, r *rule, out promql.Vector, ts time.Time) {
	returned := make(map[string]labels.Labels, len(r.previous))
	var buf []byte
	for _, s := range out {
		if err := e.store.append(s.Metric, s.T, s.F); err != nil {
			e.logger.Debug("Rule evaluation result discarded", "rule", r.name, "err", err)
			continue
		}
		buf = s.Metric.Bytes(buf[:0])
		returned[string(buf)] = s.Metric
	}
	stale := math.Float64frombits(value.StaleNaN)
	for key, ls := range r.previous {
		if _, ok := returned[key]; !ok {
			_ = e.store.append(ls, timestamp.FromTime(ts.Add(-g.queryOffset)), stale)
		}
	}
	r.previous = returned
}

func (e *ruleEvaluator) evalRecording(ctx context.Context, g *ruleGroup, r *rule, ts time.Time) (promql.Vector, error) {
	vec, err := e.query(ctx, r.query, ts.Add(-g.queryOffset))
	if err != nil {
		return nil, err
	}
	lb := labels.NewBuilder(labels.EmptyLabels())
	for i := range vec {
		lb.Reset(vec[i].Metric)
		lb.Set(model.MetricNameLabel, r.name)
		r.labels.Range(func(l labels.Label) { lb.Set(l.Name, l.Value) })
		vec[i].Metric = lb.Labels()
	}
	if vec.ContainsSameLabelset() {
		return nil, errors.New("vector contains metrics with the same labelset after applying rule labels")
	}
	if g.limit > 0 && len(vec) > g.limit {
		return nil, fmt.Errorf("exceeded limit of %d with %d series", g.limit, len(vec))
	}
	return vec, nil
}

func (e *ruleEvaluator) evalAlerting(ctx context.Context, g *ruleGroup, r *rule, ts time.Time) (promql.Vector, error) {
	evalAt := ts.Add(-g.queryOffset)
	res, err := e.query(ctx, r.query, evalAt)
	if err != nil {
		return nil, err
	}
	found := make(map[uint64]*alert, len(res))
	lb := labels.NewBuilder(labels.EmptyLabels())
	for _, smpl := range res {
		lb.Reset(smpl.Metric)
		lb.Del(model.MetricNameLabel)
		r.labels.Range(func(l labels.Label) {
			lb.Set(l.Name, e.expandLabel(ctx, r, smpl, l.Value, ts))
		})
		lb.Set(labels.AlertName, r.name)
		ls := lb.Labels()
		h := ls.Hash()
		if _, dup := found[h]; dup {
			return nil, errors.New("vector contains metrics with the same labelset after applying alert labels")
		}
		found[h] = &alert{labels: ls, activeAt: ts, state: alertPending, value: smpl.F}
	}
	for h, a := range found {
		if old, ok := r.active[h]; ok && old.state != alertInactive {
			old.value = a.value
			continue
		}
		r.active[h] = a
	}
	var vec promql.Vector
	numActive := 0
	for h, a := range r.active {
		if _, ok := found[h]; !ok {
			keepFiring := false
			if a.state == alertFiring && r.keepFor > 0 {
				if a.keepFiringSince.IsZero() {
					a.keepFiringSince = ts
				}
				keepFiring = ts.Sub(a.keepFiringSince) < r.keepFor
			}
			if a.state == alertPending || (!a.resolvedAt.IsZero() && ts.Sub(a.resolvedAt) > resolvedRetention) {
				delete(r.active, h)
			}
			if a.state != alertInactive && !keepFiring {
				a.state = alertInactive
				a.resolvedAt = ts
			}
			if !keepFiring {
				continue
			}
		} else {
			a.keepFiringSince = time.Time{}
		}
		numActive++
		if a.state == alertPending && ts.Sub(a.activeAt) >= r.hold {
			a.state = alertFiring
		}
		vec = append(vec, r.alertSample(a, "ALERTS", evalAt, 1, true), r.alertSample(a, "ALERTS_FOR_STATE", evalAt, float64(a.activeAt.Unix()), false))
	}
	if g.limit > 0 && numActive > g.limit {
		r.active = map[uint64]*alert{}
		return nil, fmt.Errorf("exceeded limit of %d with %d alerts", g.limit, numActive)
	}
	return vec, nil
}

// alertSample is an alert's ALERTS (withState) or ALERTS_FOR_STATE sample.
func (r *rule) alertSample(a *alert, name string, ts time.Time, v float64, withState bool) promql.Sample {
	lb := labels.NewBuilder(r.labels)
	a.labels.Range(func(l labels.Label) { lb.Set(l.Name, l.Value) })
	lb.Set(model.MetricNameLabel, name)
	lb.Set(labels.AlertName, r.name)
	if withState {
		lb.Set("alertstate", a.state.String())
	}
	return promql.Sample{Metric: lb.Labels(), T: timestamp.FromTime(ts), F: v}
}

// expandLabel expands a label value's template with the alert's labels
// and value, as Prometheus does; plain text is itself.
func (e *ruleEvaluator) expandLabel(ctx context.Context, r *rule, smpl promql.Sample, text string, ts time.Time) string {
	if !strings.Contains(text, "{{") {
		return text
	}
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	tmpl := template.NewTemplateExpander(ctx, defs+text, "__alert_"+r.name,
		template.AlertTemplateData(smpl.Metric.Map(), nil, "", smpl),
		model.Time(timestamp.FromTime(ts)), template.QueryFunc(e.query), nil, nil)
	out, err := tmpl.Expand()
	if err != nil {
		// What Prometheus puts in the label, so the alert still counts.
		out = fmt.Sprintf("<error expanding template: %s>", err)
		e.logger.Warn("Expanding alert template failed", "rule", r.name, "err", err)
	}
	return out
}
