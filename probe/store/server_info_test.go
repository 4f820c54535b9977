package store

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// plateau_target_server_info names the server of each target a servers
// list made, follows a reload, and is absent for an ordinary target.
func TestTargetServerInfo(t *testing.T) {
	cfg, err := probe.ParseConfig([]byte(`targets:
  - name: home
    path: /tmp
    probes:
      - {name: m, kind: metadata}
  - name: scratch
    path: /mnt/scratch/ost{server}
    servers: ["0", "1"]
    probes:
      - {name: m, kind: metadata}
`), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	s.Configure(cfg, nil)
	const head = `
# HELP plateau_target_server_info The data server and server group of a target made by a servers list; always 1.
# TYPE plateau_target_server_info gauge
`
	want := head + `plateau_target_server_info{server="0",server_group="scratch",target="scratch-0"} 1
plateau_target_server_info{server="1",server_group="scratch",target="scratch-1"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_target_server_info"); err != nil {
		t.Fatal(err)
	}
	// A reload that drops a server drops its series.
	cfg.Targets = cfg.Targets[:2]
	s.Configure(cfg, nil)
	want = head + `plateau_target_server_info{server="0",server_group="scratch",target="scratch-0"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_target_server_info"); err != nil {
		t.Fatal(err)
	}
	// A config without servers exports none.
	cfg.Targets = cfg.Targets[:1]
	s.Configure(cfg, nil)
	if n := testutil.CollectAndCount(s, "plateau_target_server_info"); n != 0 {
		t.Errorf("%d plateau_target_server_info series without servers", n)
	}
}

// The expected output is also a file, for the dashboards' tests that run
// every rule on exported series (TestRuleExpressionsMatchExportedSeries):
// the golden /metrics of the embedded default has no server target, so
// this one names the golden's target, e2e, as server 0 of a group fs.
func TestTargetServerInfoFixture(t *testing.T) {
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "e2e", Server: "0", ServerGroup: "fs"}}}, nil)
	want, err := os.ReadFile("testdata/server_info.prom")
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(s, bytes.NewReader(want), "plateau_target_server_info"); err != nil {
		t.Fatal(err)
	}
}
