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
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// checkConfig validates the config and baselines and prints each probe
// with its slot on this host, the I/O it puts on the file system per hour,
// and whether every op has a baseline.
func checkConfig(w io.Writer, name, hostname string) error {
	cfg, err := loadConfig(name)
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
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tKIND\tINTERVAL\tTIMEOUT\tSLOT OFFSET\tNEXT RUN\tI/O PER HOUR\tBASELINE")
	now := time.Now()
	for _, t := range cfg.Targets {
		for _, p := range t.Probes {
			offset := time.Duration(0)
			if p.Splay {
				offset = schedule.SlotOffset(hostname, t.Name, p.Name, p.Interval)
			}
			perHour := float64(probe.BytesPerRun(p)) * float64(time.Hour) / float64(p.Interval)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, p.Name, p.Kind, p.Interval, p.Timeout,
				offset.Round(time.Millisecond), schedule.NextSlot(now, offset, p.Interval).Format(time.RFC3339), probe.FormatSize(int64(perHour)),
				baselineStatus(baselines, t, p))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if berr != nil {
		return exitErr(2, berr)
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
