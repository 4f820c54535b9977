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
	cmd.Flag("reference-rules", "Rule files of the reference rule set (repeatable); default: the rules shipped before the sudden-regression verdict.").Default("dashboards/testdata/reference/rules.yml", "dashboards/testdata/reference/alerts.yml").StringsVar(&o.referenceRules)
	cmd.Flag("page-severity", "Severity label of the alerts that page.").Default("critical").StringVar(&o.opts.PageSeverity)
	cmd.Flag("output", "Output format: table or json.").Default("table").EnumVar(&o.output, "table", "json")
	cmd.Flag("svg", "Also draw one series (--svg-series, default the first) with its runs, plateau and page episodes of both rule sets to this file.").StringVar(&o.svg)
	cmd.Flag("svg-series", "Key of the series --svg draws.").StringVar(&o.svgSeries)
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
		return backtest.ReadCSVFile(o.input, backtest.CSVColumns{Series: strings.Split(o.seriesColumns, ","), Time: o.timeColumn, Value: o.valueColumn})
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
