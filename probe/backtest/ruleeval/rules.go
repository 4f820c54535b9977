package ruleeval

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

// AlertState is where an alert is in its life.
type AlertState int

const (
	AlertInactive AlertState = iota
	AlertPending
	AlertFiring
)

func (s AlertState) String() string {
	return [...]string{"inactive", "pending", "firing"}[s]
}

// resolvedRetention is how long Prometheus keeps a resolved alert.
const resolvedRetention = 15 * time.Minute

type Alert struct {
	Labels                                labels.Labels
	State                                 AlertState
	activeAt, resolvedAt, keepFiringSince time.Time
	value                                 float64
}

// Rule is one recording or alerting Rule.
type Rule struct {
	name          string
	record        bool
	query         string
	hold, keepFor time.Duration
	labels        labels.Labels
	// Active are an alerting rule's alerts by the hash of their labels.
	Active map[uint64]*Alert
	// previous are the series the rule wrote at its last evaluation, by
	// their labels' bytes, to mark those it no longer writes as stale.
	previous map[string]labels.Labels
}

type Group struct {
	name        string
	file        string
	limit       int
	queryOffset time.Duration
	Rules       []*Rule
}

// Evaluator evaluates the groups of some rule files over one store.
type Evaluator struct {
	Groups []*Group
	Engine *promql.Engine
	Store  *Store
	Logger *slog.Logger
}

// LoadRuleGroups parses the rule files, in order, as Prometheus loads
// them.
func LoadRuleGroups(files []string) ([]*Group, error) {
	p := parser.NewParser(parser.Options{})
	var out []*Group
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", f, errors.Join(errs...))
		}
		for _, g := range rgs.Groups {
			rg := &Group{name: g.Name, file: f, limit: g.Limit}
			if g.QueryOffset != nil {
				rg.queryOffset = time.Duration(*g.QueryOffset)
			}
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					return nil, fmt.Errorf("%s: group %s: %s: %w", f, g.Name, r.Alert+r.Record, err)
				}
				out := &Rule{
					name: r.Alert, record: r.Record != "", query: expr.String(),
					hold: time.Duration(r.For), keepFor: time.Duration(r.KeepFiringFor),
					labels: labels.FromMap(r.Labels), Active: map[uint64]*Alert{},
				}
				if out.record {
					out.name = r.Record
				}
				rg.Rules = append(rg.Rules, out)
			}
			out = append(out, rg)
		}
	}
	return out, nil
}

// query runs one instant query as Prometheus's rule manager does: a
// scalar becomes a one-sample vector, a string is an error.
func (e *Evaluator) query(ctx context.Context, qs string, ts time.Time) (promql.Vector, error) {
	q, err := e.Engine.NewInstantQuery(ctx, e.Store, nil, qs, ts)
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

// Eval evaluates every group at ts. The first rule that fails ends the
// replay: its figures would be wrong.
func (e *Evaluator) Eval(ctx context.Context, ts time.Time) error {
	for _, g := range e.Groups {
		for _, r := range g.Rules {
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
func (e *Evaluator) write(g *Group, r *Rule, out promql.Vector, ts time.Time) {
	returned := make(map[string]labels.Labels, len(r.previous))
	var buf []byte
	for _, s := range out {
		if err := e.Store.Append(s.Metric, s.T, s.F); err != nil {
			e.Logger.Debug("Rule evaluation result discarded", "rule", r.name, "err", err)
			continue
		}
		buf = s.Metric.Bytes(buf[:0])
		returned[string(buf)] = s.Metric
	}
	stale := math.Float64frombits(value.StaleNaN)
	for key, ls := range r.previous {
		if _, ok := returned[key]; !ok {
			_ = e.Store.Append(ls, timestamp.FromTime(ts.Add(-g.queryOffset)), stale)
		}
	}
	r.previous = returned
}

func (e *Evaluator) evalRecording(ctx context.Context, g *Group, r *Rule, ts time.Time) (promql.Vector, error) {
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

func (e *Evaluator) evalAlerting(ctx context.Context, g *Group, r *Rule, ts time.Time) (promql.Vector, error) {
	evalAt := ts.Add(-g.queryOffset)
	res, err := e.query(ctx, r.query, evalAt)
	if err != nil {
		return nil, err
	}
	found := make(map[uint64]*Alert, len(res))
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
		found[h] = &Alert{Labels: ls, activeAt: ts, State: AlertPending, value: smpl.F}
	}
	for h, a := range found {
		if old, ok := r.Active[h]; ok && old.State != AlertInactive {
			old.value = a.value
			continue
		}
		r.Active[h] = a
	}
	var vec promql.Vector
	numActive := 0
	for h, a := range r.Active {
		if _, ok := found[h]; !ok {
			keepFiring := false
			if a.State == AlertFiring && r.keepFor > 0 {
				if a.keepFiringSince.IsZero() {
					a.keepFiringSince = ts
				}
				keepFiring = ts.Sub(a.keepFiringSince) < r.keepFor
			}
			if a.State == AlertPending || (!a.resolvedAt.IsZero() && ts.Sub(a.resolvedAt) > resolvedRetention) {
				delete(r.Active, h)
			}
			if a.State != AlertInactive && !keepFiring {
				a.State = AlertInactive
				a.resolvedAt = ts
			}
			if !keepFiring {
				continue
			}
		} else {
			a.keepFiringSince = time.Time{}
		}
		numActive++
		if a.State == AlertPending && ts.Sub(a.activeAt) >= r.hold {
			a.State = AlertFiring
		}
		vec = append(vec, r.alertSample(a, "ALERTS", evalAt, 1, true), r.alertSample(a, "ALERTS_FOR_STATE", evalAt, float64(a.activeAt.Unix()), false))
	}
	if g.limit > 0 && numActive > g.limit {
		r.Active = map[uint64]*Alert{}
		return nil, fmt.Errorf("exceeded limit of %d with %d alerts", g.limit, numActive)
	}
	return vec, nil
}

// alertSample is an alert's ALERTS (withState) or ALERTS_FOR_STATE sample.
func (r *Rule) alertSample(a *Alert, name string, ts time.Time, v float64, withState bool) promql.Sample {
	lb := labels.NewBuilder(r.labels)
	a.Labels.Range(func(l labels.Label) { lb.Set(l.Name, l.Value) })
	lb.Set(model.MetricNameLabel, name)
	lb.Set(labels.AlertName, r.name)
	if withState {
		lb.Set("alertstate", a.State.String())
	}
	return promql.Sample{Metric: lb.Labels(), T: timestamp.FromTime(ts), F: v}
}

// expandLabel expands a label value's template with the alert's labels
// and value, as Prometheus does; plain text is itself.
func (e *Evaluator) expandLabel(ctx context.Context, r *Rule, smpl promql.Sample, text string, ts time.Time) string {
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
		e.Logger.Warn("Expanding alert template failed", "rule", r.name, "err", err)
	}
	return out
}
