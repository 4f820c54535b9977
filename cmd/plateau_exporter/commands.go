// The commands an operator runs besides the daemon, declared on the
// application main hands them, and the exit status they end with.

package main

import (
	"errors"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

// checkConfigCommand declares check-config on app and returns it with the
// function that runs it once the flags are parsed.
func checkConfigCommand(app *kingpin.Application) (*kingpin.CmdClause, func(commandEnv) error) {
	cmd := app.Command("check-config", "Validate the configuration and baselines and print what would run on this host, and the probe load of each target's fleet.")
	var o checkOptions
	cmd.Flag("fleet-nodes", "Report every target's probe load for a fleet of this many nodes, named node0001… (default: the target's fleet.nodes; targets without it get no report). The intervals are derived anew from the fleet budget for that many nodes.").IntVar(&o.fleetNodes)
	cmd.Flag("hosts", "File of the fleet's host names, one a line ('#' starts a comment), as each node's plateau_exporter knows itself: their slots place the peak; sets the fleet size.").PlaceHolder("FILE").StringVar(&o.hostsFile)
	cmd.Flag("fleet-bin", "Span over which the fleet's peak probe load is averaged.").Default("1m").DurationVar(&o.fleetBin)
	lfs := cmd.Flag("lfs-path", "lfs, run as 'lfs getstripe -d DIR' for each target on Lustre to say which OSTs its probe files land on (one, for a per-OST target made with 'lfs setstripe -c 1 -i N').").Default("lfs").String()
	jobs := addJobFlags(cmd)
	cmd.Flag("probe.history-file", "The daemon's history file, for how long ago each probe last succeeded. Default: history.json in $STATE_DIRECTORY, else "+packagedHistoryFile+".").Default(defaultCheckHistoryFile(os.Getenv)).StringVar(&o.historyFile)
	return cmd, func(e commandEnv) error {
		o.jobs = jobs.detector()
		o.layout = defaultLayoutCheck(*lfs)
		o.configFile, o.hostname = e.configFile, e.hostname
		return checkConfig(e.stdout, o)
	}
}

// probeCommand declares probe on app and returns it with the function that
// runs it once the flags are parsed.
func probeCommand(app *kingpin.Application) (*kingpin.CmdClause, func(commandEnv) error) {
	cmd := app.Command("probe", "Run the configured probes once now and print each result beside its plateau. A probe below its warning ratio, or failed, is run once more to confirm, both runs are printed, and the second decides. Exit status 0: all at or above the warning ratio; 1: one is below; 2: error (for Slurm prolog/epilog and NHC). Never skips for a Slurm job on the node: it is how a node the daemon finds always busy is measured between jobs (packaging/slurm/epilog.sh).")
	var o probeOptions
	cmd.Flag("target", "Only probes of this target (repeatable).").StringsVar(&o.targets)
	cmd.Flag("probe", "Only probes of this name (repeatable).").StringsVar(&o.probes)
	cmd.Flag("output", "Output format: table or json.").Default("table").EnumVar(&o.output, "table", "json")
	cmd.Flag("allow-missing-baselines", "Tolerate a baselines_file that does not exist yet (first boot, before characterize): warn and show results without plateaus. A baselines file that cannot be read or parsed still exits 2.").BoolVar(&o.allowMissingBaselines)
	return cmd, func(e commandEnv) error {
		o.configFile, o.hostname = e.configFile, e.hostname
		return runProbes(e.stdout, e.logger, o)
	}
}

// exitError is an error with the exit status it ends the process with:
// 2 for a command that could not do its work, 1 for probe's "below the
// warning ratio", so that scripts tell the two apart.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }

func exitErr(code int, err error) error { return &exitError{code: code, err: err} }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// runWorker is the hidden probe-worker command: one request in, one result
// out, in a process of its own that may hang on a dead mount alone.
func runWorker() error {
	return worker.Main(os.Stdin, os.Stdout)
}
