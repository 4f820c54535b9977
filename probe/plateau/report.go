package plateau

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
)

// ProbeReport is what the probe command prints: every op of each run
// beside its plateau, with the verdict the daemon's ratios are made of, as
// a table or as JSON for the scripts (a Slurm prolog, an NHC check) that
// act on it.
type ProbeReport struct {
	Ops []OpReport
}

// OpReport is one op of a run: one line of the table, one object of the
// JSON. The JSON names are an interface: scripts read them.
type OpReport struct {
	Target    string   `json:"target"`
	Probe     string   `json:"probe"`
	Kind      string   `json:"kind"`
	Op        string   `json:"op,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Value     float64  `json:"value,omitempty"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"`
	Warning   float64  `json:"warning_ratio"`
	Critical  float64  `json:"critical_ratio"`
	Verdict   string   `json:"verdict"`
	Direct    bool     `json:"direct"`
	Engine    string   `json:"engine,omitempty"`
	Error     string   `json:"error,omitempty"`
	Rationale string   `json:"note,omitempty"`
	// Attempt is 1 on the lines of a run that was below its plateau or
	// failed and was run again, 2 on the lines of that second run, 0 on a
	// run that was not repeated. The verdict of a repeated probe is its
	// second run's: Worst leaves attempt 1 out.
	Attempt int `json:"attempt,omitempty"`
}

// MarkAttempt sets Attempt on the lines of target t's probe p from index
// from on.
func (r *ProbeReport) MarkAttempt(from, attempt int) {
	for i := from; i < len(r.Ops); i++ {
		r.Ops[i].Attempt = attempt
	}
}

// Add compares a run of probe p of target t with its plateau in baselines
// (nil for none) and adds a line per op, or one for a run that failed or
// was skipped.
func (r *ProbeReport) Add(t *probe.Target, p *probe.ProbeConfig, res *probe.Result, baselines *Baselines) {
	base := OpReport{Target: t.Name, Probe: p.Name, Kind: p.Kind, Warning: t.WarningRatio, Critical: t.CriticalRatio, Direct: res.Direct, Engine: res.Engine}
	for _, v := range PlateauOf(baselines, t, p).Compare(res) {
		o := base
		o.Op, o.Verdict = v.Op, v.Verdict
		if v.Verdict == VerdictFailed || v.Verdict == VerdictSkipped {
			o.Error = v.Note
			r.Ops = append(r.Ops, o)
			continue
		}
		o.Unit, o.Value, o.Rationale = v.Unit, v.Value, v.Note
		if v.Baseline != nil {
			o.Baseline = &v.Baseline.Value
		}
		if v.HasRatio {
			ratio := v.Ratio
			o.Ratio = &ratio
		}
		r.Ops = append(r.Ops, o)
	}
}

// Worst is the most severe verdict of the report, as Worst has it: failed
// over critical over warning, "" when none is severe.
func (r *ProbeReport) Worst() string {
	vs := make([]OpVerdict, 0, len(r.Ops))
	for _, o := range r.Ops {
		if o.Attempt != 1 {
			vs = append(vs, OpVerdict{Verdict: o.Verdict})
		}
	}
	return Worst(vs)
}

// WriteJSON writes the ops as an indented JSON array.
func (r *ProbeReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r.Ops); err != nil {
		return fmt.Errorf("probe report: %w", err)
	}
	return nil
}

// WriteTable writes a line per op: result, plateau, ratio and verdict,
// with why there is no ratio or what failed.
func (r *ProbeReport) WriteTable(w io.Writer) {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tRESULT\tPLATEAU\tRATIO\tVERDICT")
	for _, o := range r.Ops {
		result, plateau, ratio := "-", "-", "-"
		if o.Op != "" {
			result = chart.FormatRate(o.Value, o.Unit)
		}
		if o.Baseline != nil {
			plateau = chart.FormatRate(*o.Baseline, o.Unit)
		}
		if o.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *o.Ratio)
		}
		verdict := o.Verdict
		switch o.Attempt {
		case 1:
			verdict += " [first run; run again to confirm]"
		case 2:
			verdict += " [second run]"
		}
		if o.Error != "" {
			verdict += ": " + o.Error
		} else if o.Rationale != "" && o.Rationale != "no baseline" {
			verdict += " (" + o.Rationale + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Target, o.Probe, dash(o.Op), result, plateau, ratio, verdict)
	}
	tw.Flush()
}
