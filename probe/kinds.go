package probe

import (
	"context"
	"sort"
)

// kindSpec is what the engine knows about one probe kind: which config keys
// it takes, its defaults and checks, how much I/O a run moves (for budgets),
// and how to run it.
type kindSpec struct {
	keys []string
	ops  []string
	// ioOnlyOps are phases that move bytes but are no measurement (the
	// random probe's preallocation); they appear only in io_bytes_total.
	ioOnlyOps   []string
	setDefaults func(*ProbeConfig)
	validate    func(*ProbeConfig) []fieldError
	bytesPerRun func(*ProbeConfig) int64
	run         func(ctx context.Context, rc *runContext) error
}

// runContext is handed to a kind's run function.
type runContext struct {
	cfg *ProbeConfig
	// probeDir is the target's verified probe directory; kinds that keep
	// files across runs open their keep directory in it.
	probeDir *probeDir
	// dir is this run's scratch directory, removed when the run ends.
	dir    *runDir
	result *Result
	// nonce makes this run's data differ from every other run's.
	nonce uint64
}

// addOp records one measured phase.
func (rc *runContext) addOp(op string, bytes, operations int64, seconds float64, lat *latencyRecorder) {
	o := OpResult{Op: op, Bytes: bytes, Operations: operations, Seconds: seconds}
	if lat != nil {
		o.Latency = lat.Snapshot()
	}
	rc.result.Ops = append(rc.result.Ops, o)
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

// OpsOf lists the ops a kind reports.
func OpsOf(kind string) []string { return kinds[kind].ops }

// BytesPerRun is the data a probe moves in one run, for I/O budgets.
func BytesPerRun(p *ProbeConfig) int64 { return kinds[p.Kind].bytesPerRun(p) }

// checkBlockSize enforces what O_DIRECT needs of every data probe's transfers.
func checkBlockSize(bs int64, errs []fieldError) []fieldError {
	if bs <= 0 || bs%defaultAlign != 0 {
		return append(errs, fieldError{"block_size", "must be a positive multiple of 4KiB (O_DIRECT alignment)"})
	}
	if bs > 1<<30 {
		return append(errs, fieldError{"block_size", "must be at most 1GiB"})
	}
	return errs
}
