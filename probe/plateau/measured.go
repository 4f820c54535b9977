package plateau

import (
	"sort"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// Measured is what the baseline runs of one probe gave.
type Measured struct {
	Target string
	Probe  *probe.ProbeConfig
	// Entries is each op's baseline: the median of the runs and their
	// spread.
	Entries map[string]*Baseline
	// Values is each op's value in every run, in run order.
	Values map[string][]float64
	// Unstable holds the ops whose runs spread too much for a baseline
	// (their RobustSpread): they have no entry, and Replace keeps the one
	// on file.
	Unstable map[string]float64
}

// Replace puts the measured entries of one probe in place of whatever the
// baselines held for it, keeping every other target's and probe's entries,
// and returns what changed, in the kind's op order.
func (b *Baselines) Replace(m *Measured) []BaselineChange {
	var changes []BaselineChange
	old := map[string]*Baseline{}
	for k, e := range b.Entries {
		if _, unstable := m.Unstable[k.Op]; unstable && k.Target == m.Target && k.Probe == m.Probe.Name {
			continue
		}
		if k.Target == m.Target && k.Probe == m.Probe.Name {
			old[k.Op] = e
			delete(b.Entries, k)
		}
	}
	for op, e := range m.Entries {
		b.Entries[BaselineKey{m.Target, m.Probe.Name, op}] = e
		changes = append(changes, BaselineChange{Key: BaselineKey{m.Target, m.Probe.Name, op}, Old: old[op], New: e})
	}
	for op, e := range old {
		if m.Entries[op] == nil {
			changes = append(changes, BaselineChange{Key: BaselineKey{m.Target, m.Probe.Name, op}, Old: e})
		}
	}
	order := probe.OpsOf(m.Probe.Kind)
	sort.Slice(changes, func(i, j int) bool {
		a, b := opIndex(order, changes[i].Key.Op), opIndex(order, changes[j].Key.Op)
		if a != b {
			return a < b
		}
		return changes[i].Key.Op < changes[j].Key.Op
	})
	return changes
}

// BaselineChange is what characterize did to one op's baseline: Old is nil
// for a new entry, New is nil for an op the probe no longer reports.
type BaselineChange struct {
	Key      BaselineKey
	Old, New *Baseline
}

// Relative is the new value's change over the old one (0.1 for +10%); ok
// is false when there is no old value to compare with or it is in another
// unit.
func (c BaselineChange) Relative() (float64, bool) {
	if c.Old == nil || c.New == nil || c.Old.Unit != c.New.Unit || !(c.Old.Value > 0) {
		return 0, false
	}
	return c.New.Value/c.Old.Value - 1, true
}
