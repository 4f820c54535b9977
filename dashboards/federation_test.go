package dashboards

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// federateConfig is the part of federate.yml the checks read: the global
// Prometheus's scrape job of the racks' /federate.
type federateConfig struct {
	ScrapeConfigs []struct {
		JobName     string              `yaml:"job_name"`
		HonorLabels bool                `yaml:"honor_labels"`
		MetricsPath string              `yaml:"metrics_path"`
		Params      map[string][]string `yaml:"params"`
		// The rest (targets, intervals, TLS) is the site's; promtool
		// checks the whole file as a Prometheus configuration.
		Rest map[string]any `yaml:",inline"`
	} `yaml:"scrape_configs"`
}

// federatedNames returns the metric names federate.yml's one job pulls
// from the racks, refusing a selector that does not name one metric
// exactly (a pattern could not be checked against the rules, and pulls
// whatever a rack adds later).
func federatedNames(t *testing.T) map[string]bool {
	t.Helper()
	var cfg federateConfig
	decodeYAMLStrict(t, federateFile, &cfg)
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("%s: %d scrape_configs, want the one federation job", federateFile, len(cfg.ScrapeConfigs))
	}
	job := cfg.ScrapeConfigs[0]
	if job.MetricsPath != "/federate" || !job.HonorLabels {
		t.Errorf("%s: job %s has metrics_path %q and honor_labels %v, want /federate and true (the racks' job and instance labels are the series' own)",
			federateFile, job.JobName, job.MetricsPath, job.HonorLabels)
	}
	names := map[string]bool{}
	for _, sel := range job.Params["match[]"] {
		matchers, err := parser.NewParser(parser.Options{}).ParseMetricSelector(sel)
		if err != nil {
			t.Errorf("%s: match[] %q: %v", federateFile, sel, err)
			continue
		}
		name := ""
		for _, m := range matchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" || len(matchers) != 1 {
			t.Errorf("%s: match[] %q: want one metric by its exact name, nothing else", federateFile, sel)
			continue
		}
		if names[name] {
			t.Errorf("%s: match[] names %s twice", federateFile, name)
		}
		names[name] = true
	}
	if len(names) == 0 {
		t.Fatalf("%s: no match[] selectors", federateFile)
	}
	return names
}

// recordingRules returns the expressions that record each name in the
// files (a name may be recorded by several rules, one per case).
func recordingRules(t *testing.T, files ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range files {
		for _, r := range loadRules(t, f) {
			if r.Record != "" {
				out[r.Record] = append(out[r.Record], r.Expr)
			}
		}
	}
	return out
}

// selectorNames returns the metric names an expression reads.
func selectorNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parsePromQL(expr)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			names = append(names, selectorName(vs))
		}
		return nil
	})
	return names
}

// TestGlobalRulesReadOnlyFederatedSeries keeps the split of docs/fleet.md's
// "Prometheus for a fleet" true: racks scrape the nodes and evaluate
// rules.yml and alerts.yml; a global Prometheus pulls what federate.yml
// selects from them and evaluates rules.yml, the site's constant rules and
// fleet_alerts.yml. On the global one:
//
//   - every series a fleet alert reads, in its expression or in the
//     queries of its description, is pulled from the racks or recorded
//     there from pulled series, all the way down: a series missing there
//     does not fail, it silently changes the alert (an `unless` that
//     removes nothing, a description with a blank);
//   - no pulled series is also recorded there from pulled series: the
//     global's copy and the racks' would be the same series written twice;
//   - federate.yml pulls nothing the fleet alerts do not read, since each
//     name is a series per node (or per node and target) on the global.
//
// And on a rack, no alert of alerts.yml and no record of rules.yml reads a
// fleet alert's ALERTS series, which only the global has.
func TestGlobalRulesReadOnlyFederatedSeries(t *testing.T) {
	federated := federatedNames(t)
	records := recordingRules(t, rulesFile, siteRulesFile)
	fleet := loadRules(t, fleetAlertsFile)
	fleetAlert := map[string]bool{}
	for _, r := range fleet {
		fleetAlert[r.Alert] = true
	}

	// needed walks what a name is made of on the global Prometheus, and
	// collects the problems and the pulled names it reaches.
	used := map[string]bool{}
	missing := map[string][]string{}
	visited := map[string]bool{}
	var need func(name, via string)
	need = func(name, via string) {
		switch {
		case name == "ALERTS" || name == "ALERTS_FOR_STATE":
			return // the global's own alerts
		case federated[name]:
			used[name] = true
			return
		case records[name] == nil:
			missing[name] = append(missing[name], via)
			return
		case visited[name]:
			return
		}
		visited[name] = true
		for i, expr := range records[name] {
			for _, in := range selectorNames(t, fmt.Sprintf("%s (rule %d)", name, i+1), expr) {
				need(in, name)
			}
		}
	}
	for _, r := range fleet {
		for _, name := range selectorNames(t, r.Alert, r.Expr) {
			need(name, r.Alert)
		}
		for k, text := range r.Annotations {
			if k == "runbook_url" {
				continue
			}
			for _, tok := range metricTokenRE.FindAllString(text, -1) {
				if records[tok] != nil || federated[tok] || strings.HasPrefix(tok, "plateau_") {
					need(tok, r.Alert+" "+k)
				}
			}
		}
	}
	for _, name := range sortedKeys(missing) {
		t.Errorf("on the global Prometheus, %s is read (by %s) but %s does not pull it and no rule records it", name, strings.Join(slices.Compact(slices.Sorted(slices.Values(missing[name]))), ", "), federateFile)
	}

	// A pulled name recorded by a rule that would produce it from pulled
	// series on the global too.
	for name := range federated {
		for i, expr := range records[name] {
			ins := selectorNames(t, fmt.Sprintf("%s (rule %d)", name, i+1), expr)
			var pulled []string
			for _, in := range ins {
				if federated[in] || (records[in] != nil && visited[in]) {
					pulled = append(pulled, in)
				}
			}
			slices.Sort(pulled)
			pulled = slices.Compact(pulled)
			if len(pulled) > 0 {
				t.Errorf("%s pulls %s, which rule %d of its records also makes on the global from %s: two writers of one series", federateFile, name, i+1, strings.Join(pulled, ", "))
			}
		}
	}
	var unused []string
	for name := range federated {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	for _, name := range unused {
		t.Errorf("%s pulls %s, which no fleet alert reads", federateFile, name)
	}

	for _, f := range []string{rulesFile, alertsFile} {
		for _, r := range loadRules(t, f) {
			e, err := parsePromQL(r.Expr)
			if err != nil {
				t.Fatalf("%s: %s%s: %v", f, r.Record, r.Alert, err)
			}
			parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
				vs, ok := node.(*parser.VectorSelector)
				if !ok || selectorName(vs) != "ALERTS" {
					return nil
				}
				for name := range fleetAlert {
					if m := vs.LabelMatchers; slices.ContainsFunc(m, func(m *labels.Matcher) bool { return m.Name == "alertname" }) &&
						!slices.ContainsFunc(m, func(m *labels.Matcher) bool { return m.Name == "alertname" && !m.Matches(name) }) {
						t.Errorf("%s: %s%s reads the ALERTS of %s, a fleet alert that a rack's Prometheus does not evaluate", f, r.Record, r.Alert, name)
					}
				}
				return nil
			})
		}
	}
	t.Logf("the global Prometheus pulls %d names and records %d from them for %d fleet alerts", len(federated), len(visited), len(fleet))
}
