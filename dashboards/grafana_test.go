package dashboards

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// No Grafana server is packaged for Debian or npm, so these checks stand in
// for loading the dashboards into one: what Grafana 10 and 11 need to import
// a dashboard, and what makes it usable with any Prometheus data source.

// requiredDashboards are the dashboards the on-call opens, by uid.
var requiredDashboards = []string{
	"plateau-overview", "plateau-probe", "plateau-gpfs", "plateau-infiniband", "plateau-nvme", "plateau-nfs",
}

// Grafana 10.0 writes schemaVersion 38 and Grafana 11 migrates it forward
// on load; a dashboard newer than the oldest Grafana it targets may use
// options that Grafana does not know.
const (
	minSchemaVersion = 36
	maxSchemaVersion = 38
)

// panelTypes are the core Grafana panels these dashboards may use; a plugin
// panel would not load on a stock Grafana.
var panelTypes = map[string]bool{
	"row": true, "timeseries": true, "stat": true, "table": true, "status-history": true,
	"state-timeline": true, "heatmap": true, "bargauge": true, "gauge": true,
}

// grafanaUnits are Grafana unit ids (packages/grafana-data valueFormats)
// the dashboards use; a misspelt unit silently shows raw numbers.
var grafanaUnits = map[string]bool{
	"none": true, "short": true, "percent": true, "percentunit": true,
	"s": true, "ms": true, "µs": true, "dtdurations": true, "dateTimeFromNow": true,
	"bytes": true, "decbytes": true, "Bps": true, "binBps": true, "bps": true,
	"ops": true, "iops": true, "reqps": true, "rps": true, "wps": true, "cps": true,
	"celsius": true, "bool_yes_no": true,
}

// rangeFunctions are the functions over counters whose range must be
// $__rate_interval: a fixed window shows nothing when it is shorter than
// four scrape intervals and hides spikes when it is longer than the step.
var rangeFunctions = map[string]bool{"rate": true, "irate": true, "increase": true, "resets": true}

var uidRE = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

func TestDashboardsAreImportable(t *testing.T) {
	seenUID := map[string]string{}
	seenTitle := map[string]string{}
	for _, d := range loadDashboards(t) {
		uid, _ := d.raw["uid"].(string)
		if !uidRE.MatchString(uid) {
			t.Errorf("%s: uid %q, want a fixed uid of up to 40 lower-case letters, digits and hyphens", d.path, uid)
		}
		if other, ok := seenUID[uid]; ok {
			t.Errorf("%s: uid %q is also %s's", d.path, uid, other)
		}
		seenUID[uid] = d.path
		title, _ := d.raw["title"].(string)
		if !strings.HasPrefix(title, "Plateau / ") {
			t.Errorf("%s: title %q, want one under \"Plateau / \"", d.path, title)
		}
		if other, ok := seenTitle[title]; ok {
			t.Errorf("%s: title %q is also %s's", d.path, title, other)
		}
		seenTitle[title] = d.path
		if id, ok := d.raw["id"]; ok && id != nil {
			t.Errorf("%s: id %v, want null so that import creates the dashboard", d.path, id)
		}
		sv, err := d.raw["schemaVersion"].(json.Number).Int64()
		if err != nil || sv < minSchemaVersion || sv > maxSchemaVersion {
			t.Errorf("%s: schemaVersion %v, want %d to %d (Grafana 10 and 11)", d.path, d.raw["schemaVersion"], minSchemaVersion, maxSchemaVersion)
		}
		if !hasString(d.raw["tags"], "plateau_exporter") {
			t.Errorf("%s: no tag plateau_exporter, which the dashboards' links use", d.path)
		}
		if _, ok := d.raw["__inputs"]; ok {
			t.Errorf("%s: __inputs binds a data source at import; use the ${datasource} variable", d.path)
		}
	}
	for _, uid := range requiredDashboards {
		if seenUID[uid] == "" {
			t.Errorf("no dashboard has uid %s", uid)
		}
	}
}

func TestDashboardVariables(t *testing.T) {
	for _, d := range loadDashboards(t) {
		vars := d.variables()
		ds := vars["datasource"]
		if ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
			t.Errorf("%s: want a variable datasource of type datasource over prometheus, got %v", d.path, ds)
		}
		for _, name := range []string{"job", "instance"} {
			v := vars[name]
			if v == nil {
				t.Errorf("%s: no %s variable", d.path, name)
				continue
			}
			if v["type"] != "query" {
				t.Errorf("%s: variable %s is of type %v, want query", d.path, name, v["type"])
			}
		}
		if q := variableQueryText(vars["instance"]); !strings.Contains(q, "$job") {
			t.Errorf("%s: the instance variable's query %q does not follow $job", d.path, q)
		}
		for name, v := range vars {
			if v["type"] != "query" {
				continue
			}
			if !isTemplatedDatasource(v["datasource"]) {
				t.Errorf("%s: variable %s: datasource %v, want ${datasource}", d.path, name, v["datasource"])
			}
			if r, _ := v["refresh"].(json.Number).Int64(); r != 1 && r != 2 {
				t.Errorf("%s: variable %s: refresh %v, want 1 (on load) or 2 (on time range change)", d.path, name, v["refresh"])
			}
		}
	}
}

func isTemplatedDatasource(v any) bool {
	m, ok := v.(map[string]any)
	return ok && m["type"] == "prometheus" && m["uid"] == "${datasource}"
}

func hasString(list any, want string) bool {
	l, _ := list.([]any)
	for _, v := range l {
		if v == want {
			return true
		}
	}
	return false
}

// TestDashboardPanels checks each panel as Grafana would render it: its
// data source is the dashboard's variable, it has a unit, a description for
// the on-call, a place on the grid, and queries that parse, filter by the
// job and instance variables and use $__rate_interval for counter rates.
func TestDashboardPanels(t *testing.T) {
	for _, d := range loadDashboards(t) {
		ids := map[int64]bool{}
		for _, p := range d.panels() {
			title, _ := p["title"].(string)
			where := fmt.Sprintf("%s: panel %q", d.path, title)
			typ, _ := p["type"].(string)
			if !panelTypes[typ] {
				t.Errorf("%s: type %q is not a core panel", where, typ)
			}
			id, err := p["id"].(json.Number).Int64()
			if err != nil || id <= 0 || ids[id] {
				t.Errorf("%s: id %v, want a positive id unique in the dashboard", where, p["id"])
			}
			ids[id] = true
			checkGridPos(t, where, p["gridPos"])
			if typ == "row" {
				continue
			}
			if title == "" {
				t.Errorf("%s: no title", where)
			}
			if desc, _ := p["description"].(string); desc == "" {
				t.Errorf("%s: no description to tell the on-call what the panel shows", where)
			}
			if !isTemplatedDatasource(p["datasource"]) {
				t.Errorf("%s: datasource %v, want {type: prometheus, uid: ${datasource}}", where, p["datasource"])
			}
			fc, _ := p["fieldConfig"].(map[string]any)
			defaults, _ := fc["defaults"].(map[string]any)
			if unit, _ := defaults["unit"].(string); !grafanaUnits[unit] {
				t.Errorf("%s: unit %q is not one of the Grafana unit ids this test knows", where, unit)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for _, tg := range targets {
				checkTarget(t, where, typ, tg)
			}
		}
	}
}

func checkGridPos(t *testing.T, where string, v any) {
	t.Helper()
	g, _ := v.(map[string]any)
	num := func(k string) int64 {
		n, _ := g[k].(json.Number)
		i, err := n.Int64()
		if err != nil {
			return -1
		}
		return i
	}
	x, y, w, h := num("x"), num("y"), num("w"), num("h")
	if x < 0 || y < 0 || w <= 0 || h <= 0 || x+w > 24 {
		t.Errorf("%s: gridPos %v does not fit Grafana's 24-column grid", where, v)
	}
}

func checkTarget(t *testing.T, where, panelType string, v any) {
	t.Helper()
	tg, _ := v.(map[string]any)
	refID, _ := tg["refId"].(string)
	where = fmt.Sprintf("%s query %s", where, refID)
	if refID == "" {
		t.Errorf("%s: no refId", where)
	}
	if !isTemplatedDatasource(tg["datasource"]) {
		t.Errorf("%s: datasource %v, want {type: prometheus, uid: ${datasource}}", where, tg["datasource"])
	}
	raw, _ := tg["expr"].(string)
	expr, err := parsePromQL(interpolateGrafana(raw))
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, raw, err)
		return
	}
	format, _ := tg["format"].(string)
	switch {
	case panelType == "heatmap" && format != "heatmap":
		t.Errorf("%s: a heatmap of bucket counts needs format heatmap, got %q", where, format)
	case panelType == "table" && format != "table":
		t.Errorf("%s: a table needs format table, got %q", where, format)
	case panelType != "table" && panelType != "heatmap":
		if lf, _ := tg["legendFormat"].(string); lf == "" {
			t.Errorf("%s: no legendFormat: the legend would show whole label sets", where)
		}
	}
	for _, problem := range checkRangesAndFilters(expr) {
		t.Errorf("%s: %s", where, problem)
	}
}

// checkRangesAndFilters returns what is wrong with the ranges and series
// filters of a dashboard query (interpolated by interpolateGrafana).
func checkRangesAndFilters(expr parser.Expr) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.Call:
			if !rangeFunctions[n.Func.Name] {
				return nil
			}
			for _, a := range n.Args {
				ms, ok := a.(*parser.MatrixSelector)
				if !ok {
					continue
				}
				if ms.RangeExpr != nil || (ms.Range != rateIntervalStandIn && ms.Range != rangeStandIn) {
					problems = append(problems, fmt.Sprintf("%s: use [$__rate_interval] (or [$__range] for the whole time range) as the range of %s", ms, n.Func.Name))
				}
			}
		case *parser.VectorSelector:
			name := selectorName(n)
			if !strings.HasPrefix(name, "plateau_") && name != "ALERTS" {
				return nil
			}
			if !matcherUses(n, "job", "grafana_var_job") {
				problems = append(problems, fmt.Sprintf("%s is not filtered by job=~\"$job\"", n))
			}
			if name != "ALERTS" && !matcherUses(n, "instance", "grafana_var_instance") {
				problems = append(problems, fmt.Sprintf("%s is not filtered by instance=~\"$instance\"", n))
			}
		}
		return nil
	})
	return problems
}

func matcherUses(vs *parser.VectorSelector, label, value string) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == label && strings.Contains(m.Value, value) {
			return true
		}
	}
	return false
}

// TestOverviewAndProbeDashboardsShowWhatTheIssueAsks pins the content the
// on-call relies on, beyond structure: the overview's grid of every node's
// ratio and its alerts in effect; the probe detail's results beside their
// plateau and its latency percentiles from the histogram.
func TestOverviewAndProbeDashboardsShowWhatTheIssueAsks(t *testing.T) {
	want := map[string][]struct{ panelType, exprPart string }{
		"plateau-overview": {
			{"status-history", "plateau_probe_ratio"},
			{"table", "ALERTS"},
			// Nodes in sudden regression beside the chronic view.
			{"stat", "instance_target:plateau_probe_regression:max"},
			{"status-history", "instance_target:plateau_probe_regression:max"},
			{"table", "plateau_probe_regression"},
			{"table", "plateau_probe_ratio_median_24_runs"},
			{"timeseries", "target:plateau_probe_regression:ratio"},
			{"timeseries", "plateau_probe_ratio_median_24_runs"},
		},
		"plateau-probe": {
			{"timeseries", "plateau_baseline_throughput_bytes_per_second"},
			{"timeseries", "plateau_probe_throughput_bytes_per_second"},
			{"timeseries", "plateau_baseline_operations_per_second"},
			{"timeseries", "plateau_probe_operations_per_second"},
			{"timeseries", "histogram_quantile(0.99, sum by (le, target, probe, op) (rate(plateau_probe_latency_seconds_bucket"},
			// The two verdicts of the page rules: the change ratio beside its
			// page threshold, the 24-run median beside the warning threshold.
			{"timeseries", "plateau_probe_change_fast_ratio"},
			{"timeseries", "plateau_probe_change_fast_noise_ratio"},
			{"timeseries", "plateau_probe_ratio_median_24_runs"},
		},
	}
	for _, d := range loadDashboards(t) {
		uid, _ := d.raw["uid"].(string)
		for _, w := range want[uid] {
			found := false
			for _, p := range d.panels() {
				if p["type"] != w.panelType {
					continue
				}
				targets, _ := p["targets"].([]any)
				for _, tg := range targets {
					m, _ := tg.(map[string]any)
					if expr, _ := m["expr"].(string); strings.Contains(expr, w.exprPart) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("%s: no %s panel queries %s", d.path, w.panelType, w.exprPart)
			}
		}
	}
}

// TestDashboardPageThresholdsMatchRules keeps the page threshold the
// dashboards draw equal to the one the daemon's verdict pages with
// (plateau.PageThreshold): a panel cannot read Go, so it repeats the
// threshold, and a tuning of K or the clamp bounds must be repeated there. Both are evaluated over a range of noise values. A threshold is
// a query of the noise whose legend ends with "page threshold".
func TestDashboardPageThresholdsMatchRules(t *testing.T) {
	want := pageThreshold(t)
	found := 0
	for _, d := range loadDashboards(t) {
		for _, p := range d.panels() {
			targets, _ := p["targets"].([]any)
			for _, tg := range targets {
				m, _ := tg.(map[string]any)
				raw, _ := m["expr"].(string)
				legend, _ := m["legendFormat"].(string)
				if !strings.Contains(raw, changeNoiseMetric) || !strings.HasSuffix(legend, "page threshold") {
					continue
				}
				where := fmt.Sprintf("%s: panel %q query %v", d.path, p["title"], m["refId"])
				expr, err := parsePromQL(interpolateGrafana(raw))
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				found++
				for _, noise := range []float64{0, 0.01, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1} {
					w, err := want(noise)
					if err != nil {
						t.Fatal(err)
					}
					got, err := evalNoiseFunction(expr, noise)
					if err != nil {
						t.Errorf("%s: %v", where, err)
						break
					}
					if math.Abs(got-w) > 1e-9 {
						t.Errorf("%s: page threshold %.4f at noise %g, but the daemon pages under %.4f: copy the threshold of %s",
							where, got, noise, w, regressionVerdict)
						break
					}
				}
			}
		}
	}
	if found == 0 {
		t.Errorf("no dashboard draws the page threshold (a query of %s with a legend ending in \"page threshold\")", changeNoiseMetric)
	}
}
