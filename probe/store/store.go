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
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

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
	// hungSince is when abandoned last rose from 0: the target has been
	// hung, without a break, since then. Zero while it is not hung.
	hungSince time.Time
	// ioBytes is what every probe of the target moved since the exporter
	// started, whatever probes came and went by reloads.
	ioBytes float64
	// server and group are the target's Server and ServerGroup of the
	// config (plateau_target_server_info), "" for an ordinary target.
	server, group string
	// serves is the target's Serves (plateau_target_serves_info).
	serves string
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
		ts, ok := s.targets[t.Name]
		if !ok {
			ts = &targetState{}
		}
		ts.server, ts.group, ts.serves = t.Server, t.ServerGroup, t.Serves
		targets[t.Name] = ts
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
		if !isMeasurement(st.kind, op.Op) {
			continue
		}
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
// exited; the target is hung while any have not, since the call that
// raised the count from 0.
func (s *Store) SetAbandoned(target string, workers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.targetState(target)
	switch {
	case workers <= 0:
		ts.hungSince = time.Time{}
	case ts.abandoned <= 0:
		ts.hungSince = time.Now()
	}
	ts.abandoned = workers
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

// isMeasurement reports whether op is one of its kind's results, not a
// phase that only moves bytes (probe.IOOnlyOpsOf: the random probe's
// preallocation, whose rate says how fast one file was first written).
func isMeasurement(kind, op string) bool {
	return !slices.Contains(probe.IOOnlyOpsOf(kind), op)
}
