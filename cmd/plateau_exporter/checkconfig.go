package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// checkConfig validates the config and prints each probe with its slot on
// this host and the I/O it puts on the file system per hour.
func checkConfig(w io.Writer, name, hostname string) error {
	cfg, err := loadConfig(name)
	if err != nil {
		return exitErr(2, err)
	}
	fmt.Fprintf(w, "config %s is valid: %d target(s)\n\n", cfg.Source, len(cfg.Targets))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tKIND\tINTERVAL\tTIMEOUT\tSLOT OFFSET\tNEXT RUN\tI/O PER HOUR")
	now := time.Now()
	for _, t := range cfg.Targets {
		for _, p := range t.Probes {
			offset := time.Duration(0)
			if p.Splay {
				offset = probe.SlotOffset(hostname, t.Name, p.Name, p.Interval)
			}
			perHour := float64(probe.BytesPerRun(p)) * float64(time.Hour) / float64(p.Interval)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, p.Name, p.Kind, p.Interval, p.Timeout,
				offset.Round(time.Millisecond), probe.NextSlot(now, offset, p.Interval).Format(time.RFC3339), probe.FormatSize(int64(perHour)))
		}
	}
	return tw.Flush()
}
