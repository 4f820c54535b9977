package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe/nodejobs"
)

// The watcher the daemon wires: the gauge and the scheduler's answer come
// from the same look, and a source it cannot read is logged once, not at
// every slot and scrape.
func TestJobWatcher(t *testing.T) {
	fixtures := filepath.Join("..", "..", "probe", "nodejobs", "testdata")
	busy := &jobWatcher{detector: nodejobs.Detector{CgroupRoot: filepath.Join(fixtures, "v2-jobid"), SpoolDir: filepath.Join(fixtures, "spool-idle")}, logger: log.NewNopLogger()}
	if v := probetest.MetricValue(t, busy, "plateau_node_job_running", nil); v != 1 {
		t.Errorf("plateau_node_job_running %g on the v2-jobid tree, want 1", v)
	}
	if running, detail := busy.JobRunning(); !running || detail != "cgroup_v2:4242 cgroup_v2:4243" {
		t.Errorf("JobRunning = %v, %q", running, detail)
	}
	if st := busy.status(); !st.Running || len(st.Jobs) != 2 || len(st.Sources) != 2 {
		t.Errorf("status %+v", st)
	}
	idle := &jobWatcher{detector: nodejobs.Detector{CgroupRoot: filepath.Join(fixtures, "v2-idle")}, logger: log.NewNopLogger()}
	if v := probetest.MetricValue(t, idle, "plateau_node_job_running", nil); v != 0 {
		t.Errorf("plateau_node_job_running %g on the idle tree, want 0", v)
	}

	// A name longer than NAME_MAX fails with ENAMETOOLONG for root too: a
	// source that exists in the flags but cannot be read.
	spool := filepath.Join(t.TempDir(), strings.Repeat("x", 300))
	var logs probetest.LogBuffer
	w := &jobWatcher{detector: nodejobs.Detector{SpoolDir: spool}, logger: log.NewLogfmtLogger(&logs)}
	for range 3 {
		w.JobRunning()
	}
	if n := strings.Count(logs.String(), "cannot read one of slurmd's traces"); n != 1 {
		t.Errorf("%d warnings for one unreadable spool over three looks, want 1:\n%s", n, logs.String())
	}
}
