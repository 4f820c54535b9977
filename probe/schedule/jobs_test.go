package schedule

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
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

// targetBesideAJob is a target of one small sequential probe due every
// second, with when_job_running set to mode, and a job that holds the
// node until the test ends it.
func targetBesideAJob(t *testing.T, mode string) (*probe.Target, *switchableJob) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	job := &switchableJob{}
	job.running.Store(true)
	return &probe.Target{Name: "t", Path: t.TempDir(), WhenJobRunning: mode, Probes: []*probe.ProbeConfig{&p}}, job
}

func TestSchedulerSkipsBesideAJobAndRunsOnceItEnds(t *testing.T) {
	target, job := targetBesideAJob(t, probe.WhenJobSkip)
	runs := new(atomic.Int32)
	logs := &probetest.LogBuffer{}
	logger := level.NewFilter(log.NewLogfmtLogger(logs), level.AllowInfo())
	results := scheduleOneWith(t, Options{Runner: countingRunner{runs}, Jobs: job, Logger: logger}, target)
	skips := func() float64 {
		return probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipJobRunning})
	}
	probetest.WaitUntil(t, "three job_running skips", 30*time.Second, func() bool { return skips() >= 3 })
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d run(s) reached the file system while a job held the node", n)
	}
	job.running.Store(false)
	probetest.WaitUntil(t, "a run after the job ended", 30*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}) >= 1
	})
	// A job holding the node for many slots is one line when the skips
	// start and one when they end; the counter has every slot.
	out := logs.String()
	if n := strings.Count(out, "skipping probe: a Slurm job holds the node"); n != 1 || !strings.Contains(out, "cgroup_v2:4242") {
		t.Errorf("%d info lines of skips for one job over %g skips, want 1 naming the job:\n%s", n, skips(), out)
	}
	if n := strings.Count(out, "probing again"); n != 1 {
		t.Errorf("%d lines saying the probes resumed, want 1:\n%s", n, out)
	}
}

// A target with when_job_running: run never asks: its probes run beside
// jobs, and the node pays no readdirs for it.
func TestSchedulerRunsBesideAJobWhenTold(t *testing.T) {
	target, job := targetBesideAJob(t, probe.WhenJobRun)
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
