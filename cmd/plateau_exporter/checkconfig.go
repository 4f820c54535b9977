package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// checkConfig validates the config and baselines and prints each probe
// with its slot on this host, the I/O it puts on the file system per hour,
// and whether every op has a baseline; then the I/O per hour of each
// target and of the whole config, a warning for each probe smaller
// than the smallest size that measured the plateau on its target (the
// min_<key> characterize --size-sweep wrote to the baselines file), and
// whether a Slurm job holds the node and how long ago each probe last
// succeeded (printJobAwareness), and the fleet's probe load on each target
// with a fleet (printFleetLoads).
func checkConfig(w io.Writer, o checkOptions) error {
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return exitErr(2, err)
	}
	hostname := o.hostname
	fleets, err := o.fleets(cfg)
	if err != nil {
		return exitErr(2, err)
	}
	fmt.Fprintf(w, "config %s is valid: %d target(s)\n", cfg.Source, len(cfg.Targets))
	baselines, berr := loadBaselines(cfg)
	switch {
	case errors.Is(berr, os.ErrNotExist):
		// Before the first characterize run there is no file yet: the
		// config is still valid, the probes simply have no plateau.
		fmt.Fprintf(w, "baselines: %s does not exist yet; run plateau_exporter characterize on a known-good system\n", cfg.BaselinesFile)
		berr = nil
	case berr != nil:
		fmt.Fprintf(w, "baselines: %v\n", berr)
	case cfg.BaselinesFile == "":
		fmt.Fprintln(w, "baselines: no baselines_file configured")
	default:
		fmt.Fprintf(w, "baselines %s are valid: %d op(s)\n", cfg.BaselinesFile, len(baselines.Entries))
	}
	perr := preflightTargets(w, cfg, hostname)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tKIND\tINTERVAL\tTIMEOUT\tSLOT OFFSET\tNEXT RUN\tI/O PER HOUR\tBASELINE")
	now := time.Now()
	var warnings []string
	var totals []string
	var all int64
	random := false
	for _, t := range cfg.Targets {
		var target int64
		for _, p := range t.Probes {
			offset := schedule.ProbeOffset(hostname, t.Name, p)
			perHour := characterize.HourlyIO(p)
			target += perHour
			random = random || p.Kind == probe.KindRandom
			interval := p.Interval.String()
			if p.Interval != p.BaseInterval() {
				interval += " (configured " + p.BaseInterval().String() + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, p.Name, p.Kind, interval, p.Timeout,
				offset.Round(time.Millisecond), schedule.NextSlot(now, offset, p.Interval).Format(time.RFC3339), probe.FormatIO(perHour),
				baselineStatus(baselines, t, p))
			if w := baselines.BelowMinSize(t.Name, p); w != "" {
				warnings = append(warnings, fmt.Sprintf("warning: %s/%s: %s", t.Name, p.Name, w))
			}
		}
		all += target
		name := t.Name
		if t.Server != "" {
			name = fmt.Sprintf("%s (server %s of %s, %s)", t.Name, t.Server, t.ServerGroup, t.Path)
		}
		if t.Serves != "" {
			name = fmt.Sprintf("%s (a server's own device, serves %s)", t.Name, t.Serves)
		}
		line := fmt.Sprintf("target %s: %s of I/O per hour", name, probe.FormatIO(target))
		switch {
		case t.MaxBytesPerHour > 0 && target > t.MaxBytesPerHour:
			line += fmt.Sprintf(", over its max_bytes_per_hour %s: probes will be skipped (reason=budget)", probe.FormatSize(t.MaxBytesPerHour))
		case t.MaxBytesPerHour > 0:
			line += fmt.Sprintf(" (max_bytes_per_hour %s)", probe.FormatSize(t.MaxBytesPerHour))
		}
		totals = append(totals, line)
		if o.layout.fsType != nil {
			info, warning := o.layout.lustreLayout(t)
			if info != "" {
				totals = append(totals, info)
			}
			if warning != "" {
				warnings = append(warnings, warning)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, l := range totals {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "all targets: %s of I/O per hour\n", probe.FormatIO(all))
	if random {
		fmt.Fprintln(w, "(a random probe counts its kept file per run, what the budget reserves before it; it moves what the storage does in 2 x duration, which the budget charges after the run)")
	}
	for _, l := range warnings {
		fmt.Fprintln(w, l)
	}
	printJobAwareness(w, cfg, o.jobs, o.historyFile, now)
	if err := printFleetLoads(w, fleets, o.fleetBin); err != nil {
		return exitErr(2, err)
	}
	if berr != nil {
		return exitErr(2, berr)
	}
	if perr != nil {
		return exitErr(2, perr)
	}
	return nil
}

// baselineStatus says whether every op of a probe has a usable baseline.
func baselineStatus(b *plateau.Baselines, t *probe.Target, p *probe.ProbeConfig) string {
	if b == nil || len(b.Entries) == 0 {
		return "no"
	}
	var missing []string
	for _, op := range probe.OpsOf(p.Kind) {
		if e, why := b.For(t.Name, p, op); e == nil {
			missing = append(missing, op+": "+why)
		}
	}
	if len(missing) == 0 {
		return "yes"
	}
	if len(missing) == len(probe.OpsOf(p.Kind)) && strings.HasSuffix(missing[0], "no baseline") {
		return "no"
	}
	return "partial (" + strings.Join(missing, "; ") + ")"
}
