package store

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Snapshot is a copy of what the store holds, for readers other than
// /metrics (the status page). It is taken under the read lock, as a scrape
// is, and shares nothing the store changes afterwards.
type Snapshot struct {
	// Probes are the configured probes, sorted by target and probe.
	Probes []ProbeSnapshot
	// Targets are the configured targets and any removed one whose stuck
	// worker has not exited, sorted by name.
	Targets []TargetSnapshot
	// HistoryLoaded and HistoryWriteErrors are
	// plateau_probe_history_last_load_successful and
	// plateau_probe_history_write_errors_total.
	HistoryLoaded      bool
	HistoryWriteErrors uint64
}

// TargetSnapshot is a target's stuck workers.
type TargetSnapshot struct {
	Name string
	// Abandoned counts workers killed at their timeout that have not
	// exited; the target is hung (no probe starts) while it is above 0.
	Abandoned int
	// HungSince is when the target became hung (Abandoned rose from 0);
	// zero while it is not hung.
	HungSince time.Time
}

// ProbeSnapshot is one probe as /metrics shows it.
type ProbeSnapshot struct {
	Target, Probe, Kind string
	// Params is plateau.ProbeParams of the configured probe.
	Params     string
	Interval   time.Duration
	InProgress bool
	// Last is the last run that ended (not a skip), LastSuccess the last
	// successful one; nil before the first. They may be the same result.
	// Latency histograms are left out: they are the store's to merge.
	Last, LastSuccess *probe.Result
	// Runs, Errors and Skips are plateau_probe_runs_total by result,
	// _errors_total and _skips_total by reason, every label value present.
	Runs, Errors, Skips map[string]uint64
	Plateau             plateau.Plateau
	// Verdicts is Plateau.Compare of Last, the verdicts /metrics turns into
	// plateau_probe_ratio; nil before the first run.
	Verdicts []plateau.OpVerdict
	// Ops are the measured ops of the probe's kind, in the kind's order.
	Ops []OpSnapshot
}

// OpSnapshot is one op's recent results.
type OpSnapshot struct {
	Op string
	// History is the op's last successful results in the kind's unit,
	// oldest first: what the change ratio is computed from.
	History []float64
	// Change is plateau_probe_change_ratio and _change_noise_ratio; set
	// (HasChange) only where /metrics exports them: enough history and the
	// last run successful.
	Change    plateau.Change
	HasChange bool
}

// Snapshot copies the store's state. The lock is held only for the copy;
// verdicts and change ratios are computed after it is released, so a
// reader never holds up a probe that is recording its result.
func (s *Store) Snapshot() Snapshot {
	snap := s.copyState()
	for i := range snap.Probes {
		p := &snap.Probes[i]
		if p.Last != nil {
			p.Verdicts = p.Plateau.Compare(p.Last)
		}
		// As in Collect: rates and their statistics only while the last
		// run succeeded.
		current := p.Last != nil && p.Last == p.LastSuccess
		for j := range p.Ops {
			if current && p.Last.Op(p.Ops[j].Op) != nil {
				p.Ops[j].Change, p.Ops[j].HasChange = plateau.ChangeOf(p.Ops[j].History)
			}
		}
	}
	return snap
}

func (s *Store) copyState() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := Snapshot{
		Probes:             make([]ProbeSnapshot, 0, len(s.probes)),
		Targets:            make([]TargetSnapshot, 0, len(s.targets)),
		HistoryLoaded:      s.historyLoaded,
		HistoryWriteErrors: s.writeErrors.Load(),
	}
	for _, st := range s.probes {
		p := ProbeSnapshot{
			Target: st.target, Probe: st.probe, Kind: st.kind, Params: st.params,
			Interval:   time.Duration(st.interval * float64(time.Second)),
			InProgress: st.inProgress,
			Runs:       counts(st.runs), Errors: counts(st.errors), Skips: counts(st.skips),
			Plateau: plateau.Plateau{
				Kind: st.plateau.Kind, Baselines: maps.Clone(st.plateau.Baselines), Missing: maps.Clone(st.plateau.Missing),
				Warning: st.plateau.Warning, Critical: st.plateau.Critical,
			},
		}
		// Results are not changed once recorded, but their Ops slice is
		// the worker's; copy it so the snapshot is the reader's alone.
		p.LastSuccess = copyResult(st.lastSuccess)
		if st.last == st.lastSuccess {
			p.Last = p.LastSuccess
		} else {
			p.Last = copyResult(st.last)
		}
		for _, op := range probe.OpsOf(st.kind) {
			k := plateau.HistoryKey{Target: st.target, Probe: st.probe, Op: op, Params: st.params}
			p.Ops = append(p.Ops, OpSnapshot{Op: op, History: slices.Clone(s.history[k].Results)})
		}
		snap.Probes = append(snap.Probes, p)
	}
	for name, ts := range s.targets {
		snap.Targets = append(snap.Targets, TargetSnapshot{Name: name, Abandoned: ts.abandoned, HungSince: ts.hungSince})
	}
	sort.Slice(snap.Probes, func(i, j int) bool {
		a, b := snap.Probes[i], snap.Probes[j]
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.Probe < b.Probe
	})
	sort.Slice(snap.Targets, func(i, j int) bool { return snap.Targets[i].Name < snap.Targets[j].Name })
	return snap
}

// Probe returns the snapshot of one probe, or nil.
func (s Snapshot) Probe(target, name string) *ProbeSnapshot {
	for i := range s.Probes {
		if s.Probes[i].Target == target && s.Probes[i].Probe == name {
			return &s.Probes[i]
		}
	}
	return nil
}

// Target returns the snapshot of one target, or nil.
func (s Snapshot) Target(name string) *TargetSnapshot {
	for i := range s.Targets {
		if s.Targets[i].Name == name {
			return &s.Targets[i]
		}
	}
	return nil
}

func copyResult(r *probe.Result) *probe.Result {
	if r == nil {
		return nil
	}
	c := *r
	c.Ops = slices.Clone(r.Ops)
	for i := range c.Ops {
		c.Ops[i].Latency = nil
	}
	return &c
}

func counts(m map[string]float64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = uint64(v)
	}
	return out
}
