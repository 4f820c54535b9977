package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/plateau-exporter/plateau_exporter/collector"
	"github.com/plateau-exporter/plateau_exporter/internal/daemonlog"
	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/internal/webguard"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
	"github.com/plateau-exporter/plateau_exporter/probe/nodejobs"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

type serveOptions struct {
	configFile             string
	hostname               string
	webFlags               *web.FlagConfig
	metricsPath            string
	disableExporterMetrics bool
	maxRequests            int
	logLevel               string
	historyFile            string
	jobs                   nodejobs.Detector
	gomaxprocs             int
	// signals, when set, are already registered (SIGHUP, SIGTERM, SIGINT).
	signals chan os.Signal
	// enableLifecycle serves POST /-/reload.
	enableLifecycle bool
	readTimeout     time.Duration
	idleTimeout     time.Duration
	maxConnections  int
}

func serve(logger log.Logger, o serveOptions) error {
	// Signals first: until Notify, SIGHUP kills the process (and systemd
	// counts death by SIGHUP as a clean exit, so it does not restart it).
	// runDaemon registers them even earlier, before dropping privileges.
	signals := o.signals
	if signals == nil {
		signals = make(chan os.Signal, 4)
		signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	}
	defer signal.Stop(signals)
	level.Info(logger).Log("msg", "starting plateau_exporter", "version", version.Info(), "build_context", version.BuildContext())
	// Set here, not through the environment, so that the probe-worker
	// children keep Go's default and measure as characterize did. The
	// serving process waits on I/O and parses small files: two Ps are
	// enough, and bound where the runtime's GC workers (which otherwise
	// spread onto every idle P) can land beside a job.
	if o.gomaxprocs > 0 {
		level.Debug(logger).Log("msg", "GOMAXPROCS of the serving process", "gomaxprocs", o.gomaxprocs, "was", runtime.GOMAXPROCS(o.gomaxprocs))
	}
	// A TLS or auth file that is wrong must stop the start, not surface as a
	// failed handshake on the first scrape.
	if f := *o.webFlags.WebConfigFile; f != "" {
		if err := web.Validate(f); err != nil {
			return exitErr(2, fmt.Errorf("web config %s: %w", f, err))
		}
	}
	// The config's text is read and checked now (its size is bounded, so
	// this is quick): a wrong file stops the start. Its target paths and
	// the baselines, which may wait on a hung mount or be large, are
	// loaded once the server answers.
	cfg, err := readConfig(o.configFile)
	if err != nil {
		return exitErr(2, boundedErr(err))
	}

	counters, err := collector.NewRegistry(logger)
	if err != nil {
		return exitErr(2, err)
	}
	level.Info(logger).Log("msg", "counter collectors enabled", "collectors", fmt.Sprint(counters.Enabled()))
	// Tracked remembers each collector's last scrape for the status page.
	tracked := collector.Track(counters)

	// The history of the change ratios is loaded before the first
	// Configure, which keeps the entries of the configured probes.
	results := store.Open(store.Options{HistoryFile: o.historyFile, Logger: logger})
	runner := &worker.ProcessRunner{Command: worker.DefaultCommand(), Logger: logger}
	// The node's own I/O during each run, from /proc and, for GPFS, from
	// the gpfs collector's background mmpmon answers: the method value is
	// the adapter, so that probe/ never imports collector.
	ioCounters := &iocount.Proc{GPFS: counters.GPFSFSBytes}
	// Job awareness: the scheduler asks at each slot, a scrape reads
	// plateau_node_job_running, the status page shows the jobs.
	jobs := &jobWatcher{detector: o.jobs, logger: logger}
	scheduler := schedule.New(schedule.Options{Logger: logger, Hostname: o.hostname, Runner: runner, Reporter: results, IOCounters: ioCounters, Jobs: jobs})

	reloadSuccess := prometheus.NewGauge(prometheus.GaugeOpts{
		// 1 if the last attempt to load the configuration succeeded, 0
		// if it failed and the previous one is still running.
		Name: "plateau_config_last_reload_successful",
		Help: "1 if the last attempt to load the configuration succeeded, else 0.",
	})
	reloadTime := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "plateau_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful configuration load.",
	})
	baselinesLoaded := prometheus.NewGauge(prometheus.GaugeOpts{
		// 1 if the baselines file named by the config was loaded (or
		// none is configured), 0 if it is missing or invalid and no
		// ratios are exported.
		Name: "plateau_baselines_last_load_successful",
		Help: "1 if the baselines file was loaded or none is configured, 0 if it is missing or invalid.",
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("plateau_exporter"), results, tracked, reloadSuccess, reloadTime, baselinesLoaded, jobs)
	if !o.disableExporterMetrics {
		reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	}

	rl := &reloader{logger: logger, name: o.configFile, scheduler: scheduler, results: results, success: reloadSuccess, timestamp: reloadTime, baselinesLoaded: baselinesLoaded, paths: new(probe.PathChecker)}
	page, err := newStatusPage(o, rl, results, tracked, jobs)
	if err != nil {
		return err
	}
	server := &http.Server{
		Handler: newHandler(handlerOptions{serve: o, registry: reg, reloader: rl, page: page, logger: logger}),
		// Every phase of a connection has an end: a client that opens
		// connections and says nothing, or keeps them idle, does not hold
		// the daemon's descriptors (which its probes need) for long.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       o.readTimeout,
		IdleTimeout:       o.idleTimeout,
		ConnState:         webguard.NewConnLimiter(logger, o.maxConnections).ConnState,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, o.webFlags, daemonlog.Slog(logger, o.logLevel)) }()

	// The first load runs as a reload would, off this loop: the server
	// answers (not ready) while a target path hangs or the baselines load.
	rl.start(cfg)
	for {
		select {
		case err := <-serveErr:
			scheduler.Stop()
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return exitErr(1, err)
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				rl.trigger()
				continue
			}
			level.Info(logger).Log("msg", "shutting down", "signal", sig)
			// Stop ends the running probes: each worker gets SIGTERM and
			// worker.DefaultStopGrace to remove its files, then SIGKILL.
			// A reload still blocked on a hung mount is left behind.
			rl.stop()
			scheduler.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := server.Shutdown(ctx)
			cancel()
			return err
		}
	}
}

// newStatusPage wires the status page (`/`, which replaces
// exporter-toolkit's landing page and keeps its links) and /status.json to
// the daemon's state. Each request takes a snapshot of the store, which
// never waits for a probe, and the collectors' state at the last scrape.
// The store takes the node's concurrent I/O that the scheduler measures.
var _ schedule.ConcurrentReporter = (*store.Store)(nil)

func newStatusPage(o serveOptions, rl *reloader, results *store.Store, counters *collector.Tracked, jobs *jobWatcher) (*statuspage.Page, error) {
	nextRun := func(t *probe.Target, p *probe.ProbeConfig, now time.Time) time.Time {
		offset := time.Duration(0)
		if p.Splay { // as the scheduler places the probe's slot
			offset = schedule.SlotOffset(o.hostname, t.Name, p.Name, p.Interval)
		}
		return schedule.NextSlot(now, offset, p.Interval)
	}
	page, err := statuspage.New(statuspage.Options{
		Name:        "plateau_exporter",
		Description: "File-system probes beside their characterized plateau, with GPFS, InfiniBand, NVMe and NFS counters",
		Links: []statuspage.Link{
			{Address: o.metricsPath, Text: "Metrics"},
			{Address: "/status.json", Text: "Status as JSON"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Ready"},
		},
		Gather: func() statuspage.Input {
			in := statuspage.Input{Now: time.Now(), Hostname: o.hostname, Version: version.Info(),
				Store: results.Snapshot(), Collectors: collectorStates(counters), NextRun: nextRun, NodeJobs: jobs.status()}
			if sc := rl.shown.Load(); sc != nil {
				in.Config, in.ConfigLoadedAt, in.LastReloadError, in.BaselinesError = sc.cfg, sc.loadedAt, sc.reloadErr, sc.baselinesErr
			}
			return in
		},
	})
	if err != nil {
		return nil, fmt.Errorf("status page: %w", err)
	}
	return page, nil
}

// collectorStates hands the status page what the last scrape saw of each
// counter collector.
func collectorStates(counters *collector.Tracked) []statuspage.CollectorState {
	var out []statuspage.CollectorState
	for _, c := range counters.States() {
		out = append(out, statuspage.CollectorState{Name: c.Name, Scraped: c.Scraped, Absent: c.Absent, Success: c.Success, Duration: c.Duration, At: c.At})
	}
	return out
}

// stdlibLogger adapts go-kit to promhttp's error log.
type stdlibLogger struct{ l log.Logger }

func (s stdlibLogger) Println(v ...any) { level.Error(s.l).Log("msg", fmt.Sprint(v...)) }
