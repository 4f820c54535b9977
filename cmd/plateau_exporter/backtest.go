package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/backtest"
)

// backtestOptions are the flags of `backtest`; the flag names and the JSON
// it writes are a contract (design.md, "detection").
type backtestOptions struct {
	input                   string
	seriesColumns           string
	timeColumn, valueColumn string
	valueScale              float64
	unit                    string
	promURL, promSelector   string
	promStart, promEnd      string
	promStep                time.Duration
	opts                    backtest.Options
	drops                   string
	rules, referenceRules   []string
	output, svg             string
	svgSeries               string
	// --fleet
	fleet, referenceSet    bool
	groupColumns           string
	injectScope            string
	fsPlateau              []string
	alertmanager           string
	fsBytes, jobBytes, end string
}

func backtestCommand(app *kingpin.Application) (*kingpin.CmdClause, func(w io.Writer) error) {
	cmd := app.Command("backtest", "Replay recorded probe series through alerting rules, evaluated with Prometheus's PromQL engine as a Prometheus server evaluates them, and report how often they page on the series as recorded and how fast they page on injected drops, for the shipped rules and a reference rule set side by side.")
	var o backtestOptions
	cmd.Flag("input", "CSV file of runs, with a header line.").StringVar(&o.input)
	cmd.Flag("series-columns", "Comma-separated columns whose values together name a series.").Default("system,file_system,app,op").StringVar(&o.seriesColumns)
	cmd.Flag("time-column", "Column of the run's start, Unix seconds.").Default("start_unix").StringVar(&o.timeColumn)
	cmd.Flag("value-column", "Column of the run's result.").Default("mib_per_second").StringVar(&o.valueColumn)
	cmd.Flag("value-scale", "Factor from the values read to the unit; default 1048576 (MiB/s, as the shared CSV has) for --input, 1 for --prometheus.url, whose values are in the unit already.").Default("0").Float64Var(&o.valueScale)
	cmd.Flag("unit", "Unit of the scaled values: bytes_per_second or operations_per_second.").Default(probe.UnitBytesPerSecond).EnumVar(&o.unit, probe.UnitBytesPerSecond, probe.UnitOpsPerSecond)
	cmd.Flag("prometheus.url", "Read the series from this Prometheus instead of --input (range queries).").StringVar(&o.promURL)
	cmd.Flag("prometheus.selector", "Series selector of the results to read from Prometheus.").Default("plateau_probe_throughput_bytes_per_second").StringVar(&o.promSelector)
	cmd.Flag("prometheus.start", "Start of the range read from Prometheus: RFC 3339, or a duration before the end (e.g. 8760h).").Default("8760h").StringVar(&o.promStart)
	cmd.Flag("prometheus.end", "End of the range read from Prometheus: RFC 3339, or empty for now.").StringVar(&o.promEnd)
	cmd.Flag("prometheus.step", "Resolution of the range queries; well under the probe interval.").Default("1m").DurationVar(&o.promStep)
	cmd.Flag("interval", "Simulated probe interval: each run of a series is one interval.").Default("15m").DurationVar(&o.opts.Interval)
	cmd.Flag("evaluation-interval", "Simulated scrape and rule evaluation interval.").Default("5m").DurationVar(&o.opts.EvaluationInterval)
	cmd.Flag("baseline-runs", "The plateau of each series is characterized from its first N runs (median and spread); the rest is replayed.").Default("10").IntVar(&o.opts.BaselineRuns)
	cmd.Flag("inject-drops", "Comma-separated drop sizes injected into the series (0.5: runs multiplied by 0.5).").Default("0.3,0.5").StringVar(&o.drops)
	cmd.Flag("inject-runs", "Runs each injected drop lasts.").Default("20").IntVar(&o.opts.InjectRuns)
	cmd.Flag("trials", "Injected drops per series and drop size.").Default("100").IntVar(&o.opts.Trials)
	cmd.Flag("seed", "Seed of the trials' onsets.").Default("1").Uint64Var(&o.opts.Seed)
	cmd.Flag("onset-after", "Onsets are drawn from this many runs after the baseline runs.").Default("30").IntVar(&o.opts.OnsetAfter)
	cmd.Flag("warmup-runs", "Runs replayed before each onset; 0 derives them from the rules' longest window, for and keep_firing_for.").Default("0").IntVar(&o.opts.WarmupRuns)
	cmd.Flag("rules", "Rule files of the rule set under test (repeatable).").Default("dashboards/rules.yml", "dashboards/alerts.yml").StringsVar(&o.rules)
	cmd.Flag("reference-rules", "Rule files of the reference rule set (repeatable); default: the rules shipped before the sudden-regression verdict, or with --fleet those shipped before the file-system page read the nodes' low scores (dashboards/testdata/reference-fleet/).").Default("dashboards/testdata/reference/rules.yml", "dashboards/testdata/reference/alerts.yml").IsSetByUser(&o.referenceSet).StringsVar(&o.referenceRules)
	cmd.Flag("page-severity", "Severity label of the alerts that page.").Default("critical").StringVar(&o.opts.PageSeverity)
	cmd.Flag("output", "Output format: table or json.").Default("table").EnumVar(&o.output, "table", "json")
	cmd.Flag("svg", "Also draw one series (--svg-series, default the first) with its runs, plateau and page episodes of both rule sets to this file.").StringVar(&o.svg)
	cmd.Flag("svg-series", "Key of the series --svg draws.").StringVar(&o.svgSeries)
	cmd.Flag("fleet", "Replay the series of each group (--group-columns) together as the nodes of one fleet probing one file system, on one clock by their own timestamps (--time-column): real time is compressed so that the group's cadence, the median gap between runs of its slowest series, is one --interval. The fleet rules are evaluated over each group, and the report gives, per group, the file-system page's firing fraction and episodes per month on the unmodified series, the node pages' episodes per node-month, and for fleet-wide drops the fraction paged within 1, 2 and 3 intervals (interval k ends at the first evaluation after every node of the group has had k runs since the onset) and the median of the notifications Alertmanager sends (--alertmanager-config's grouping and inhibitions). Where the CSV has --fs-bytes-column, --job-bytes-column and --end-column, everyone else's load during each run, (file-system bytes - the run's bytes) / its duration, is exported as a GPFS client's fs_io_s counters would count it, held until the group's next run in that direction, and the group's aggregate plateau per direction is the 95th percentile of the summed rates (that load plus the run's own) over its runs, or --fs-plateau: the shipped utilization rules then tell busy from broken.").BoolVar(&o.fleet)
	cmd.Flag("group-columns", "With --fleet: comma-separated columns (or, with --prometheus.url, labels) whose values together name a group, the nodes of one file system.").Default("system,file_system").StringVar(&o.groupColumns)
	cmd.Flag("inject-scope", "Where a trial's drop goes: series (each series alone, the default without --fleet) or fleet (one onset in time per trial, every series of the group multiplied by the drop from its first run at or after it for --inject-runs of its runs; the default and the only scope with --fleet).").Default("").EnumVar(&o.injectScope, "", "series", "fleet")
	cmd.Flag("fs-plateau", "With --fleet: GROUP=RATE, the group's aggregate plateau in bytes/s (both directions) instead of the 95th percentile the input shows (repeatable).").StringsVar(&o.fsPlateau)
	cmd.Flag("alertmanager-config", "With --fleet: the Alertmanager configuration whose root route's group_by and inhibit_rules count the notifications.").Default("dashboards/alertmanager.yml").StringVar(&o.alertmanager)
	cmd.Flag("fs-bytes-column", "With --fleet: column of the bytes the whole file system moved in the run's direction during the run (empty: not recorded).").Default("fs_bytes_same_direction").StringVar(&o.fsBytes)
	cmd.Flag("job-bytes-column", "With --fleet: column of the bytes the run itself moved.").Default("job_bytes").StringVar(&o.jobBytes)
	cmd.Flag("end-column", "With --fleet: column of the run's end, Unix seconds.").Default("end_unix").StringVar(&o.end)
	return cmd, func(w io.Writer) error { return runBacktest(w, o) }
}

func runBacktest(w io.Writer, o backtestOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	series, err := backtestInput(ctx, o)
	if err != nil {
		return err
	}
	for _, d := range strings.Split(o.drops, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		v, err := strconv.ParseFloat(d, 64)
		if err != nil {
			return fmt.Errorf("--inject-drops: %q is not a number", d)
		}
		o.opts.Drops = append(o.opts.Drops, v)
	}
	o.opts.Current, o.opts.Reference = o.rules, o.referenceRules
	o.opts.Unit, o.opts.Scale = o.unit, o.valueScale
	if o.opts.Scale == 0 {
		o.opts.Scale = 1
		if o.input != "" {
			o.opts.Scale = 1 << 20
		}
	}
	o.opts.Logger = slog.New(slog.DiscardHandler)
	if o.fleet {
		return runFleetBacktest(ctx, w, series, o)
	}
	if o.injectScope == "fleet" {
		return fmt.Errorf("backtest: --inject-scope fleet needs --fleet: a fleet-wide drop needs the series grouped into fleets")
	}
	report, err := backtest.Run(ctx, series, o.opts)
	if err != nil {
		return err
	}
	if o.svg != "" {
		if err := report.WriteSVGFile(o.svg, o.svgSeries); err != nil {
			return err
		}
	}
	if o.output == "json" {
		return report.WriteJSON(w)
	}
	return report.WriteTable(w)
}

// backtestInput reads the series from the CSV file or from Prometheus.
func backtestInput(ctx context.Context, o backtestOptions) ([]backtest.Series, error) {
	switch {
	case o.input != "" && o.promURL != "":
		return nil, fmt.Errorf("backtest: give --input or --prometheus.url, not both")
	case o.input != "":
		cols := backtest.CSVColumns{Series: strings.Split(o.seriesColumns, ","), Time: o.timeColumn, Value: o.valueColumn}
		if o.fleet {
			cols.Labels = strings.Split(o.groupColumns, ",")
			cols.FSBytes, cols.JobBytes, cols.End = o.fsBytes, o.jobBytes, o.end
		}
		return backtest.ReadCSVFile(o.input, cols)
	case o.promURL != "":
		end := time.Now()
		if o.promEnd != "" {
			t, err := time.Parse(time.RFC3339, o.promEnd)
			if err != nil {
				return nil, fmt.Errorf("--prometheus.end: %w", err)
			}
			end = t
		}
		start, err := time.Parse(time.RFC3339, o.promStart)
		if err != nil {
			d, derr := time.ParseDuration(o.promStart)
			if derr != nil {
				return nil, fmt.Errorf("--prometheus.start: %q is neither RFC 3339 nor a duration", o.promStart)
			}
			start = end.Add(-d)
		}
		return backtest.FetchPrometheus(ctx, backtest.PrometheusQuery{URL: o.promURL, Selector: o.promSelector, Start: start, End: end, Step: o.promStep})
	}
	return nil, fmt.Errorf("backtest: give --input FILE or --prometheus.url URL")
}

// runFleetBacktest is `backtest --fleet`.
func runFleetBacktest(ctx context.Context, w io.Writer, series []backtest.Series, o backtestOptions) error {
	if o.injectScope == "series" {
		return fmt.Errorf("backtest: --fleet injects fleet-wide drops only (--inject-scope fleet); per-series drops are backtest without --fleet")
	}
	if o.svg != "" {
		return fmt.Errorf("backtest: --svg draws one series; it is not available with --fleet")
	}
	fo := backtest.FleetOptions{Options: o.opts, Alertmanager: o.alertmanager, FSPlateau: map[string]float64{}}
	if !o.referenceSet {
		fo.Reference = []string{"dashboards/testdata/reference-fleet/rules.yml", "dashboards/testdata/reference-fleet/alerts.yml"}
	}
	for _, c := range strings.Split(o.groupColumns, ",") {
		if c = strings.TrimSpace(c); c != "" {
			fo.GroupColumns = append(fo.GroupColumns, c)
		}
	}
	for _, kv := range o.fsPlateau {
		group, rate, ok := strings.Cut(kv, "=")
		v, err := strconv.ParseFloat(rate, 64)
		if !ok || err != nil || !(v > 0) {
			return fmt.Errorf("--fs-plateau: %q is not GROUP=RATE with a rate in bytes/s above 0", kv)
		}
		fo.FSPlateau[group] = v
	}
	report, err := backtest.RunFleet(ctx, series, fo)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return report.WriteJSON(w)
	}
	return report.WriteTable(w)
}
