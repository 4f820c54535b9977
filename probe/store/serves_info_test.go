package store

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// plateau_target_serves_info says which file system a storage server's
// own target serves, follows a reload, and is absent for other targets.
func TestTargetServesInfo(t *testing.T) {
	cfg, err := probe.ParseConfig([]byte(`targets:
  - name: home
    path: /tmp
    probes:
      - {name: m, kind: metadata}
  - name: ost0-disk
    path: /srv/ost0
    serves: scratch
    probes:
      - {name: s, kind: sequential}
`), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	s.Configure(cfg, nil)
	want := `
# HELP plateau_target_serves_info The clients' target of the file system this storage server's own target serves; always 1.
# TYPE plateau_target_serves_info gauge
plateau_target_serves_info{serves="scratch",target="ost0-disk"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_target_serves_info"); err != nil {
		t.Fatal(err)
	}
	// A reload without it drops the series.
	cfg.Targets = cfg.Targets[:1]
	s.Configure(cfg, nil)
	if n := testutil.CollectAndCount(s, "plateau_target_serves_info"); n != 0 {
		t.Errorf("%d plateau_target_serves_info series after the serving target went", n)
	}
}

// The expected output is also a file, for the dashboards' test that runs
// every rule on exported series (TestRuleExpressionsMatchExportedSeries):
// it names the golden /metrics' target, e2e, as serving scratch.
func TestTargetServesInfoFixture(t *testing.T) {
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "e2e", Serves: "scratch"}}}, nil)
	want, err := os.ReadFile("testdata/serves_info.prom")
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(s, bytes.NewReader(want), "plateau_target_serves_info"); err != nil {
		t.Fatal(err)
	}
}
