// Command plateau_backtest runs `plateau_exporter backtest`: it replays
// recorded probe series through alerting rules with Prometheus's PromQL
// engine. It is a binary of its own so that the daemon's, resident on every
// node, does not carry the engine (plateau_exporter backtest hands its
// arguments to this one); the flags are declared once, in
// internal/backtestcli, for both.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/plateau-exporter/plateau_exporter/internal/backtestcli"
	"github.com/plateau-exporter/plateau_exporter/probe/backtest"
	"github.com/plateau-exporter/plateau_exporter/probe/backtest/promfetch"
)

func main() {
	app := kingpin.New("plateau_backtest", backtestcli.Help+" Run as plateau_exporter backtest.")
	app.Version(version.Print("plateau_backtest"))
	app.HelpFlag.Short('h')
	flags := backtestcli.Declare(app)
	kingpin.MustParse(app.Parse(os.Args[1:]))
	if err := runBacktest(os.Stdout, flags); err != nil {
		// Exit status 1, as plateau_exporter's commands end on an error.
		fmt.Fprintln(os.Stderr, "plateau_exporter backtest:", err)
		os.Exit(1)
	}
}

func runBacktest(w io.Writer, f *backtestcli.Flags) error {
	if (f.TraceTrials != "" || f.TracePages != "") && !f.Fleet {
		return fmt.Errorf("backtest: --trace-trials and --trace-pages trace --fleet; give --fleet")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	series, err := backtestInput(ctx, f)
	if err != nil {
		return err
	}
	opts := backtest.Options{
		Interval: f.Interval, EvaluationInterval: f.EvaluationInterval,
		BaselineRuns: f.BaselineRuns, InjectRuns: f.InjectRuns, Trials: f.Trials, OnsetAfter: f.OnsetAfter, WarmupRuns: f.WarmupRuns,
		Seed: f.Seed, PageSeverity: f.PageSeverity,
	}
	for _, d := range strings.Split(f.Drops, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		v, err := strconv.ParseFloat(d, 64)
		if err != nil {
			return fmt.Errorf("--inject-drops: %q is not a number", d)
		}
		opts.Drops = append(opts.Drops, v)
	}
	opts.Current, opts.Reference = f.Rules, f.ReferenceRules
	opts.Unit, opts.Scale = f.Unit, f.ValueScale
	if opts.Scale == 0 {
		opts.Scale = 1
		if f.Input != "" {
			opts.Scale = 1 << 20
		}
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	if f.Fleet {
		return runFleetBacktest(ctx, w, series, f, opts)
	}
	if f.InjectScope == "fleet" {
		return fmt.Errorf("backtest: --inject-scope fleet needs --fleet: a fleet-wide drop needs the series grouped into fleets")
	}
	report, err := backtest.Run(ctx, series, opts)
	if err != nil {
		return err
	}
	if f.SVG != "" {
		if err := report.WriteSVGFile(f.SVG, f.SVGSeries); err != nil {
			return err
		}
	}
	if f.Output == "json" {
		return report.WriteJSON(w)
	}
	return report.WriteTable(w)
}

// backtestInput reads the series from the CSV file or from Prometheus.
func backtestInput(ctx context.Context, f *backtestcli.Flags) ([]backtest.Series, error) {
	switch {
	case f.Input != "" && f.PromURL != "":
		return nil, fmt.Errorf("backtest: give --input or --prometheus.url, not both")
	case f.Input != "":
		cols := backtest.CSVColumns{Series: strings.Split(f.SeriesColumns, ","), Time: f.TimeColumn, Value: f.ValueColumn}
		if f.ShapeColumns != "" {
			cols.Shape = strings.Split(f.ShapeColumns, ",")
		}
		if f.Fleet {
			cols.Labels = strings.Split(f.GroupColumns, ",")
			cols.FSBytes, cols.JobBytes, cols.End = f.FSBytes, f.JobBytes, f.End
		}
		return backtest.ReadCSVFile(f.Input, cols)
	case f.PromURL != "":
		end := time.Now()
		if f.PromEnd != "" {
			t, err := time.Parse(time.RFC3339, f.PromEnd)
			if err != nil {
				return nil, fmt.Errorf("--prometheus.end: %w", err)
			}
			end = t
		}
		start, err := time.Parse(time.RFC3339, f.PromStart)
		if err != nil {
			d, derr := time.ParseDuration(f.PromStart)
			if derr != nil {
				return nil, fmt.Errorf("--prometheus.start: %q is neither RFC 3339 nor a duration", f.PromStart)
			}
			start = end.Add(-d)
		}
		return promfetch.FetchPrometheus(ctx, promfetch.PrometheusQuery{URL: f.PromURL, Selector: f.PromSelector, Start: start, End: end, Step: f.PromStep})
	}
	return nil, fmt.Errorf("backtest: give --input FILE or --prometheus.url URL")
}

// runFleetBacktest is `backtest --fleet`.
func runFleetBacktest(ctx context.Context, w io.Writer, series []backtest.Series, f *backtestcli.Flags, opts backtest.Options) error {
	if f.InjectScope == "series" {
		return fmt.Errorf("backtest: --fleet injects fleet-wide drops only (--inject-scope fleet); per-series drops are backtest without --fleet")
	}
	if f.SVG != "" {
		return fmt.Errorf("backtest: --svg draws one series; it is not available with --fleet")
	}
	fo := backtest.FleetOptions{Options: opts, Alertmanager: f.Alertmanager, FSPlateau: map[string]float64{}}
	if !f.ReferenceSet {
		fo.Reference = []string{"dashboards/testdata/reference-fleet/rules.yml", "dashboards/testdata/reference-fleet/alerts.yml"}
	}
	for _, c := range strings.Split(f.GroupColumns, ",") {
		if c = strings.TrimSpace(c); c != "" {
			fo.GroupColumns = append(fo.GroupColumns, c)
		}
	}
	for _, kv := range f.FSPlateau {
		group, rate, ok := strings.Cut(kv, "=")
		v, err := strconv.ParseFloat(rate, 64)
		if !ok || err != nil || !(v > 0) {
			return fmt.Errorf("--fs-plateau: %q is not GROUP=RATE with a rate in bytes/s above 0", kv)
		}
		fo.FSPlateau[group] = v
	}
	traces, err := createTraces(f)
	if err != nil {
		return err
	}
	report, err := backtest.RunFleet(ctx, series, fo)
	if err != nil {
		traces.remove()
		return err
	}
	if err := traces.write(report); err != nil {
		return err
	}
	if f.Output == "json" {
		return report.WriteJSON(w)
	}
	return report.WriteTable(w)
}

// traces are the --trace-* files of `backtest --fleet`, created before
// the replay: a path that cannot be written fails at once, not after
// the minutes the replay takes.
type traces []traceFile

type traceFile struct {
	flag  string
	out   *os.File
	write func(*backtest.FleetReport, io.Writer) error
}

func createTraces(f *backtestcli.Flags) (traces, error) {
	var ts traces
	for _, t := range []struct {
		flag, path string
		write      func(*backtest.FleetReport, io.Writer) error
	}{
		{"--trace-trials", f.TraceTrials, (*backtest.FleetReport).WriteCalmTrials},
		{"--trace-pages", f.TracePages, (*backtest.FleetReport).WritePageEpisodes},
	} {
		if t.path == "" {
			continue
		}
		out, err := os.Create(t.path)
		if err != nil {
			ts.remove()
			return nil, fmt.Errorf("%s: %w", t.flag, err)
		}
		ts = append(ts, traceFile{flag: t.flag, out: out, write: t.write})
	}
	return ts, nil
}

// write writes each file from the report and closes it.
func (ts traces) write(report *backtest.FleetReport) error {
	var errs []error
	for _, t := range ts {
		err := t.write(report, t.out)
		if cerr := t.out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", t.flag, t.out.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// remove closes and removes the files, the replay having failed.
func (ts traces) remove() {
	for _, t := range ts {
		t.out.Close()
		os.Remove(t.out.Name())
	}
}
