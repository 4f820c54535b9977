package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

type probeOptions struct {
	configFile string
	hostname   string
	targets    []string
	probes     []string
	output     string
	// allowMissingBaselines tolerates a baselines file that does not exist
	// yet (first boot, before characterize); see loadProbeBaselines.
	allowMissingBaselines bool
}

// opReport is one line of the probe command's report.
type opReport struct {
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
}

// errBelowPlateau makes the probe command exit 1.
var errBelowPlateau = errors.New("a result is below its warning threshold")

// runProbes runs the selected probes once in the foreground, each in a
// worker process bounded by its timeout (a Slurm prolog must not hang on a
// dead mount), and reports every op beside its plateau. Exit status: 0 when
// every result is at or above its warning ratio, 1 when one is below, 2 on
// error (a probe that failed, a config or baselines file that cannot be
// read or parsed; see loadProbeBaselines).
func runProbes(w io.Writer, logger log.Logger, o probeOptions) error {
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return exitErr(2, err)
	}
	baselines, err := loadProbeBaselines(os.Stderr, cfg, o.allowMissingBaselines)
	if err != nil {
		return exitErr(2, err)
	}
	selected, err := selectProbes(cfg, o.targets, o.probes)
	if err != nil {
		return exitErr(2, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := &worker.ProcessRunner{Command: worker.DefaultCommand(), Logger: logger}

	var reports []opReport
	for _, sp := range selected {
		res := runWhenFree(ctx, runner, probe.NewRequest(sp.target, sp.probe, o.hostname), sp.probe.Timeout)
		reports = append(reports, reportOps(sp.target, sp.probe, res, baselines)...)
	}
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return exitErr(2, err)
		}
	} else {
		printReports(w, reports)
	}
	worst := 0
	for _, r := range reports {
		switch r.Verdict {
		case plateau.VerdictFailed:
			worst = 2
		case plateau.VerdictWarning, plateau.VerdictCritical:
			worst = max(worst, 1)
		}
	}
	switch worst {
	case 2:
		return exitErr(2, errors.New("a probe failed"))
	case 1:
		return exitErr(1, errBelowPlateau)
	}
	return nil
}

// loadProbeBaselines reads the config's baselines file for the probe
// command, which a Slurm prolog or an NHC check acts on: without its
// plateaus every verdict would be no-baseline and the check would pass
// forever, so a file that cannot be read or parsed is an error (exit 2),
// named with file, line and field. With allowMissing, and only then, a
// file that does not exist (ENOENT: first boot, before characterize has
// written it) is a warning on stderr and the results are shown without
// plateaus (exit 0, or 2 if a probe failed); a file that exists but cannot
// be read (a directory, no permission) or parsed is still an error. A
// config without baselines_file has no plateaus, as before.
func loadProbeBaselines(stderr io.Writer, cfg *probe.Config, allowMissing bool) (*plateau.Baselines, error) {
	b, err := loadBaselines(cfg)
	switch {
	case err == nil:
		return b, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	case allowMissing:
		fmt.Fprintf(stderr, "plateau_exporter: warning: %v (--allow-missing-baselines): results are shown without plateaus\n", err)
		return nil, nil
	}
	return nil, fmt.Errorf("%w (write it with `plateau_exporter characterize`; before the first characterization, --allow-missing-baselines shows results without plateaus)", err)
}

type selectedProbe struct {
	target *probe.Target
	probe  *probe.ProbeConfig
}

func selectProbes(cfg *probe.Config, targets, probes []string) ([]selectedProbe, error) {
	var out []selectedProbe
	for _, t := range cfg.Targets {
		if len(targets) > 0 && !slices.Contains(targets, t.Name) {
			continue
		}
		for _, p := range t.Probes {
			if len(probes) > 0 && !slices.Contains(probes, p.Name) {
				continue
			}
			out = append(out, selectedProbe{t, p})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no configured probe matches --target %v --probe %v (targets: %s)", targets, probes, strings.Join(cfg.TargetNames(), ", "))
	}
	return out, nil
}

// runWhenFree runs the request, waiting while the daemon holds the
// target's lock, but no longer than one probe timeout.
func runWhenFree(ctx context.Context, runner worker.Runner, req probe.Request, wait time.Duration) *probe.Result {
	deadline := time.Now().Add(wait)
	for {
		out := runner.Run(ctx, req)
		if out.Result.Skipped != probe.SkipTargetBusy || time.Now().After(deadline) || ctx.Err() != nil {
			return out.Result
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// reportOps puts each op of a run beside its plateau, with the verdict
// the daemon's ratios are made of.
func reportOps(t *probe.Target, p *probe.ProbeConfig, res *probe.Result, baselines *plateau.Baselines) []opReport {
	base := opReport{Target: t.Name, Probe: p.Name, Kind: p.Kind, Warning: t.WarningRatio, Critical: t.CriticalRatio, Direct: res.Direct, Engine: res.Engine}
	var out []opReport
	for _, v := range plateau.PlateauOf(baselines, t, p).Compare(res) {
		r := base
		r.Op, r.Verdict = v.Op, v.Verdict
		if v.Verdict == plateau.VerdictFailed || v.Verdict == plateau.VerdictSkipped {
			r.Error = v.Note
			out = append(out, r)
			continue
		}
		r.Unit, r.Value, r.Rationale = v.Unit, v.Value, v.Note
		if v.Baseline != nil {
			r.Baseline = &v.Baseline.Value
		}
		if v.HasRatio {
			ratio := v.Ratio
			r.Ratio = &ratio
		}
		out = append(out, r)
	}
	return out
}

func printReports(w io.Writer, reports []opReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tOP\tRESULT\tPLATEAU\tRATIO\tVERDICT")
	for _, r := range reports {
		result, plateau, ratio := "-", "-", "-"
		if r.Op != "" {
			result = humanRate(r.Value, r.Unit)
		}
		if r.Baseline != nil {
			plateau = humanRate(*r.Baseline, r.Unit)
		}
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *r.Ratio)
		}
		verdict := r.Verdict
		if r.Error != "" {
			verdict += ": " + r.Error
		} else if r.Rationale != "" && r.Rationale != "no baseline" {
			verdict += " (" + r.Rationale + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Target, r.Probe, dash(r.Op), result, plateau, ratio, verdict)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanRate prints bytes/s in binary units (as block sizes are given) and
// operation rates with SI prefixes.
func humanRate(v float64, unit string) string {
	if unit == probe.UnitBytesPerSecond {
		for _, u := range []struct {
			s string
			f float64
		}{{"GiB/s", 1 << 30}, {"MiB/s", 1 << 20}, {"KiB/s", 1 << 10}} {
			if v >= u.f {
				return fmt.Sprintf("%.1f %s", v/u.f, u.s)
			}
		}
		return fmt.Sprintf("%.0f B/s", v)
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M ops/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f K ops/s", v/1e3)
	}
	return fmt.Sprintf("%.0f ops/s", v)
}
