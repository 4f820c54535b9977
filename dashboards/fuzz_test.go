package dashboards

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedExpositions adds the golden /metrics and the collectors' expected
// outputs, when present, to a fuzz corpus.
func seedExpositions(f *testing.F) {
	paths := []string{goldenMetrics}
	for _, g := range collectorExpositionGlobs {
		m, _ := filepath.Glob(g)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("# HELP plateau_probe_success x\n# TYPE plateau_probe_success gauge\nplateau_probe_success{kind=\"sequential\",probe=\"seq\",target=\"tmp\"} 1\n"))
	f.Add([]byte("# TYPE plateau_probe_latency_seconds histogram\nplateau_probe_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} <masked>\n"))
	f.Add([]byte("plateau_x{a=\"q\\\"uote\\\\\",b=\"\"} 1 1700000000000\n"))
}

func FuzzParseExposition(f *testing.F) {
	seedExpositions(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := parseExposition(data)
		if err != nil {
			return
		}
		for name, mi := range e {
			if metricNameRE.FindString(name) != name {
				t.Fatalf("accepted invalid metric name %q", name)
			}
			for l := range mi.labels {
				if metricNameRE.FindString(l) != l || strings.Contains(l, ":") {
					t.Fatalf("metric %s: accepted invalid label name %q", name, l)
				}
			}
		}
	})
}

// seedDashboardQueries adds every query of the shipped dashboards.
func seedDashboardQueries(f *testing.F) {
	paths, _ := filepath.Glob(dashboardGlob)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			for _, key := range []string{`"expr": `, `"query": `, `"definition": `} {
				if v, ok := strings.CutPrefix(line, key); ok {
					f.Add(strings.Trim(strings.TrimSuffix(v, ","), `"`))
				}
			}
		}
	}
	f.Add(`rate(x{job=~"$job",a="${a:regex}",b="[[b]]"}[$__rate_interval])`)
	f.Add(`$${a}`)
	f.Add(`label_values(plateau_exporter_build_info{job=~"$job", x="a,b"}, instance)`)
}

func FuzzInterpolateGrafana(f *testing.F) {
	seedDashboardQueries(f)
	f.Fuzz(func(t *testing.T, q string) {
		out := interpolateGrafana(q)
		if grafanaVarRE.MatchString(out) {
			t.Fatalf("interpolateGrafana(%q) = %q still holds a variable", q, out)
		}
		if !strings.Contains(q, "$") && !strings.Contains(q, "[[") && out != q {
			t.Fatalf("interpolateGrafana(%q) = %q changed a query without variables", q, out)
		}
	})
}

func FuzzVariableQuery(f *testing.F) {
	seedDashboardQueries(f)
	f.Fuzz(func(t *testing.T, q string) {
		expr, label, err := variableQuery(q)
		if err != nil {
			return
		}
		if !strings.Contains(q, expr) || !strings.Contains(q, label) {
			t.Fatalf("variableQuery(%q) = %q, %q: not parts of the query", q, expr, label)
		}
		if strings.HasPrefix(strings.TrimSpace(q), "label_values(") && strings.Contains(label, ",") {
			// The label is what follows the last top-level comma; a comma in
			// it must sit inside quotes or brackets.
			if lastTopLevelComma(label) >= 0 {
				t.Fatalf("variableQuery(%q): label %q holds a top-level comma", q, label)
			}
		}
	})
}
