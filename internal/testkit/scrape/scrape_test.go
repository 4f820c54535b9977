package scrape

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

const exposition = `# HELP plateau_probe_success Whether the last run succeeded.
# TYPE plateau_probe_success gauge
plateau_probe_success{probe="seq",target="scratch"} 1
plateau_probe_success{probe="md",target="scratch"} 0
# TYPE plateau_probe_runs_total counter
plateau_probe_runs_total{probe="seq",result="success",target="scratch"} 7
`

func TestFamiliesAndValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	fams, _, err := Families(nil, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"plateau_probe_success", map[string]string{"probe": "md"}, 0, true},
		{"plateau_probe_success", map[string]string{"probe": "seq", "target": "scratch"}, 1, true},
		{"plateau_probe_success", map[string]string{"probe": "rand"}, 0, false},
		{"plateau_probe_runs_total", nil, 7, true},
		{"plateau_absent", nil, 0, false},
	} {
		v, ok := Value(fams, c.name, c.labels)
		if v != c.want || ok != c.ok {
			t.Errorf("Value(%s, %v) = %g, %t; want %g, %t", c.name, c.labels, v, ok, c.want, c.ok)
		}
	}
	if _, _, err := Families(nil, srv.URL+"/missing"); err == nil {
		t.Error("a 404 page was read as an exposition")
	}
}

func TestParseRejectsBadText(t *testing.T) {
	if _, err := Parse([]byte("plateau_x{ 1\n")); err == nil {
		t.Error("a broken sample line parsed")
	}
}
