package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/nodejobs"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// packagedHistoryFile is where the packaged unit's daemon keeps its history
// (StateDirectory=plateau_exporter): check-config, run by hand outside the
// unit, reads it there unless told otherwise.
const packagedHistoryFile = "/var/lib/plateau_exporter/history.json"

// defaultCheckHistoryFile is the daemon's history file as check-config
// finds it: the unit's, or the packaged location.
func defaultCheckHistoryFile(getenv func(string) string) string {
	if f := defaultHistoryFile(getenv); f != "" {
		return f
	}
	return packagedHistoryFile
}

// printJobAwareness says whether a Slurm job holds the node now and, per
// target, what a job means for its probes and how long ago each last
// succeeded (from the daemon's history file): a node that a job always
// holds is never probed by the daemon, and this is where that shows
// before an alert does.
func printJobAwareness(w io.Writer, cfg *probe.Config, d nodejobs.Detector, historyFile string, now time.Time) {
	o := d.Look()
	fmt.Fprintln(w)
	switch {
	case o.Running():
		fmt.Fprintf(w, "jobs: a Slurm job holds this node now (%s); probes of targets with when_job_running: skip are skipped until it ends\n", describeJobs(o.Jobs))
	case o.Visible():
		fmt.Fprintf(w, "jobs: no Slurm job holds this node now (looked at: %s)\n", strings.Join(o.Sources, ", "))
	default:
		fmt.Fprintf(w, "jobs: no Slurm job can be seen on this node (nothing of slurmd under %q or %q): when_job_running has no effect\n", d.CgroupRoot, d.SpoolDir)
	}
	for _, err := range o.Errs {
		fmt.Fprintf(w, "jobs: warning: %v\n", err)
	}
	history, herr := loadCheckHistory(historyFile)
	for _, t := range cfg.Targets {
		line := fmt.Sprintf("target %s: when_job_running %s;", t.Name, t.WhenJobRunning)
		for _, p := range t.Probes {
			line += " " + p.Name + " " + lastSuccessAgo(history, herr, t.Name, p.Name, now)
		}
		fmt.Fprintln(w, line)
	}
	switch {
	case herr != nil:
		fmt.Fprintf(w, "(last successes unknown: %v)\n", herr)
	default:
		fmt.Fprintf(w, "(last successes from the daemon's history file %s; measure a node that jobs always hold from the epilog: packaging/slurm/epilog.sh)\n", historyFile)
	}
}

// loadCheckHistory reads the daemon's history file; a missing one is an
// error here, since check-config cannot tell "never ran" from "elsewhere".
func loadCheckHistory(file string) (plateau.History, error) {
	if file == "" {
		return nil, errors.New("no --probe.history-file")
	}
	h, err := plateau.LoadHistoryFile(file)
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		if _, serr := os.Stat(file); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist (not the daemon's, or it has not run a probe yet)", file)
		}
	}
	return h, nil
}

// lastSuccessAgo is how long ago the probe's newest op result was added
// to the history, with any params: a probe whose size changed still ran.
func lastSuccessAgo(h plateau.History, herr error, target, probeName string, now time.Time) string {
	if herr != nil {
		return "last succeeded: unknown;"
	}
	var last time.Time
	for k, e := range h {
		if k.Target == target && k.Probe == probeName && e.Updated.After(last) {
			last = e.Updated
		}
	}
	if last.IsZero() {
		return "never succeeded;"
	}
	ago := now.Sub(last)
	// Seconds matter for a probe every minute, not for one a day ago.
	if ago >= time.Hour {
		ago = ago.Round(time.Minute)
	} else {
		ago = ago.Round(time.Second)
	}
	return fmt.Sprintf("last succeeded %s ago;", ago)
}
