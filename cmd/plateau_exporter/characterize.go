package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"

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
	maxRuns       int
	maxSpread     float64
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
	cmd.Flag("max-runs", "Most runs per probe while one of its ops spreads more than a verdict allows (1.4826 x MAD / median above half the distance from 1 to the target's warning_ratio: 10% at 0.8); an op still that unstable gets no baseline, and characterize exits 2 naming it. 0: three times --runs.").Default("0").IntVar(&o.maxRuns)
	cmd.Flag("max-spread", "The most an op's runs may spread (1.4826 x MAD / median, 0.1 for ±10%) for its baseline to be written. 0: half the distance from 1 to the target's warning_ratio. A baseline that spreads more cannot tell a drop from the node's noise.").Default("0").Float64Var(&o.maxSpread)
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
	case o.maxRuns < 0:
		return exitErr(2, fmt.Errorf("--max-runs must not be negative, got %d", o.maxRuns))
	case o.sweep && o.sweepRuns < 1:
		return exitErr(2, fmt.Errorf("--sweep-runs must be at least 1, got %d", o.sweepRuns))
	case o.sweep && o.maxWorkers < 1:
		return exitErr(2, fmt.Errorf("--max-workers must be at least 1, got %d", o.maxWorkers))
	case o.sweep && o.maxQueueDepth < 1:
		return exitErr(2, fmt.Errorf("--max-queue-depth must be at least 1, got %d", o.maxQueueDepth))
	case o.sizeSweep && o.sizeRuns < 1:
		return exitErr(2, fmt.Errorf("--size-sweep.runs must be at least 1, got %d", o.sizeRuns))
	}
	sizer := characterize.SizeSweeper{Runs: o.sizeRuns, Room: characterize.RoomAboveMinFree, MaxTime: o.sizeMaxTime}
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
	refs, err := selectProbes(cfg, o.targets, o.probes)
	if err != nil {
		return exitErr(2, err)
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
		MaxRuns:  o.maxRuns,
		// 0: from each target's warning ratio.
		MaxSpread: o.maxSpread,
		Spacing:   o.runSpacing,
		OnStart:   prog.Start,
		OnDone:    prog.Done,
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = 3 * o.runs
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

	// The size sweeps run after Characterize, on the probes whose
	// baselines it wrote: OnWritten below fills in which.
	sizes := characterize.SizeSession{
		Sizer: sizer, Baselines: baselines, Path: path,
		OnSwept: func(r characterize.SizeSweepReport) { prog.Print(r) },
		OnWritten: func(path, backup string) {
			prog.Printf("\nwrote the smallest good sizes to %s%s\n", path, keptAs(backup))
		},
	}
	session := characterize.Session{
		Baselines: baselines, Path: path, OutDir: outDir, Sweep: o.sweep,
		OnNotCharacterized: func(err error) { prog.Printf("not characterized: %v\n", err) },
		OnNothingWritten:   func(path string) { prog.Printf("no probe could be characterized; %s is left as it was\n", path) },
		OnWritten: func(path, backup string, changes []plateau.BaselineChange) {
			sizes.Characterized = characterize.CharacterizedIn(changes)
			prog.Print(characterize.NewWrittenReport(path, backup, changes, o.historyFile))
		},
		OnNoSweep: func(ref characterize.ProbeRef) {
			prog.Printf("\nno sweep of %s/%s: its baseline runs failed\n", ref.Target.Name, ref.Probe.Name)
		},
		OnSwept: func(sw *characterize.Sweep, svgPath, csvPath string, err error) {
			prog.Print(characterize.SweepReport{Sweep: sw, MaxWorkers: o.maxWorkers, MaxQueueDepth: o.maxQueueDepth, SVGPath: svgPath, CSVPath: csvPath, Err: err})
		},
	}
	err = c.Characterize(ctx, refs, session)
	if o.sizeSweep {
		err = errors.Join(err, c.SizeSweepAll(ctx, refs, sizes))
	}
	if err != nil {
		return exitErr(2, err)
	}
	return nil
}

// keptAs names the backup of a file written, "" when there was no file.
func keptAs(backup string) string {
	if backup == "" {
		return ""
	}
	return fmt.Sprintf(" (the previous file is kept as %s)", backup)
}
