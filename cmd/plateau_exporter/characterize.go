package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

type characterizeOptions struct {
	configFile    string
	hostname      string
	targets       []string
	probes        []string
	runs          int
	runSpacing    time.Duration
	sweep         bool
	maxWorkers    int
	maxQueueDepth int
	sweepRuns     int
	// sizeSweep runs each probe at doubling sizes to find the smallest
	// that measures the plateau; sizeRuns runs per size, sizeMaxIO bounds
	// one probe's sweep.
	sizeSweep     bool
	sizeRuns      int
	sizeMaxIO     string
	sizeMaxTime   time.Duration
	outputDir     string
	baselinesFile string
	// historyFile is the daemon's history of recent runs, to show how they
	// compared with the old plateau; "" for none.
	historyFile string
	// slurm runs the fleet characterization inside a Slurm allocation
	// (see slurm.go); the other fields are its flags.
	slurm      bool
	srun       string
	scontrol   string
	startDelay time.Duration
	sample     int
	rulesFile  string
}

// characterizeCommand declares the characterize command on app and returns
// it with the function that runs it once the flags are parsed.
func characterizeCommand(app *kingpin.Application) (*kingpin.CmdClause, func(logger log.Logger, configFile, hostname string) error) {
	cmd := app.Command("characterize", "Measure the plateaus on a known-good system: run each probe --runs times and write the median and spread to the baselines file (the old file is kept as a backup). With --sweep, also run each probe at 1, 2, 4 ... workers (queue depths for random) to find the knee, and draw the curve. Exit status 2 if a probe could not be characterized.")
	var o characterizeOptions
	cmd.Flag("target", "Only probes of this target (repeatable).").StringsVar(&o.targets)
	cmd.Flag("probe", "Only probes of this name (repeatable).").StringsVar(&o.probes)
	cmd.Flag("runs", "Runs per probe; the baseline is their median.").Default("5").IntVar(&o.runs)
	cmd.Flag("run-spacing", "Least time between the starts of a probe's runs, so the baseline reflects the system over minutes rather than one moment.").Default("15s").DurationVar(&o.runSpacing)
	cmd.Flag("sweep", "Also sweep each probe over doubling workers (queue depth for random probes) and report the knee, maximum and sustained values, with an SVG chart and a CSV of the curve.").BoolVar(&o.sweep)
	cmd.Flag("max-workers", "Highest worker count a sweep tries; levels are the powers of two up to it.").Default(strconv.Itoa(2 * runtime.NumCPU())).IntVar(&o.maxWorkers)
	// Queue depth costs no thread per level, and an NVMe device or a
	// parallel file system holds its IOPS plateau far above a node's
	// worker count: the reference's random characterization ran queue
	// depth 16 per thread, so the default sweeps to four times that.
	cmd.Flag("max-queue-depth", "Highest queue depth a random probe's sweep tries; levels are the powers of two up to it.").Default("64").IntVar(&o.maxQueueDepth)
	cmd.Flag("sweep-runs", "Runs per sweep step; the step's value is their median.").Default("3").IntVar(&o.sweepRuns)
	cmd.Flag("size-sweep", "Also run each probe at doubling sizes (file_size for sequential, segment_size for shared_file, files for metadata, duration for random) from a small one up to 64x the configured one (within --size-sweep.max-io, --size-sweep.max-time and the room above min_free_ratio), report the smallest whose every op is within 5% of its value at 8x that size, with its I/O per hour at the probe's interval, and write it to the baselines file (min_file_size, ...), which check-config then warns below.").BoolVar(&o.sizeSweep)
	cmd.Flag("size-sweep.runs", "Runs per size of a size sweep; the size's value is their median.").Default(strconv.Itoa(characterize.DefaultSizeSweepRuns)).IntVar(&o.sizeRuns)
	cmd.Flag("size-sweep.max-io", "Most I/O one probe's size sweep may do (by each run's planned bytes); larger sizes are left out, and a probe whose four smallest sizes do not fit is not swept. A target's max_bytes_per_hour bounds it too.").Default("8GiB").StringVar(&o.sizeMaxIO)
	cmd.Flag("size-sweep.max-time", "Most time a random probe's size sweep may plan for its runs' phases (2 x duration per run); longer durations are left out.").Default("10m").DurationVar(&o.sizeMaxTime)
	cmd.Flag("output-dir", "Directory for the sweep's SVG and CSV files. Default: the baselines file's directory.").StringVar(&o.outputDir)
	cmd.Flag("baselines-file", "Baselines file to write. Default: the config's baselines_file.").StringVar(&o.baselinesFile)
	cmd.Flag("history-file", "The daemon's history of recent runs (its --probe.history-file), to print how they compared with the old and the new plateau. Default: $STATE_DIRECTORY/history.json when set.").Default(defaultHistoryFile(os.Getenv)).StringVar(&o.historyFile)
	cmd.Flag("slurm", "Characterize the whole file system from inside a Slurm allocation (salloc/sbatch): sweep total workers 1, 2, 4 ... --max-workers, one srun task per worker round-robin over the allocation's nodes, each step's write and read phases (metadata: one phase) started together; print the maximum, sustained plateau and knee of each op's aggregate and stonewalled values, and write to --output-dir an SVG per probe, slurm_steps.csv and the recording rules of the aggregate plateau (filesystem_plateaus.yml). Runs sequential, shared_file and metadata probes; with --sample, also writes node-class baselines.").BoolVar(&o.slurm)
	cmd.Flag("slurm.srun", "srun to start the steps' tasks with.").Default("srun").StringVar(&o.srun)
	cmd.Flag("slurm.scontrol", "scontrol to list the allocation's nodes with (scontrol show hostnames $SLURM_JOB_NODELIST).").Default("scontrol").StringVar(&o.scontrol)
	cmd.Flag("slurm.start-delay", "How far ahead of each srun its tasks' common start lies; a task that gets there later is reported as late. Raise it when srun takes longer to start every task.").Default("3s").DurationVar(&o.startDelay)
	cmd.Flag("sample", "With --slurm: also run every selected probe alone, as the daemon runs it, on this many of the allocation's nodes (spread over its list; --runs runs each), write their median and spread as one baselines file for the whole node class (--baselines-file, default <output-dir>/baselines.yml) and report the outlier nodes.").IntVar(&o.sample)
	cmd.Flag("rules-file", "With --slurm: the Prometheus rule file to write. Default: <output-dir>/filesystem_plateaus.yml.").StringVar(&o.rulesFile)
	return cmd, func(logger log.Logger, configFile, hostname string) error {
		o.configFile, o.hostname = configFile, hostname
		return runCharacterize(os.Stdout, logger, o)
	}
}

// runCharacterize measures the selected probes and writes their baselines,
// then sweeps them when asked. Each run goes through a worker process with
// the probe's timeout, as the daemon runs it, and waits while the daemon
// holds the target. Baselines are written before any sweep starts, so an
// interrupted sweep loses none of them.
func runCharacterize(w *os.File, logger log.Logger, o characterizeOptions) error {
	if o.slurm {
		return runFleetCharacterize(w, logger, o)
	}
	switch {
	case o.runs < 1:
		return exitErr(2, fmt.Errorf("--runs must be at least 1, got %d", o.runs))
	case o.sweep && o.sweepRuns < 1:
		return exitErr(2, fmt.Errorf("--sweep-runs must be at least 1, got %d", o.sweepRuns))
	case o.sweep && o.maxWorkers < 1:
		return exitErr(2, fmt.Errorf("--max-workers must be at least 1, got %d", o.maxWorkers))
	case o.sweep && o.maxQueueDepth < 1:
		return exitErr(2, fmt.Errorf("--max-queue-depth must be at least 1, got %d", o.maxQueueDepth))
	case o.sizeSweep && o.sizeRuns < 1:
		return exitErr(2, fmt.Errorf("--size-sweep.runs must be at least 1, got %d", o.sizeRuns))
	}
	sizer := characterize.SizeSweeper{Runs: o.sizeRuns, Room: roomAboveMinFree, MaxTime: o.sizeMaxTime}
	if o.sizeSweep {
		maxIO, err := probe.ParseSize(o.sizeMaxIO)
		if err != nil || maxIO <= 0 {
			return exitErr(2, fmt.Errorf("--size-sweep.max-io: want a positive size such as 16GiB, got %q", o.sizeMaxIO))
		}
		sizer.MaxIO = maxIO
	}
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return exitErr(2, err)
	}
	path := o.baselinesFile
	if path == "" {
		path = cfg.BaselinesFile
	}
	if path == "" {
		return exitErr(2, fmt.Errorf("no baselines file to write: set baselines_file in %s or pass --baselines-file", cfg.Source))
	}
	baselines, err := plateau.LoadBaselines(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		baselines = plateau.NewBaselines()
	case err != nil:
		// Merging needs the entries of the other probes; writing over a
		// file we cannot read would lose them.
		return exitErr(2, fmt.Errorf("%w; fix or move it before characterizing (nothing was run)", err))
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return exitErr(2, fmt.Errorf("directory of the baselines file %s does not exist", path))
	}
	outDir := o.outputDir
	if outDir == "" {
		outDir = filepath.Dir(path)
	}
	if o.sweep {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return exitErr(2, fmt.Errorf("output directory: %w", err))
		}
	}
	selected, err := selectProbes(cfg, o.targets, o.probes)
	if err != nil {
		return exitErr(2, err)
	}
	refs := make([]characterize.ProbeRef, len(selected))
	for i, sp := range selected {
		refs[i] = characterize.ProbeRef{Target: sp.target, Probe: sp.probe}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := &worker.ProcessRunner{Command: worker.DefaultCommand(), Logger: logger}
	prog := characterize.ProgressTo(w, logger)
	c := &characterize.Characterizer{
		Run: func(ctx context.Context, req probe.Request) *probe.Result {
			return runWhenFree(ctx, runner, req, req.Probe.Timeout)
		},
		Hostname: o.hostname,
		Runs:     o.runs,
		Spacing:  o.runSpacing,
		OnStart:  prog.Start,
		OnDone:   prog.Done,
	}
	if o.sweep {
		c.SweepRuns, c.MaxLevel, c.MaxQueueDepth = o.sweepRuns, o.maxWorkers, o.maxQueueDepth
	}
	total := c.Plan(refs)
	what := fmt.Sprintf("%d run(s) each", o.runs)
	if o.sweep {
		what += fmt.Sprintf(", then a sweep up to %d workers (queue depth %d for random probes) with %d run(s) per step", o.maxWorkers, o.maxQueueDepth, o.sweepRuns)
	}
	if o.sizeSweep {
		total += c.PlanSizes(sizer, refs)
		what += fmt.Sprintf(", then a size sweep with %d run(s) per size", o.sizeRuns)
	}
	prog.Printf("characterizing %d probe(s) on %s: %s; %d runs in all\n", len(refs), o.hostname, what, total)
	prog.Begin(total)
	defer prog.Finish()

	// characterized are the probes whose baselines this run wrote: only
	// those are size-swept, as only those are swept.
	characterized := map[plateau.ProbeKey]bool{}
	report := characterize.Session{
		Baselines: baselines, Path: path, OutDir: outDir, Sweep: o.sweep,
		OnNotCharacterized: func(err error) { prog.Printf("not characterized: %v\n", err) },
		OnNothingWritten:   func(path string) { prog.Printf("no probe could be characterized; %s is left as it was\n", path) },
		OnWritten: func(path, backup string, changes []plateau.BaselineChange) {
			for _, ch := range changes {
				if ch.New != nil {
					characterized[plateau.ProbeKey{Target: ch.Key.Target, Probe: ch.Key.Probe}] = true
				}
			}
			var sb strings.Builder
			fmt.Fprintf(&sb, "\nwrote %s", path)
			if backup != "" {
				fmt.Fprintf(&sb, " (the previous file is kept as %s)", backup)
			}
			sb.WriteString(":\n")
			printChanges(&sb, changes)
			printRecent(&sb, o.historyFile, changes)
			prog.Printf("%s", sb.String())
		},
		OnNoSweep: func(ref characterize.ProbeRef) {
			prog.Printf("\nno sweep of %s/%s: its baseline runs failed\n", ref.Target.Name, ref.Probe.Name)
		},
		OnSwept: func(sw *characterize.Sweep, svgPath, csvPath string, err error) {
			var sb strings.Builder
			if sw != nil && len(sw.Steps) > 0 {
				printSweep(&sb, sw, o.maxWorkers, o.maxQueueDepth)
				if svgPath != "" {
					fmt.Fprintf(&sb, "chart: %s\ndata:  %s\n", svgPath, csvPath)
				}
			}
			if err != nil {
				fmt.Fprintf(&sb, "\nsweep incomplete: %v\n", err)
			}
			prog.Printf("%s", sb.String())
		},
	}
	err = c.Characterize(ctx, refs, report)
	if o.sizeSweep {
		err = errors.Join(err, sizeSweeps(ctx, c, sizer, refs, characterized, baselines, path, prog))
	}
	if err != nil {
		return exitErr(2, err)
	}
	return nil
}

// sizeSweeps runs the size sweep of each characterized probe, prints its
// table and writes the smallest good sizes to the baselines file.
func sizeSweeps(ctx context.Context, c *characterize.Characterizer, sizer characterize.SizeSweeper, refs []characterize.ProbeRef, characterized map[plateau.ProbeKey]bool, baselines *plateau.Baselines, path string, prog *characterize.Progress) error {
	var errs []error
	changed := false
	for _, ref := range refs {
		key := plateau.ProbeKey{Target: ref.Target.Name, Probe: ref.Probe.Name}
		if !characterized[key] {
			c.SkipSizeSweep(sizer, ref)
			prog.Printf("\nno size sweep of %s/%s: its baseline runs failed\n", key.Target, key.Probe)
			continue
		}
		sw, err := c.SweepSizes(ctx, sizer, ref)
		var sb strings.Builder
		if sw != nil && len(sw.Steps) > 0 {
			printSizeSweep(&sb, sw, ref.Target)
		}
		switch m, ok := sw.Result(); {
		case err != nil:
			fmt.Fprintf(&sb, "\nsize sweep incomplete: %v\n", err)
			errs = append(errs, err)
		case ok:
			baselines.SetMinSize(key.Target, key.Probe, m)
			changed = true
		default:
			// A size on file from an earlier sweep no longer holds.
			if _, had := baselines.MinSizes[key]; had {
				delete(baselines.MinSizes, key)
				changed = true
				fmt.Fprintf(&sb, "the %s on file for it was removed\n", plateau.MinSizeKey(ref.Probe.Kind))
			}
		}
		prog.Printf("%s", sb.String())
	}
	if changed {
		backup, err := baselines.Write(path)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("write baselines: %w", err))...)
		}
		kept := ""
		if backup != "" {
			kept = fmt.Sprintf(" (the previous file is kept as %s)", backup)
		}
		prog.Printf("\nwrote the smallest good sizes to %s%s\n", path, kept)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", characterize.ErrIncomplete, errors.Join(errs...))
	}
	return nil
}

// printSizeSweep shows each size of a size sweep with its ops' medians,
// its I/O per run and per hour at the probe's interval, and whether it
// measured the plateau.
func printSizeSweep(w io.Writer, sw *characterize.SizeSweep, t *probe.Target) {
	size := func(v int64) string { return plateau.FormatProbeSize(sw.Kind, v) }
	first, last := sw.Steps[0].Size, sw.Steps[len(sw.Steps)-1].Size
	fmt.Fprintf(w, "\nsize sweep of %s/%s (%s): %s %s to %s, doubling, median of %d run(s) per size; a size is good when every op is within %.0f%% of its value at %dx the size\n",
		sw.Target, sw.Probe, sw.Params, sw.Key, size(first), size(last), sw.Runs, 100*characterize.SizeTolerance, characterize.SizeFactor)
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
			row = append(row, humanRate(st.Median(op), sw.Unit))
		}
		good := "-"
		switch j := sw.Judge(i); {
		case !j.Judged:
			good = fmt.Sprintf("- (no %s step)", size(characterize.SizeFactor*st.Size))
		case j.Good:
			good = "yes"
			if i == best {
				good = "yes, smallest"
			}
		default:
			var off []string
			for _, op := range sw.Ops {
				if r := j.Ratio[op]; math.Abs(r-1) > characterize.SizeTolerance {
					off = append(off, fmt.Sprintf("%s %.2f", op, r))
				}
			}
			good = fmt.Sprintf("no (%s of %s)", strings.Join(off, ", "), size(characterize.SizeFactor*st.Size))
		}
		row = append(row, probe.FormatSize(st.BytesPerRun), probe.FormatSize(st.HourlyIO), formatIO(st.Moved), good)
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
		fmt.Fprintf(w, "smallest good %s: none up to %s, the largest size with an %dx step before %s; the probe's results still change with its size there\n", sw.Key, size(last/characterize.SizeFactor), characterize.SizeFactor, why)
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

// roomAboveMinFree is how many bytes the target's file system can take
// and keep its min_free_ratio free.
func roomAboveMinFree(t *probe.Target) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(t.Path, &st); err != nil {
		return 0, err
	}
	bsize := uint64(st.Bsize)
	avail := float64(st.Bavail * bsize)
	keep := t.MinFreeRatio * float64(st.Blocks*bsize)
	return int64(max(0, avail-keep)), nil
}

// printChanges shows each op's old and new baseline and the change.
func printChanges(w io.Writer, changes []plateau.BaselineChange) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tOLD\tNEW\tCHANGE\tSPREAD\tRUNS")
	for _, ch := range changes {
		old, nw, change, spread, runs := "-", "-", "", "-", "-"
		if ch.Old != nil {
			old = humanRate(ch.Old.Value, ch.Old.Unit)
		}
		if ch.New != nil {
			nw = humanRate(ch.New.Value, ch.New.Unit)
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

// printRecent shows, when the daemon's history file has runs of the
// characterized ops, how their median compared with the old plateau and
// compares with the new one: a plateau that had drifted far from what the
// probe delivered explains weeks of chronic-shortfall warnings.
func printRecent(w io.Writer, historyFile string, changes []plateau.BaselineChange) {
	if historyFile == "" {
		return
	}
	h, err := plateau.LoadHistoryFile(historyFile)
	if err != nil {
		fmt.Fprintf(w, "\nrecent runs not shown: %v\n", err)
		return
	}
	var rows []string
	for _, ch := range changes {
		rc, ok := h.CompareRecent(ch)
		if !ok {
			continue
		}
		ratio := func(r float64) string {
			if r == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", r)
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", ch.Key.Target, ch.Key.Probe, ch.Key.Op, rc.Runs,
			humanRate(rc.Median, ch.New.Unit), ratio(rc.ToOld), ratio(rc.ToNew), rc.Updated.UTC().Format(time.RFC3339)))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nthe daemon's recent runs (%s) against the old and the new plateau:\n", historyFile)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tRUNS\tMEDIAN\tOF OLD\tOF NEW\tLAST RUN")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
}

// printSweep reports a sweep in the shape of the characterizations'
// "maximum and sustained" table, with the worker count to suggest for the
// continuous probe.
func printSweep(w io.Writer, sw *characterize.Sweep, maxWorkers, maxQueueDepth int) {
	limit, limitFlag := maxWorkers, "--max-workers"
	if sw.Variable == characterize.VariableQueueDepth {
		limit, limitFlag = maxQueueDepth, "--max-queue-depth"
	}
	levels := sw.Levels()
	var ls []string
	for _, l := range levels {
		ls = append(ls, strconv.Itoa(l))
	}
	fmt.Fprintf(w, "\nsweep of %s/%s (%s): %s %s, median of %d run(s) per step\n", sw.Target, sw.Probe, sw.Params, sw.Variable, strings.Join(ls, ", "), sw.Runs)
	if sw.Variable == characterize.VariableQueueDepth {
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
		fmt.Fprintf(tw, "%s\t%s at %d\t%s\t%s\n", s.Op, humanRate(s.Max, sw.Unit), s.MaxLevel, humanRate(s.Sustained, sw.Unit), knee)
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
