package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
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

// errBelowPlateau makes the probe command exit 1.
var errBelowPlateau = errors.New("a result is below its warning threshold")

// runProbes runs the selected probes once in the foreground, each in a
// worker process bounded by its timeout (a Slurm prolog must not hang on a
// dead mount), and reports every op beside its plateau. Exit status: 0 when
// every result is at or above its warning ratio, 1 when one is below, 2 on
// error (a probe that failed, a config or baselines file that cannot be
// read or parsed; see loadProbeBaselines).
//
// It never looks for Slurm jobs, whatever a target's when_job_running: it
// is what the epilog runs between jobs, and there the job that just ended
// may still show (its cgroup, its extern step's socket) until slurmd has
// cleaned up, so a look would find the very job being cleaned up and never
// measure. Whoever runs it has chosen the moment.
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

	var report plateau.ProbeReport
	for _, sp := range selected {
		from := len(report.Ops)
		res := runWhenFree(ctx, runner, probe.NewRequest(sp.Target, sp.Probe, o.hostname), sp.Probe.Timeout)
		report.Add(sp.Target, sp.Probe, res, baselines)
		// One run below the plateau is one sample of a node that may be
		// busy for a moment; what acts on the exit status (a prolog that
		// drains the node) must not rest on it. As NHC checks are usually
		// confirmed, a probe below its warning ratio, or failed, is run
		// once more, and the second run's verdict is the probe's; both
		// are printed.
		var first plateau.ProbeReport
		first.Ops = report.Ops[from:]
		if first.Worst() == "" || ctx.Err() != nil {
			continue
		}
		report.MarkAttempt(from, 1)
		second := len(report.Ops)
		res = runWhenFree(ctx, runner, probe.NewRequest(sp.Target, sp.Probe, o.hostname), sp.Probe.Timeout)
		report.Add(sp.Target, sp.Probe, res, baselines)
		report.MarkAttempt(second, 2)
	}
	if o.output == "json" {
		if err := report.WriteJSON(w); err != nil {
			return exitErr(2, err)
		}
	} else {
		report.WriteTable(w)
	}
	switch report.Worst() {
	case plateau.VerdictFailed:
		return exitErr(2, errors.New("a probe failed"))
	case plateau.VerdictWarning, plateau.VerdictCritical:
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

// selectProbes is the configured probes the --target and --probe flags
// name (all when empty), in config order.
func selectProbes(cfg *probe.Config, targets, probes []string) ([]characterize.ProbeRef, error) {
	var out []characterize.ProbeRef
	for _, t := range cfg.Targets {
		if len(targets) > 0 && !slices.Contains(targets, t.Name) {
			continue
		}
		for _, p := range t.Probes {
			if len(probes) > 0 && !slices.Contains(probes, p.Name) {
				continue
			}
			out = append(out, characterize.ProbeRef{Target: t, Probe: p})
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
