package dashboards

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// foreignMetrics are the series outside plateau_exporter that the rules and
// dashboards may read: Prometheus's own alert series and scrape health.
var foreignMetrics = map[string]bool{"ALERTS": true, "ALERTS_FOR_STATE": true, "up": true}

// Labels every scraped series has from Prometheus, not from the exporter.
var targetLabels = map[string]bool{"job": true, "instance": true}

// promQL is one PromQL expression and where it was found.
type promQL struct {
	where string
	expr  string
}

func ruleExpressions(t *testing.T) []promQL {
	t.Helper()
	var out []promQL
	for _, f := range shippedRuleFiles() {
		for _, r := range loadRules(t, f) {
			out = append(out, promQL{where: fmt.Sprintf("%s: %s%s", f, r.Record, r.Alert), expr: r.Expr})
		}
	}
	return out
}

// dashboardExpressions returns every query of the dashboards: panel targets
// and template variable queries, with Grafana's variables interpolated.
func dashboardExpressions(t *testing.T) []promQL {
	t.Helper()
	var out []promQL
	for _, d := range loadDashboards(t) {
		for _, p := range d.panels() {
			title, _ := p["title"].(string)
			targets, _ := p["targets"].([]any)
			for _, tg := range targets {
				m, _ := tg.(map[string]any)
				expr, _ := m["expr"].(string)
				refID, _ := m["refId"].(string)
				out = append(out, promQL{
					where: fmt.Sprintf("%s: panel %q query %s", d.path, title, refID),
					expr:  interpolateGrafana(expr),
				})
			}
		}
		for name, v := range d.variables() {
			if v["type"] != "query" {
				continue
			}
			expr, _, err := variableQuery(variableQueryText(v))
			if err != nil {
				t.Errorf("%s: variable %s: %v", d.path, name, err)
				continue
			}
			if expr != "" {
				out = append(out, promQL{where: fmt.Sprintf("%s: variable %s", d.path, name), expr: interpolateGrafana(expr)})
			}
		}
	}
	return out
}

// variableQueryText reads a query variable's query, which Grafana stores
// as a string or, since Grafana 10, as an object with a `query` field.
func variableQueryText(v map[string]any) string {
	switch q := v["query"].(type) {
	case string:
		return q
	case map[string]any:
		s, _ := q["query"].(string)
		return s
	}
	return ""
}

// siteRulesFile stands for the rule file a site writes beside ours: the
// series rules.yml may read without recording them itself (the aggregate
// plateau of a file system, plateau:filesystem_plateau_bytes_per_second).
const siteRulesFile = "testdata/site_rules.yml"

func recordedNames(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range []string{rulesFile, siteRulesFile} {
		for _, r := range loadRules(t, f) {
			out[r.Record] = true
		}
	}
	return out
}

func parsePromQL(expr string) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(expr)
}

// selectorName returns the metric name a selector selects, or "" when it
// selects by a __name__ regexp (which no check could follow).
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// TestExpressionsNameExportedMetrics is the drift test: every expression of
// the rules and dashboards parses, every plateau_ metric it reads is in the
// daemon's golden /metrics output (or a collector's expected fixture
// output) with the labels its matchers use, and every level:metric:op name
// is recorded by rules.yml.
func TestExpressionsNameExportedMetrics(t *testing.T) {
	exported, sources := exportedMetrics(t)
	t.Logf("exported metrics read from %s", strings.Join(sources, ", "))
	recorded := recordedNames(t)
	exprs := append(ruleExpressions(t), dashboardExpressions(t)...)
	if len(exprs) == 0 {
		t.Fatal("no expressions found")
	}
	used := map[string]bool{}
	for _, q := range exprs {
		expr, err := parsePromQL(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		for _, problem := range checkSelectors(expr, exported, recorded, used) {
			t.Errorf("%s: %s", q.where, problem)
		}
	}
	for _, name := range sortedKeys(exported) {
		if strings.HasPrefix(name, "plateau_") && !used[name] {
			t.Logf("note: %s is exported but no rule or dashboard reads it", name)
		}
	}
}

// checkSelectors returns what is wrong with the metrics an expression reads.
// It records the names it sees in used.
func checkSelectors(expr parser.Expr, exported exposition, recorded, used map[string]bool) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := selectorName(vs)
		used[name] = true
		switch {
		case name == "":
			problems = append(problems, fmt.Sprintf("selector %s picks metrics by a name pattern, which cannot be checked", vs))
		case strings.Contains(name, ":"):
			if !recorded[name] {
				problems = append(problems, fmt.Sprintf("%s is not recorded by %s", name, rulesFile))
			}
		case strings.HasPrefix(name, "plateau_"):
			mi := exported[name]
			if mi == nil {
				problems = append(problems, fmt.Sprintf("%s is not exported by plateau_exporter", name))
				break
			}
			if !mi.sampled {
				break // known from its TYPE line only: its labels are unknown
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel || targetLabels[m.Name] || m.Matches("") {
					continue
				}
				if !mi.labels[m.Name] {
					problems = append(problems, fmt.Sprintf("%s has no label %q (it has %s)", name, m.Name, strings.Join(sortedKeys(mi.labels), ", ")))
				}
			}
		case !foreignMetrics[name]:
			problems = append(problems, fmt.Sprintf("%s is neither a plateau_ metric nor one Prometheus provides", name))
		}
		return nil
	})
	return problems
}

// metricTokenRE finds metric-like words in prose: names of exported series
// (plateau_...) and recorded series (level:metric:operations, and a site's
// plateau:filesystem_plateau_...).
var metricTokenRE = regexp.MustCompile(`(?:[a-z_]*:)?[a-z_]*plateau_[a-z0-9_]+(?::[a-z0-9_]+)?`)

// TestProseNamesExportedMetrics extends the drift test to what the on-call
// reads: the metric names quoted in alert descriptions and in RUNBOOK.md
// must exist too.
func TestProseNamesExportedMetrics(t *testing.T) {
	exported, _ := exportedMetrics(t)
	recorded := recordedNames(t)
	texts := map[string]string{}
	runbook, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	texts[runbookFile] = string(runbook)
	for _, f := range alertFiles() {
		for _, r := range loadRules(t, f) {
			for k, v := range r.Annotations {
				if k != "runbook_url" {
					texts[fmt.Sprintf("%s: %s %s", f, r.Alert, k)] = v
				}
			}
		}
	}
	for where, text := range texts {
		for _, tok := range metricTokenRE.FindAllString(text, -1) {
			switch {
			case tok == "plateau_exporter":
				// The program's name.
			case strings.Contains(tok, ":"):
				if !recorded[tok] {
					t.Errorf("%s: mentions %s, which %s does not record", where, tok, rulesFile)
				}
			case exported[tok] == nil:
				t.Errorf("%s: mentions %s, which plateau_exporter does not export", where, tok)
			}
		}
	}
}
