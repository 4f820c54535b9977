package dashboards

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
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
			t.Errorf("%s: alert %s belongs in %s", rulesFile, r.Alert, strings.Join(alertFiles(), " or "))
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
	for _, r := range loadAlerts(t) {
		if r.Record != "" {
			t.Errorf("%s: recording rule %s belongs in %s", strings.Join(alertFiles(), " or "), r.Record, rulesFile)
			continue
		}
		name := r.Alert
		if !alertNameRE.MatchString(name) {
			t.Errorf("alert %q: want a CamelCase name starting with Plateau", name)
		}
		// none: an alert that only inhibits others, which
		// alertmanager.yml routes to a receiver with no integration.
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" && sev != "none" {
			t.Errorf("alert %s: severity %q, want warning, critical or none", name, sev)
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
	for _, r := range loadAlerts(t) {
		alerts[strings.ToLower(r.Alert)] = true
	}
	data, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		title, ok := strings.CutPrefix(line, "## ")
		if ok && alertNameRE.MatchString(title) && !alerts[strings.ToLower(title)] {
			t.Errorf("%s: section %q describes no alert of %s", runbookFile, title, strings.Join(alertFiles(), " or "))
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

// TestEveryAlertIsTested wants, for each shipped alert, a promtool
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
	for _, r := range loadAlerts(t) {
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
			t.Errorf("promtool tests expect alert %s, which %s does not define", name, strings.Join(alertFiles(), " nor "))
		}
	}
}

// TestPromtoolTestsLoadTheShippedRules makes sure each test file exercises
// the files that ship, not a copy.
func TestPromtoolTestsLoadTheShippedRules(t *testing.T) {
	want := map[string]bool{}
	groups := map[string]bool{}
	for _, f := range shippedRuleFiles() {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		want[abs] = true
		var rf ruleFile
		decodeYAMLStrict(t, f, &rf)
		for _, g := range rf.Groups {
			groups[g.Name] = true
		}
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
		// promtool orders the groups it knows by this list and ignores
		// a name it does not know: a misspelt or renamed group would
		// silently leave the test to a random order.
		for _, name := range f.GroupEvalOrder {
			if !groups[name] {
				t.Errorf("%s: group_eval_order names %s, a group no file of %s has", path, name, shippedRuleFiles())
			}
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

// loadAlertmanagerConfig reads the inhibitions of alertmanager.yml. Not
// strict: the file is a whole Alertmanager configuration, of which only
// the inhibitions matter to these tests.
func loadAlertmanagerConfig(t *testing.T) alertmanagerConfig {
	t.Helper()
	data, err := os.ReadFile(alertmanagerFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg alertmanagerConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", alertmanagerFile, err)
	}
	return cfg
}

// TestInhibitRulesNameExistingAlerts keeps alertmanager.yml in step with
// the alert files: an inhibition of a renamed alert would silently stop working.
// amtool checks the syntax (TestAmtoolCheckConfig); this checks the names.
func TestInhibitRulesNameExistingAlerts(t *testing.T) {
	cfg := loadAlertmanagerConfig(t)
	if len(cfg.InhibitRules) == 0 {
		t.Fatalf("%s has no inhibit_rules", alertmanagerFile)
	}
	alerts := loadAlerts(t)
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
					t.Errorf("inhibit rule %d: %q matches no alert of %s", i, m, alertFiles())
				}
			case "severity":
				if !matcherMatchesAny(t, op, value, alerts, func(r rule) string { return r.Labels["severity"] }) {
					t.Errorf("inhibit rule %d: %q matches no severity used in %s", i, m, alertFiles())
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

// The margins the promtool tests of tests/probes.yml and tests/fleet.yml
// are written with, so that they survive the tuning of the page by
// backtest (see the head of tests/probes.yml). TestPromtoolTestMarginsHold
// says which one a tuning broke, rather than leaving it to a promtool
// failure at some eval time.
const (
	// Cases that must page drop the change ratio to at most this, with
	// marginNoise.
	marginPageRatio = 0.35
	// Cases that must not page hold it at least this high with
	// marginNoise: one slow run as the daemon exports it, 2^(-1/4) =
	// 0.841 for four runs, since each run counts at worst as half the
	// normal (winsorFloor in probe/plateau/change.go).
	marginQuietRatio = 0.84
	marginNoise      = 0.05
	// A noisy op (noise marginNoisyNoise) is quiet at marginNoisyQuiet
	// and still pages at marginNoisyPage.
	marginNoisyNoise = 0.4
	marginNoisyQuiet = 0.7
	marginNoisyPage  = 0.1
	// Pages are expected this long after the change ratio reached its
	// low, and expected gone this long after it recovered.
	marginMaxFor           = 30 * time.Minute
	marginMaxKeepFiringFor = time.Hour
	// One slow run taken literally (the change ratio low for one run of
	// 15m) is silent only while `for` outlasts it.
	marginMinFor = 15 * time.Minute
)

func TestPromtoolTestMarginsHold(t *testing.T) {
	threshold := pageThreshold(t)
	check := func(noise, ratio float64, page bool) {
		t.Helper()
		thr, err := threshold(noise)
		if err != nil {
			t.Fatal(err)
		}
		if got := ratio < thr; got != page {
			t.Errorf("with noise %g the page threshold is %.3f, so a change ratio of %g pages: %v, but the promtool tests "+
				"assume %v (see the head of tests/probes.yml); move their values or reconsider the tuning", noise, thr, ratio, got, page)
		}
	}
	check(marginNoise, marginPageRatio, true)
	check(marginNoise, marginQuietRatio, false)
	check(marginNoisyNoise, marginNoisyQuiet, false)
	check(marginNoisyNoise, marginNoisyPage, true)

	for _, name := range []string{"PlateauProbeRegression", "PlateauFileSystemRegression"} {
		r := alertNamed(t, name)
		forDur, keep := ruleDuration(t, r, r.For), ruleDuration(t, r, r.KeepFiringFor)
		if forDur > marginMaxFor {
			t.Errorf("%s: for %s, longer than the %s after which the promtool tests expect it firing", name, r.For, marginMaxFor)
		}
		if keep > marginMaxKeepFiringFor {
			t.Errorf("%s: keep_firing_for %s, longer than the %s after which the promtool tests expect it gone", name, r.KeepFiringFor, marginMaxKeepFiringFor)
		}
	}
	if r := alertNamed(t, "PlateauProbeRegression"); ruleDuration(t, r, r.For) < marginMinFor {
		t.Errorf("PlateauProbeRegression: for %s, shorter than one default run (%s): a change ratio low for one run "+
			"would page, and the next run would not have to agree", r.For, marginMinFor)
	}
}

// TestFileSystemPageFiresBeforeNodePages keeps what the inhibition of the
// node pages by PlateauFileSystemRegression (alertmanager.yml) relies on:
// when the nodes of a file system fall together, the file-system page
// fires before their node pages would notify.
func TestFileSystemPageFiresBeforeNodePages(t *testing.T) {
	fs, node := alertNamed(t, "PlateauFileSystemRegression"), alertNamed(t, "PlateauProbeRegression")
	if ruleDuration(t, fs, fs.For) >= ruleDuration(t, node, node.For) {
		t.Errorf("PlateauFileSystemRegression: for %s is not shorter than PlateauProbeRegression's %s: the node pages "+
			"of a storage problem would notify before the file-system page that inhibits them", fs.For, node.For)
	}
}

// alertNamed returns the one alerting rule of alertFiles with this name.
func alertNamed(t *testing.T, name string) rule {
	t.Helper()
	var found []rule
	for _, r := range loadAlerts(t) {
		if r.Alert == name {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s define alert %s %d times, want once", alertFiles(), name, len(found))
	}
	return found[0]
}

// ruleDuration parses a `for` or keep_firing_for; empty is zero.
func ruleDuration(t *testing.T, r rule, s string) time.Duration {
	t.Helper()
	if s == "" {
		return 0
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		t.Fatalf("alert %s: duration %q: %v", r.Alert, s, err)
	}
	return time.Duration(d)
}

const (
	changeNoiseMetric = "plateau_probe_change_fast_noise_ratio"
	// regressionVerdict names where the page threshold is defined: the
	// daemon computes the verdict (plateau_probe_regression), not a rule.
	regressionVerdict = "plateau.PageThreshold (probe/plateau/verdict.go)"
)

// pageThreshold is the sudden-regression verdict's threshold on the
// two-run change ratio as a function of its noise, as the daemon computes
// it for plateau_probe_regression.
func pageThreshold(t *testing.T) func(noise float64) (float64, error) {
	t.Helper()
	return func(noise float64) (float64, error) { return plateau.PageThreshold(noise), nil }
}

// evalNoiseFunction evaluates a PromQL expression of numbers and one
// series, plateau_probe_change_fast_noise_ratio (whatever its matchers), for
// one value of that series. It knows the arithmetic and the functions a
// threshold is written with; anything else is an error, for the test to
// learn.
func evalNoiseFunction(e parser.Expr, noise float64) (float64, error) {
	eval := func(e parser.Expr) (float64, error) { return evalNoiseFunction(e, noise) }
	switch n := e.(type) {
	case *parser.NumberLiteral:
		return n.Val, nil
	case *parser.ParenExpr:
		return eval(n.Expr)
	case *parser.UnaryExpr:
		v, err := eval(n.Expr)
		if n.Op == parser.SUB {
			v = -v
		}
		return v, err
	case *parser.VectorSelector:
		if selectorName(n) != changeNoiseMetric {
			return 0, fmt.Errorf("threshold reads %s, want only %s", n, changeNoiseMetric)
		}
		return noise, nil
	case *parser.BinaryExpr:
		l, err := eval(n.LHS)
		if err != nil {
			return 0, err
		}
		r, err := eval(n.RHS)
		if err != nil {
			return 0, err
		}
		switch n.Op {
		case parser.ADD:
			return l + r, nil
		case parser.SUB:
			return l - r, nil
		case parser.MUL:
			return l * r, nil
		case parser.DIV:
			return l / r, nil
		}
		return 0, fmt.Errorf("operator %s in threshold %s", n.Op, e)
	case *parser.Call:
		args := make([]float64, len(n.Args))
		for i, a := range n.Args {
			v, err := eval(a)
			if err != nil {
				return 0, err
			}
			args[i] = v
		}
		switch n.Func.Name {
		case "clamp":
			return math.Min(math.Max(args[0], args[1]), args[2]), nil
		case "clamp_min":
			return math.Max(args[0], args[1]), nil
		case "clamp_max":
			return math.Min(args[0], args[1]), nil
		case "abs":
			return math.Abs(args[0]), nil
		case "sqrt":
			return math.Sqrt(args[0]), nil
		case "exp":
			return math.Exp(args[0]), nil
		}
		return 0, fmt.Errorf("function %s in threshold %s", n.Func.Name, e)
	}
	return 0, fmt.Errorf("cannot evaluate %s (%T) in a threshold", e, e)
}

// alertLabels is one alert as Alertmanager sees it, for the inhibition
// checks below.
type alertLabels map[string]string

// TestInhibitionsKeepOneProblemOnePage checks the inhibitions of
// alertmanager.yml against the cases they exist for: a storage problem
// pages once per file system, a sudden regression is not repeated by the
// chronic warning of the same node and target, a hung mount explains the rest of its
// node's probe alerts, and none of it reaches across file systems or nodes.
func TestInhibitionsKeepOneProblemOnePage(t *testing.T) {
	cfg := loadAlertmanagerConfig(t)
	// The verdict alerts and the exporter's probe alerts are per node and
	// target (alerts.yml).
	perTarget := func(alert, severity, instance, target string) alertLabels {
		return alertLabels{"alertname": alert, "severity": severity, "job": "plateau", "instance": instance, "target": target}
	}
	fsPage := alertLabels{"alertname": "PlateauFileSystemRegression", "severity": "critical", "job": "plateau", "target": "scratch"}
	page := perTarget("PlateauProbeRegression", "critical", "node01:9731", "scratch")
	warning := perTarget("PlateauProbeBelowPlateau", "warning", "node01:9731", "scratch")
	hung := alertLabels{"alertname": "PlateauProbeHung", "severity": "critical", "job": "plateau", "instance": "node01:9731", "target": "scratch"}
	cases := []struct {
		name           string
		source, target alertLabels
		inhibited      bool
	}{
		{"the file-system page holds its node pages", fsPage, page, true},
		{"the file-system page holds its chronic warnings", fsPage, warning, true},
		{"the file-system page holds another node's page", fsPage, perTarget("PlateauProbeRegression", "critical", "node07:9731", "scratch"), true},
		{"the file-system page leaves another file system's pages", fsPage, perTarget("PlateauProbeRegression", "critical", "node01:9731", "home"), false},
		{"the file-system page leaves another job's pages", fsPage, func() alertLabels {
			a := perTarget("PlateauProbeRegression", "critical", "node01:9731", "scratch")
			a["job"] = "other"
			return a
		}(), false},
		{"a node page holds the chronic warning of its target", page, warning, true},
		{"a node page leaves the chronic warning of another target of its node", page, perTarget("PlateauProbeBelowPlateau", "warning", "node01:9731", "home"), false},
		{"a node page leaves another node's warning", page, perTarget("PlateauProbeBelowPlateau", "warning", "node02:9731", "scratch"), false},
		{"a node page leaves the file-system page", page, fsPage, false},
		{"a node page leaves another node's page", page, perTarget("PlateauProbeRegression", "critical", "node02:9731", "scratch"), false},
		{"a chronic warning leaves the page", warning, page, false},
		{"a hung mount holds the node page", hung, page, true},
		{"a hung mount holds the chronic warning", hung, warning, true},
		{"a hung mount holds the failing probe", hung, perTarget("PlateauProbeFailing", "warning", "node01:9731", "scratch"), true},
		{"a hung mount holds the probe not run", hung, perTarget("PlateauProbeNotRun", "warning", "node01:9731", "scratch"), true},
		{"a hung mount leaves another node", hung, perTarget("PlateauProbeRegression", "critical", "node02:9731", "scratch"), false},
		{"a hung mount leaves another target of its node", hung, perTarget("PlateauProbeRegression", "critical", "node01:9731", "home"), false},
		{"a hung mount leaves the file-system page", hung, fsPage, false},
	}
	for _, c := range cases {
		for k := range c.target {
			if c.target[k] == "" {
				delete(c.target, k)
			}
		}
		if got := inhibits(t, cfg, c.source, c.target); got != c.inhibited {
			t.Errorf("%s: %s inhibits %s: %v, want %v", c.name, c.source["alertname"], c.target["alertname"], got, c.inhibited)
		}
	}
}

// inhibits reports whether a firing source alert inhibits the target alert
// under one of cfg's rules, as Alertmanager decides it: the source matches
// the source matchers, the target the target matchers, and each label of
// `equal` has the same value on both (a missing label is the empty value).
func inhibits(t *testing.T, cfg alertmanagerConfig, source, target alertLabels) bool {
	t.Helper()
	for _, ir := range cfg.InhibitRules {
		if !matchesAll(t, ir.SourceMatchers, source) || !matchesAll(t, ir.TargetMatchers, target) {
			continue
		}
		equal := true
		for _, l := range ir.Equal {
			equal = equal && source[l] == target[l]
		}
		if equal {
			return true
		}
	}
	return false
}

func matchesAll(t *testing.T, matchers []string, a alertLabels) bool {
	t.Helper()
	for _, m := range matchers {
		sub := matcherRE.FindStringSubmatch(m)
		if sub == nil {
			t.Fatalf("cannot read matcher %q", m)
		}
		value, err := strconv.Unquote(sub[3])
		if err != nil {
			t.Fatalf("matcher %q: %v", m, err)
		}
		v := a[sub[1]]
		var ok bool
		switch sub[2] {
		case "=":
			ok = v == value
		case "!=":
			ok = v != value
		case "=~", "!~":
			re, err := regexp.Compile("^(?:" + value + ")$")
			if err != nil {
				t.Fatalf("matcher %q: %v", m, err)
			}
			ok = re.MatchString(v) == (sub[2] == "=~")
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestCauseAlertsInhibitTheProbeAlertsTheyExplain checks the inhibitions
// of the causes (alertmanager.yml): a critical cause alert of a node (a
// GPFS file system gone, RDMA down, disks down) holds the probe alerts of
// that node, so the page names the cause; a warning cause holds nothing;
// nothing reaches another node; and a busy file system
// (PlateauFileSystemContention) holds the node pages of its target, not
// another target's. The promtool cases of tests/causes.yml show each
// cause alert firing beside the probe alert it explains.
func TestCauseAlertsInhibitTheProbeAlertsTheyExplain(t *testing.T) {
	cfg := loadAlertmanagerConfig(t)
	// The probe alerts are per node and target, naming their probes and
	// ops in the description.
	probe := func(alert, severity, instance, target string) alertLabels {
		return alertLabels{"alertname": alert, "severity": severity, "job": "plateau", "instance": instance, "target": target}
	}
	cause := func(alert, severity, instance string, extra ...string) alertLabels {
		a := alertLabels{"alertname": alert, "severity": severity, "job": "plateau", "instance": instance}
		for i := 0; i+1 < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	page := probe("PlateauProbeRegression", "critical", "node01:9731", "scratch")
	warning := probe("PlateauProbeBelowPlateau", "warning", "node01:9731", "scratch")
	failing := probe("PlateauProbeFailing", "warning", "node01:9731", "scratch")
	otherNode := probe("PlateauProbeRegression", "critical", "node02:9731", "scratch")
	fsPage := alertLabels{"alertname": "PlateauFileSystemRegression", "severity": "critical", "job": "plateau", "target": "scratch"}
	unmounted := cause("PlateauGPFSFileSystemNotMounted", "critical", "node01:9731", "filesystem", "scratch", "state", "not mounted")
	rdma := cause("PlateauGPFSRDMADown", "critical", "node01:9731")
	disks := cause("PlateauGPFSDisksDown", "critical", "node01:9731", "filesystem", "scratch")
	waiters := cause("PlateauGPFSLongWaiters", "warning", "node01:9731")
	busy := alertLabels{"alertname": "PlateauFileSystemContention", "severity": "warning", "job": "plateau", "target": "scratch"}
	cases := []struct {
		name           string
		source, target alertLabels
		inhibited      bool
	}{
		{"an unmounted file system holds its node's page", unmounted, page, true},
		{"an unmounted file system holds its node's chronic warning", unmounted, warning, true},
		{"an unmounted file system holds its node's failing probe", unmounted, failing, true},
		{"an unmounted file system leaves another node's page", unmounted, otherNode, false},
		{"an unmounted file system leaves the file-system page", unmounted, fsPage, false},
		{"RDMA down holds its node's page", rdma, page, true},
		{"RDMA down holds its node's chronic warning", rdma, warning, true},
		{"RDMA down leaves its node's failing probe", rdma, failing, false},
		{"RDMA down leaves another node's page", rdma, otherNode, false},
		{"disks down hold their node's page", disks, page, true},
		{"disks down leave another node's page", disks, otherNode, false},
		{"long waiters, a warning, leave the page", waiters, page, false},
		{"a busy file system holds its node pages", busy, page, true},
		{"a busy file system holds another node's page of it", busy, otherNode, true},
		{"a busy file system holds its chronic warnings", busy, warning, true},
		{"a busy file system leaves another target's page", busy, probe("PlateauProbeRegression", "critical", "node01:9731", "home"), false},
		{"a probe page leaves the cause alert", page, rdma, false},
	}
	for _, c := range cases {
		if got := inhibits(t, cfg, c.source, c.target); got != c.inhibited {
			t.Errorf("%s: %s inhibits %s: %v, want %v", c.name, c.source["alertname"], c.target["alertname"], got, c.inhibited)
		}
	}
}

// TestCauseAlertsFireBeforeTheNodePage keeps what those inhibitions rely
// on: an alert that holds the node pages fires before them, so the on-call
// gets the cause, not the symptom first.
func TestCauseAlertsFireBeforeTheNodePage(t *testing.T) {
	node := alertNamed(t, "PlateauProbeRegression")
	nodeFor := ruleDuration(t, node, node.For)
	for _, name := range []string{"PlateauGPFSFileSystemNotMounted", "PlateauGPFSRDMADown", "PlateauGPFSDisksDown", "PlateauFileSystemContention"} {
		r := alertNamed(t, name)
		if d := ruleDuration(t, r, r.For); d >= nodeFor {
			t.Errorf("%s: for %s is not shorter than PlateauProbeRegression's %s: the node page would notify before the cause that inhibits it", name, r.For, node.For)
		}
	}
}

// TestServerPageIsTheOnlyNotification checks the inhibition of
// alertmanager.yml that makes one slow data server one notification, with
// the alerts tests/servers.yml shows firing for it: PlateauServerSlow holds
// the file-system page and the node pages of its server's target, and
// nothing of the other servers' targets, nor of another job.
func TestServerPageIsTheOnlyNotification(t *testing.T) {
	cfg := loadAlertmanagerConfig(t)
	server := alertLabels{"alertname": "PlateauServerSlow", "severity": "critical", "job": "plateau", "target": "scratch-1", "server_group": "scratch", "server": "1"}
	perTarget := func(alert, severity, instance, target string) alertLabels {
		return alertLabels{"alertname": alert, "severity": severity, "job": "plateau", "instance": instance, "target": target}
	}
	fsPage := func(target string) alertLabels {
		return alertLabels{"alertname": "PlateauFileSystemRegression", "severity": "critical", "job": "plateau", "target": target}
	}
	cases := []struct {
		name      string
		target    alertLabels
		inhibited bool
	}{
		{"the file-system page of its target", fsPage("scratch-1"), true},
		{"each node page of its target", perTarget("PlateauProbeRegression", "critical", "node01:9731", "scratch-1"), true},
		{"another node's page of its target", perTarget("PlateauProbeRegression", "critical", "node03:9731", "scratch-1"), true},
		{"the chronic warning of its target", perTarget("PlateauProbeBelowPlateau", "warning", "node01:9731", "scratch-1"), true},
		{"the file-system page of a sibling server", fsPage("scratch-2"), false},
		{"a node page of a sibling server", perTarget("PlateauProbeRegression", "critical", "node01:9731", "scratch-2"), false},
		{"a hung mount of its target", perTarget("PlateauProbeHung", "critical", "node01:9731", "scratch-1"), false},
		{"another job's file-system page", func() alertLabels { a := fsPage("scratch-1"); a["job"] = "other"; return a }(), false},
	}
	for _, c := range cases {
		if got := inhibits(t, cfg, server, c.target); got != c.inhibited {
			t.Errorf("%s: PlateauServerSlow inhibits %s: %v, want %v", c.name, c.target["alertname"], got, c.inhibited)
		}
	}
	// Nothing holds the server page itself: not the file-system page of its
	// target, nor a node page.
	for _, src := range []alertLabels{fsPage("scratch-1"), perTarget("PlateauProbeRegression", "critical", "node01:9731", "scratch-1")} {
		if inhibits(t, cfg, src, server) {
			t.Errorf("%s inhibits PlateauServerSlow: the server would never be named", src["alertname"])
		}
	}
	// The inhibition holds only what fires no earlier than the server page.
	srv, fs, node := alertNamed(t, "PlateauServerSlow"), alertNamed(t, "PlateauFileSystemRegression"), alertNamed(t, "PlateauProbeRegression")
	if ruleDuration(t, srv, srv.For) > ruleDuration(t, fs, fs.For) || ruleDuration(t, srv, srv.For) >= ruleDuration(t, node, node.For) {
		t.Errorf("PlateauServerSlow: for %s, want no longer than PlateauFileSystemRegression's %s and shorter than PlateauProbeRegression's %s: the pages it holds would notify first",
			srv.For, fs.For, node.For)
	}
	if ruleDuration(t, srv, srv.KeepFiringFor) < ruleDuration(t, fs, fs.KeepFiringFor) {
		t.Errorf("PlateauServerSlow: keep_firing_for %s, shorter than PlateauFileSystemRegression's %s: that page would notify alone once the server recovers",
			srv.KeepFiringFor, fs.KeepFiringFor)
	}
}
