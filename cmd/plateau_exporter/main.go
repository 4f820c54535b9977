// Command plateau_exporter probes HPC file systems on a schedule, reads
// storage and fabric counters, and exports both beside the characterized
// plateau for Prometheus. This file only wires flags to commands.
package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
)

const defaultConfigFile = "/etc/plateau_exporter/plateau.yml"

func main() {
	app := kingpin.CommandLine
	app.Name = "plateau_exporter"
	app.Help = "Probes file systems against their characterized plateau and exports the results, with GPFS, InfiniBand, NVMe and NFS counters, for Prometheus."
	app.Version(version.Print("plateau_exporter"))
	kingpin.ManPageTemplate = manPageTemplate(kingpin.ManPageTemplate, version.Version, version.BuildDate)
	app.HelpFlag.Short('h')

	var (
		logLevel   = app.Flag("log.level", "Only log messages with the given severity or above: debug, info, warn, error.").Default("info").Enum("debug", "info", "warn", "error")
		logFormat  = app.Flag("log.format", "Output format of log messages: logfmt or json.").Default("logfmt").Enum("logfmt", "json")
		configFile = app.Flag("config.file", "Probe configuration file. Default: "+defaultConfigFile+" if it exists, else the embedded default (a light probe of each kind in the OS temp directory).").String()
		hostname   = app.Flag("probe.hostname", "Name of the per-host probe directory under each target path. Default: the host name.").String()
	)

	serveCmd := app.Command("serve", "Run the exporter: probe on schedule, serve /metrics (the default command).").Default()
	webFlags := kingpinflag.AddFlags(serveCmd, ":9731")
	metricsPath := serveCmd.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
	disableExporterMetrics := serveCmd.Flag("web.disable-exporter-metrics", "Exclude the exporter's own Go runtime and process metrics from /metrics.").Bool()
	maxRequests := serveCmd.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("40").Int()
	historyFile := serveCmd.Flag("probe.history-file", "File that keeps each probe op's last results across restarts, for plateau_probe_change_ratio; empty: in memory only. Default: history.json in $STATE_DIRECTORY (set by systemd from the unit's StateDirectory=), else empty.").Default(defaultHistoryFile(os.Getenv)).String()

	workerCmd := app.Command("probe-worker", "Run one probe request from stdin and print its result (used by the daemon).").Hidden()
	smartHelperCmd := app.Command("smart-helper", "Read NVMe SMART logs with CAP_SYS_ADMIN for the daemon, which keeps no capability (started by the daemon).").Hidden()
	smartHelperRole := smartHelperCmd.Flag("role", "keeper (starts servers) or server (answers SMART reads).").Required().Enum("keeper", "server")
	slurmTaskCmd := app.Command("slurm-task", "Run one task of a characterize --slurm step (started by srun).").Hidden()
	checkCmd := app.Command("check-config", "Validate the configuration and baselines and print what would run on this host, and the probe load of each target's fleet.")
	checkFleetNodes := checkCmd.Flag("fleet-nodes", "Report every target's probe load for a fleet of this many nodes, named node0001… (default: the target's fleet.nodes; targets without it get no report). The intervals are derived anew from the fleet budget for that many nodes.").Int()
	checkHosts := checkCmd.Flag("hosts", "File of the fleet's host names, one a line ('#' starts a comment), as each node's plateau_exporter knows itself: their slots place the peak; sets the fleet size.").PlaceHolder("FILE").String()
	checkFleetBin := checkCmd.Flag("fleet-bin", "Span over which the fleet's peak probe load is averaged.").Default("1m").Duration()

	probeCmd := app.Command("probe", "Run the configured probes once now and print each result beside its plateau. Exit status 0: all at or above the warning ratio; 1: one is below; 2: error (for Slurm prolog/epilog and NHC).")
	probeTargets := probeCmd.Flag("target", "Only probes of this target (repeatable).").Strings()
	probeProbes := probeCmd.Flag("probe", "Only probes of this name (repeatable).").Strings()
	probeOutput := probeCmd.Flag("output", "Output format: table or json.").Default("table").Enum("table", "json")
	probeAllowMissing := probeCmd.Flag("allow-missing-baselines", "Tolerate a baselines_file that does not exist yet (first boot, before characterize): warn and show results without plateaus. A baselines file that cannot be read or parsed still exits 2.").Bool()

	characterizeCmd, runCharacterizeCmd := characterizeCommand(app)
	backtestCmd, runBacktestCmd := backtestCommand(app)

	cmd := kingpin.MustParse(app.Parse(os.Args[1:]))
	logger := newLogger(*logLevel, *logFormat, os.Stderr)
	host := *hostname
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			fmt.Fprintln(os.Stderr, "plateau_exporter: host name:", err)
			os.Exit(2)
		}
		host = h
	}

	var err error
	switch cmd {
	case serveCmd.FullCommand():
		if err = dropPrivileges(logger, *logLevel, *logFormat); err != nil {
			break
		}
		err = serve(logger, serveOptions{
			configFile:             *configFile,
			hostname:               host,
			webFlags:               webFlags,
			metricsPath:            *metricsPath,
			disableExporterMetrics: *disableExporterMetrics,
			maxRequests:            *maxRequests,
			logLevel:               *logLevel,
			historyFile:            *historyFile,
		})
	case workerCmd.FullCommand():
		err = runWorker()
	case smartHelperCmd.FullCommand():
		err = runSMARTHelper(*smartHelperRole, logger, *logLevel, *logFormat)
	case slurmTaskCmd.FullCommand():
		err = runSlurmTask(logger)
	case checkCmd.FullCommand():
		err = checkConfig(os.Stdout, checkOptions{configFile: *configFile, hostname: host, fleetNodes: *checkFleetNodes, hostsFile: *checkHosts, fleetBin: *checkFleetBin})
	case probeCmd.FullCommand():
		err = runProbes(os.Stdout, logger, probeOptions{configFile: *configFile, hostname: host, targets: *probeTargets, probes: *probeProbes, output: *probeOutput, allowMissingBaselines: *probeAllowMissing})
	case characterizeCmd.FullCommand():
		err = runCharacterizeCmd(logger, *configFile, host)
	case backtestCmd.FullCommand():
		err = runBacktestCmd(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plateau_exporter:", err)
		os.Exit(exitCode(err))
	}
}
