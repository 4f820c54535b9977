package dashboards

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// The structural checks cannot tell whether a panel shows anything: a
// vector match on a label the metrics do not share, or a many-to-many
// match, parses fine and draws an empty or broken panel. This test
// evaluates every panel query with promtool against series shaped exactly
// as the exporter exports them (the golden /metrics and the collectors'
// expected fixture outputs, scraped every minute for an hour) and wants
// each to return data.

const (
	evalJob      = "plateau"
	evalInstance = "node01:9731"
)

// seriesFromExposition turns expositions into promtool input series: one
// per sample line, with the target labels Prometheus adds, counters rising
// by one per scrape and gauges holding their value (1 where the golden
// file masks it).
func seriesFromExposition(data []byte, out map[string]string) error {
	types := map[string]string{}
	sampleRE := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)`)
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			return fmt.Errorf("cannot read sample line %q", line)
		}
		name, labels, value := m[1], strings.TrimSuffix(strings.TrimPrefix(m[2], "{"), "}"), m[3]
		target := fmt.Sprintf(`job=%q,instance=%q`, evalJob, evalInstance)
		if labels != "" {
			labels = target + "," + labels
		} else {
			labels = target
		}
		series := name + "{" + labels + "}"
		counter := types[name] == "counter"
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && (types[base] == "histogram" || types[base] == "summary") {
				counter = true
			}
		}
		switch v, err := strconv.ParseFloat(value, 64); {
		case counter:
			out[series] = "0+1x60"
		case err != nil:
			out[series] = "1x60"
		default:
			out[series] = strconv.FormatFloat(v, 'g', -1, 64) + "x60"
		}
	}
	return nil
}

// interpolateForEval replaces Grafana variables as Grafana would with the
// job and instance of the test series selected and every other variable
// set to All (the dashboards give All the value .+).
func interpolateForEval(expr string) string {
	r := strings.NewReplacer(
		"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		"$job", evalJob, "$instance", evalInstance,
	)
	expr = r.Replace(expr)
	return grafanaVarRE.ReplaceAllString(expr, ".+")
}

// dataQuery returns the query with every comparison turned into its bool
// form, so that it must return data on the fixtures: a filter (`> 0`,
// `== 1`, `< threshold`) may rightly drop every series of healthy or
// unchanging fixtures, but its bool form keeps one result per matched
// series. What fails then is a missing metric or a vector match that
// finds nothing, the mistakes that parse fine.
func dataQuery(q string) (string, error) {
	expr, err := parsePromQL(q)
	if err != nil {
		return "", err
	}
	parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
		if b, ok := node.(*parser.BinaryExpr); ok && b.Op.IsComparisonOperator() &&
			(b.LHS.Type() == parser.ValueTypeVector || b.RHS.Type() == parser.ValueTypeVector) &&
			!inUnlessRHS(node, path) {
			b.ReturnBool = true
		}
		return nil
	})
	return expr.String(), nil
}

// inUnlessRHS reports whether node lies on the right of an `unless`: a
// filter there says what to exclude (`unless on (instance)
// plateau_node_job_running == 1`), and its bool form would exclude
// everything, so it stays a filter.
func inUnlessRHS(node parser.Node, path []parser.Node) bool {
	for i, anc := range path {
		b, ok := anc.(*parser.BinaryExpr)
		if !ok || b.Op != parser.LUNLESS {
			continue
		}
		child := node
		if i+1 < len(path) {
			child = path[i+1]
		}
		if child == b.RHS {
			return true
		}
	}
	return false
}

// namedQuery is a query to evaluate and where it comes from.
type namedQuery struct{ where, query string }

func TestDashboardQueriesReturnData(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	var queries []namedQuery
	for _, d := range loadDashboards(t) {
		for _, p := range d.panels() {
			targets, _ := p["targets"].([]any)
			for _, tg := range targets {
				m, _ := tg.(map[string]any)
				raw, _ := m["expr"].(string)
				queries = append(queries, namedQuery{
					where: fmt.Sprintf("%s: panel %q query %v", d.path, p["title"], m["refId"]),
					query: interpolateForEval(raw),
				})
			}
		}
	}
	// The dashboards read the recorded series of the verdicts too, so the
	// rules run beside the exported series.
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	site, err := filepath.Abs(siteRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	evaluateOnExportedSeries(t, promtool, queries, []string{rules, site})
}

// TestRuleExpressionsMatchExportedSeries does for the rules what the
// promtool unit tests cannot: those feed hand-written series, so an `on`
// or `group_left` naming a label the exporter does not export would pass
// them. Here every rule's expression runs on the exporter's own series,
// with rules.yml loaded so the recorded series exist too.
func TestRuleExpressionsMatchExportedSeries(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	var queries []namedQuery
	for _, f := range shippedRuleFiles() {
		for _, r := range loadRules(t, f) {
			queries = append(queries, namedQuery{where: fmt.Sprintf("%s: %s%s", f, r.Record, r.Alert), query: r.Expr})
		}
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	site, err := filepath.Abs(siteRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	evaluateOnExportedSeries(t, promtool, queries, []string{rules, site})
}

// evaluateOnExportedSeries runs each query, in its bool form (dataQuery),
// with promtool over an hour of series shaped as the exporter exports them,
// and fails for each that returns nothing.
func evaluateOnExportedSeries(t *testing.T, promtool string, queries []namedQuery, ruleFiles []string) {
	t.Helper()
	series := map[string]string{}
	golden, err := os.ReadFile(goldenMetrics)
	if err != nil {
		t.Fatalf("the golden /metrics output of the daemon is missing (%v)", err)
	}
	if err := seriesFromExposition(golden, series); err != nil {
		t.Fatalf("%s: %v", goldenMetrics, err)
	}
	for _, g := range collectorExpositionGlobs {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := seriesFromExposition(data, series); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		}
	}
	// The store's fixture has the golden's target e2e serve scratch
	// (plateau_target_serves_info): a storage server's own target, which
	// the file-system page leaves out. A copy of e2e's series under
	// scratch stands for the clients of the file system it serves.
	for k, v := range series {
		if !strings.HasPrefix(k, "plateau_target_serves_info{") && strings.Contains(k, `target="e2e"`) {
			series[strings.Replace(k, `target="e2e"`, `target="scratch"`, 1)] = v
		}
	}
	// Prometheus itself writes ALERTS, which the overview lists.
	series[fmt.Sprintf(`ALERTS{alertname="PlateauProbeFailing",alertstate="firing",severity="warning",job=%q,instance=%q,target="e2e"}`, evalJob, evalInstance)] = "1x60"
	// And the file-system page, whose ALERTS its incident's members read
	// (PlateauFileSystemIncident): the golden's nodes are not a fleet
	// that falls.
	series[fmt.Sprintf(`ALERTS{alertname="PlateauFileSystemRegression",alertstate="firing",severity="critical",job=%q,target="scratch",filesystem="scratch"}`, evalJob)] = "1x60"

	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	type inputSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type testCase struct {
		Name           string        `yaml:"name"`
		Interval       string        `yaml:"interval"`
		InputSeries    []inputSeries `yaml:"input_series"`
		PromqlExprTest []exprTest    `yaml:"promql_expr_test"`
	}
	var file struct {
		RuleFiles          []string   `yaml:"rule_files"`
		EvaluationInterval string     `yaml:"evaluation_interval"`
		Tests              []testCase `yaml:"tests"`
	}
	file.RuleFiles = ruleFiles
	file.EvaluationInterval = "1m"
	var inputs []inputSeries
	for _, s := range sortedKeys(series) {
		inputs = append(inputs, inputSeries{s, series[s]})
	}
	// Every query is one promql_expr_test of a single test group: the
	// series are loaded and the rules evaluated over the hour once, not
	// once per query (that was most of the time of the two tests that call
	// this). Each test is one sample of value 1 exactly when its query
	// returns data.
	all := testCase{Name: "every query returns data", Interval: "1m", InputSeries: inputs}
	var wheres []string
	for _, nq := range queries {
		q, err := dataQuery(nq.query)
		if err != nil {
			t.Errorf("%s: %v", nq.where, err)
			continue
		}
		all.PromqlExprTest = append(all.PromqlExprTest, exprTest{
			Expr:       fmt.Sprintf("vector(1) and on () (count(%s) > 0)", q),
			EvalTime:   "50m",
			ExpSamples: []sample{{Labels: "{}", Value: 1}},
		})
		wheres = append(wheres, nq.where)
	}
	file.Tests = []testCase{all}
	t.Logf("%d queries over %d series", len(all.PromqlExprTest), len(inputs))
	out, err := runPromtoolTest(t, promtool, file)
	if err == nil {
		t.Logf("%s", out)
		return
	}
	// promtool names a failed test by its group, which is the same for
	// all, and by its expression (as %q prints it): that names the query.
	named := 0
	for i, et := range all.PromqlExprTest {
		if bytes.Contains(out, []byte("expr: "+strconv.Quote(et.Expr)+",")) {
			t.Errorf("%s returns no data on the exported series: %s", wheres[i], et.Expr)
			named++
		}
	}
	t.Fatalf("promtool test rules: %v (%d queries named above)\n%s", err, named, out)
}

// runPromtoolTest writes file as a promtool unit test file and runs
// `promtool test rules` on it.
func runPromtoolTest(t *testing.T, promtool string, file any) ([]byte, error) {
	t.Helper()
	data, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "eval_test.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, promtool, "test", "rules", path).CombinedOutput()
}
