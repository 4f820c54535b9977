// The daemon's configuration: reading it and the baselines, and the
// reload on SIGHUP that swaps both without a restart.

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
)

// defaultHistoryFile is history.json in the service's state directory,
// which systemd names in STATE_DIRECTORY (the first one, when the unit has
// several, colon-separated), or "" outside systemd: a newcomer's run with
// the embedded default config writes nothing anywhere.
func defaultHistoryFile(getenv func(string) string) string {
	dir, _, _ := strings.Cut(getenv("STATE_DIRECTORY"), ":")
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "history.json")
}

// loadConfig reads the named file; with none named, the packaged file if it
// exists, else the embedded default. Every target path must exist.
func loadConfig(name string) (*probe.Config, error) {
	cfg, err := readConfig(name)
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckPaths(probe.PathCheckDeadline); err != nil {
		return nil, err
	}
	return cfg, nil
}

func readConfig(name string) (*probe.Config, error) {
	if name == "" {
		if _, err := os.Stat(defaultConfigFile); err == nil {
			name = defaultConfigFile
		} else {
			return probe.LoadEmbedded()
		}
	}
	return probe.ReadConfigFile(name)
}

// loadServeConfig is loadConfig for the daemon, where a target path that is
// missing or does not answer is a warning, not an error. At boot the daemon
// starts before GPFS has mounted its file systems (mmfsd mounts them after
// it joins the cluster, minutes later), and a restart during an outage
// must not take the node's counters and its other targets down with it.
// Such a target's probes fail (reason enoent or timeout) until the path is
// back; they never create it, which could put them on the wrong file
// system.
func loadServeConfig(logger log.Logger, paths *probe.PathChecker, name string) (*probe.Config, error) {
	cfg, err := readConfig(name)
	if err != nil {
		return nil, err
	}
	checkServePaths(logger, paths, cfg)
	return cfg, nil
}

func checkServePaths(logger log.Logger, paths *probe.PathChecker, cfg *probe.Config) {
	if err := paths.Check(cfg, probe.PathCheckDeadline); err != nil {
		level.Warn(logger).Log("msg", "target path not usable; its probes fail until it is (file system not mounted yet?)", "err", boundedErr(err))
	}
}

func (r *reloader) checkPaths(cfg *probe.Config) { checkServePaths(r.logger, r.paths, cfg) }

// loadBaselines reads the config's baselines file. A missing or corrupt
// file is not fatal: probes still run and export their results, only
// without ratios, and the error is returned for the log and the gauge.
func loadBaselines(cfg *probe.Config) (*plateau.Baselines, error) {
	if cfg.BaselinesFile == "" {
		return plateau.NewBaselines(), nil
	}
	b, err := plateau.LoadBaselines(cfg.BaselinesFile)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// reloader swaps the running config on SIGHUP or POST /-/reload; a config
// that fails to load leaves the running one in place.
type reloader struct {
	mu              sync.Mutex
	logger          log.Logger
	name            string
	scheduler       *schedule.Scheduler
	results         *store.Store
	success         prometheus.Gauge
	timestamp       prometheus.Gauge
	baselinesLoaded prometheus.Gauge
	// paths remembers target path checks blocked on a hung mount.
	paths *probe.PathChecker
	// shown is what the status page says of the config. It is read
	// without mu, which a reload holds while a path check may block on a
	// hung mount: the page must answer during exactly such an incident.
	shown atomic.Pointer[shownConfig]
	// ready is set once the first load is applied (/-/ready).
	ready atomic.Bool
	// running is held by the one reload in flight; pending asks it to
	// load once more when it ends (a SIGHUP that came meanwhile, maybe
	// after the file changed again).
	running, pending atomic.Bool
	// stopped, once set, makes a reload that ends after the daemon's stop
	// apply nothing.
	stopped atomic.Bool
}

// start applies the config read at start-up off the caller's goroutine,
// as a reload would: its target paths may hang and its baselines be big.
func (r *reloader) start(cfg *probe.Config) {
	r.running.Store(true)
	go func() {
		r.mu.Lock()
		r.checkPaths(cfg)
		r.apply(cfg)
		r.mu.Unlock()
		r.ready.Store(true)
		r.finish()
	}()
}

// trigger starts a reload unless one is in flight, which then loads once
// more when it ends. It never waits: the signal loop that calls it must
// always be free to act on SIGTERM.
func (r *reloader) trigger() {
	r.pending.Store(true)
	if !r.running.CompareAndSwap(false, true) {
		return
	}
	go r.finish()
}

// tryReload reloads now, unless a reload is in flight; ran says which.
// Requests while a reload hangs on a mount are answered at once, not
// parked behind it.
func (r *reloader) tryReload() (err error, ran bool) {
	if !r.running.CompareAndSwap(false, true) {
		return nil, false
	}
	defer r.finish()
	return r.reload(), true
}

// finish runs the reloads asked for meanwhile, then lets the next one in.
func (r *reloader) finish() {
	for {
		for r.pending.Swap(false) {
			_ = r.reload()
		}
		r.running.Store(false)
		// A trigger between the last Swap and the Store saw running set
		// and left its request to this goroutine.
		if !r.pending.Load() || !r.running.CompareAndSwap(false, true) {
			return
		}
	}
}

// stop makes reloads still in flight apply nothing.
func (r *reloader) stop() { r.stopped.Store(true) }

// boundedErr is err with its text bounded, for the log, the page and the
// JSON: an error listing 100,000 unknown keys is megabytes.
func boundedErr(err error) error {
	if err == nil || len(err.Error()) <= probe.MaxErrorText {
		return err
	}
	return errors.New(probe.BoundText(err.Error(), probe.MaxErrorText))
}

// shownConfig is the running config for the status page, since when it
// runs, and what the last loads refused.
type shownConfig struct {
	cfg                     *probe.Config
	loadedAt                time.Time
	reloadErr, baselinesErr string
}

func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped.Load() {
		return errors.New("stopping")
	}
	cfg, err := loadServeConfig(r.logger, r.paths, r.name)
	err = boundedErr(err)
	if err != nil {
		// Log before the gauge flips, so whoever sees the 0 finds the why.
		level.Error(r.logger).Log("msg", "reload failed; keeping the running config", "err", err)
		r.success.Set(0)
		if prev := r.shown.Load(); prev != nil {
			next := *prev
			next.reloadErr = err.Error()
			r.shown.Store(&next)
		}
		return err
	}
	r.apply(cfg)
	return nil
}

func (r *reloader) apply(cfg *probe.Config) {
	baselines, err := loadBaselines(cfg)
	err = boundedErr(err)
	if r.stopped.Load() {
		return
	}
	shown := &shownConfig{cfg: cfg, loadedAt: time.Now()}
	if err != nil {
		shown.baselinesErr = err.Error()
		r.baselinesLoaded.Set(0)
		level.Error(r.logger).Log("msg", "baselines not loaded; probes run and export results without ratios", "err", err)
	} else {
		r.baselinesLoaded.Set(1)
	}
	r.results.Configure(cfg, baselines)
	r.scheduler.Apply(cfg)
	r.shown.Store(shown)
	r.success.Set(1)
	r.timestamp.SetToCurrentTime()
	n := 0
	if baselines != nil {
		n = len(baselines.Entries)
	}
	level.Info(r.logger).Log("msg", "config loaded", "source", cfg.Source, "targets", len(cfg.Targets), "baselines", n)
	logFleetStretch(r.logger, cfg)
}

// logFleetStretch says, per target, which probe intervals the node's share
// of the fleet budget stretched and by how much (the config parser derived
// them; the scheduler and /metrics use the stretched ones).
func logFleetStretch(logger log.Logger, cfg *probe.Config) {
	for _, t := range cfg.Targets {
		if t.Fleet == nil || !t.Stretch.Stretched() {
			continue
		}
		level.Info(logger).Log("msg", "fleet budget stretches the target's probe intervals", "target", t.Name,
			"fleet_nodes", t.Fleet.Nodes, "fleet_max_bytes_per_hour", probe.FormatSize(t.Fleet.MaxBytesPerHour),
			"share_per_hour", probe.FormatBytes(t.Stretch.Share), "planned_per_hour", probe.FormatBytes(t.Stretch.Needed),
			"factor", fmt.Sprintf("%.4g", t.Stretch.Factor), "probes", t.StretchSummary())
	}
}
