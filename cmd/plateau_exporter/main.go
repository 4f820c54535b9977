// Command plateau_exporter probes HPC file systems on a schedule, reads
// storage and fabric counters, and exports both beside the characterized
// plateau for Prometheus. This file only wires flags to commands.
//
// The daemon (serve, the default command) reads the collector, web and
// probe flags; each of the other commands (check-config, probe,
// characterize, backtest) is parsed by an application of its own that
// holds only the flags it reads, so that its --help shows those and no
// others, as promtool's subcommands do. The daemon's application still
// declares every command with its flags, so that --help lists them and
// --help-man documents them all.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/plateau-exporter/plateau_exporter/internal/daemonlog"
)

const defaultConfigFile = "/etc/plateau_exporter/plateau.yml"

const appHelp = "Probes file systems against their characterized plateau and exports the results, with GPFS, Lustre, InfiniBand, NVMe and NFS counters, for Prometheus."

// commandEnv is what a command gets from the flags it shares with the
// daemon.
type commandEnv struct {
	logger     log.Logger
	logLevel   string
	logFormat  string
	configFile string
	hostname   string
	stdout     io.Writer
	// args are the command's arguments after its name, for a command run
	// by another binary (backtest).
	args []string
}

// shared says which of the daemon's flags a command reads.
type shared struct{ log, config bool }

// command is one command besides the daemon: the shared flags it reads,
// and how it declares its own flags on an application and runs.
type command struct {
	name   string
	shared shared
	add    func(app *kingpin.Application) (*kingpin.CmdClause, func(commandEnv) error)
}

// commands are the public commands besides serve, in the order --help
// lists them.
func commands() []command {
	return []command{
		{"check-config", shared{log: false, config: true}, checkConfigCommand},
		{"probe", shared{log: true, config: true}, probeCommand},
		{"characterize", shared{log: true, config: true}, func(app *kingpin.Application) (*kingpin.CmdClause, func(commandEnv) error) {
			cmd, run := characterizeCommand(app)
			return cmd, func(e commandEnv) error { return run(e.logger, e.configFile, e.hostname) }
		}},
		{"backtest", shared{}, func(app *kingpin.Application) (*kingpin.CmdClause, func(commandEnv) error) {
			cmd, run := backtestCommand(app)
			return cmd, func(e commandEnv) error { return run(e.args) }
		}},
	}
}

func main() {
	stampVersion(debug.ReadBuildInfo)
	args := os.Args[1:]
	app := newApp(kingpin.CommandLine)
	app.UsageTemplate(defaultCommandUsageTemplate)
	kingpin.ManPageTemplate = manPageTemplate(kingpin.ManPageTemplate, version.Version, version.BuildDate)
	flags := addSharedFlags(app, shared{log: true, config: true})
	daemon := registerDaemonCommands(app)
	var err error
	if c, cargs, ok := selectedCommand(app, args); ok {
		err = runCommand(c, cargs)
	} else {
		err = runDaemon(app, flags, daemon, args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plateau_exporter:", err)
		os.Exit(exitCode(err))
	}
}

// stampVersion fills in what the release build's -ldflags set (Makefile)
// from the build information Go embeds, for a binary built with plain go
// build or go run: the module version (a tag, or a pseudo-version with
// the commit), the VCS revision and time, with "-dirty" for a modified
// tree. Without it the status page and build_info said version= and
// revision=unknown.
func stampVersion(read func() (*debug.BuildInfo, bool)) {
	bi, ok := read()
	if !ok {
		return
	}
	if version.Version == "" {
		version.Version = "devel"
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version.Version = v
		}
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if (version.Revision == "" || version.Revision == "unknown") && rev != "" {
		if modified {
			rev += "-dirty"
		}
		version.Revision = rev
	}
	if version.BuildDate == "" && at != "" {
		version.BuildDate = at
	}
	if version.Branch == "" {
		version.Branch = "unknown"
	}
}

// defaultCommandUsageTemplate is kingpin's usage with, when no command is
// named (`plateau_exporter --help`), the flags of the default command
// (serve) first: those a newcomer starts the daemon with (web, probe
// history, Slurm), which are serve's and not the application's, so that
// kingpin's own template listed only the collectors' and the shared ones.
var defaultCommandUsageTemplate = strings.Replace(kingpin.DefaultUsageTemplate, `{{if .Context.Flags -}}
Flags:`, `{{if not .Context.SelectedCommand -}}
{{range .App.Commands -}}
{{if .Default -}}
Flags of {{.Name}}, the default command:
{{.Flags|FlagsToTwoColumns|FormatTwoColumns}}
{{end -}}
{{end -}}
{{end -}}
{{if .Context.Flags -}}
Flags:`, 1)

// newApp is an application with the name, help and version every one of
// plateau_exporter's carries.
func newApp(app *kingpin.Application) *kingpin.Application {
	app.Name = "plateau_exporter"
	app.Help = appHelp
	app.Version(version.Print("plateau_exporter"))
	app.HelpFlag.Short('h')
	return app
}

// sharedFlags declares the flags the commands share with the daemon.
type sharedFlags struct {
	logLevel, logFormat, configFile, hostname *string
}

func addSharedFlags(app *kingpin.Application, s shared) sharedFlags {
	var f sharedFlags
	if s.log {
		f.logLevel = app.Flag("log.level", "Only log messages with the given severity or above: debug, info, warn, error.").Default("info").Enum("debug", "info", "warn", "error")
		f.logFormat = app.Flag("log.format", "Output format of log messages: logfmt or json.").Default("logfmt").Enum("logfmt", "json")
	}
	if s.config {
		f.configFile = app.Flag("config.file", "Probe configuration file. Default: "+defaultConfigFile+" if it exists, else the embedded default (a light probe of each kind in the OS temp directory).").String()
		f.hostname = app.Flag("probe.hostname", "Name of the per-host probe directory under each target path. Default: the host name.").String()
	}
	return f
}

// env resolves the shared flags once they are parsed.
func (f sharedFlags) env() (commandEnv, error) {
	e := commandEnv{logLevel: "info", logFormat: "logfmt", stdout: os.Stdout}
	if f.logLevel != nil {
		e.logLevel, e.logFormat = *f.logLevel, *f.logFormat
	}
	e.logger = daemonlog.New(e.logLevel, e.logFormat, os.Stderr)
	if f.configFile != nil {
		e.configFile, e.hostname = *f.configFile, *f.hostname
		if e.hostname == "" {
			h, err := os.Hostname()
			if err != nil {
				return e, exitErr(2, fmt.Errorf("host name: %w", err))
			}
			e.hostname = h
		}
	}
	return e, nil
}

// selectedCommand finds the public command the arguments name, by the
// daemon's own parser (which knows every flag, so a flag's value is never
// taken for a command), and the arguments to hand its application:
// "help probe" becomes "probe --help".
func selectedCommand(daemon *kingpin.Application, args []string) (command, []string, bool) {
	ctx, err := daemon.ParseContext(args)
	if err != nil || ctx.SelectedCommand == nil {
		return command{}, nil, false
	}
	name := ctx.SelectedCommand.FullCommand()
	if name == "help" {
		for _, el := range ctx.Elements {
			if a, ok := el.Clause.(*kingpin.ArgClause); ok && a.Model().Name == "command" && el.Value != nil {
				name = *el.Value
				args = []string{name, "--help"}
				break
			}
		}
	}
	for _, c := range commands() {
		if c.name == name {
			return c, args, true
		}
	}
	return command{}, nil, false
}

// runCommand parses the arguments with an application that holds only the
// command's own flags and the shared ones it reads, and runs it.
func runCommand(c command, args []string) error {
	app := newApp(kingpin.New("plateau_exporter", appHelp))
	flags := addSharedFlags(app, c.shared)
	_, run := c.add(app)
	kingpin.MustParse(app.Parse(args))
	env, err := flags.env()
	if err != nil {
		return err
	}
	for i, a := range args {
		if a == c.name {
			env.args = args[i+1:]
			break
		}
	}
	return run(env)
}

// daemonCommands are the daemon's own commands and their parsed flags.
type daemonCommands struct {
	serve, worker, smartHelper, slurmTask *kingpin.CmdClause
	serveFlags                            serveFlags
	smartHelperRole                       *string
}

// registerDaemonCommands declares serve (the default), the hidden commands
// the daemon starts itself, and every public command with its flags, so
// that --help lists them and --help-man documents them.
func registerDaemonCommands(app *kingpin.Application) daemonCommands {
	var d daemonCommands
	d.serve = app.Command("serve", "Run the exporter: probe on schedule, serve /metrics (the default command).").Default()
	d.serveFlags = addServeFlags(d.serve)
	d.worker = app.Command("probe-worker", "Run one probe request from stdin and print its result (used by the daemon).").Hidden()
	d.smartHelper = app.Command("smart-helper", "Read NVMe SMART logs with CAP_SYS_ADMIN for the daemon, which keeps no capability (started by the daemon).").Hidden()
	d.smartHelperRole = d.smartHelper.Flag("role", "keeper (starts servers) or server (answers SMART reads).").Required().Enum("keeper", "server")
	d.slurmTask = app.Command("slurm-task", "Run one task of a characterize --slurm step (started by srun).").Hidden()
	for _, c := range commands() {
		c.add(app)
	}
	return d
}

// runDaemon parses the daemon's flags (the collectors', web and probe
// flags) and runs serve or one of the hidden commands it starts.
func runDaemon(app *kingpin.Application, flags sharedFlags, d daemonCommands, args []string) error {
	cmd := kingpin.MustParse(app.Parse(args))
	env, err := flags.env()
	if err != nil {
		return err
	}
	switch cmd {
	case d.serve.FullCommand():
		// Registered before anything that may take time (dropping
		// privileges, reading files): until then SIGHUP kills the daemon.
		signals := make(chan os.Signal, 4)
		signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
		if err := dropPrivileges(env.logger, env.logLevel, env.logFormat); err != nil {
			return err
		}
		o := d.serveFlags.options(env)
		o.signals = signals
		return serve(env.logger, o)
	case d.worker.FullCommand():
		return runWorker()
	case d.smartHelper.FullCommand():
		return runSMARTHelper(*d.smartHelperRole, env.logger, env.logLevel, env.logFormat)
	case d.slurmTask.FullCommand():
		return runSlurmTask(env.logger)
	}
	return fmt.Errorf("command %s: not run by the daemon", cmd)
}

// serveFlags are serve's own flags.
type serveFlags struct {
	webFlags               *web.FlagConfig
	metricsPath            *string
	disableExporterMetrics *bool
	maxRequests            *int
	historyFile            *string
	jobs                   jobFlags
	gomaxprocs             *int
	enableLifecycle        *bool
	readTimeout            *time.Duration
	idleTimeout            *time.Duration
	maxConnections         *int
}

func addServeFlags(cmd *kingpin.CmdClause) serveFlags {
	return serveFlags{
		webFlags:               kingpinflag.AddFlags(cmd, ":9731"),
		metricsPath:            cmd.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String(),
		disableExporterMetrics: cmd.Flag("web.disable-exporter-metrics", "Exclude the exporter's own Go runtime and process metrics from /metrics.").Bool(),
		maxRequests:            cmd.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("40").Int(),
		historyFile:            cmd.Flag("probe.history-file", "File that keeps each probe op's last results across restarts, for plateau_probe_change_ratio; empty: in memory only. Default: history.json in $STATE_DIRECTORY (set by systemd from the unit's StateDirectory=), else empty.").Default(defaultHistoryFile(os.Getenv)).String(),
		jobs:                   addJobFlags(cmd),
		enableLifecycle:        cmd.Flag("web.enable-lifecycle", "Serve POST /-/reload (as Prometheus). Off by default: SIGHUP reloads too, and needs the daemon's user.").Bool(),
		readTimeout:            cmd.Flag("web.read-timeout", "Longest time to read a whole request, headers and body.").Default("30s").Duration(),
		idleTimeout:            cmd.Flag("web.idle-timeout", "How long a keep-alive connection may stay idle before the daemon closes it.").Default("60s").Duration(),
		maxConnections:         cmd.Flag("web.max-connections", "Most open HTTP connections; more are closed at once. At most half the process's file descriptor limit, so clients never take the descriptors probes need.").Default("512").Int(),
		gomaxprocs:             cmd.Flag("runtime.gomaxprocs", "GOMAXPROCS of the serving process (scrapes, schedule, counters); probes run in their own worker processes with the Go default. 0: the Go default (every CPU). The default of 2 keeps the daemon, and its garbage collector's workers, on at most two CPUs at a time of a many-core compute node (bench/scrape.sh: 1 made the largest scrapes 3x slower).").Default("2").Int(),
	}
}

func (f serveFlags) options(env commandEnv) serveOptions {
	return serveOptions{
		configFile:             env.configFile,
		hostname:               env.hostname,
		webFlags:               f.webFlags,
		metricsPath:            *f.metricsPath,
		disableExporterMetrics: *f.disableExporterMetrics,
		maxRequests:            *f.maxRequests,
		logLevel:               env.logLevel,
		historyFile:            *f.historyFile,
		jobs:                   f.jobs.detector(),
		gomaxprocs:             *f.gomaxprocs,
		enableLifecycle:        *f.enableLifecycle,
		readTimeout:            *f.readTimeout,
		idleTimeout:            *f.idleTimeout,
		maxConnections:         *f.maxConnections,
	}
}
