// Package statuspage owns what an administrator at the node sees at `/`
// and what a script reads at `/status.json`: per target and probe, the
// last result of each op beside its plateau, its ratio and verdict, the
// op's last runs as a small server-rendered SVG chart, the last and next
// run, skips and errors by reason, hung or abandoned workers, and the
// counter collectors' state at the last scrape.
//
// It computes no verdict of its own: ratios and verdicts are
// plateau.Plateau.Compare's, taken by the store's Snapshot, and change
// ratios are the store's, so the page, /metrics and the probe command can
// never disagree. It is fed an Input (a store snapshot, the running config,
// collector states), so that it is tested without a daemon, and it never
// waits for a probe: a snapshot is a copy taken under the store's lock.
package statuspage

import (
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
)

// SchemaVersion is the version of the /status.json shape. Fields may be
// added within a version; one that changes meaning or goes away bumps it.
const SchemaVersion = 1

// Verdicts of the page beside plateau's (ok, warning, critical,
// no-baseline, failed): a probe that has not run since the daemon
// started, and an op its last successful run did not measure (a
// sequential probe with read_after reads only from its second run on).
const (
	VerdictPending     = "pending"
	VerdictNotMeasured = "not-measured"
)

// Input is everything the page shows, gathered anew for every request.
type Input struct {
	// Now is when the page is built; next runs are after it.
	Now      time.Time
	Hostname string
	Version  string
	// Config is the running config; nil shows the store's probes only.
	Config *probe.Config
	// ConfigLoadedAt is when Config was applied, LastReloadError why the
	// last reload was refused ("" when it was not), BaselinesError why the
	// baselines file was not loaded ("" when it was, or none is set).
	ConfigLoadedAt  time.Time
	LastReloadError string
	BaselinesError  string
	Store           store.Snapshot
	Collectors      []CollectorState
	// NextRun is the probe's next slot after now; nil leaves it unknown.
	// The scheduler's slot arithmetic is passed in, not imported, so the
	// page stays apart from the code that runs probes.
	NextRun func(t *probe.Target, p *probe.ProbeConfig, now time.Time) time.Time
	// NodeJobs is whether a Slurm job holds the node, as cmd looked when
	// the page was gathered; nil shows nothing about jobs.
	NodeJobs *NodeJobs
}

// NodeJobs is what the node shows of Slurm jobs, from slurmd's cgroup tree
// and spool directory (cmd reads them with probe/nodejobs; the page only
// draws what it is handed).
type NodeJobs struct {
	// Running is true while a job holds the node: the probes of targets
	// with when_job_running skip are then skipped at their slots.
	Running bool `json:"running"`
	// Jobs are "source:id", such as "cgroup_v2:4242" or "spool:4242".
	Jobs []string `json:"jobs"`
	// Sources are the sources that could be read; none means no job can
	// be seen on this node, so "not running" says nothing.
	Sources []string `json:"sources"`
	// Errors are sources that exist but could not be read.
	Errors []string `json:"errors"`
}

// CollectorState is a counter collector as the last scrape of /metrics
// left it. The page takes it from cmd, which reads it off the collectors'
// registry: the page never imports the collectors it reports on.
type CollectorState struct {
	Name string
	// Scraped is false until a scrape has run the collector; the other
	// fields are then zero.
	Scraped bool
	// Absent: the collector's subject is not on this node; it is idle.
	Absent   bool
	Success  bool
	Duration time.Duration
	// At is when that scrape began.
	At time.Time
}

// Status is the content of /status.json, and what the HTML page renders.
type Status struct {
	SchemaVersion int               `json:"schema_version"`
	GeneratedAt   time.Time         `json:"generated_at"`
	Hostname      string            `json:"hostname"`
	Version       string            `json:"version"`
	Config        ConfigStatus      `json:"config"`
	Targets       []TargetStatus    `json:"targets"`
	Collectors    []CollectorStatus `json:"collectors"`
	// NodeJobs is null when the daemon does not look for jobs.
	NodeJobs *NodeJobs `json:"node_jobs"`
}

// ConfigStatus is what is loaded and what failed to be.
type ConfigStatus struct {
	Source             string     `json:"source"`
	LoadedAt           *time.Time `json:"loaded_at"`
	LastReloadError    string     `json:"last_reload_error"`
	BaselinesFile      string     `json:"baselines_file"`
	BaselinesError     string     `json:"baselines_error"`
	HistoryLoaded      bool       `json:"history_loaded"`
	HistoryWriteErrors uint64     `json:"history_write_errors"`
}

// TargetStatus is one target and its probes.
type TargetStatus struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Configured is false for a target removed by a reload whose stuck
	// worker has not exited yet.
	Configured    bool    `json:"configured"`
	WarningRatio  float64 `json:"warning_ratio"`
	CriticalRatio float64 `json:"critical_ratio"`
	// WhenJobRunning is the target's when_job_running, skip or run.
	WhenJobRunning string `json:"when_job_running"`
	Hung           bool   `json:"hung"`
	// HungSince is when the target became hung (its first stuck worker
	// was abandoned), null while it is not hung.
	HungSince        *time.Time    `json:"hung_since"`
	AbandonedWorkers int           `json:"abandoned_workers"`
	Probes           []ProbeStatus `json:"probes"`
}

// ProbeStatus is one probe: its last run beside its plateau.
type ProbeStatus struct {
	Name            string  `json:"name"`
	Kind            string  `json:"kind"`
	Params          string  `json:"params"`
	IntervalSeconds float64 `json:"interval_seconds"`
	InProgress      bool    `json:"in_progress"`
	// Verdict is the worst of the ops' (plateau.Worst), ok when none is
	// severe but one is ok, else no-baseline; failed, or pending.
	Verdict string `json:"verdict"`
	// Note says what failed, or why no op has a ratio when they all
	// lack one for the same reason; "" otherwise.
	Note    string     `json:"note"`
	LastRun *RunStatus `json:"last_run"`
	// SinceLastRunSeconds is how long ago the last run ended, null when
	// none has since the daemon started: on a node that a job always
	// holds, probes of a target with when_job_running skip never run.
	SinceLastRunSeconds *float64   `json:"since_last_run_seconds"`
	LastSuccessAt       *time.Time `json:"last_success_at"`
	NextRunAt           *time.Time `json:"next_run_at"`
	Ops                 []OpStatus `json:"ops"`
	// Runs by result (success, failure, timeout, skipped), Errors and
	// Skips by reason, since the daemon started: the counters of
	// plateau_probe_runs_total, _errors_total and _skips_total.
	Runs   map[string]uint64 `json:"runs"`
	Errors map[string]uint64 `json:"errors"`
	Skips  map[string]uint64 `json:"skips"`
}

// RunStatus is the last run that ended.
type RunStatus struct {
	Start           time.Time `json:"start"`
	End             time.Time `json:"end"`
	DurationSeconds float64   `json:"duration_seconds"`
	Success         bool      `json:"success"`
	// Reason is the error reason of a failed run, Error its message.
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Direct bool   `json:"direct"`
	Engine string `json:"engine"`
}

// OpStatus is one op of the probe's kind. Numbers that do not apply are
// null, never 0: a ratio of 0 would read as a total outage.
type OpStatus struct {
	Op string `json:"op"`
	// Unit is bytes_per_second or operations_per_second, of Value and
	// Baseline.
	Unit string `json:"unit"`
	// Value is the last run's result; null when the last run failed or did
	// not measure the op.
	Value *float64 `json:"value"`
	// Baseline is the op's plateau, null when none applies.
	Baseline       *float64 `json:"baseline"`
	BaselineSpread *float64 `json:"baseline_spread"`
	// Ratio is Value over Baseline as plateau_probe_ratio exports it.
	Ratio   *float64 `json:"ratio"`
	Verdict string   `json:"verdict"`
	Note    string   `json:"note"`
	// ChangeRatio and ChangeNoise are plateau_probe_change_ratio and
	// _change_noise_ratio.
	ChangeRatio *float64 `json:"change_ratio"`
	ChangeNoise *float64 `json:"change_noise"`
	// ChangeFastRatio, ChangeFastNoise and ChangeLowRuns are
	// plateau_probe_change_fast_ratio, _fast_noise_ratio and _low_runs,
	// what the page mostly reads.
	ChangeFastRatio *float64 `json:"change_fast_ratio"`
	ChangeFastNoise *float64 `json:"change_fast_noise"`
	ChangeLowRuns   *int     `json:"change_low_runs"`
	// HistoryUnit is the unit of History, the kind's (a hand-written
	// baseline may use another); History is the op's last successful
	// results, oldest first.
	HistoryUnit string    `json:"history_unit"`
	History     []float64 `json:"history"`
}

// CollectorStatus is a counter collector at the last scrape.
type CollectorStatus struct {
	Name string `json:"name"`
	// Scraped is false until a scrape of /metrics has run the collector.
	Scraped bool `json:"scraped"`
	// Absent: nothing of the collector's kind on this node (idle).
	Absent          bool       `json:"absent,omitempty"`
	Success         bool       `json:"success"`
	DurationSeconds float64    `json:"duration_seconds"`
	At              *time.Time `json:"at"`
}

// Build assembles the status from its input: targets and probes in the
// order of the config, then any the store holds that the config does not
// (a target removed while its worker is stuck).
func Build(in Input) Status {
	st := Status{
		SchemaVersion: SchemaVersion, GeneratedAt: in.Now.UTC(), Hostname: in.Hostname, Version: in.Version,
		Config: ConfigStatus{
			LoadedAt: timePtr(in.ConfigLoadedAt), LastReloadError: in.LastReloadError, BaselinesError: in.BaselinesError,
			HistoryLoaded: in.Store.HistoryLoaded, HistoryWriteErrors: in.Store.HistoryWriteErrors,
		},
		Targets:    []TargetStatus{},
		Collectors: []CollectorStatus{},
		NodeJobs:   in.NodeJobs,
	}
	seen := map[string]bool{}
	if in.Config != nil {
		st.Config.Source, st.Config.BaselinesFile = in.Config.Source, in.Config.BaselinesFile
		for _, t := range in.Config.Targets {
			seen[t.Name] = true
			ts := TargetStatus{Name: t.Name, Path: t.Path, Configured: true, WarningRatio: t.WarningRatio, CriticalRatio: t.CriticalRatio,
				WhenJobRunning: t.WhenJobRunning, Probes: []ProbeStatus{}}
			if snap := in.Store.Target(t.Name); snap != nil {
				ts.setHung(snap)
			}
			for _, p := range t.Probes {
				ps := probeStatus(p.Kind, p.Name, in.Store.Probe(t.Name, p.Name))
				ps.IntervalSeconds = p.Interval.Seconds()
				if ps.Params == "" {
					ps.Params = plateau.ProbeParams(p)
				}
				if in.NextRun != nil {
					ps.NextRunAt = timePtr(in.NextRun(t, p, in.Now))
				}
				if ps.LastRun != nil {
					ps.SinceLastRunSeconds = floatPtr(in.Now.Sub(ps.LastRun.End).Seconds())
				}
				ts.Probes = append(ts.Probes, ps)
			}
			st.Targets = append(st.Targets, ts)
		}
	}
	for _, snap := range in.Store.Targets {
		if seen[snap.Name] {
			continue
		}
		seen[snap.Name] = true
		ts := TargetStatus{Name: snap.Name, Probes: []ProbeStatus{}}
		ts.setHung(&snap)
		// Without a config (a test, or a page built before the first
		// load), the store's probes are all there is.
		if in.Config == nil {
			ts.Configured = true
			for i := range in.Store.Probes {
				if p := &in.Store.Probes[i]; p.Target == snap.Name {
					ps := probeStatus(p.Kind, p.Probe, p)
					ps.IntervalSeconds = p.Interval.Seconds()
					ts.Probes = append(ts.Probes, ps)
				}
			}
		}
		st.Targets = append(st.Targets, ts)
	}
	for _, c := range in.Collectors {
		cs := CollectorStatus{Name: c.Name, Scraped: c.Scraped, Absent: c.Absent, Success: c.Success, DurationSeconds: c.Duration.Seconds()}
		if c.Scraped {
			cs.At = timePtr(c.At)
		}
		st.Collectors = append(st.Collectors, cs)
	}
	return st
}

// setHung copies the target's stuck workers from the store.
func (ts *TargetStatus) setHung(snap *store.TargetSnapshot) {
	ts.AbandonedWorkers, ts.Hung = snap.Abandoned, snap.Abandoned > 0
	if ts.Hung {
		ts.HungSince = timePtr(snap.HungSince)
	}
}

// probeStatus is one probe from its snapshot, which is nil while the
// store has not caught up with a reload.
func probeStatus(kind, name string, snap *store.ProbeSnapshot) ProbeStatus {
	ps := ProbeStatus{Name: name, Kind: kind, Verdict: VerdictPending,
		Runs: map[string]uint64{}, Errors: map[string]uint64{}, Skips: map[string]uint64{}, Ops: []OpStatus{}}
	if snap == nil {
		for _, op := range probe.OpsOf(kind) {
			unit := probe.OpUnit(kind)
			ps.Ops = append(ps.Ops, OpStatus{Op: op, Unit: unit, Verdict: VerdictPending, HistoryUnit: unit, History: []float64{}})
		}
		return ps
	}
	ps.Params, ps.InProgress = snap.Params, snap.InProgress
	ps.Runs, ps.Errors, ps.Skips = snap.Runs, snap.Errors, snap.Skips
	if ls := snap.LastSuccess; ls != nil {
		ps.LastSuccessAt = timePtr(ls.End)
	}
	if r := snap.Last; r != nil {
		ps.LastRun = &RunStatus{Start: r.Start.UTC(), End: r.End.UTC(), DurationSeconds: r.End.Sub(r.Start).Seconds(),
			Success: r.OK(), Reason: r.Reason, Error: r.Error, Direct: r.Direct, Engine: r.Engine}
	}
	// A failed run has one verdict, without an op.
	byOp := map[string]plateau.OpVerdict{}
	var runVerdict *plateau.OpVerdict
	for _, v := range snap.Verdicts {
		if v.Op == "" {
			runVerdict = &v
			continue
		}
		byOp[v.Op] = v
	}
	var measured []plateau.OpVerdict
	for _, o := range snap.Ops {
		op := OpStatus{Op: o.Op, Unit: probe.OpUnit(kind), HistoryUnit: probe.OpUnit(kind), History: o.History}
		if op.History == nil {
			op.History = []float64{}
		}
		if b := snap.Plateau.Baselines[o.Op]; b != nil {
			op.Unit = b.Unit
			if b.Value > 0 {
				op.Baseline, op.BaselineSpread = floatPtr(b.Value), floatPtr(b.Spread)
			}
		}
		v, ok := byOp[o.Op]
		switch {
		case snap.Last == nil:
			op.Verdict = VerdictPending
			op.Note = snap.Plateau.Missing[o.Op]
		case runVerdict != nil:
			op.Verdict, op.Note = runVerdict.Verdict, runVerdict.Note
		case !ok:
			op.Verdict, op.Note = VerdictNotMeasured, "the last run did not measure this op"
		default:
			measured = append(measured, v)
			op.Unit, op.Value, op.Verdict, op.Note = v.Unit, floatPtr(v.Value), v.Verdict, v.Note
			if v.HasRatio {
				op.Ratio = floatPtr(v.Ratio)
			}
		}
		if o.HasChange {
			op.ChangeRatio, op.ChangeNoise = floatPtr(o.Change.Ratio), floatPtr(o.Change.Noise)
			op.ChangeFastRatio, op.ChangeFastNoise = floatPtr(o.Change.FastRatio), floatPtr(o.Change.FastNoise)
			low := o.Change.LowRuns
			op.ChangeLowRuns = &low
		}
		ps.Ops = append(ps.Ops, op)
	}
	switch {
	case snap.Last == nil:
		ps.Verdict = VerdictPending
	case runVerdict != nil:
		ps.Verdict, ps.Note = runVerdict.Verdict, runVerdict.Note
	default:
		ps.Verdict = overall(measured)
		ps.Note = commonNote(measured)
	}
	return ps
}

// commonNote is the note every op shares, such as an I/O mode that
// differs from the baselines' (which takes the ratio of all of them), or
// "" when they differ or have none.
func commonNote(vs []plateau.OpVerdict) string {
	if len(vs) == 0 {
		return ""
	}
	for _, v := range vs[1:] {
		if v.Note != vs[0].Note {
			return ""
		}
	}
	return vs[0].Note
}

// overall is the probe's verdict from its ops': the worst severe one as
// the probe command's exit status sees it, else ok when an op is.
func overall(vs []plateau.OpVerdict) string {
	if w := plateau.Worst(vs); w != "" {
		return w
	}
	for _, v := range vs {
		if v.Verdict == plateau.VerdictOK {
			return plateau.VerdictOK
		}
	}
	return plateau.VerdictNoBaseline
}

// floatPtr is v, or nil when it is not finite: JSON has no NaN or
// infinity, and a page that fails to encode would hide every other probe.
func floatPtr(v float64) *float64 {
	if !chart.Finite(v) {
		return nil
	}
	return &v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
