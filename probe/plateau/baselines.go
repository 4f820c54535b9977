// Package plateau owns what the daemon compares every result with, and
// the comparison itself: the baselines and their file, Compare (the one
// verdict that /metrics, the probe command and the status page all use),
// the run verdicts and the change statistic, the history of recent runs
// the daemon keeps across restarts, and the probe command's report of
// results beside their plateau. How the baselines are measured
// lives in probe/characterize; how the rules fire on recorded series, in
// probe/backtest.
package plateau

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// A baseline is what a probe achieves on a known-good system: the plateau
// its results are compared with. Baselines live in their own file, written
// by `plateau_exporter characterize` and editable by hand, apart from the
// hand-written config. Each records the probe parameters it was measured
// with, because a baseline for 1 MiB blocks says nothing about 8 MiB blocks.

// BaselineKey names one op of one probe of one target.
type BaselineKey struct {
	Target, Probe, Op string
}

// Baseline is the plateau of one op.
type Baseline struct {
	Kind string
	// Unit is probe.UnitBytesPerSecond or probe.UnitOpsPerSecond.
	Unit  string
	Value float64
	// Spread is the relative spread of the runs the value is the median of:
	// 1.4826 x MAD / median (RobustSpread) as characterize writes it, (max
	// - min) / (2 * median) in files written before. 0 when unknown or
	// hand-written. Compare reads it (ClassifyWithin).
	Spread     float64
	Runs       int
	Method     string
	MeasuredAt time.Time
	Host       string
	// Params is ProbeParams of the probe as measured; empty on hand-written
	// entries, which then apply whatever the parameters.
	Params string
	// Direct ("true" or "false") and Engine say how the measured runs did
	// their I/O, as the labels of plateau_probe_info do. They are outcomes
	// of a run, not configuration: the random probe falls back from libaio
	// to goroutines when the node's AIO contexts run out (fs.aio-max-nr),
	// and a run that went through the page cache measures something else
	// than a direct one. Empty (hand-written entries, older files) applies
	// the baseline whatever the mode.
	Direct, Engine string
	Line           int
}

// Baselines is the parsed baselines file.
type Baselines struct {
	Entries map[BaselineKey]*Baseline
	// MinSizes is each probe's smallest good size (characterize
	// --size-sweep), kept beside its op entries; nil when none is.
	MinSizes map[ProbeKey]MinSize
	Source   string
}

// NewBaselines returns an empty set.
func NewBaselines() *Baselines { return &Baselines{Entries: map[BaselineKey]*Baseline{}} }

// ProbeParams fingerprints the parameters that decide what a probe
// measures (not its schedule), e.g. "sequential workers=1 file_size=256MiB
// block_size=8MiB".
func ProbeParams(p *probe.ProbeConfig) string {
	parts := []string{p.Kind}
	add := func(k string, v string) { parts = append(parts, k+"="+v) }
	for _, k := range probe.KeysOf(p.Kind) {
		switch k {
		case "workers":
			add(k, strconv.Itoa(p.Workers))
		case "file_size":
			add(k, probe.FormatSize(p.FileSize))
		case "block_size":
			add(k, probe.FormatSize(p.BlockSize))
		case "segment_size":
			add(k, probe.FormatSize(p.SegmentSize))
		case "queue_depth":
			add(k, strconv.Itoa(p.QueueDepth))
		case "duration":
			add(k, p.Duration.String())
		case "files":
			add(k, strconv.Itoa(p.Files))
		case "read_after":
			if p.ReadAfter > 0 {
				add(k, p.ReadAfter.String())
			}
		}
	}
	return strings.Join(parts, " ")
}

// ModeMismatch says how a run did its I/O differently from the runs the
// baseline was measured with, or "" when it did not (or the baseline does
// not record it). Such a run is not compared with the plateau.
func (b *Baseline) ModeMismatch(r *probe.Result) string {
	var diffs []string
	if got := strconv.FormatBool(r.Direct); b.Direct != "" && b.Direct != got {
		diffs = append(diffs, "direct="+got+" (baseline direct="+b.Direct+")")
	}
	if b.Engine != "" && b.Engine != r.Engine {
		diffs = append(diffs, "engine="+r.Engine+" (baseline engine="+b.Engine+")")
	}
	if len(diffs) == 0 {
		return ""
	}
	return "run used " + strings.Join(diffs, ", ")
}

// For returns the baseline that applies to an op of a configured probe, or
// nil with a reason when there is none or it was measured differently.
func (b *Baselines) For(target string, p *probe.ProbeConfig, op string) (*Baseline, string) {
	if b == nil {
		return nil, "no baselines loaded"
	}
	e := b.Entries[BaselineKey{target, p.Name, op}]
	switch {
	case e == nil:
		return nil, "no baseline"
	case e.Kind != p.Kind:
		return nil, fmt.Sprintf("baseline is for kind %s", e.Kind)
	case e.Params != "" && e.Params != ProbeParams(p):
		return nil, fmt.Sprintf("baseline measured with %q, probe now runs %q", e.Params, ProbeParams(p))
	}
	return e, ""
}
