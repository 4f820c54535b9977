package characterize

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// The reports of a characterization, each printed as the command's text
// with WriteTable. The characterize command offers no JSON form: its
// results for scripts are the baselines file and the sweeps' CSV.

// WrittenReport is what a characterization wrote to the baselines file:
// each op's old and new plateau and the change, and, when the daemon's
// history has runs of those ops, how their median compared with the old
// plateau and compares with the new one. A plateau that had drifted far
// from what the probe delivered explains weeks of chronic-shortfall
// warnings.
type WrittenReport struct {
	// Path is the baselines file written, Backup the previous file kept
	// ("" when there was none).
	Path, Backup string
	Changes      []plateau.BaselineChange
	// HistoryFile is the daemon's history Recent was read from, "" for
	// none; HistoryErr says why it could not be read.
	HistoryFile string
	Recent      []RecentRuns
	HistoryErr  error
}

// RecentRuns is the daemon's recent runs of one characterized op.
type RecentRuns struct {
	Key  plateau.BaselineKey
	Unit string
	plateau.RecentComparison
}

// NewWrittenReport reports the changes written to path, beside the
// daemon's recent runs of them read from historyFile ("" for none).
func NewWrittenReport(path, backup string, changes []plateau.BaselineChange, historyFile string) *WrittenReport {
	r := &WrittenReport{Path: path, Backup: backup, Changes: changes, HistoryFile: historyFile}
	if historyFile == "" {
		return r
	}
	h, err := plateau.LoadHistoryFile(historyFile)
	if err != nil {
		r.HistoryErr = err
		return r
	}
	for _, ch := range changes {
		if rc, ok := h.CompareRecent(ch); ok {
			r.Recent = append(r.Recent, RecentRuns{Key: ch.Key, Unit: ch.New.Unit, RecentComparison: rc})
		}
	}
	return r
}

// WriteTable prints the file written, the changes and the recent runs.
func (r *WrittenReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nwrote %s", r.Path)
	if r.Backup != "" {
		fmt.Fprintf(w, " (the previous file is kept as %s)", r.Backup)
	}
	fmt.Fprint(w, ":\n")
	writeChanges(w, r.Changes)
	r.writeRecent(w)
}

// writeChanges shows each op's old and new baseline and the change.
func writeChanges(w io.Writer, changes []plateau.BaselineChange) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tOLD\tNEW\tCHANGE\tSPREAD\tRUNS")
	for _, ch := range changes {
		old, nw, change, spread, runs := "-", "-", "", "-", "-"
		if ch.Old != nil {
			old = chart.FormatRate(ch.Old.Value, ch.Old.Unit)
		}
		if ch.New != nil {
			nw = chart.FormatRate(ch.New.Value, ch.New.Unit)
			spread = fmt.Sprintf("±%.1f%%", 100*ch.New.Spread)
			runs = strconv.Itoa(ch.New.Runs)
		}
		switch r, ok := ch.Relative(); {
		case ch.Old == nil:
			change = "new"
		case ch.New == nil:
			change = "removed (the probe no longer reports this op)"
		case ok:
			change = fmt.Sprintf("%+.1f%%", 100*r)
		default:
			change = "unit changed"
		}
		if ch.Old != nil && ch.New != nil && ch.Old.Params != "" && ch.Old.Params != ch.New.Params {
			change += fmt.Sprintf(" (old one measured with %s)", ch.Old.Params)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ch.Key.Target, ch.Key.Probe, ch.Key.Op, old, nw, change, spread, runs)
	}
	tw.Flush()
}

func (r *WrittenReport) writeRecent(w io.Writer) {
	if r.HistoryErr != nil {
		fmt.Fprintf(w, "\nrecent runs not shown: %v\n", r.HistoryErr)
		return
	}
	if len(r.Recent) == 0 {
		return
	}
	ratio := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	fmt.Fprintf(w, "\nthe daemon's recent runs (%s) against the old and the new plateau:\n", r.HistoryFile)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tRUNS\tMEDIAN\tOF OLD\tOF NEW\tLAST RUN")
	for _, rc := range r.Recent {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", rc.Key.Target, rc.Key.Probe, rc.Key.Op, rc.Runs,
			chart.FormatRate(rc.Median, rc.Unit), ratio(rc.ToOld), ratio(rc.ToNew), rc.Updated.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// SweepReport is one probe's sweep over workers or queue depths, in the
// shape of the characterizations' "maximum and sustained" table, with the
// level to suggest for the continuous probe.
type SweepReport struct {
	Sweep *Sweep
	// MaxWorkers and MaxQueueDepth are the sweep's limits (the flags
	// --max-workers and --max-queue-depth), named when an op was still
	// rising at the last level.
	MaxWorkers, MaxQueueDepth int
	// SVGPath and CSVPath are the curve's files, "" when none was written.
	SVGPath, CSVPath string
	// Err says why the sweep is incomplete, nil when it is not.
	Err error
}

// WriteTable prints the sweep's table and suggestion, its files and why
// it is incomplete.
func (r SweepReport) WriteTable(w io.Writer) {
	if sw := r.Sweep; sw != nil && len(sw.Steps) > 0 {
		r.writeSweep(w)
		if r.SVGPath != "" {
			fmt.Fprintf(w, "chart: %s\ndata:  %s\n", r.SVGPath, r.CSVPath)
		}
	}
	if r.Err != nil {
		fmt.Fprintf(w, "\nsweep incomplete: %v\n", r.Err)
	}
}

func (r SweepReport) writeSweep(w io.Writer) {
	sw := r.Sweep
	limit, limitFlag := r.MaxWorkers, "--max-workers"
	if sw.Variable == VariableQueueDepth {
		limit, limitFlag = r.MaxQueueDepth, "--max-queue-depth"
	}
	levels := sw.Levels()
	var ls []string
	for _, l := range levels {
		ls = append(ls, strconv.Itoa(l))
	}
	fmt.Fprintf(w, "\nsweep of %s/%s (%s): %s %s, median of %d run(s) per step\n", sw.Target, sw.Probe, sw.Params, sw.Variable, strings.Join(ls, ", "), sw.Runs)
	if sw.Variable == VariableQueueDepth {
		fmt.Fprintf(w, "(a %s probe has no workers: its queue_depth was swept instead)\n", sw.Kind)
	}
	last := levels[len(levels)-1]
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "OP\tMAX\tSUSTAINED\tKNEE\n")
	for _, s := range sw.Summary() {
		knee := fmt.Sprintf("%s=%d", sw.Variable, s.Knee)
		if s.Knee == 0 {
			knee = fmt.Sprintf("still rising at %s=%d", sw.Variable, last)
		}
		fmt.Fprintf(tw, "%s\t%s at %d\t%s\t%s\n", s.Op, chart.FormatRate(s.Max, sw.Unit), s.MaxLevel, chart.FormatRate(s.Sustained, sw.Unit), knee)
	}
	tw.Flush()
	level, rising := sw.Suggest()
	v := sw.Variable
	switch {
	case len(rising) > 0 && last < limit:
		fmt.Fprintf(w, "suggestion: none; %s still rising at %s=%d, where the sweep stopped\n", strings.Join(rising, ", "), v, last)
	case len(rising) > 0:
		fmt.Fprintf(w, "suggestion: none; %s still rising at %s=%d: the plateau lies beyond %s %d (sweep further to find it)\n", strings.Join(rising, ", "), v, last, limitFlag, limit)
	case level == sw.Configured:
		fmt.Fprintf(w, "suggestion: %s=%d, as configured, reaches the plateau of every op; the current setting is fine\n", v, level)
	case level < sw.Configured:
		fmt.Fprintf(w, "suggestion: %s: %d reaches the same plateau as the configured %d with less load; if you change it, characterize again\n", v, level, sw.Configured)
	default:
		fmt.Fprintf(w, "suggestion: %s: %d, where the plateau starts; the configured %d measures below it. If you change it, characterize again\n", v, level, sw.Configured)
	}
}

// SizeSweepReport is one probe's size sweep: each size with its ops'
// medians, its I/O per run and per hour at the probe's interval, and
// whether it measured the plateau; or why the probe was not swept.
type SizeSweepReport struct {
	Ref ProbeRef
	// NotSwept is set when the probe's baseline failed, so it was not
	// size-swept.
	NotSwept bool
	Sweep    *SizeSweep
	// Err says why the sweep is incomplete, nil when it is not.
	Err error
	// Removed is set when a smallest good size on file from an earlier
	// sweep was removed, as it no longer holds.
	Removed bool
}

// WriteTable prints the size sweep's table and verdict.
func (r SizeSweepReport) WriteTable(w io.Writer) {
	if r.NotSwept {
		fmt.Fprintf(w, "\nno size sweep of %s/%s: its baseline runs failed\n", r.Ref.Target.Name, r.Ref.Probe.Name)
		return
	}
	if sw := r.Sweep; sw != nil && len(sw.Steps) > 0 {
		r.writeSizeSweep(w)
	}
	if r.Err != nil {
		fmt.Fprintf(w, "\nsize sweep incomplete: %v\n", r.Err)
	}
	if r.Removed {
		fmt.Fprintf(w, "the %s on file for it was removed\n", plateau.MinSizeKey(r.Ref.Probe.Kind))
	}
}

func (r SizeSweepReport) writeSizeSweep(w io.Writer) {
	sw, t := r.Sweep, r.Ref.Target
	size := func(v int64) string { return plateau.FormatProbeSize(sw.Kind, v) }
	first, last := sw.Steps[0].Size, sw.Steps[len(sw.Steps)-1].Size
	fmt.Fprintf(w, "\nsize sweep of %s/%s (%s): %s %s to %s, doubling, median of %d run(s) per size; a size is good when every op is within %.0f%% of its value at %dx the size\n",
		sw.Target, sw.Probe, sw.Params, sw.Key, size(first), size(last), sw.Runs, 100*SizeTolerance, SizeFactor)
	if sw.Capped != "" {
		fmt.Fprintf(w, "(capped: %s)\n", sw.Capped)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{strings.ToUpper(sw.Key)}
	for _, op := range sw.Ops {
		head = append(head, strings.ToUpper(op))
	}
	head = append(head, "I/O PER RUN", "I/O PER HOUR", "MOVED PER RUN", "GOOD")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	best := sw.Smallest()
	for i, st := range sw.Steps {
		row := []string{size(st.Size)}
		for _, op := range sw.Ops {
			row = append(row, chart.FormatRate(st.Median(op), sw.Unit))
		}
		good := "-"
		switch j := sw.Judge(i); {
		case !j.Judged:
			good = fmt.Sprintf("- (no %s step)", size(SizeFactor*st.Size))
		case j.Good:
			good = "yes"
			if i == best {
				good = "yes, smallest"
			}
		default:
			var off []string
			for _, op := range sw.Ops {
				if r := j.Ratio[op]; math.Abs(r-1) > SizeTolerance {
					off = append(off, fmt.Sprintf("%s %.2f", op, r))
				}
			}
			good = fmt.Sprintf("no (%s of %s)", strings.Join(off, ", "), size(SizeFactor*st.Size))
		}
		row = append(row, probe.FormatSize(st.BytesPerRun), probe.FormatSize(st.HourlyIO), probe.FormatIO(st.Moved), good)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if sw.Kind == probe.KindRandom {
		fmt.Fprintf(w, "(random: I/O PER RUN is what the budget reserves before a run, the kept file; MOVED PER RUN is what the runs moved)\n")
	}
	m, ok := sw.Result()
	if !ok {
		why := "the end of the ladder"
		if sw.Capped != "" {
			why = "the cap above"
		}
		fmt.Fprintf(w, "smallest good %s: none up to %s, the largest size with an %dx step before %s; the probe's results still change with its size there\n", sw.Key, size(last/SizeFactor), SizeFactor, why)
		return
	}
	st := sw.Steps[best]
	fmt.Fprintf(w, "smallest good %s: %s, %s of I/O per hour at the %s interval", sw.Key, m, probe.FormatSize(st.HourlyIO), sw.Interval)
	for _, c := range sw.Steps {
		if c.Size == sw.Configured {
			fmt.Fprintf(w, " (the configured %s: %s per hour)", size(sw.Configured), probe.FormatSize(c.HourlyIO))
		}
	}
	fmt.Fprintln(w)
	switch {
	case sw.Configured < m.Value:
		fmt.Fprintf(w, "the configured %s=%s is below it: its results read the probe's start-up more than the storage\n", sw.Key, size(sw.Configured))
	case sw.Configured > m.Value:
		fmt.Fprintf(w, "the configured %s=%s could shrink to %s; if you change it, characterize again\n", sw.Key, size(sw.Configured), m)
	}
	if t.MaxBytesPerHour > 0 && st.HourlyIO > t.MaxBytesPerHour {
		fmt.Fprintf(w, "note: that is over the target's max_bytes_per_hour %s\n", probe.FormatSize(t.MaxBytesPerHour))
	}
}
