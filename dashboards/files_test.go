package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Paths are relative to this package's directory, where go test runs.
const (
	rulesFile        = "rules.yml"
	alertsFile       = "alerts.yml"
	fleetAlertsFile  = "fleet_alerts.yml"
	federateFile     = "federate.yml"
	runbookFile      = "RUNBOOK.md"
	alertmanagerFile = "alertmanager.yml"
	promtoolTestGlob = "tests/*.yml"
	dashboardGlob    = "*.json"

	// goldenMetrics is the daemon's /metrics output, kept by the end-to-end
	// test of cmd/plateau_exporter with volatile values masked.
	goldenMetrics = "../cmd/plateau_exporter/testdata/metrics.golden"
)

// collectorExpositionGlobs find the expected outputs of the counter
// collectors' fixture tests: on a test machine without GPFS, InfiniBand or
// NVMe the golden /metrics has none of their metrics, so these files are
// where the names of those metrics are recorded. The store's expected
// outputs record the probe metrics that the golden /metrics has only on
// some machines (plateau_probe_concurrent_bytes_per_second needs a
// temporary directory on a block device).
var collectorExpositionGlobs = []string{
	"../collector/fixtures/*.prom",
	"../collector/fixtures/*/*.prom",
	"../collector/testdata/*.prom",
	"../probe/store/testdata/*.prom",
}

// rule is one recording or alerting rule of a Prometheus rule file.
type rule struct {
	Record        string            `yaml:"record"`
	Alert         string            `yaml:"alert"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

// loadRules reads a rule file, refusing unknown keys so that a misspelt
// `keep_firing_for` is an error rather than a silently ignored field.
func loadRules(t *testing.T, path string) []rule {
	t.Helper()
	var f ruleFile
	decodeYAMLStrict(t, path, &f)
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", path)
	}
	return rules
}

// alertFiles are the shipped alerting rule files: the per-node alerts,
// right on any Prometheus that scrapes the node, and the fleet's, which
// must see every node of a file system.
func alertFiles() []string { return []string{alertsFile, fleetAlertsFile} }

// shippedRuleFiles are every shipped rule file, as one Prometheus for the
// whole fleet loads them.
func shippedRuleFiles() []string { return append([]string{rulesFile}, alertFiles()...) }

// loadAlerts returns the alerting rules of every file of alertFiles.
func loadAlerts(t *testing.T) []rule {
	t.Helper()
	var rules []rule
	for _, f := range alertFiles() {
		rules = append(rules, loadRules(t, f)...)
	}
	return rules
}

// promtoolTests is the part of a `promtool test rules` file the checks need.
type promtoolTests struct {
	RuleFiles          []string `yaml:"rule_files"`
	EvaluationInterval string   `yaml:"evaluation_interval"`
	// GroupEvalOrder is the order promtool evaluates the named groups in
	// at each step (the rest first), for a test that reads an alert at
	// the very evaluation a record changes.
	GroupEvalOrder []string `yaml:"group_eval_order"`
	Tests          []struct {
		Name        string `yaml:"name"`
		Interval    string `yaml:"interval"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromqlExprTest []struct {
			Expr       string `yaml:"expr"`
			EvalTime   string `yaml:"eval_time"`
			ExpSamples []struct {
				Labels string  `yaml:"labels"`
				Value  float64 `yaml:"value"`
			} `yaml:"exp_samples"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

func loadPromtoolTests(t *testing.T) map[string]promtoolTests {
	t.Helper()
	paths, err := filepath.Glob(promtoolTestGlob)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no promtool test files match %s", promtoolTestGlob)
	}
	out := map[string]promtoolTests{}
	for _, p := range paths {
		var f promtoolTests
		decodeYAMLStrict(t, p, &f)
		out[p] = f
	}
	return out
}

func decodeYAMLStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
}

// dashboard is a Grafana dashboard decoded loosely: the checks walk its JSON
// rather than a Go model of Grafana's schema, which changes between
// Grafana versions.
type dashboard struct {
	path string
	raw  map[string]any
}

func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	paths, err := filepath.Glob(dashboardGlob)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no dashboards match %s", dashboardGlob)
	}
	var out []dashboard
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		var raw map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%s is not valid JSON: %v", p, err)
		}
		out = append(out, dashboard{path: p, raw: raw})
	}
	return out
}

// panels returns every panel of a dashboard, including those nested in
// collapsed rows.
func (d dashboard) panels() []map[string]any {
	var out []map[string]any
	var walk func(list []any)
	walk = func(list []any) {
		for _, p := range list {
			m, ok := p.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, m)
			if sub, ok := m["panels"].([]any); ok {
				walk(sub)
			}
		}
	}
	list, _ := d.raw["panels"].([]any)
	walk(list)
	return out
}

// variables returns the dashboard's template variables by name.
func (d dashboard) variables() map[string]map[string]any {
	out := map[string]map[string]any{}
	tmpl, _ := d.raw["templating"].(map[string]any)
	list, _ := tmpl["list"].([]any)
	for _, v := range list {
		if m, ok := v.(map[string]any); ok {
			name, _ := m["name"].(string)
			out[name] = m
		}
	}
	return out
}

// metricInfo is what a Prometheus text exposition tells about one metric
// name: whether it had samples, and the label names seen on them.
type metricInfo struct {
	sampled bool
	labels  map[string]bool
}

// exposition maps metric names to what the exposition tells about them.
type exposition map[string]*metricInfo

func (e exposition) add(name string, sampled bool, labels ...string) {
	mi := e[name]
	if mi == nil {
		mi = &metricInfo{labels: map[string]bool{}}
		e[name] = mi
	}
	mi.sampled = mi.sampled || sampled
	for _, l := range labels {
		mi.labels[l] = true
	}
}

func (e exposition) merge(other exposition) {
	for name, mi := range other {
		e.add(name, mi.sampled, sortedKeys(mi.labels)...)
	}
}

var metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)

// parseExposition reads the metric names and label names of a Prometheus
// text exposition (format 0.0.4, as promhttp writes it). It reads names
// only, so values may be masked (the golden file replaces volatile values
// with placeholders that no strict parser would accept). Histogram and
// summary TYPE lines also declare their _bucket, _sum and _count series.
// See https://prometheus.io/docs/instrumenting/exposition_formats/.
func parseExposition(data []byte) (exposition, error) {
	out := exposition{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[1] == "TYPE" {
				name := f[2]
				if metricNameRE.FindString(name) != name {
					return nil, fmt.Errorf("line %d: TYPE of invalid metric name %q", i+1, name)
				}
				out.add(name, false)
				switch f[3] {
				case "histogram", "gaugehistogram":
					out.add(name+"_bucket", false)
					out.add(name+"_sum", false)
					out.add(name+"_count", false)
				case "summary":
					out.add(name+"_sum", false)
					out.add(name+"_count", false)
				}
			}
			continue
		}
		name := metricNameRE.FindString(line)
		if name == "" {
			return nil, fmt.Errorf("line %d: no metric name at the start of %q", i+1, line)
		}
		rest := line[len(name):]
		var labels []string
		if strings.HasPrefix(rest, "{") {
			var err error
			labels, rest, err = parseLabelNames(rest)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
		}
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			return nil, fmt.Errorf("line %d: unexpected %q after the metric name and labels", i+1, rest)
		}
		if strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("line %d: sample %q has no value", i+1, name)
		}
		out.add(name, true, labels...)
	}
	return out, nil
}

// parseLabelNames reads `{a="x",b="y"}` at the start of s and returns the
// label names and what follows the closing brace.
func parseLabelNames(s string) (names []string, rest string, err error) {
	i := 1 // past '{'
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return nil, "", fmt.Errorf("unterminated label set")
		}
		if s[i] == '}' {
			return names, s[i+1:], nil
		}
		name := metricNameRE.FindString(s[i:])
		if name == "" || strings.Contains(name, ":") {
			return nil, "", fmt.Errorf("invalid label name at %q", s[i:])
		}
		i += len(name)
		if i >= len(s) || s[i] != '=' {
			return nil, "", fmt.Errorf("label %s: expected '='", name)
		}
		i++
		if i >= len(s) || s[i] != '"' {
			return nil, "", fmt.Errorf("label %s: expected a quoted value", name)
		}
		i++
		for {
			if i >= len(s) {
				return nil, "", fmt.Errorf("label %s: unterminated value", name)
			}
			if s[i] == '\\' {
				i += 2
				continue
			}
			if s[i] == '"' {
				i++
				break
			}
			i++
		}
		names = append(names, name)
	}
}

// exportedMetrics reads the daemon's golden /metrics and the collectors'
// expected fixture outputs. A missing golden file fails the test: without
// it nothing guards the rules and dashboards against renamed metrics.
func exportedMetrics(t *testing.T) (exposition, []string) {
	t.Helper()
	data, err := os.ReadFile(goldenMetrics)
	if err != nil {
		t.Fatalf("the golden /metrics output of the daemon is missing (%v): it is written by the "+
			"end-to-end test of cmd/plateau_exporter, and the rules and dashboards are checked against it", err)
	}
	all, err := parseExposition(data)
	if err != nil {
		t.Fatalf("%s: %v", goldenMetrics, err)
	}
	sources := []string{goldenMetrics}
	for _, g := range collectorExpositionGlobs {
		paths, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("reading %s: %v", p, err)
			}
			e, err := parseExposition(data)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			all.merge(e)
			sources = append(sources, p)
		}
	}
	return all, sources
}

// grafanaVarRE matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and the deprecated [[name]].
var grafanaVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\]\]`)

// Durations that stand in for Grafana's interval variables, so that after
// parsing, a range can be traced back to the variable it came from. Odd
// primes of seconds, which no dashboard writes by hand.
const (
	rateIntervalStandIn = 7919 * time.Second
	intervalStandIn     = 7907 * time.Second
	rangeStandIn        = 7901 * time.Second
)

func promDuration(d time.Duration) string { return fmt.Sprintf("%ds", int64(d/time.Second)) }

// interpolateGrafana replaces Grafana variables in a query the way Grafana
// would before sending it, with stand-ins the PromQL parser accepts:
// durations for the interval variables and a plain word for the others
// (which dashboards use inside label matcher strings). It repeats until no
// variable is left, because removing one `$` can form another from what
// preceded it.
func interpolateGrafana(expr string) string {
	// Each pass removes at least one `$` or `[[` and adds none.
	for passes := len(expr); passes >= 0 && grafanaVarRE.MatchString(expr); passes-- {
		expr = grafanaVarRE.ReplaceAllStringFunc(expr, func(m string) string {
			sub := grafanaVarRE.FindStringSubmatch(m)
			name := sub[1] + sub[2] + sub[3]
			switch name {
			case "__rate_interval":
				return promDuration(rateIntervalStandIn)
			case "__interval":
				return promDuration(intervalStandIn)
			case "__range":
				return promDuration(rangeStandIn)
			case "__interval_ms", "__range_ms", "__range_s":
				return "7877"
			}
			return "grafana_var_" + name
		})
	}
	return expr
}

// variableQuery splits a Prometheus template variable query into the PromQL
// it evaluates (a series selector or an expression, empty when it has none)
// and the label it reads. It knows Grafana's Prometheus query functions:
// label_values(label), label_values(selector, label), query_result(expr),
// label_names() and metrics(regex).
func variableQuery(q string) (expr, label string, err error) {
	q = strings.TrimSpace(q)
	open := strings.IndexByte(q, '(')
	if open < 0 || !strings.HasSuffix(q, ")") {
		return "", "", fmt.Errorf("variable query %q is not a Grafana query function", q)
	}
	fn, args := strings.TrimSpace(q[:open]), q[open+1:len(q)-1]
	switch fn {
	case "label_values":
		comma := lastTopLevelComma(args)
		if comma < 0 {
			return "", strings.TrimSpace(args), nil
		}
		return strings.TrimSpace(args[:comma]), strings.TrimSpace(args[comma+1:]), nil
	case "query_result":
		return strings.TrimSpace(args), "", nil
	case "label_names", "metrics":
		return "", "", nil
	}
	return "", "", fmt.Errorf("variable query %q uses unknown function %q", q, fn)
}

// lastTopLevelComma finds the comma separating a selector from a label name,
// skipping commas inside braces, brackets, parentheses and quotes. It
// returns -1 when there is none.
func lastTopLevelComma(s string) int {
	depth, last := 0, -1
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			last = i
		}
	}
	return last
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
