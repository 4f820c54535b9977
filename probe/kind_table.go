package probe

import (
	"slices"
	"sort"
)

// kindSpec is the schema of one probe kind: which config keys it takes, the
// ops it reports, its defaults and checks, and how much I/O a run moves
// (for budgets). How a kind runs is probe/engine's.
type kindSpec struct {
	keys []string
	ops  []string
	// ioOnlyOps are phases that move bytes but are no measurement (the
	// random probe's preallocation); they appear only in io_bytes_total.
	ioOnlyOps   []string
	setDefaults func(*ProbeConfig)
	validate    func(*ProbeConfig) []fieldError
	bytesPerRun func(*ProbeConfig) int64
}

// kinds is the fixed table of probe kinds.
var kinds = map[string]kindSpec{
	KindSequential: sequentialKind,
	KindSharedFile: sharedFileKind,
	KindMetadata:   metadataKind,
	KindRandom:     randomKind,
}

// KindNames lists the probe kinds, sorted.
func KindNames() []string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// KnownKind reports whether kind names a probe kind.
func KnownKind(kind string) bool {
	_, ok := kinds[kind]
	return ok
}

// OpsOf lists the ops a kind reports, in the order it runs them.
func OpsOf(kind string) []string { return slices.Clone(kinds[kind].ops) }

// IOOnlyOpsOf lists the phases of a kind that move bytes without being a
// measurement (the random probe's preallocation).
func IOOnlyOpsOf(kind string) []string { return slices.Clone(kinds[kind].ioOnlyOps) }

// KeysOf lists the kind-specific config keys of a kind, in the order a
// probe's parameters are printed.
func KeysOf(kind string) []string { return slices.Clone(kinds[kind].keys) }

// HasKey reports whether a kind takes the config key.
func HasKey(kind, key string) bool { return slices.Contains(kinds[kind].keys, key) }

// BytesPerRun is the data a probe moves in one run, for I/O budgets.
func BytesPerRun(p *ProbeConfig) int64 { return kinds[p.Kind].bytesPerRun(p) }

// Units of a plateau and of a result compared with it.
const (
	UnitBytesPerSecond = "bytes_per_second"
	UnitOpsPerSecond   = "operations_per_second"
)

// OpUnit is the unit an op's baseline is kept in: throughput for
// sequential and shared-file data, operation rates for random I/O (IOPS)
// and metadata, as the published characterizations report them.
func OpUnit(kind string) string {
	switch kind {
	case KindSequential, KindSharedFile:
		return UnitBytesPerSecond
	}
	return UnitOpsPerSecond
}
