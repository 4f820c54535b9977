package schedule

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

// switchableJob is a job that the test starts and ends; asked counts the
// slots that asked.
type switchableJob struct {
	running atomic.Bool
	asked   atomic.Int32
}

func (j *switchableJob) JobRunning() (bool, string) {
	j.asked.Add(1)
	return j.running.Load(), "cgroup_v2:4242"
}

// countingRunner counts the runs that reached the file system.
type countingRunner struct{ runs *atomic.Int32 }

func (c countingRunner) Run(ctx context.Context, req probe.Request) worker.Outcome {
	c.runs.Add(1)
	return worker.InProcessRunner{}.Run(ctx, req)
}

func TestSchedulerSkipsBesideAJobAndRunsOnceItEnds(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	target := &probe.Target{Name: "t", Path: t.TempDir(), WhenJobRunning: probe.WhenJobSkip, Probes: []*probe.ProbeConfig{&p}}
	job := &switchableJob{}
	job.running.Store(true)
	runs := new(atomic.Int32)
	results := scheduleOneWith(t, Options{Runner: countingRunner{runs}, Jobs: job}, target)
	skips := func() float64 {
		return probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipJobRunning})
	}
	probetest.WaitUntil(t, "two job_running skips", 30*time.Second, func() bool { return skips() >= 2 })
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d run(s) reached the file system while a job held the node", n)
	}
	job.running.Store(false)
	probetest.WaitUntil(t, "a run after the job ended", 30*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}) >= 1
	})
}

// A target with when_job_running: run never asks: its probes run beside
// jobs, and the node pays no readdirs for it.
func TestSchedulerRunsBesideAJobWhenTold(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	target := &probe.Target{Name: "t", Path: t.TempDir(), WhenJobRunning: probe.WhenJobRun, Probes: []*probe.ProbeConfig{&p}}
	job := &switchableJob{}
	job.running.Store(true)
	results := scheduleOneWith(t, Options{Runner: worker.InProcessRunner{}, Jobs: job}, target)
	probetest.WaitUntil(t, "a run beside the job", 30*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}) >= 1
	})
	if n := job.asked.Load(); n != 0 {
		t.Errorf("asked %d times whether a job runs, want never", n)
	}
	if v := probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipJobRunning}); v != 0 {
		t.Errorf("%g job_running skips, want 0", v)
	}
}
