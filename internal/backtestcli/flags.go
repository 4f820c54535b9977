// Package backtestcli declares the flags of the backtest command, for the
// two binaries that need them: plateau_exporter, whose --help and man page
// document the command and which hands it on, and plateau_backtest, which
// runs it. It imports neither the backtest nor Prometheus's PromQL engine:
// the daemon's binary is resident on every node of a cluster, and what only
// a backtest on a workstation needs must not cost each node memory.
package backtestcli

import (
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// The units of --unit. They are probe.UnitBytesPerSecond and
// probe.UnitOpsPerSecond (a test holds them equal); the package probe is
// not imported so that this one stays a leaf.
const (
	UnitBytesPerSecond = "bytes_per_second"
	UnitOpsPerSecond   = "operations_per_second"
)

// Help is the command's description.
const Help = "Replay recorded probe series through alerting rules, evaluated with Prometheus's PromQL engine as a Prometheus server evaluates them, and report how often they page on the series as recorded and how fast they page on injected drops, for the shipped rules and a reference rule set side by side."

// Flags are the parsed flags of backtest; the flag names and the JSON the
// command writes are a contract (design.md, "detection").
type Flags struct {
	Input                   string
	SeriesColumns           string
	ShapeColumns            string
	TimeColumn, ValueColumn string
	ValueScale              float64
	Unit                    string
	PromURL, PromSelector   string
	PromStart, PromEnd      string
	PromStep                time.Duration

	Interval, EvaluationInterval                             time.Duration
	BaselineRuns, InjectRuns, Trials, OnsetAfter, WarmupRuns int
	Seed                                                     uint64
	PageSeverity                                             string
	Drops                                                    string

	Rules, ReferenceRules []string
	// ReferenceSet says --reference-rules was given: with --fleet the
	// default reference is another rule set.
	ReferenceSet bool
	Output       string
	SVG          string
	SVGSeries    string

	// --fleet
	Fleet                   bool
	GroupColumns            string
	InjectScope             string
	FSPlateau               []string
	Alertmanager            string
	FSBytes, JobBytes, End  string
	TraceTrials, TracePages string
}

// flagDeclarer is what declares flags: a kingpin application (plateau_backtest) or
// one of its commands (plateau_exporter backtest).
type flagDeclarer interface {
	Flag(name, help string) *kingpin.FlagClause
}

// Declare declares the flags on c and returns where they are parsed to.
func Declare(c flagDeclarer) *Flags {
	var f Flags
	c.Flag("input", "CSV file of runs, with a header line.").StringVar(&f.Input)
	c.Flag("series-columns", "Comma-separated columns whose values together name a series.").Default("system,file_system,app,op").StringVar(&f.SeriesColumns)
	c.Flag("shape-columns", "Comma-separated columns that fix what a run does (its ranks, the bytes it moves), where the file has them: a probe is one job measured again and again, so a series whose runs recur in a few shapes (those of 10 runs or more hold 90% of its runs) is read as one series per shape, its key and labels extended by their values. A column that takes a new value at most runs leaves the series whole. Empty: none.").Default("nprocs,job_bytes").StringVar(&f.ShapeColumns)
	c.Flag("time-column", "Column of the run's start, Unix seconds.").Default("start_unix").StringVar(&f.TimeColumn)
	c.Flag("value-column", "Column of the run's result.").Default("mib_per_second").StringVar(&f.ValueColumn)
	c.Flag("value-scale", "Factor from the values read to the unit; default 1048576 (MiB/s, as the shared CSV has) for --input, 1 for --prometheus.url, whose values are in the unit already.").Default("0").Float64Var(&f.ValueScale)
	c.Flag("unit", "Unit of the scaled values: bytes_per_second or operations_per_second.").Default(UnitBytesPerSecond).EnumVar(&f.Unit, UnitBytesPerSecond, UnitOpsPerSecond)
	c.Flag("prometheus.url", "Read the series from this Prometheus instead of --input (range queries).").StringVar(&f.PromURL)
	c.Flag("prometheus.selector", "Series selector of the results to read from Prometheus.").Default("plateau_probe_throughput_bytes_per_second").StringVar(&f.PromSelector)
	c.Flag("prometheus.start", "Start of the range read from Prometheus: RFC 3339, or a duration before the end (e.g. 8760h).").Default("8760h").StringVar(&f.PromStart)
	c.Flag("prometheus.end", "End of the range read from Prometheus: RFC 3339, or empty for now.").StringVar(&f.PromEnd)
	c.Flag("prometheus.step", "Resolution of the range queries; well under the probe interval.").Default("1m").DurationVar(&f.PromStep)
	c.Flag("interval", "Simulated probe interval: each run of a series is one interval.").Default("15m").DurationVar(&f.Interval)
	c.Flag("evaluation-interval", "Simulated scrape and rule evaluation interval.").Default("5m").DurationVar(&f.EvaluationInterval)
	c.Flag("baseline-runs", "The plateau of each series is characterized from its first N runs (median and spread); the rest is replayed.").Default("10").IntVar(&f.BaselineRuns)
	c.Flag("inject-drops", "Comma-separated drop sizes injected into the series (0.5: runs multiplied by 0.5).").Default("0.3,0.5").StringVar(&f.Drops)
	c.Flag("inject-runs", "Runs each injected drop lasts.").Default("20").IntVar(&f.InjectRuns)
	c.Flag("trials", "Injected drops per series and drop size.").Default("100").IntVar(&f.Trials)
	c.Flag("seed", "Seed of the trials' onsets.").Default("1").Uint64Var(&f.Seed)
	c.Flag("onset-after", "Onsets are drawn from this many runs after the baseline runs.").Default("30").IntVar(&f.OnsetAfter)
	c.Flag("warmup-runs", "Runs replayed before each onset; 0 derives them from the rules' longest window, for and keep_firing_for.").Default("0").IntVar(&f.WarmupRuns)
	c.Flag("rules", "Rule files of the rule set under test (repeatable).").Default("dashboards/rules.yml", "dashboards/alerts.yml", "dashboards/fleet_alerts.yml").StringsVar(&f.Rules)
	c.Flag("reference-rules", "Rule files of the reference rule set (repeatable); default: the rules shipped before the sudden-regression verdict, or with --fleet those shipped before the file-system page read the nodes' low scores (dashboards/testdata/reference-fleet/).").Default("dashboards/testdata/reference/rules.yml", "dashboards/testdata/reference/alerts.yml").IsSetByUser(&f.ReferenceSet).StringsVar(&f.ReferenceRules)
	c.Flag("page-severity", "Severity label of the alerts that page.").Default("critical").StringVar(&f.PageSeverity)
	c.Flag("output", "Output format: table or json.").Default("table").EnumVar(&f.Output, "table", "json")
	c.Flag("svg", "Also draw one series (--svg-series, default the first) with its runs, plateau and page episodes of both rule sets to this file.").StringVar(&f.SVG)
	c.Flag("svg-series", "Key of the series --svg draws.").StringVar(&f.SVGSeries)
	c.Flag("fleet", "Replay the series of each group (--group-columns) together as the nodes of one fleet probing one file system, on one clock by their own timestamps (--time-column): real time is compressed so that the group's cadence, the median gap between runs of its slowest series, is one --interval. The fleet rules are evaluated over each group, and the report gives, per group, the file-system page's firing fraction and episodes per month on the unmodified series, the node pages' episodes per node-month, and for fleet-wide drops the fraction paged within 1, 2 and 3 intervals (interval k ends at the first evaluation after every node of the group has had k runs since the onset) and the median of the notifications Alertmanager sends (--alertmanager-config's grouping and inhibitions); beside them, whatever the rules, how often the group's own unmodified series fall together as far as each injected drop (its median node's latest run at or under 1 - drop of its recent normal): a verdict that reads the probes alone and pages on such drops pages on about that much of the unmodified time too. Where the CSV has --fs-bytes-column, --job-bytes-column and --end-column, everyone else's load during each run, (file-system bytes - the run's bytes) / its duration, is exported as a GPFS client's fs_io_s counters would count it, held until the group's next run in that direction, and the group's aggregate plateau per direction is the 95th percentile of the summed rates (that load plus the run's own) over its runs, or --fs-plateau: the shipped utilization rules then tell busy from broken.").BoolVar(&f.Fleet)
	c.Flag("group-columns", "With --fleet: comma-separated columns (or, with --prometheus.url, labels) whose values together name a group, the nodes of one file system.").Default("system,file_system").StringVar(&f.GroupColumns)
	c.Flag("inject-scope", "Where a trial's drop goes: series (each series alone, the default without --fleet) or fleet (one onset in time per trial, every series of the group multiplied by the drop from its first run at or after it for --inject-runs of its runs; the default and the only scope with --fleet).").Default("").EnumVar(&f.InjectScope, "", "series", "fleet")
	c.Flag("fs-plateau", "With --fleet: GROUP=RATE, the group's aggregate plateau in bytes/s (both directions) instead of the 95th percentile the input shows (repeatable).").StringsVar(&f.FSPlateau)
	c.Flag("alertmanager-config", "With --fleet: the Alertmanager configuration whose root route's group_by and inhibit_rules count the notifications.").Default("dashboards/alertmanager.yml").StringVar(&f.Alertmanager)
	c.Flag("fs-bytes-column", "With --fleet: column of the bytes the whole file system moved in the run's direction during the run (empty: not recorded).").Default("fs_bytes_same_direction").StringVar(&f.FSBytes)
	c.Flag("job-bytes-column", "With --fleet: column of the bytes the run itself moved.").Default("job_bytes").StringVar(&f.JobBytes)
	c.Flag("trace-trials", "With --fleet: also write each calm trial the figures count, for both rule sets, to this file, one JSON object per line: its group, drop and onset, the interval the file-system page started by, the page's episodes and every first notification of the drop's window (alert, intervals after the onset) with why it is the drop's or not (drop, real_fall, unmodified). It says why a drop notified twice.").StringVar(&f.TraceTrials)
	c.Flag("trace-pages", "With --fleet: also write each episode of the file-system page on the unmodified series, for both rule sets, to this file, one JSON object per line: its group, start and end, how many intervals it fired, whether it is false (more than an interval from any real fall) and how many of its steps are excess (outside a real fall while the group is seen). It says where false pages and excess firing come from.").StringVar(&f.TracePages)
	c.Flag("end-column", "With --fleet: column of the run's end, Unix seconds.").Default("end_unix").StringVar(&f.End)
	return &f
}
