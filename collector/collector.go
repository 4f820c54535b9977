// Package collector owns plateau_exporter's counter collectors, seven of
// them: gpfs (mmpmon, the -Y commands and the diagnosis commands),
// infiniband, nvme, nfs (client), lustre (client), lustre_server and lnet
// (LNet health, through lnetctl); each is idle where its subject is absent. It follows
// node_exporter's model: one file per collector, each registered with a
// --collector.<name> flag, and a per-collector success and duration metric so
// that a failing subsystem is visible without failing the whole scrape.
package collector

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// namespace prefixes every metric this exporter produces.
const namespace = "plateau"

// Collector is what each counter collector implements: it sends the metrics
// it read during one scrape to ch, or returns an error.
type Collector interface {
	Update(ch chan<- prometheus.Metric) error
}

// ErrNoData tells the registry that the subsystem is absent on this host
// (no GPFS, no InfiniBand HCA, no NFS mount). The collector is then idle,
// not failing: it exports plateau_scrape_collector_present 0 and no
// plateau_scrape_collector_success series, so that an alert on failing
// collectors does not fire on every node that lacks one kind of hardware.
var ErrNoData = errors.New("collector returned no data")

// presenceChecker is implemented by a collector that can tell cheaply,
// without running a command or blocking on a file system, whether its
// subject exists on this node (a binary, a sysfs class, a procfs tree).
// The registry asks before every Update, so a subject that appears later
// (a module loaded, a file system mounted) is picked up, and an absent
// one never starts the collector's background work. reason says what was
// looked for, for the log ("no /usr/lpp/mmfs/bin/mmpmon").
type presenceChecker interface {
	presence() (present bool, reason string)
}

// IsNoDataError reports whether err is, or wraps, ErrNoData.
func IsNoDataError(err error) bool { return errors.Is(err, ErrNoData) }

type factoryFunc func(logger log.Logger) (Collector, error)

// registration is filled only from init() functions together with the
// kingpin flags, the one kind of package-level state the project allows.
var (
	factories      = map[string]factoryFunc{}
	collectorState = map[string]*bool{}
	forcedFlags    = map[string]bool{}
)

var (
	scrapeDurationDesc = scrapeDesc("collector_duration_seconds",
		"Time the collector took to read its counters during this scrape, in seconds.")
	scrapeSuccessDesc = scrapeDesc("collector_success",
		"1 if the collector read its counters during this scrape, 0 if it failed. Only collectors whose subject is present on the node have this series (see plateau_scrape_collector_present).")
	scrapePresentDesc = scrapeDesc("collector_present",
		"1 if the collector's subject (GPFS, an InfiniBand HCA, an NVMe controller, an NFS mount, Lustre) is present on this node, 0 if it is absent and the collector is idle.")
	parseErrorsDesc = prometheus.NewDesc(
		// Lines (rows, records, attribute files) of the source that the
		// collector could not read and skipped, since the exporter
		// started. The rest of the source is still exported; a source
		// with nothing readable fails the collector
		// (plateau_scrape_collector_success 0) instead. Every source
		// parsed at least once has a series, 0 while it had no bad line.
		prometheus.BuildFQName(namespace, "collector", "parse_errors_total"),
		"Lines of the source that the collector could not read and skipped.",
		[]string{"collector", "source"}, nil,
	)
)

// scrapeDesc declares plateau_scrape_<name>{collector}, a series the
// registry adds for each collector.
func scrapeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrape", name), help, []string{"collector"}, nil)
}

// registerCollector is called from each collector's init(): it adds the
// --collector.<name> flag and remembers how to build the collector.
func registerCollector(name string, enabledByDefault bool, factory factoryFunc) {
	state := "disabled"
	if enabledByDefault {
		state = "enabled"
	}
	flagName := "collector." + name
	help := fmt.Sprintf("Enable the %s collector (default: %s).", name, state)
	def := "false"
	if enabledByDefault {
		def = "true"
	}
	flag := kingpin.Flag(flagName, help).Default(def).Action(collectorFlagAction(name)).Bool()
	collectorState[name] = flag
	factories[name] = factory
}

// collectorFlagAction records which collectors were set explicitly, so that
// --collector.disable-defaults keeps them.
func collectorFlagAction(name string) func(*kingpin.ParseContext) error {
	return func(*kingpin.ParseContext) error {
		forcedFlags[name] = true
		return nil
	}
}

var disableDefaultCollectors = kingpin.Flag(
	"collector.disable-defaults",
	"Disable all collectors that are enabled by default; enable the ones wanted with --collector.<name>.",
).Default("false").Bool()

// Names lists every registered collector, sorted.
func Names() []string {
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Registry runs the enabled collectors on each scrape, concurrently, and adds
// the per-collector success and duration metrics. It implements
// prometheus.Collector.
type Registry struct {
	collectors map[string]Collector
	logger     log.Logger
	// health keeps, per collector, what the log has said, so that an
	// absent subject is logged once and a failure at most once per
	// failureLogEvery rather than at every scrape.
	health map[string]*collectorHealth
	now    func() time.Time
}

// failureLogEvery is how often a collector that keeps failing is logged at
// warning level: often enough to be found in a day's log, rarely enough
// that a scrape every 15 s does not bury everything else.
const failureLogEvery = 10 * time.Minute

// collectorHealth is what the log last said about one collector.
type collectorHealth struct {
	mu sync.Mutex
	// known is false until presence was first decided.
	known   bool
	present bool
	// lastWarn is when the last failure was logged at warning level, and
	// lastErr what it said.
	lastWarn time.Time
	lastErr  string
}

// NewRegistry builds the collectors enabled by flags. With filters, only the
// named collectors are built (they must be enabled), as node_exporter's
// collect[] parameter does.
func NewRegistry(logger log.Logger, filters ...string) (*Registry, error) {
	enabled := map[string]bool{}
	for name, on := range collectorState {
		if *on && (!*disableDefaultCollectors || forcedFlags[name]) {
			enabled[name] = true
		}
	}
	if len(filters) > 0 {
		want := map[string]bool{}
		for _, f := range filters {
			if _, ok := factories[f]; !ok {
				return nil, fmt.Errorf("collector %q does not exist", f)
			}
			if !enabled[f] {
				return nil, fmt.Errorf("collector %q is disabled", f)
			}
			want[f] = true
		}
		enabled = want
	}
	collectors := map[string]Collector{}
	for name := range enabled {
		c, err := factories[name](log.With(logger, "collector", name))
		if err != nil {
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		collectors[name] = c
	}
	r := NewRegistryFrom(logger, collectors)
	r.announce()
	return r, nil
}

// NewRegistryFrom wraps already built collectors; tests and benchmarks use it
// to run a collector through the same success/duration accounting.
func NewRegistryFrom(logger log.Logger, collectors map[string]Collector) *Registry {
	r := &Registry{collectors: collectors, logger: logger, health: map[string]*collectorHealth{}, now: time.Now}
	for name := range collectors {
		r.health[name] = &collectorHealth{}
	}
	return r
}

// announce logs, once at start-up, each collector whose subject is absent
// from this node, so that the log says at info level why it exports
// nothing. Collectors that only learn it by reading (NFS) say so at their
// first scrape instead.
func (r *Registry) announce() {
	for _, name := range r.Enabled() {
		if p, ok := r.collectors[name].(presenceChecker); ok {
			present, reason := p.presence()
			r.notePresence(name, present, reason)
		}
	}
}

// notePresence logs a change of presence: at start-up, and when a subject
// appears or goes later (a module loaded, a last mount unmounted).
func (r *Registry) notePresence(name string, present bool, reason string) {
	h := r.health[name]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known && h.present == present {
		return
	}
	first := !h.known
	h.known, h.present = true, present
	switch {
	case !present:
		level.Info(r.logger).Log("msg", fmt.Sprintf("%s: %s; collector idle", name, reason), "collector", name)
	case !first:
		level.Info(r.logger).Log("msg", name+": subject now present; collecting", "collector", name)
	}
}

// noteFailure logs a present collector's failure at warning level, at most
// once per failureLogEvery unless the error changes, and at debug level
// otherwise.
func (r *Registry) noteFailure(name string, err error, duration time.Duration) {
	h := r.health[name]
	h.mu.Lock()
	now := r.now()
	loud := h.lastWarn.IsZero() || now.Sub(h.lastWarn) >= failureLogEvery || err.Error() != h.lastErr
	if loud {
		h.lastWarn, h.lastErr = now, err.Error()
	}
	h.mu.Unlock()
	lvl := level.Debug
	if loud {
		lvl = level.Warn
	}
	lvl(r.logger).Log("msg", "collector failed", "collector", name, "duration_seconds", duration.Seconds(), "err", err)
}

// Close stops the collectors that run in the background (the GPFS
// commands' loops) and waits for them. Without it a registry that is
// dropped keeps running commands: in a test binary, into the environment
// of whatever test runs next.
func (r *Registry) Close() error {
	var errs []error
	for name, c := range r.collectors {
		if cl, ok := c.(io.Closer); ok {
			if err := cl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("collector %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Enabled lists the collectors this registry runs, sorted.
func (r *Registry) Enabled() []string {
	names := make([]string, 0, len(r.collectors))
	for n := range r.collectors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- scrapeDurationDesc
	ch <- scrapeSuccessDesc
	ch <- scrapePresentDesc
	ch <- parseErrorsDesc
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	var wg sync.WaitGroup
	wg.Add(len(r.collectors))
	for name, c := range r.collectors {
		go func(name string, c Collector) {
			defer wg.Done()
			r.execute(name, c, ch)
		}(name, c)
	}
	wg.Wait()
}

func (r *Registry) execute(name string, c Collector, ch chan<- prometheus.Metric) {
	if p, ok := c.(presenceChecker); ok {
		if present, reason := p.presence(); !present {
			r.notePresence(name, false, reason)
			ch <- prometheus.MustNewConstMetric(scrapePresentDesc, prometheus.GaugeValue, 0, name)
			return
		}
	}
	begin := time.Now()
	err := c.Update(ch)
	if IsNoDataError(err) {
		// Found absent while reading (NFS learns it from mountstats), or
		// gone between the check and the read. A collector returns
		// ErrNoData before it sends anything.
		r.notePresence(name, false, absentReason(err))
		ch <- prometheus.MustNewConstMetric(scrapePresentDesc, prometheus.GaugeValue, 0, name)
		return
	}
	r.finish(name, c, ch, err, time.Since(begin))
}

// absentReason is the log's wording of an ErrNoData error.
func absentReason(err error) string {
	return strings.TrimSuffix(strings.TrimSuffix(err.Error(), ErrNoData.Error()), ": ")
}

// finish sends a present collector's accounting series.
func (r *Registry) finish(name string, c Collector, ch chan<- prometheus.Metric, err error, duration time.Duration) {
	r.notePresence(name, true, "")
	success := 1.0
	if err != nil {
		success = 0
		r.noteFailure(name, err, duration)
	}
	ch <- prometheus.MustNewConstMetric(scrapePresentDesc, prometheus.GaugeValue, 1, name)
	ch <- prometheus.MustNewConstMetric(scrapeDurationDesc, prometheus.GaugeValue, duration.Seconds(), name)
	ch <- prometheus.MustNewConstMetric(scrapeSuccessDesc, prometheus.GaugeValue, success, name)
	// Sent even when Update failed: the count is what the parsers saw
	// until now, and an alert's rate() needs the series at every scrape.
	if p, ok := c.(parseErrorReporter); ok {
		for _, sc := range p.parseErrors().snapshot() {
			ch <- prometheus.MustNewConstMetric(parseErrorsDesc, prometheus.CounterValue, float64(sc.count), name, sc.source)
		}
	}
}

// typedDesc pairs a descriptor with its value type so collectors declare both once.
type typedDesc struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
}

// descsOf declares the descriptors of one collector: descsOf(sub).typed
// builds plateau_<sub>_<name>, so that every collector names its series
// the same way and none spells out NewDesc and BuildFQName again.
type descsOf string

func (sub descsOf) typed(name, help string, vt prometheus.ValueType, labels ...string) typedDesc {
	return typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, string(sub), name), help, labels, nil), vt}
}

func (d *typedDesc) mustNewConstMetric(value float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d.desc, d.valueType, value, labels...)
}

// dirHasEntries reports whether dir can be listed and holds at least one
// entry: one getdents of a sysfs class, the cheap test of a device kind's
// presence.
func dirHasEntries(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}
