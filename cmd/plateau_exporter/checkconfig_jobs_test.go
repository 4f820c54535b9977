package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// check-config says whether a job holds the node, from the same fixture
// trees as nodejobs' tests, and how long ago each probe last succeeded,
// from the daemon's history file: a node that jobs always hold shows here
// as a probe that has not succeeded for long.
func TestCheckConfigSaysWhetherAJobHoldsTheNode(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}\n      - {name: md, kind: metadata, workers: 1, files: 16}")
	history := filepath.Join(t.TempDir(), "history.json")
	if err := plateau.WriteHistoryFile(history, plateau.History{
		{Target: "e2e", Probe: "seq", Op: "write", Params: "p"}: {Results: []float64{1}, Updated: time.Now().Add(-3 * time.Hour)},
		{Target: "e2e", Probe: "seq", Op: "read", Params: "p"}:  {Results: []float64{1}, Updated: time.Now().Add(-2 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	fixtures := filepath.Join("..", "..", "probe", "nodejobs", "testdata")
	for _, tc := range []struct {
		name, cgroup, spool string
		want                []string
	}{
		{"a job in a SLUID cgroup", "v2-sluid", "spool-idle", []string{"jobs: a Slurm job holds this node now (cgroup_v2:sEKNKTV3WPV500)", "when_job_running: skip are skipped until it ends"}},
		{"a job step in the spool", "v1-idle", "spool", []string{"jobs: a Slurm job holds this node now (spool:17 spool:300 spool:4242)"}},
		{"an idle node", "v2-idle", "spool-idle", []string{"jobs: no Slurm job holds this node now (looked at: cgroup_v2, spool)"}},
		{"no Slurm", "missing", "missing", []string{"jobs: no Slurm job can be seen on this node", "when_job_running has no effect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runBinary(t, "check-config", "--config.file="+cfg, "--slurm.cgroup-path="+filepath.Join(fixtures, tc.cgroup),
				"--slurm.spool-path="+filepath.Join(fixtures, tc.spool), "--probe.history-file="+history)
			if code != 0 {
				t.Fatalf("check-config exited %d: %s%s", code, out, stderr)
			}
			for _, w := range append(tc.want, "target e2e: when_job_running "+probe.WhenJobSkip+"; seq last succeeded 2h0m0s ago; md never succeeded;") {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	out, _, code := runBinary(t, "check-config", "--config.file="+cfg, "--slurm.cgroup-path=", "--slurm.spool-path=", "--probe.history-file="+filepath.Join(t.TempDir(), "none.json"))
	if code != 0 || !strings.Contains(out, "seq last succeeded: unknown;") || !strings.Contains(out, "none.json does not exist") {
		t.Errorf("without a history file (exit %d):\n%s", code, out)
	}
}
