package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const runbookBase = "https://github.com/plateau-exporter/plateau_exporter/blob/main/dashboards/RUNBOOK.md#"

// Recording rule names follow level:metric:operations
// (https://prometheus.io/docs/practices/rules/): the labels kept, the
// metric, the operations applied.
var recordNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*:plateau_[a-z0-9_]+:[a-z0-9_]+$`)

func TestRecordingRulesFollowNamingConvention(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range loadRules(t, rulesFile) {
		if r.Alert != "" {
			t.Errorf("%s: alert %s belongs in %s", rulesFile, r.Alert, alertsFile)
			continue
		}
		if !recordNameRE.MatchString(r.Record) {
			t.Errorf("recording rule %q is not named level:plateau_metric:operations", r.Record)
		}
		if seen[r.Record] {
			t.Errorf("recording rule %q is defined twice", r.Record)
		}
		seen[r.Record] = true
	}
}

var alertNameRE = regexp.MustCompile(`^Plateau[A-Z][A-Za-z0-9]*$`)

// TestAlertsFollowMixinConventions checks what the monitoring mixins ask of
// an alert: a CamelCase name with the project's prefix, a severity the
// routing knows, an untemplated one-line summary, a templated description,
// and a runbook_url whose anchor is a section of RUNBOOK.md.
func TestAlertsFollowMixinConventions(t *testing.T) {
	sections := runbookSections(t)
	for _, r := range loadRules(t, alertsFile) {
		if r.Record != "" {
			t.Errorf("%s: recording rule %s belongs in %s", alertsFile, r.Record, rulesFile)
			continue
		}
		name := r.Alert
		if !alertNameRE.MatchString(name) {
			t.Errorf("alert %q: want a CamelCase name starting with Plateau", name)
		}
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", name, sev)
		}
		if r.For == "" {
			t.Errorf("alert %s: no `for`: one bad scrape would page", name)
		}
		if strings.Contains(name, "BelowPlateau") && r.KeepFiringFor == "" {
			t.Errorf("alert %s: no keep_firing_for: a result wavering at the threshold would flap", name)
		}
		summary := r.Annotations["summary"]
		if summary == "" || strings.Contains(summary, "{{") || strings.Contains(summary, "\n") {
			t.Errorf("alert %s: summary %q, want one untemplated line", name, summary)
		}
		if d := r.Annotations["description"]; !strings.Contains(d, "{{ $labels.") {
			t.Errorf("alert %s: description %q names no label of the alert", name, d)
		}
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q, want %s<section>", name, url, runbookBase)
		case anchor != strings.ToLower(name):
			t.Errorf("alert %s: runbook_url anchor %q, want the alert's own section %q", name, anchor, strings.ToLower(name))
		case !sections[anchor]:
			t.Errorf("alert %s: %s has no section with anchor #%s", name, runbookFile, anchor)
		}
	}
}

// TestRunbookHasNoOrphanSections keeps RUNBOOK.md from describing alerts
// that were renamed or removed.
func TestRunbookHasNoOrphanSections(t *testing.T) {
	alerts := map[string]bool{}
	for _, r := range loadRules(t, alertsFile) {
		alerts[strings.ToLower(r.Alert)] = true
	}
	data, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		title, ok := strings.CutPrefix(line, "## ")
		if ok && alertNameRE.MatchString(title) && !alerts[strings.ToLower(title)] {
			t.Errorf("%s: section %q describes no alert of %s", runbookFile, title, alertsFile)
		}
	}
}

// runbookSections returns the anchors GitHub gives RUNBOOK.md's headings:
// lower case, punctuation dropped, spaces turned into hyphens.
func runbookSections(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		out[slug] = true
	}
	return out
}

// TestEveryAlertIsTested wants, for each alert of alerts.yml, a promtool
// case where it fires with each of its severities and a case where it
// must not fire (an alert_rule_test with empty exp_alerts).
func TestEveryAlertIsTested(t *testing.T) {
	firing := map[string]map[string]bool{} // alertname -> severities seen firing
	silent := map[string]bool{}
	for path, f := range loadPromtoolTests(t) {
		for _, tc := range f.Tests {
			for _, art := range tc.AlertRuleTest {
				if len(art.ExpAlerts) == 0 {
					silent[art.Alertname] = true
				}
				for _, a := range art.ExpAlerts {
					if firing[art.Alertname] == nil {
						firing[art.Alertname] = map[string]bool{}
					}
					sev := a.ExpLabels["severity"]
					if sev == "" {
						t.Errorf("%s: test %q expects %s without its severity label", path, tc.Name, art.Alertname)
					}
					firing[art.Alertname][sev] = true
				}
			}
		}
	}
	defined := map[string]bool{}
	for _, r := range loadRules(t, alertsFile) {
		defined[r.Alert] = true
		sev := r.Labels["severity"]
		if !firing[r.Alert][sev] {
			t.Errorf("alert %s (severity %s) has no promtool test in which it fires", r.Alert, sev)
		}
		if !silent[r.Alert] {
			t.Errorf("alert %s has no promtool test in which it must stay silent (empty exp_alerts)", r.Alert)
		}
	}
	for name := range firing {
		if !defined[name] {
			t.Errorf("promtool tests expect alert %s, which %s does not define", name, alertsFile)
		}
	}
}

// TestPromtoolTestsLoadTheShippedRules makes sure each test file exercises
// the files that ship, not a copy.
func TestPromtoolTestsLoadTheShippedRules(t *testing.T) {
	want := map[string]bool{}
	for _, f := range []string{rulesFile, alertsFile} {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		want[abs] = true
	}
	for path, f := range loadPromtoolTests(t) {
		got := map[string]bool{}
		for _, rf := range f.RuleFiles {
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(path), rf))
			if err != nil {
				t.Fatal(err)
			}
			got[abs] = true
		}
		for w := range want {
			if !got[w] {
				t.Errorf("%s: rule_files does not load %s", path, w)
			}
		}
		if len(f.Tests) == 0 {
			t.Errorf("%s: no tests", path)
		}
	}
}

type alertmanagerConfig struct {
	InhibitRules []struct {
		SourceMatchers []string `yaml:"source_matchers"`
		TargetMatchers []string `yaml:"target_matchers"`
		Equal          []string `yaml:"equal"`
	} `yaml:"inhibit_rules"`
}

var matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*$`)

// TestInhibitRulesNameExistingAlerts keeps alertmanager.yml in step with
// alerts.yml: an inhibition of a renamed alert would silently stop working.
// amtool checks the syntax (TestAmtoolCheckConfig); this checks the names.
func TestInhibitRulesNameExistingAlerts(t *testing.T) {
	data, err := os.ReadFile(alertmanagerFile)
	if err != nil {
		t.Fatal(err)
	}
	// Not strict: the file is a whole Alertmanager configuration, of which
	// only the inhibitions matter here.
	var cfg alertmanagerConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", alertmanagerFile, err)
	}
	if len(cfg.InhibitRules) == 0 {
		t.Fatalf("%s has no inhibit_rules", alertmanagerFile)
	}
	alerts := loadRules(t, alertsFile)
	for i, ir := range cfg.InhibitRules {
		for _, m := range append(append([]string{}, ir.SourceMatchers...), ir.TargetMatchers...) {
			sub := matcherRE.FindStringSubmatch(m)
			if sub == nil {
				t.Errorf("inhibit rule %d: cannot read matcher %q", i, m)
				continue
			}
			label, op, quoted := sub[1], sub[2], sub[3]
			value, err := strconv.Unquote(quoted)
			if err != nil {
				t.Errorf("inhibit rule %d: matcher %q: %v", i, m, err)
				continue
			}
			switch label {
			case "alertname":
				if !matcherMatchesAny(t, op, value, alerts, func(r rule) string { return r.Alert }) {
					t.Errorf("inhibit rule %d: %q matches no alert of %s", i, m, alertsFile)
				}
			case "severity":
				if !matcherMatchesAny(t, op, value, alerts, func(r rule) string { return r.Labels["severity"] }) {
					t.Errorf("inhibit rule %d: %q matches no severity used in %s", i, m, alertsFile)
				}
			}
		}
		if len(ir.Equal) == 0 {
			t.Errorf("inhibit rule %d: no `equal` labels: it would inhibit across every node and file system", i)
		}
	}
}

func matcherMatchesAny(t *testing.T, op, value string, rules []rule, field func(rule) string) bool {
	t.Helper()
	var re *regexp.Regexp
	if op == "=~" || op == "!~" {
		var err error
		if re, err = regexp.Compile("^(?:" + value + ")$"); err != nil {
			t.Errorf("matcher regexp %q: %v", value, err)
			return true
		}
	}
	for _, r := range rules {
		v := field(r)
		switch op {
		case "=":
			if v == value {
				return true
			}
		case "!=":
			if v != value {
				return true
			}
		case "=~":
			if re.MatchString(v) {
				return true
			}
		case "!~":
			if !re.MatchString(v) {
				return true
			}
		}
	}
	return false
}
