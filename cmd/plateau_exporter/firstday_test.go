package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// scrape is one /metrics answer of the daemon and when it was taken.
type scrape struct {
	at       time.Time
	families map[string]*dto.MetricFamily
}

// TestIdleNodeFiresNoAlert is a newcomer's first day on a node without
// GPFS, InfiniBand, NVMe, NFS or Lustre (this machine, or any CI runner):
// the daemon started with its default flags and config exports no success
// series for an absent collector, and 20 minutes of what it exports,
// replayed through every shipped alert with promtool, fire nothing. The
// scrapes are real; the replay stretches them to 20 minutes without a
// 20-minute wait (see replaySeries).
func TestIdleNodeFiresNoAlert(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	// The default config probes the OS temp directory.
	t.Setenv("TMPDIR", t.TempDir())
	absent := map[string]bool{}
	for _, c := range []struct{ name, path string }{
		{"gpfs", "/usr/lpp/mmfs/bin/mmpmon"},
		{"infiniband", "/sys/class/infiniband"},
		{"nvme", "/sys/class/nvme"},
		{"lustre", "/sys/fs/lustre"},
		{"lustre_server", "/sys/fs/lustre"},
	} {
		if _, err := os.Stat(c.path); err != nil {
			absent[c.name] = true
		}
	}
	if len(absent) == 0 {
		t.Skip("this node has every collector's subject")
	}
	d := startDaemon(t, "--probe.hostname=firstday-node")
	var scrapes []scrape
	// Every probe of the default config runs within its first minute
	// (splay in a 1m interval); scrape until each has run, and twice more.
	extra := 0
	probetest.PollUntil(t, "every default probe to run once", 3*time.Second, 2*time.Minute, func() bool {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(d.metrics()))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		scrapes = append(scrapes, scrape{at: time.Now(), families: fams})
		if f := fams["plateau_probe_last_run_timestamp_seconds"]; f != nil && len(f.Metric) >= 4 {
			extra++
		}
		return extra >= 3
	})
	last := scrapes[len(scrapes)-1].families
	present := map[string]float64{}
	for _, m := range last["plateau_scrape_collector_present"].GetMetric() {
		present[labelOf(m, "collector")] = m.GetGauge().GetValue()
	}
	for name := range absent {
		if v, ok := present[name]; !ok || v != 0 {
			t.Errorf("collector %s: plateau_scrape_collector_present %v (exported %v), want 0 on a node without it", name, v, ok)
		}
	}
	for _, m := range last["plateau_scrape_collector_success"].GetMetric() {
		if c := labelOf(m, "collector"); absent[c] || present[c] == 0 {
			t.Errorf("absent collector %s exports plateau_scrape_collector_success %v", c, m.GetGauge().GetValue())
		}
	}

	dir := t.TempDir()
	test := promtoolReplay(t, scrapes, 20)
	file := filepath.Join(dir, "replay.yml")
	if err := os.WriteFile(file, test, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("the shipped alerts fire on 20 minutes of an idle node's own /metrics:\n%s", out)
	}
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// promtoolReplay writes a promtool test that feeds minutes minutes of the
// scrapes, one a minute, to every shipped rule file and expects no alert at
// any minute. The k recorded scrapes are cycled: a gauge takes the value of
// scrape i mod k; a counter (and a histogram's parts) goes on from where
// the last cycle ended, so it never resets; a Unix timestamp keeps its age
// (value minus the scrape's time) at the replayed minute, so that "not run
// for N intervals" reads what the node really showed.
func promtoolReplay(t *testing.T, scrapes []scrape, minutes int) []byte {
	t.Helper()
	type point struct {
		v  float64
		ok bool
	}
	type series struct {
		counter, timestamp bool
		pts                []point
	}
	all := map[string]*series{}
	k := len(scrapes)
	for i, s := range scrapes {
		for name, f := range s.families {
			for _, m := range f.GetMetric() {
				add := func(suffix string, v float64, extra ...string) {
					key := seriesKey(name+suffix, m, extra...)
					se := all[key]
					if se == nil {
						se = &series{pts: make([]point, k)}
						se.counter = f.GetType() == dto.MetricType_COUNTER || f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY
						se.timestamp = strings.HasSuffix(name, "_timestamp_seconds")
						all[key] = se
					}
					if se.timestamp {
						v -= float64(s.at.UnixNano()) / 1e9
					}
					se.pts[i] = point{v, !math.IsNaN(v)}
				}
				switch f.GetType() {
				case dto.MetricType_COUNTER:
					add("", m.GetCounter().GetValue())
				case dto.MetricType_GAUGE:
					add("", m.GetGauge().GetValue())
				case dto.MetricType_UNTYPED:
					add("", m.GetUntyped().GetValue())
				case dto.MetricType_HISTOGRAM:
					h := m.GetHistogram()
					for _, b := range h.GetBucket() {
						add("_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
					}
					add("_bucket", float64(h.GetSampleCount()), "le", "+Inf")
					add("_count", float64(h.GetSampleCount()))
					add("_sum", h.GetSampleSum())
				}
			}
		}
	}
	keys := make([]string, 0, len(all))
	for key := range all {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	type inputSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	var inputs []inputSeries
	for _, key := range keys {
		se := all[key]
		// A counter's growth over one cycle: what the next cycle adds.
		first, lastV := math.NaN(), math.NaN()
		for _, p := range se.pts {
			if p.ok {
				if math.IsNaN(first) {
					first = p.v
				}
				lastV = p.v
			}
		}
		vals := make([]string, 0, minutes+1)
		for i := 0; i <= minutes; i++ {
			p := se.pts[i%k]
			if !p.ok {
				vals = append(vals, "_")
				continue
			}
			v := p.v
			if se.counter {
				v += float64(i/k) * (lastV - first)
			}
			if se.timestamp {
				v += float64(i * 60)
			}
			vals = append(vals, strconv.FormatFloat(v, 'g', -1, 64))
		}
		inputs = append(inputs, inputSeries{Series: key, Values: strings.Join(vals, " ")})
	}
	type alertTest struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []any  `yaml:"exp_alerts"`
	}
	var alerts []alertTest
	names := shippedAlertNames(t)
	for m := 5; m <= minutes; m += 5 {
		for _, n := range names {
			alerts = append(alerts, alertTest{EvalTime: fmt.Sprintf("%dm", m), Alertname: n, ExpAlerts: []any{}})
		}
	}
	root := filepath.Join("..", "..", "dashboards")
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{
		"rule_files":          []string{filepath.Join(abs, "rules.yml"), filepath.Join(abs, "alerts.yml"), filepath.Join(abs, "fleet_alerts.yml")},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"name":            "an idle node's own /metrics",
			"interval":        "1m",
			"input_series":    inputs,
			"alert_rule_test": alerts,
		}},
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// seriesKey is the promtool series notation of one sample, with the job and
// instance labels a scrape adds.
func seriesKey(name string, m *dto.Metric, extra ...string) string {
	labels := map[string]string{"job": "plateau", "instance": "firstday-node:9731"}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(extra); i += 2 {
		labels[extra[i]] = extra[i+1]
	}
	names := make([]string, 0, len(labels))
	for n := range labels {
		if labelNameRE.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%q", n, labels[n])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// shippedAlertNames lists every alert of the shipped alert files.
func shippedAlertNames(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range []string{"alerts.yml", "fleet_alerts.yml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "dashboards", f))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []struct {
				Rules []struct {
					Alert string `yaml:"alert"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					seen[r.Alert] = true
				}
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no alert in the shipped alert files")
	}
	return names
}
