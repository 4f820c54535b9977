package plateau

import (
	"fmt"
	"slices"
	"strings"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// Verdicts of a comparison, one per op of a run (one per run when the run
// measured nothing).
const (
	VerdictOK       = "ok"
	VerdictWarning  = "warning"
	VerdictCritical = "critical"
	// VerdictNoBaseline: no plateau applies to the op as the probe now
	// runs, or the run did its I/O differently from the baseline's runs.
	VerdictNoBaseline = "no-baseline"
	VerdictFailed     = "failed"
	VerdictSkipped    = "skipped"
)

// Plateau is what the results of one configured probe are compared with:
// the baseline of each op that has one applying to the probe as it is
// configured now, why the other ops have none, and the target's warning
// and critical ratios.
type Plateau struct {
	Kind string
	// Baselines holds each op's baseline; ops without one are in Missing
	// with the reason.
	Baselines         map[string]*Baseline
	Missing           map[string]string
	Warning, Critical float64
}

// PlateauOf matches baselines (nil when none could be loaded) to a probe
// of a target.
func PlateauOf(baselines *Baselines, t *probe.Target, p *probe.ProbeConfig) Plateau {
	pl := Plateau{Kind: p.Kind, Baselines: map[string]*Baseline{}, Missing: map[string]string{},
		Warning: t.WarningRatio, Critical: t.CriticalRatio}
	for _, op := range probe.OpsOf(p.Kind) {
		if b, why := baselines.For(t.Name, p, op); b != nil {
			pl.Baselines[op] = b
		} else {
			pl.Missing[op] = why
		}
	}
	return pl
}

// ModeMismatch says how a run did its I/O differently (direct, engine)
// from the runs its baselines were measured with, or "" when it did not.
// Such a run is not compared: a regression that is only the mode would
// page, or a real one hide behind it.
func (pl Plateau) ModeMismatch(r *probe.Result) string {
	for _, op := range probe.OpsOf(pl.Kind) {
		if b := pl.Baselines[op]; b != nil {
			if m := b.ModeMismatch(r); m != "" {
				return m
			}
		}
	}
	return ""
}

// OpVerdict is one op of a run beside its plateau.
type OpVerdict struct {
	// Op is empty on the single verdict of a run that failed or was
	// skipped.
	Op string
	// Unit is the baseline's unit, or the kind's when there is none, and
	// Value the op's result in it.
	Unit  string
	Value float64
	// Baseline is the plateau compared with; nil when none applies.
	Baseline *Baseline
	// Ratio is Value over the baseline's; set (HasRatio) only for the
	// verdicts ok, warning and critical.
	Ratio    float64
	HasRatio bool
	Verdict  string
	// Note says why there is no ratio, or what failed.
	Note string
}

// Compare is the verdict on one run: each op's result over its plateau,
// critical under the critical ratio, warning under the warning ratio, ok
// otherwise. It is the one comparison behind plateau_probe_ratio, the
// probe command's verdicts and exit status, and the status page.
func (pl Plateau) Compare(r *probe.Result) []OpVerdict {
	switch {
	case r.Skipped != "":
		return []OpVerdict{{Verdict: VerdictSkipped, Note: strings.TrimSpace(r.Skipped + ": " + r.Error)}}
	case !r.OK():
		return []OpVerdict{{Verdict: VerdictFailed, Note: r.Reason + ": " + r.Error}}
	}
	mismatch := pl.ModeMismatch(r)
	out := make([]OpVerdict, 0, len(r.Ops))
	for _, op := range r.Ops {
		// A phase that is no measurement (the random probe's
		// preallocation) gets no verdict.
		if slices.Contains(probe.IOOnlyOpsOf(pl.Kind), op.Op) {
			continue
		}
		v := OpVerdict{Op: op.Op, Unit: probe.OpUnit(pl.Kind)}
		b := pl.Baselines[op.Op]
		if b != nil {
			v.Unit = b.Unit
		}
		v.Value = op.Value(v.Unit)
		switch {
		case b == nil || !(b.Value > 0):
			v.Verdict, v.Note = VerdictNoBaseline, pl.Missing[op.Op]
		case mismatch != "":
			// The plateau is shown, the ratio is not.
			v.Baseline, v.Verdict, v.Note = b, VerdictNoBaseline, mismatch
		default:
			v.Baseline, v.Ratio, v.HasRatio = b, v.Value/b.Value, true
			v.Verdict = pl.ClassifyWithin(v.Ratio, b.Spread)
			if v.Verdict != pl.Classify(v.Ratio) {
				v.Note = fmt.Sprintf("within the noise of the baseline's runs (spread ±%.0f%%)", 100*b.Spread)
			}
		}
		out = append(out, v)
	}
	return out
}

// Classify is the verdict on a ratio to the plateau.
func (pl Plateau) Classify(ratio float64) string {
	switch {
	case ratio < pl.Critical:
		return VerdictCritical
	case ratio < pl.Warning:
		return VerdictWarning
	}
	return VerdictOK
}

// ClassifyWithin is the verdict on a ratio to a plateau whose runs spread
// ±spread (Baseline.Spread, about one standard deviation of a run over
// the median). A ratio within two of them, 1 - 2 x spread or above, is no
// warning: an unchanged node gives one that low on about 2% of runs.
// Critical also needs the ratio below 1 - 4 x spread: a baseline of runs
// spread ±15% cannot tell a drop to 0.45 from its noise. A baseline that
// characterize accepted (spread at most half the distance to the warning
// ratio) keeps the target's ratios as they are; a hand-written one
// (spread 0) too.
func (pl Plateau) ClassifyWithin(ratio, spread float64) string {
	if !(spread > 0) {
		return pl.Classify(ratio)
	}
	switch {
	case ratio < pl.Critical && ratio < 1-4*spread:
		return VerdictCritical
	case ratio < pl.Warning && ratio < 1-2*spread:
		return VerdictWarning
	}
	return VerdictOK
}

// Worst is the most severe of a set of verdicts for an exit status:
// failed over critical over warning; ok, skipped and no-baseline are not
// severe.
func Worst(verdicts []OpVerdict) string {
	rank := []string{VerdictFailed, VerdictCritical, VerdictWarning}
	worst := ""
	for _, v := range verdicts {
		i := slices.Index(rank, v.Verdict)
		if i >= 0 && (worst == "" || i < slices.Index(rank, worst)) {
			worst = v.Verdict
		}
	}
	return worst
}
