package store

import (
	"bytes"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// configured is a Store configured from a config's YAML, and that config
// for the test to reload a part of.
func configured(t *testing.T, yaml string) (*Store, *probe.Config) {
	t.Helper()
	cfg, err := probe.ParseConfig([]byte(yaml), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	s.Configure(cfg, nil)
	return s, cfg
}

// homeTarget is a config's first target, an ordinary one: neither made
// by a servers list nor serving a file system.
const homeTarget = `targets:
  - name: home
    path: /tmp
    probes:
      - {name: m, kind: metadata}
`

// reload configures s again with the first n of cfg's targets, as a
// reload that drops the others.
func reload(s *Store, cfg *probe.Config, n int) {
	cfg.Targets = cfg.Targets[:n]
	s.Configure(cfg, nil)
}

// plateau_target_server_info names the server of each target a servers
// list made, follows a reload, and is absent for an ordinary target.
func TestTargetServerInfo(t *testing.T) {
	s, cfg := configured(t, homeTarget+`  - name: scratch
    path: /mnt/scratch/ost{server}
    servers: ["0", "1"]
    probes:
      - {name: m, kind: metadata}
`)
	const head = `
# HELP plateau_target_server_info The data server and server group of a target made by a servers list; always 1.
# TYPE plateau_target_server_info gauge
`
	compareSeries(t, s, head+`plateau_target_server_info{server="0",server_group="scratch",target="scratch-0"} 1
plateau_target_server_info{server="1",server_group="scratch",target="scratch-1"} 1
`, "plateau_target_server_info")
	// A reload that drops a server drops its series.
	reload(s, cfg, 2)
	compareSeries(t, s, head+`plateau_target_server_info{server="0",server_group="scratch",target="scratch-0"} 1
`, "plateau_target_server_info")
	// A config without servers exports none.
	reload(s, cfg, 1)
	compareSeries(t, s, "", "plateau_target_server_info")
}

// plateau_target_serves_info says which file system a storage server's
// own target serves, follows a reload, and is absent for other targets.
func TestTargetServesInfo(t *testing.T) {
	s, cfg := configured(t, homeTarget+`  - name: ost0-disk
    path: /srv/ost0
    serves: scratch
    probes:
      - {name: s, kind: sequential}
`)
	compareSeries(t, s, `
# HELP plateau_target_serves_info The clients' target of the file system this storage server's own target serves; always 1.
# TYPE plateau_target_serves_info gauge
plateau_target_serves_info{serves="scratch",target="ost0-disk"} 1
`, "plateau_target_serves_info")
	// A reload without it drops the series.
	reload(s, cfg, 1)
	compareSeries(t, s, "", "plateau_target_serves_info")
}

// The expected outputs are also files, for the dashboards' test that runs
// every rule on exported series (TestRuleExpressionsMatchExportedSeries):
// the golden /metrics of the embedded default has neither a server target
// nor a serving one, so these name the golden's target, e2e, as server 0 of
// a group fs and as serving scratch.
func TestTargetInfoFixtures(t *testing.T) {
	for _, tc := range []struct {
		file, metric string
		target       probe.Target
	}{
		{"testdata/server_info.prom", "plateau_target_server_info", probe.Target{Name: "e2e", Server: "0", ServerGroup: "fs"}},
		{"testdata/serves_info.prom", "plateau_target_serves_info", probe.Target{Name: "e2e", Serves: "scratch"}},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			s := New()
			s.Configure(&probe.Config{Targets: []*probe.Target{&tc.target}}, nil)
			want, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := testutil.CollectAndCompare(s, bytes.NewReader(want), tc.metric); err != nil {
				t.Fatal(err)
			}
		})
	}
}
