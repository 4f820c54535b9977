//go:build integration

package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/slurmtest"
	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// TestIntegrationSkipsBesideASlurmJob runs the daemon as on node n1 of the
// test's own Slurm, which has no cgroup plugins (proctrack/linuxproc), so
// the job is seen by its step socket in n1's spool directory: a
// probe whose slot comes while `salloc -w n1 srun sleep 600` holds n1 is skipped
// with reason job_running and plateau_node_job_running is 1; once the job
// is cancelled the gauge falls to 0 and the next slot runs.
func TestIntegrationSkipsBesideASlurmJob(t *testing.T) {
	c := startSlurm(t)
	spool := c.Spool("n1")

	// salloc holds the allocation on n1 and srun starts step 0 there: the
	// shape of an interactive job, whose step socket is what n1's slurmd
	// leaves in its spool (no cgroup plugins here).
	alloc := c.Command("salloc", "-w", "n1", "--job-name=plateau-jobs", "srun", "sleep", "600")
	var allocOut strings.Builder
	alloc.Stdout, alloc.Stderr = &allocOut, &allocOut
	if err := alloc.Start(); err != nil {
		t.Fatalf("salloc: %v", err)
	}
	var job string
	probetest.PollUntil(t, "salloc's job running on n1", 250*time.Millisecond, 60*time.Second, func() bool {
		out, err := c.Command("squeue", "-h", "-n", "plateau-jobs", "-t", "RUNNING", "-o", "%i").Output()
		job = strings.TrimSpace(string(out))
		return err == nil && job != ""
	})
	cancelled := false
	cancel := func() {
		if cancelled {
			return
		}
		cancelled = true
		if b, err := c.Command("scancel", job).CombinedOutput(); err != nil {
			t.Errorf("scancel %s: %v: %s", job, err, b)
		}
		done := make(chan struct{})
		go func() { alloc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			alloc.Process.Kill()
			<-done
		}
	}
	t.Cleanup(cancel)
	probetest.PollUntil(t, "job "+job+"'s step socket in "+spool, 250*time.Millisecond, 60*time.Second, func() bool {
		return stepSocketOf(t, spool, job)
	})

	cfg, _ := writeConfig(t, "{name: seq, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB, interval: 2s, timeout: 1500ms}")
	d := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults",
		"--slurm.cgroup-path="+t.TempDir(), "--slurm.spool-path="+spool)
	skipped := `plateau_probe_skips_total{kind="sequential",probe="seq",reason="job_running",target="e2e"}`
	probetest.PollUntil(t, "two job_running skips while the job holds n1", 250*time.Millisecond, 60*time.Second, func() bool {
		return value(d.metrics(), skipped) >= 2
	})
	m := d.metrics()
	if v := value(m, "plateau_node_job_running "); v != 1 {
		t.Errorf("plateau_node_job_running %g while job %s runs, want 1", v, job)
	}
	if n := successes(m); n != 0 {
		t.Errorf("%g successful run(s) while job %s held the node, want 0", n, job)
	}
	// The status page says the same: the job, and a probe that has not run.
	code, body := d.get("/status.json")
	var st statuspage.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/status.json: HTTP %d, %v", code, err)
	}
	if st.NodeJobs == nil || !st.NodeJobs.Running || !slices.Contains(st.NodeJobs.Jobs, "spool:"+job) ||
		st.Targets[0].WhenJobRunning != "skip" || st.Targets[0].Probes[0].SinceLastRunSeconds != nil {
		t.Errorf("/status.json while job %s runs: node_jobs %+v, target %+v", job, st.NodeJobs, st.Targets[0])
	}

	cancel()
	probetest.PollUntil(t, "job "+job+"'s socket gone", 250*time.Millisecond, 60*time.Second, func() bool {
		return !stepSocketOf(t, spool, job)
	})
	probetest.PollUntil(t, "plateau_node_job_running 0 after the job", 250*time.Millisecond, 30*time.Second, func() bool {
		return value(d.metrics(), "plateau_node_job_running ") == 0
	})
	probetest.PollUntil(t, "a successful run at a slot after the job ended", 250*time.Millisecond, 60*time.Second, func() bool {
		return successes(d.metrics()) >= 1
	})
	if !strings.Contains(d.stderr.String(), `msg="skipping probe: a Slurm job holds the node"`) || !strings.Contains(d.stderr.String(), "spool:"+job) {
		t.Errorf("the log does not say which job held the node:\n%s", slurmtest.LastLines(d.stderr.String(), 20))
	}
}

// stepSocketOf reports whether the spool holds a step socket of job.
func stepSocketOf(t *testing.T, spool, job string) bool {
	t.Helper()
	entries, err := os.ReadDir(spool)
	if err != nil {
		t.Fatalf("spool: %v", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "n1_"+job+".") {
			return true
		}
	}
	return false
}
