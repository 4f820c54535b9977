package main

import (
	"errors"
	"strings"
	"sync"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/probe/nodejobs"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// jobFlags are where slurmd's traces of running jobs are looked for; serve
// and check-config read them, so tests point both at fixture trees.
type jobFlags struct {
	cgroupPath, spoolPath *string
}

func addJobFlags(cmd *kingpin.CmdClause) jobFlags {
	return jobFlags{
		cgroupPath: cmd.Flag("slurm.cgroup-path", "Where cgroup file systems are mounted; a Slurm job is seen by its directory under system.slice/slurmstepd.scope (cgroup v2) or <controller>/slurm/uid_*/ (v1). Empty: do not look.").Default(nodejobs.DefaultCgroupRoot).String(),
		spoolPath:  cmd.Flag("slurm.spool-path", "slurmd's SlurmdSpoolDir; a running job step is seen by its socket <node>_<job>.<step> there. Empty: do not look.").Default(nodejobs.DefaultSpoolDir).String(),
	}
}

func (f jobFlags) detector() nodejobs.Detector {
	return nodejobs.Detector{CgroupRoot: *f.cgroupPath, SpoolDir: *f.spoolPath}
}

// jobWatcher is the daemon's job awareness: the scheduler asks it at each
// slot (schedule.JobWatcher), and a scrape reads plateau_node_job_running
// from it. Both look anew (a few readdirs), so the gauge is true at the
// scrape and the skip at the slot, with no loop polling in between.
type jobWatcher struct {
	detector nodejobs.Detector
	logger   log.Logger

	mu sync.Mutex
	// lastErr is the last read error logged, so that a spool directory the
	// daemon may not list is logged once, not at every slot and scrape.
	lastErr string
}

var _ schedule.JobWatcher = (*jobWatcher)(nil)

// 1 while a Slurm job holds this node (seen in slurmd's cgroup tree or spool
// directory, read at the scrape), else 0. Probes of targets with
// when_job_running: skip are skipped (reason="job_running") while it is 1.
var descNodeJobRunning = prometheus.NewDesc("plateau_node_job_running",
	"1 while a Slurm job holds this node, else 0.",
	nil, nil)

// look reads the node and logs a read error when it changes.
func (w *jobWatcher) look() nodejobs.Observation {
	o := w.detector.Look()
	msg := ""
	if len(o.Errs) > 0 {
		msg = errors.Join(o.Errs...).Error()
	}
	w.mu.Lock()
	changed := msg != w.lastErr
	w.lastErr = msg
	w.mu.Unlock()
	if changed && msg != "" {
		level.Warn(w.logger).Log("msg", "cannot read one of slurmd's traces of running jobs; the others still count", "err", msg)
	}
	return o
}

// JobRunning implements schedule.JobWatcher.
func (w *jobWatcher) JobRunning() (bool, string) {
	o := w.look()
	return o.Running(), describeJobs(o.Jobs)
}

// Describe implements prometheus.Collector.
func (w *jobWatcher) Describe(ch chan<- *prometheus.Desc) { ch <- descNodeJobRunning }

// Collect implements prometheus.Collector.
func (w *jobWatcher) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if w.look().Running() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descNodeJobRunning, prometheus.GaugeValue, v)
}

// status is what the status page shows of the node's jobs, looked at now.
func (w *jobWatcher) status() *statuspage.NodeJobs {
	o := w.look()
	st := &statuspage.NodeJobs{Running: o.Running(), Jobs: []string{}, Sources: o.Sources, Errors: []string{}}
	if st.Sources == nil {
		st.Sources = []string{}
	}
	if o.Running() {
		st.Jobs = jobLabels(o.Jobs)
	}
	for _, err := range o.Errs {
		st.Errors = append(st.Errors, err.Error())
	}
	return st
}

// jobLabels are the jobs as the status page lists them: "cgroup_v2:4242".
func jobLabels(jobs []nodejobs.Job) []string {
	labels := make([]string, len(jobs))
	for i, j := range jobs {
		labels[i] = j.Source + ":" + j.ID
	}
	return labels
}

// describeJobs is "cgroup_v2:4242 spool:4242", for logs and check-config.
func describeJobs(jobs []nodejobs.Job) string { return strings.Join(jobLabels(jobs), " ") }
