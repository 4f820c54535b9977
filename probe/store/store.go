// Package store holds the probe metrics that /metrics shows: their
// descriptors, declared once, the latest result and counters of every
// configured probe, recorded when a run ends, and Collect, which copies them
// out under a read lock so a scrape never waits for a probe. Ratios come
// from plateau's Compare, the same verdict the probe command prints; change
// ratios from plateau's ChangeOf over each op's last results, which the
// store keeps, in a history file when one is given, across restarts.
package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Run results, the `result` label of plateau_probe_runs_total.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
	ResultTimeout = "timeout"
	ResultSkipped = "skipped"
)

var runResults = []string{ResultSuccess, ResultFailure, ResultTimeout, ResultSkipped}

// namespace prefixes every metric of the exporter.
const namespace = "plateau"

var (
	probeLabels   = []string{"target", "probe", "kind"}
	probeOpLabels = []string{"target", "probe", "kind", "op"}

	descSuccess = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "success"),
		"1 if the last run of the probe completed and measured, 0 if it failed or timed out.", probeLabels, nil)
	descLastRun = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "last_run_timestamp_seconds"),
		"Unix time at which the last run of the probe ended, successful or not.", probeLabels, nil)
	descLastSuccess = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "last_success_timestamp_seconds"),
		"Unix time at which the last successful run of the probe ended.", probeLabels, nil)
	descDuration = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "duration_seconds"),
		"Wall time of the last run of the probe, in seconds, including set-up and clean-up.", probeLabels, nil)
	descInterval = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "interval_seconds"),
		"Interval between runs of the probe, in seconds: as configured, or as the target's fleet budget stretched it (fleet.max_bytes_per_hour).", probeLabels, nil)
	descInProgress = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "in_progress"),
		"1 while a run of the probe is going on.", probeLabels, nil)
	descInfo = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "info"),
		"How the last successful run did its I/O: direct is true when O_DIRECT was used, engine names how requests were issued.",
		[]string{"target", "probe", "kind", "direct", "engine"}, nil)
	descThroughput = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "throughput_bytes_per_second"),
		"Data moved per second by the op in the last successful run, in bytes per second (close and fsync included).", probeOpLabels, nil)
	descOpsRate = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "operations_per_second"),
		"Operations per second of the op in the last successful run (I/O requests for data probes, syscalls for metadata).", probeOpLabels, nil)
	descLatency = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "latency_seconds"),
		"Latency of each operation (one I/O request or one metadata syscall) of the op, over all runs since start, in seconds.", probeOpLabels, nil)
	descRuns = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "runs_total"),
		"Runs of the probe by result: success, failure, timeout, skipped.", append(probeLabels[:3:3], "result"), nil)
	descErrors = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "errors_total"),
		"Failed runs of the probe by reason, from errno: enospc, eio, eacces, erofs, estale, edquot, enoent, timeout, unsafe, other.", append(probeLabels[:3:3], "reason"), nil)
	descSkips = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "skips_total"),
		"Skipped runs of the probe by reason: overlap, target_busy, target_hung, min_free, budget.", append(probeLabels[:3:3], "reason"), nil)
	descIOBytes = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "io_bytes_total"),
		"Bytes the probe's runs moved to or from the file system, by op: the load plateau_exporter itself puts on storage.", probeOpLabels, nil)
	descConcurrent = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "concurrent_bytes_per_second"),
		"Bytes per second this node moved on the probed file system during the last successful run apart from the probe's own, by op (read, write): a slow run on a node busy with its own jobs' I/O. From /proc/diskstats for a local block device (the whole partition), /proc/self/mountstats for NFS (bytes to and from the server), and for GPFS mmpmon fs_io_s as the gpfs collector last read it in the background: its resolution is --collector.gpfs.interval, coarse for runs shorter than that and absent when no new answer came during the run. Absent when no source applies (tmpfs, overlay, FUSE) or while the probe fails.", probeOpLabels, nil)
	// One series per target instead of one per probe op, for the fleet
	// rule that subtracts the probes' own traffic from a node's (issue 16).
	descTargetIOBytes = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_io_bytes_total"),
		"Bytes all probes of the target moved to or from the file system since the exporter started: the sum of the target's plateau_probe_io_bytes_total, counting probes a reload has since removed too.", []string{"target"}, nil)
	descHung = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "hung"),
		"1 while a worker of the target ignores SIGKILL (stuck on the file system); no probe starts on the target until it exits.", []string{"target"}, nil)
	descAbandoned = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "abandoned_workers"),
		"Workers of the target killed at their timeout that have not exited yet.", []string{"target"}, nil)
	descBaselineBytes = prometheus.NewDesc(prometheus.BuildFQName(namespace, "baseline", "throughput_bytes_per_second"),
		"The op's plateau: throughput the same probe reached on a known-good system, in bytes per second.", probeOpLabels, nil)
	descBaselineOps = prometheus.NewDesc(prometheus.BuildFQName(namespace, "baseline", "operations_per_second"),
		"The op's plateau: operation rate the same probe reached on a known-good system, per second.", probeOpLabels, nil)
	descRatio = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "ratio"),
		"Last successful result of the op divided by its baseline (1 = at plateau); absent without a baseline, while the probe fails, or while its I/O mode differs from the baseline's.", probeOpLabels, nil)
	descModeMismatch = prometheus.NewDesc(prometheus.BuildFQName(namespace, "baseline", "io_mode_mismatch"),
		"1 when the last successful run did its I/O differently (direct, engine of plateau_probe_info) from the runs its baseline was measured with; its ratio is then not exported. Present once a probe with a baseline has succeeded.", probeLabels, nil)
	descThreshold = prometheus.NewDesc(prometheus.BuildFQName(namespace, "alert", "threshold_ratio"),
		"Ratio to baseline below which the probe's results are a warning or critical regression (the target's warning_ratio and critical_ratio).",
		[]string{"target", "probe", "severity"}, nil)
	descChange = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "change_ratio"),
		fmt.Sprintf("Geometric mean of the op's last %d results divided by the probe's recent normal, the median of that %d-run mean over the %d runs before them (1 = as usual, 0.5 = half). Absent until the probe has %d successful runs.",
			plateau.ChangeRuns, plateau.ChangeRuns, plateau.NormalRuns, minChangeRuns), probeOpLabels, nil)
	descChangeNoise = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "change_noise_ratio"),
		fmt.Sprintf("How much that %d-run mean moves on its own: 1.4826 x the median absolute deviation of its natural log over the same %d runs, about its relative standard deviation.",
			plateau.ChangeRuns, plateau.NormalRuns), probeOpLabels, nil)
	descChangeFast = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "change_fast_ratio"),
		fmt.Sprintf("The same as plateau_probe_change_ratio over the op's last %d results: the statistic the sudden-regression verdict pages on, fully down after %d runs of a drop.",
			plateau.FastRuns, plateau.FastRuns), probeOpLabels, nil)
	descChangeFastNoise = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "change_fast_noise_ratio"),
		fmt.Sprintf("How much that %d-run mean moves on its own, as plateau_probe_change_noise_ratio.", plateau.FastRuns), probeOpLabels, nil)
	descChangeLowRuns = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "change_low_runs"),
		fmt.Sprintf("How many of the op's latest runs in a row were each below the median of the %d runs before it (at most %d). The verdict asks for 2, so that one slow run never pages.",
			plateau.NormalRuns, plateau.MaxLowRuns), probeOpLabels, nil)
	descRegression = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "regression"),
		fmt.Sprintf("1 when the op is in sudden regression, the verdict that pages (plateau.Change.Regression of the plateau_probe_change_* statistics): its last %d runs' mean under its recent normal by more than %g times its noise (clamped to %g..%g) with both runs below normal, or its last %d runs' mean so with the latest run below normal and the %d-run mean under %g of normal; else 0. Computed once per run; absent while plateau_probe_change_ratio is.",
			plateau.FastRuns, float64(plateau.PageNoiseFactor), plateau.PageMinDrop, plateau.PageMaxDrop, plateau.ChangeRuns, plateau.FastRuns, plateau.SlowPageFastRatio), probeOpLabels, nil)
	descMedianRecent = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "ratio_median_3_runs"),
		fmt.Sprintf("Median of the op's last %d successful results divided by its baseline: plateau_probe_ratio steadied over the last runs, counted in runs whatever the probe's interval. Absent where plateau_probe_ratio is.",
			plateau.RecentMedianRuns), probeOpLabels, nil)
	descMedianLong = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "ratio_median_24_runs"),
		fmt.Sprintf("Median of the op's last %d successful results divided by its baseline, the chronic shortfall's measure, which one bad evening cannot move. Absent where plateau_probe_ratio is, and until the op has %d successful runs with the probe's current parameters.",
			plateau.LongMedianRuns, plateau.MinLongMedianRuns), probeOpLabels, nil)
	// The fleet rules count nodes per target: reading these, a series per
	// node and target, instead of every op's verdict (issue 16) makes them
	// read a twentieth of the series on the default config's fleet.
	descTargetRegression = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_regression"),
		"1 when any op of any probe of the target is in sudden regression (the maximum of the target's plateau_probe_regression), else 0; absent while none of them has a plateau_probe_regression.",
		[]string{"target"}, nil)
	descTargetBelowWarning = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_below_warning"),
		"1 when any op of any probe of the target has its plateau_probe_ratio_median_3_runs under its probe's warning threshold (plateau_alert_threshold_ratio{severity=\"warning\"}), else 0; absent while none of them has a plateau_probe_ratio_median_3_runs.",
		[]string{"target"}, nil)
	descTargetBelowPlateau = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_below_plateau"),
		"1 when any op of any probe of the target has its plateau_probe_ratio_median_24_runs under its probe's warning threshold (plateau_alert_threshold_ratio{severity=\"warning\"}), the chronic shortfall PlateauProbeBelowPlateau warns of, else 0; absent while none of them has a plateau_probe_ratio_median_24_runs.",
		[]string{"target"}, nil)
	// Per target, what the cause and exporter rules read instead of every
	// probe's series (issue 16): at 5,000 nodes of packaging/plateau.yml a
	// rule over a series per probe or per probe op reads 35,000 to
	// 100,000 series at each evaluation, over one per target 10,000.
	descTargetConcurrentBusy = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_concurrent_busy"),
		fmt.Sprintf("1 when, during the last successful run of any probe of the target, the node moved more bytes per second of its own on the file system for an op (plateau_probe_concurrent_bytes_per_second) than %g times that probe's throughput plateau for the op (plateau_baseline_throughput_bytes_per_second): the node was busy with its jobs' I/O, else 0; absent while no probe of the target has both.",
			ConcurrentBusyFraction), []string{"target"}, nil)
	descTargetFailing = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_failing_probes"),
		"How many probes of the target have plateau_probe_failing 1.", []string{"target"}, nil)
	descTargetNotRun = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "target_not_run_probes"),
		"How many probes of the target have plateau_probe_not_run 1.", []string{"target"}, nil)
	descTargetModeMismatch = prometheus.NewDesc(prometheus.BuildFQName(namespace, "baseline", "target_io_mode_mismatch_probes"),
		"How many probes of the target have plateau_baseline_io_mode_mismatch 1; absent while none of them has a plateau_baseline_io_mode_mismatch.", []string{"target"}, nil)
	descFailing = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "failing"),
		fmt.Sprintf("1 when the probe fails for good, not one failed run: its last run failed or timed out and its last success is more than %d of its intervals old, or it has not succeeded since the exporter started and failed or timed out %d times; else 0. Evaluated at each scrape on the exporter's clock.",
			failingIntervals, failingRuns), probeLabels, nil)
	descNotRun = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "not_run"),
		fmt.Sprintf("1 when the probe's last run ended more than %d of its intervals ago, or, not having run since the exporter started, it was skipped %d times; else 0. Evaluated at each scrape on the exporter's clock.",
			notRunIntervals, notRunSkips), probeLabels, nil)
	descHistoryLoaded = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "history_last_load_successful"),
		"1 if the history file of the change ratios (--probe.history-file) was loaded at start, or none is configured; 0 if it could not be read or was corrupt: it was set aside as <file>.corrupt-* and the change ratios start anew.", nil, nil)
	descHistoryWriteErrors = prometheus.NewDesc(prometheus.BuildFQName(namespace, "probe", "history_write_errors_total"),
		"Failed writes of the history file of the change ratios (--probe.history-file); the reason is in the log. Until a write succeeds, a restart loses the runs since the last one.", nil, nil)
)

// ConcurrentBusyFraction of a probe's throughput plateau, moved by the
// node's own jobs on the file system during a run, makes the node busy
// (plateau_probe_target_concurrent_busy): the probe then shares the node's
// client (threads, cache, link) with the jobs and runs low because the
// node is busy, not broken. The GPFS counterpart of the cause,
// instance:plateau_gpfs_node_busy:bool in rules.yml, uses the same half.
const ConcurrentBusyFraction = 0.5

// The conditions of plateau_probe_failing and plateau_probe_not_run, which
// PlateauProbeFailing and PlateauProbeNotRun alert on. They were PromQL
// over every probe's timestamps and run counters at every evaluation; a
// 0/1 per probe, computed here at each scrape, costs Prometheus one
// instant selector instead, and compares the probe's timestamps with the
// clock that wrote them rather than with Prometheus's.
const (
	// failingIntervals: no success for more than two of the probe's own
	// intervals is at least two failed runs in a row, whatever the
	// interval.
	failingIntervals = 2
	// failingRuns failed runs for a probe that has not succeeded since the
	// exporter started (it has no last success to date).
	failingRuns = 2
	// notRunIntervals: longer than any splay or skipped slot.
	notRunIntervals = 3
	// notRunSkips skipped slots in a row (budget, full file system, busy
	// or hung target) for a probe that has not run since the start.
	notRunSkips = 3
)

// failing is plateau_probe_failing's condition at now.
func (st *probeState) failing(now time.Time) bool {
	if st.last == nil || st.last.OK() {
		return false
	}
	if st.lastSuccess == nil {
		return st.runs[ResultFailure]+st.runs[ResultTimeout] >= failingRuns
	}
	return now.Sub(st.lastSuccess.End).Seconds() > failingIntervals*st.interval
}

// notRun is plateau_probe_not_run's condition at now.
func (st *probeState) notRun(now time.Time) bool {
	if st.last == nil {
		return st.runs[ResultSkipped] >= notRunSkips
	}
	return now.Sub(st.last.End).Seconds() > notRunIntervals*st.interval
}

// minChangeRuns is how many successful runs ChangeOf needs: the recent
// ChangeRuns, MinNormalRuns before them, and ChangeRuns-1 more for the
// first normal run's rolling mean.
const minChangeRuns = plateau.MinNormalRuns + 2*plateau.ChangeRuns - 1

type probeKey struct{ target, probe string }

// probeState is everything exported about one probe.
type probeState struct {
	target, probe, kind string
	// params is plateau.ProbeParams of the configured probe, the part of
	// its history's key that a reload may change.
	params      string
	interval    float64
	inProgress  bool
	last        *probe.Result
	lastSuccess *probe.Result
	runs        map[string]float64
	errors      map[string]float64
	skips       map[string]float64
	ioBytes     map[string]float64
	latency     map[string]*probe.LatencyHistogram
	plateau     plateau.Plateau
	// pendingConcurrent is the node's own I/O during the run being
	// recorded (RecordConcurrent comes just before Record); concurrent is
	// that of lastSuccess, nil when no counters applied.
	pendingConcurrent *iocount.Rate
	concurrent        *iocount.Rate
}

type targetState struct {
	abandoned int
	// ioBytes is what every probe of the target moved since the exporter
	// started, whatever probes came and went by reloads.
	ioBytes float64
}

// Store holds the latest results for scrapes. Probes write to it when a run
// ends; a scrape takes a read lock for as long as it takes to copy numbers,
// so /metrics never waits for a probe.
type Store struct {
	mu      sync.RWMutex
	probes  map[probeKey]*probeState
	targets map[string]*targetState
	// history is every configured probe op's last successful results,
	// for the change ratios; historyGen counts its changes, so that a
	// snapshot written late never replaces a newer one in the file.
	history    plateau.History
	historyGen uint64
	// historyLoaded is false when the history file could not be loaded.
	historyLoaded bool

	// historyFile is where the history is saved, "" for nowhere.
	historyFile string
	logger      log.Logger
	// writeMu serializes writes of the history file, which happen outside
	// mu so that neither a scrape nor another probe waits for an fsync.
	writeMu sync.Mutex
	// written is the historyGen of the snapshot in the file (under writeMu).
	written uint64
	// notSetAside is set while a file that could not be loaded is still
	// at historyFile (renaming it failed): writing would destroy it, so
	// nothing is written until it is set aside (under writeMu).
	notSetAside bool
	writeErrors atomic.Uint64
}

// Options configure a store.
type Options struct {
	// HistoryFile keeps the change ratios' history across restarts (it is
	// loaded by Open, written after every successful run); "" keeps it in
	// memory only.
	HistoryFile string
	// Logger gets what goes wrong with the history file; nil logs nothing.
	Logger log.Logger
}

// New returns an empty store that keeps its history in memory only.
func New() *Store {
	return Open(Options{})
}

// Open returns a store with the history of o.HistoryFile. It never fails: a
// file that cannot be loaded is renamed to <file>.corrupt-<UTC time> and
// logged, the gauge plateau_probe_history_last_load_successful is 0, and
// the history starts empty, since a daemon that refuses to start over a
// cache of recent results would lose far more than those results.
func Open(o Options) *Store {
	s := &Store{
		probes: map[probeKey]*probeState{}, targets: map[string]*targetState{},
		history: plateau.History{}, historyLoaded: true,
		historyFile: o.HistoryFile, logger: o.Logger,
	}
	if s.logger == nil {
		s.logger = log.NewNopLogger()
	}
	if s.historyFile == "" {
		return s
	}
	h, err := plateau.LoadHistoryFile(s.historyFile)
	if err == nil {
		s.history = h
		level.Info(s.logger).Log("msg", "history of the change ratios loaded", "file", s.historyFile, "entries", len(h))
		return s
	}
	s.historyLoaded = false
	aside, aerr := plateau.SetAsideHistoryFile(s.historyFile, time.Now())
	if aerr != nil {
		s.notSetAside = true
		level.Error(s.logger).Log("msg", "history of the change ratios not loaded, and the file could not be set aside; it is not written until it can be", "err", err, "set_aside_err", aerr)
		return s
	}
	level.Warn(s.logger).Log("msg", "history of the change ratios not loaded; file set aside, starting with empty history", "err", err, "set_aside_as", aside)
	return s
}

// Configure keeps the state of probes that are still configured (same
// target, name and kind) and drops the rest, so counters survive a reload.
// Baselines (nil when none could be loaded) are matched to probes here.
// History is kept for probes with the same parameters too: a probe with
// another size or number of workers measures something else, so its
// history starts anew, and a removed probe's is dropped (from the file at
// the next write).
func (s *Store) Configure(cfg *probe.Config, baselines *plateau.Baselines) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[probeKey]*probeState{}
	targets := map[string]*targetState{}
	type paramsKey struct{ target, probe, params string }
	configured := map[paramsKey]bool{}
	for _, t := range cfg.Targets {
		if ts, ok := s.targets[t.Name]; ok {
			targets[t.Name] = ts
		} else {
			targets[t.Name] = &targetState{}
		}
		for _, p := range t.Probes {
			k := probeKey{t.Name, p.Name}
			st, ok := s.probes[k]
			if !ok || st.kind != p.Kind {
				st = newProbeState(t.Name, p)
			}
			st.interval = p.Interval.Seconds()
			st.params = plateau.ProbeParams(p)
			st.plateau = plateau.PlateauOf(baselines, t, p)
			keep[k] = st
			configured[paramsKey{t.Name, p.Name, st.params}] = true
		}
	}
	for k := range s.history {
		if !configured[paramsKey{k.Target, k.Probe, k.Params}] {
			delete(s.history, k)
			s.historyGen++
		}
	}
	// A stuck worker of a removed target still counts until it exits.
	for name, ts := range s.targets {
		if _, ok := targets[name]; !ok && ts.abandoned > 0 {
			targets[name] = ts
		}
	}
	s.probes = keep
	s.targets = targets
}

func newProbeState(target string, p *probe.ProbeConfig) *probeState {
	st := &probeState{
		target: target, probe: p.Name, kind: p.Kind,
		runs: map[string]float64{}, errors: map[string]float64{}, skips: map[string]float64{},
		ioBytes: map[string]float64{}, latency: map[string]*probe.LatencyHistogram{},
	}
	for _, r := range runResults {
		st.runs[r] = 0
	}
	for _, r := range probe.ErrorReasons() {
		st.errors[r] = 0
	}
	for _, r := range probe.SkipReasons() {
		st.skips[r] = 0
	}
	for _, op := range probe.OpsOf(p.Kind) {
		st.ioBytes[op] = 0
	}
	// The preallocation's series exists before the first run writes the
	// file, so that increase() over it is right from the start.
	for _, op := range probe.IOOnlyOpsOf(p.Kind) {
		st.ioBytes[op] = 0
	}
	return st
}

func (s *Store) state(target, probe string) *probeState {
	return s.probes[probeKey{target, probe}]
}

// SetInProgress marks a probe as running or not.
func (s *Store) SetInProgress(target, probe string, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state(target, probe); st != nil {
		st.inProgress = running
	}
}

// RecordSkip counts a run that did not happen.
func (s *Store) RecordSkip(target, probe, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state(target, probe); st != nil {
		st.runs[ResultSkipped]++
		st.skips[reason]++
	}
}

// RecordConcurrent keeps the node's own I/O on the target's file system
// during the run that Record is told about next; ok is false when no
// counters applied.
func (s *Store) RecordConcurrent(target, probe string, rate iocount.Rate, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state(target, probe); st != nil {
		st.pendingConcurrent = nil
		if ok {
			st.pendingConcurrent = &rate
		}
	}
}

// Record stores the result of a run; timedOut is set when its worker was
// killed at the timeout. After a successful run the history file is
// written, outside the lock.
func (s *Store) Record(r *probe.Result, timedOut bool) {
	if gen, snapshot := s.record(r, timedOut); snapshot != nil {
		s.saveHistory(gen, snapshot)
	}
}

// record is Record under the lock; it returns a snapshot of the history to
// save and its generation, or nil when there is nothing to save.
func (s *Store) record(r *probe.Result, timedOut bool) (uint64, plateau.History) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(r.Target, r.Probe)
	if st == nil {
		return 0, nil // the probe was removed by a reload while it ran
	}
	success := false
	pending := st.pendingConcurrent
	st.pendingConcurrent = nil
	switch {
	case r.Skipped != "":
		st.runs[ResultSkipped]++
		st.skips[r.Skipped]++
		return 0, nil
	case timedOut || r.Reason == probe.ReasonTimeout:
		// Killed at the timeout, or stopped itself just before it: both
		// are timeouts, not failures.
		st.runs[ResultTimeout]++
		st.errors[probe.ReasonTimeout]++
	case r.Reason != "":
		st.runs[ResultFailure]++
		st.errors[r.Reason]++
	default:
		success = true
		st.runs[ResultSuccess]++
		st.lastSuccess = r
		st.concurrent = pending
		for _, op := range r.Ops {
			if op.Latency == nil {
				continue
			}
			h := st.latency[op.Op]
			if h == nil {
				h = &probe.LatencyHistogram{}
				st.latency[op.Op] = h
			}
			_ = h.Add(op.Latency)
		}
		// A run in another I/O mode than the baselines' enters the history
		// all the same: the change ratio compares the probe with itself.
		s.addHistory(st, r)
	}
	ts := s.targetState(st.target)
	for _, op := range r.Ops {
		st.ioBytes[op.Op] += float64(op.Bytes)
		ts.ioBytes += float64(op.Bytes)
	}
	st.last = r
	if !success || s.historyFile == "" {
		return 0, nil
	}
	return s.historyGen, s.snapshotHistory()
}

// addHistory appends a successful run's results, in its kind's unit, to
// its ops' histories, keeping the last plateau.HistoryRuns.
func (s *Store) addHistory(st *probeState, r *probe.Result) {
	updated := r.End
	if updated.IsZero() {
		updated = time.Now()
	}
	unit := probe.OpUnit(st.kind)
	for _, op := range r.Ops {
		v := op.Value(unit)
		// Not a rate, and JSON cannot hold it: such a result would make
		// the file unwritable rather than the statistic absent.
		if !(v >= 0) || math.IsInf(v, 0) {
			continue
		}
		k := plateau.HistoryKey{Target: st.target, Probe: st.probe, Op: op.Op, Params: st.params}
		e := s.history[k]
		e.Results = append(e.Results, v)
		if n := len(e.Results); n > plateau.HistoryRuns {
			e.Results = e.Results[n-plateau.HistoryRuns:]
		}
		e.Updated = updated
		s.history[k] = e
	}
	s.historyGen++
}

// snapshotHistory copies the history, so that it can be written while
// Record appends to it.
func (s *Store) snapshotHistory() plateau.History {
	h := make(plateau.History, len(s.history))
	for k, e := range s.history {
		h[k] = plateau.HistoryEntry{Results: slices.Clone(e.Results), Updated: e.Updated}
	}
	return h
}

// saveHistory writes a snapshot of generation gen, unless a newer one was
// written already (two runs that end together may get here out of order).
// A failure is logged and counted, never fatal: the probes and their
// metrics do not depend on the file.
func (s *Store) saveHistory(gen uint64, h plateau.History) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if gen <= s.written {
		return
	}
	if s.notSetAside {
		aside, err := plateau.SetAsideHistoryFile(s.historyFile, time.Now())
		switch {
		case err == nil:
			level.Warn(s.logger).Log("msg", "history file that could not be loaded set aside", "set_aside_as", aside)
		case errors.Is(err, os.ErrNotExist):
			// Gone (removed by hand): nothing left to keep.
		default:
			s.writeErrors.Add(1)
			level.Error(s.logger).Log("msg", "history not saved: the file that could not be loaded is still in its place", "err", err)
			return
		}
		s.notSetAside = false
	}
	if err := plateau.WriteHistoryFile(s.historyFile, h); err != nil {
		s.writeErrors.Add(1)
		level.Error(s.logger).Log("msg", "history not saved; a restart would lose the runs since the last save", "err", err)
		return
	}
	s.written = gen
}

// SetAbandoned sets how many killed workers of the target have not
// exited; the target is hung while any have not.
func (s *Store) SetAbandoned(target string, workers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targetState(target).abandoned = workers
}

// targetState returns the target's state, created when the target is not
// (or no longer) configured. s.mu must be held for writing.
func (s *Store) targetState(target string) *targetState {
	ts := s.targets[target]
	if ts == nil {
		ts = &targetState{}
		s.targets[target] = ts
	}
	return ts
}

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSuccess, descLastRun, descLastSuccess, descDuration, descInterval, descInProgress, descInfo,
		descThroughput, descOpsRate, descConcurrent, descLatency, descRuns, descErrors, descSkips, descIOBytes, descTargetIOBytes, descHung, descAbandoned,
		descBaselineBytes, descBaselineOps, descRatio, descModeMismatch, descThreshold,
		descChange, descChangeNoise, descChangeFast, descChangeFastNoise, descChangeLowRuns,
		descRegression, descMedianRecent, descMedianLong, descTargetRegression, descTargetBelowWarning, descTargetBelowPlateau,
		descTargetConcurrentBusy, descTargetFailing, descTargetNotRun, descTargetModeMismatch,
		descFailing, descNotRun, descHistoryLoaded, descHistoryWriteErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	now := time.Now()
	// Per target: whether any op has the verdict (the series exists) and
	// whether any op's verdict is 1; how many probes have each of the
	// exporter's own conditions.
	type targetVerdict struct {
		hasRegression, regression, hasRecent, belowWarning, hasLong, belowPlateau bool
		hasConcurrent, concurrentBusy, hasModeMismatch                            bool
		failing, notRun, modeMismatch                                             int
	}
	targets := map[string]*targetVerdict{}
	for _, st := range s.probes {
		l := []string{st.target, st.probe, st.kind}
		tv := targets[st.target]
		if tv == nil {
			tv = &targetVerdict{}
			targets[st.target] = tv
		}
		failing, notRun := st.failing(now), st.notRun(now)
		tv.failing += int(b2f(failing))
		tv.notRun += int(b2f(notRun))
		gauge(descInterval, st.interval, l...)
		gauge(descFailing, b2f(failing), l...)
		gauge(descNotRun, b2f(notRun), l...)
		gauge(descInProgress, b2f(st.inProgress), l...)
		for _, r := range sortedKeys(st.runs) {
			counter(descRuns, st.runs[r], append(l, r)...)
		}
		for _, r := range sortedKeys(st.errors) {
			counter(descErrors, st.errors[r], append(l, r)...)
		}
		for _, r := range sortedKeys(st.skips) {
			counter(descSkips, st.skips[r], append(l, r)...)
		}
		for _, op := range sortedKeys(st.ioBytes) {
			counter(descIOBytes, st.ioBytes[op], append(l, op)...)
		}
		for _, op := range sortedKeys(st.latency) {
			ch <- newHistogramMetric(descLatency, st.latency[op], append(l, op)...)
		}
		if st.last != nil {
			gauge(descSuccess, b2f(st.last.OK()), l...)
			gauge(descLastRun, float64(st.last.End.UnixNano())/1e9, l...)
			gauge(descDuration, st.last.End.Sub(st.last.Start).Seconds(), l...)
		}
		if ls := st.lastSuccess; ls != nil {
			gauge(descLastSuccess, float64(ls.End.UnixNano())/1e9, l...)
			gauge(descInfo, 1, append(l, boolLabel(ls.Direct), ls.Engine)...)
			// A run in another I/O mode than its baselines' would raise or
			// hide a regression that is only the mode, so it gets no ratio.
			if len(st.plateau.Baselines) > 0 {
				mismatch := st.plateau.ModeMismatch(ls) != ""
				tv.hasModeMismatch = true
				tv.modeMismatch += int(b2f(mismatch))
				gauge(descModeMismatch, b2f(mismatch), l...)
			}
			// Rates are only meaningful while the last run succeeded; a
			// failing probe must not keep showing yesterday's numbers.
			if st.last == ls {
				for _, op := range ls.Ops {
					gauge(descThroughput, op.BytesPerSecond(), append(l, op.Op)...)
					gauge(descOpsRate, op.OperationsPerSecond(), append(l, op.Op)...)
				}
				if c := st.concurrent; c != nil {
					gauge(descConcurrent, c.Read, append(l, "read")...)
					gauge(descConcurrent, c.Write, append(l, "write")...)
					for op, moved := range map[string]float64{"read": c.Read, "write": c.Write} {
						if b, ok := st.plateau.Baselines[op]; ok && b.Unit == probe.UnitBytesPerSecond {
							tv.hasConcurrent = true
							tv.concurrentBusy = tv.concurrentBusy || moved > ConcurrentBusyFraction*b.Value
						}
					}
				}
				// The medians divide the history, kept in the kind's unit,
				// by the plateau: only where the ratio is exported, in the
				// same unit, so that they are medians of that ratio.
				plateaus := map[string]float64{}
				for _, v := range st.plateau.Compare(ls) {
					if v.HasRatio {
						gauge(descRatio, v.Ratio, append(l, v.Op)...)
						if v.Unit == probe.OpUnit(st.kind) {
							plateaus[v.Op] = v.Baseline.Value
						}
					}
				}
				for _, op := range ls.Ops {
					k := plateau.HistoryKey{Target: st.target, Probe: st.probe, Op: op.Op, Params: st.params}
					ol := append(l, op.Op)
					v := plateau.RunVerdicts(s.history[k].Results, plateaus[op.Op])
					if v.HasChange {
						tv.hasRegression = true
						tv.regression = tv.regression || v.Regression
					}
					if v.HasRecent {
						tv.hasRecent = true
						tv.belowWarning = tv.belowWarning || v.RecentMedian < st.plateau.Warning
					}
					if v.HasLong {
						tv.hasLong = true
						tv.belowPlateau = tv.belowPlateau || v.LongMedian < st.plateau.Warning
					}
					if c := v.Change; v.HasChange {
						gauge(descChange, c.Ratio, ol...)
						gauge(descChangeNoise, c.Noise, ol...)
						gauge(descChangeFast, c.FastRatio, ol...)
						gauge(descChangeFastNoise, c.FastNoise, ol...)
						gauge(descChangeLowRuns, float64(c.LowRuns), ol...)
						gauge(descRegression, b2f(v.Regression), ol...)
					}
					if v.HasRecent {
						gauge(descMedianRecent, v.RecentMedian, ol...)
					}
					if v.HasLong {
						gauge(descMedianLong, v.LongMedian, ol...)
					}
				}
			}
		}
		for _, op := range sortedKeys(st.plateau.Baselines) {
			b := st.plateau.Baselines[op]
			d := descBaselineOps
			if b.Unit == probe.UnitBytesPerSecond {
				d = descBaselineBytes
			}
			gauge(d, b.Value, append(l, op)...)
		}
		gauge(descThreshold, st.plateau.Warning, st.target, st.probe, "warning")
		gauge(descThreshold, st.plateau.Critical, st.target, st.probe, "critical")
	}
	for _, name := range sortedKeys(targets) {
		tv := targets[name]
		if tv.hasRegression {
			gauge(descTargetRegression, b2f(tv.regression), name)
		}
		if tv.hasRecent {
			gauge(descTargetBelowWarning, b2f(tv.belowWarning), name)
		}
		if tv.hasLong {
			gauge(descTargetBelowPlateau, b2f(tv.belowPlateau), name)
		}
		if tv.hasConcurrent {
			gauge(descTargetConcurrentBusy, b2f(tv.concurrentBusy), name)
		}
		gauge(descTargetFailing, float64(tv.failing), name)
		gauge(descTargetNotRun, float64(tv.notRun), name)
		if tv.hasModeMismatch {
			gauge(descTargetModeMismatch, float64(tv.modeMismatch), name)
		}
	}
	for name, ts := range s.targets {
		gauge(descHung, b2f(ts.abandoned > 0), name)
		gauge(descAbandoned, float64(ts.abandoned), name)
		counter(descTargetIOBytes, ts.ioBytes, name)
	}
	gauge(descHistoryLoaded, b2f(s.historyLoaded))
	counter(descHistoryWriteErrors, float64(s.writeErrors.Load()))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
