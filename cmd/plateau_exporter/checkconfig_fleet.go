package main

import (
	"github.com/plateau-exporter/plateau_exporter/probe/nodejobs"

	"fmt"
	"io"
	"os"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// checkOptions are check-config's flags.
type checkOptions struct {
	configFile, hostname string
	// fleetNodes sets the fleet size of every target's report (0: each
	// target's fleet.nodes); hostsFile names the fleet's hosts, one a line
	// (empty: node0001…nodeNNNN); fleetBin is the span of the peak.
	fleetNodes int
	hostsFile  string
	fleetBin   time.Duration
	// layout checks where a target on Lustre puts its probe files.
	layout layoutCheck
	// jobs looks for Slurm jobs on the node; historyFile is the daemon's,
	// for how long ago each probe last succeeded.
	jobs        nodejobs.Detector
	historyFile string
}

// fleetReport is one target's fleet, as check-config reports it: the
// target with the intervals that fleet would run (t), the node count and
// names, and where they came from.
type fleetReport struct {
	t         *probe.Target
	hosts     []string
	simulated bool
	// whatIf is set when the nodes are not the config's fleet.nodes.
	whatIf bool
}

// fleets decides which targets get a fleet report and with which hosts:
// every target when --fleet-nodes or --hosts is given, else those with a
// fleet block. A fleet size other than the config's derives the
// intervals anew, as such a fleet's nodes would.
func (o checkOptions) fleets(cfg *probe.Config) ([]fleetReport, error) {
	var hosts []string
	if o.hostsFile != "" {
		data, err := os.ReadFile(o.hostsFile)
		if err != nil {
			return nil, fmt.Errorf("--hosts: %w", err)
		}
		if hosts, err = schedule.ParseHosts(data, o.hostsFile); err != nil {
			return nil, fmt.Errorf("--hosts: %w", err)
		}
		if o.fleetNodes > 0 && o.fleetNodes != len(hosts) {
			return nil, fmt.Errorf("--fleet-nodes %d but --hosts %s lists %d hosts", o.fleetNodes, o.hostsFile, len(hosts))
		}
	}
	if o.fleetNodes < 0 {
		return nil, fmt.Errorf("--fleet-nodes must be at least 1, got %d", o.fleetNodes)
	}
	var out []fleetReport
	for _, t := range cfg.Targets {
		nodes := o.fleetNodes
		if hosts != nil {
			nodes = len(hosts)
		}
		if nodes == 0 && t.Fleet != nil {
			nodes = t.Fleet.Nodes
		}
		if nodes == 0 {
			continue
		}
		r := fleetReport{t: t, hosts: hosts, whatIf: t.Fleet == nil || nodes != t.Fleet.Nodes}
		if r.hosts == nil {
			r.hosts, r.simulated = schedule.SimulatedHosts(nodes), true
		}
		if r.whatIf {
			var err error
			if r.t, err = t.ForFleet(nodes); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// printFleetLoads prints, per fleet, the node's share of the fleet budget
// and its I/O per hour before and after stretching, the fleet's mean probe
// load (nodes × bytes per run / interval, summed over the probes), its
// peak in the busiest bin from the simulated slots of every host, their
// ratio (the herd factor) and both as fractions of the file system's
// plateau.
func printFleetLoads(w io.Writer, fleets []fleetReport, bin time.Duration) error {
	if bin < time.Second {
		return fmt.Errorf("--fleet-bin %s: must be at least 1s", bin)
	}
	for _, r := range fleets {
		t := r.t
		l, err := schedule.FleetLoadOf(schedule.FleetLoadParams{Target: t, Hosts: r.hosts, Bin: bin})
		if err != nil {
			return err
		}
		fmt.Fprintln(w)
		names := fmt.Sprintf("%s … %s", r.hosts[0], r.hosts[len(r.hosts)-1])
		if len(r.hosts) == 1 {
			names = r.hosts[0]
		}
		src := "simulated names"
		if !r.simulated {
			src = "from --hosts"
		}
		fmt.Fprintf(w, "fleet of target %s: %d nodes (%s, %s)", t.Name, l.Nodes, names, src)
		if r.whatIf && t.Fleet != nil {
			fmt.Fprintf(w, "; the config's fleet.nodes is %d", t.Fleet.Nodes)
		}
		fmt.Fprintln(w)
		if t.Fleet != nil && t.Fleet.Servers > 1 {
			fmt.Fprintf(w, "  server %s of %s: the fleet block covers its %d servers' targets together, so each gets 1/%d of its budget\n",
				t.Server, t.ServerGroup, t.Fleet.Servers, t.Fleet.Servers)
		}
		var before, after int64
		for _, p := range t.Probes {
			configured := *p
			configured.Interval = p.BaseInterval()
			before += characterize.HourlyIO(&configured)
			after += characterize.HourlyIO(p)
		}
		switch {
		case t.Fleet == nil || t.Fleet.MaxBytesPerHour <= 0:
			fmt.Fprintf(w, "  per node: %s of I/O per hour; no fleet budget (fleet.max_bytes_per_hour): intervals as configured\n", probe.FormatIO(before))
		case t.Stretch.Stretched():
			fmt.Fprintf(w, "  fleet budget %s per hour: a node's share is %s per hour\n", probe.FormatSize(t.Fleet.MaxBytesPerHour), probe.FormatBytes(t.Stretch.Share))
			fmt.Fprintf(w, "  per node: %s of I/O per hour at the configured intervals, %s after stretching them x%.4g (%s)\n",
				probe.FormatIO(before), probe.FormatIO(after), t.Stretch.Factor, t.StretchSummary())
		default:
			fmt.Fprintf(w, "  fleet budget %s per hour: a node's share is %s per hour\n", probe.FormatSize(t.Fleet.MaxBytesPerHour), probe.FormatBytes(t.Stretch.Share))
			fmt.Fprintf(w, "  per node: %s of I/O per hour, within the share: intervals as configured\n", probe.FormatIO(before))
		}
		splay := ""
		for _, p := range t.Probes {
			if !p.Splay {
				splay = " (splay off: every node starts the same probe at the same instant)"
				break
			}
		}
		fmt.Fprintf(w, "  mean probe load: %.0f B/s (%s/s): nodes x bytes per run / interval, summed over the probes\n", l.Mean, probe.FormatBytes(l.Mean))
		span := fmt.Sprintf("the intervals' whole hyper-period %s", l.HyperPeriod)
		switch {
		case l.Complete:
		case l.HyperPeriod > 0:
			span = fmt.Sprintf("the first %s of the hyper-period %s; another part may peak higher", l.Window, l.HyperPeriod)
		default:
			span = fmt.Sprintf("the first %s of a longer hyper-period; another part may peak higher", l.Window)
		}
		fmt.Fprintf(w, "  peak probe load: %.0f B/s (%s/s) in the busiest %s, %s into a simulation of %s%s\n",
			l.Peak, probe.FormatBytes(l.Peak), l.Bin, l.PeakAt.Sub(time.Unix(0, 0)), span, splay)
		fmt.Fprintf(w, "  herd factor (peak/mean): %.2f (1.0 = perfectly spread)\n", l.Herd())
		for _, p := range t.Probes {
			if p.Interval <= l.Bin {
				fmt.Fprintf(w, "  (probe %s runs every %s, not less often than a bin lasts: every bin holds its runs of every node; a shorter --fleet-bin shows how they spread)\n", p.Name, p.Interval)
				break
			}
		}
		if t.Fleet != nil && t.Fleet.FilesystemPlateau > 0 {
			fp := t.Fleet.FilesystemPlateau
			fmt.Fprintf(w, "  file system plateau %s/s: mean %s of it, peak %s\n", probe.FormatBytes(fp), percent(l.Mean/fp), percent(l.Peak/fp))
		} else {
			fmt.Fprintln(w, "  file system plateau: unknown (set fleet.filesystem_plateau, e.g. from plateau:filesystem_plateau_bytes_per_second)")
		}
	}
	return nil
}

// percent renders a fraction with three significant digits: 0.281%, 12.5%.
func percent(f float64) string {
	return fmt.Sprintf("%.3g%%", 100*f)
}
