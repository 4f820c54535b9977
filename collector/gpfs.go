package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const gpfsSubsystem = "gpfs"

var (
	gpfsMmpmonPath = kingpin.Flag("collector.gpfs.mmpmon-path",
		"Path of mmpmon; the gpfs collector reports no data when it does not exist.").
		Default("/usr/lpp/mmfs/bin/mmpmon").String()
	gpfsMmgetstatePath = kingpin.Flag("collector.gpfs.mmgetstate-path",
		"Path of mmgetstate, run as 'mmgetstate -Y' for plateau_gpfs_state; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmgetstate").String()
	gpfsMmhealthPath = kingpin.Flag("collector.gpfs.mmhealth-path",
		"Path of mmhealth, run as 'mmhealth node show -Y' for plateau_gpfs_health_status; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmhealth").String()
	gpfsSudo = kingpin.Flag("collector.gpfs.sudo",
		"Run the GPFS commands through 'sudo -n' (they need root).").
		Default("false").Bool()
	gpfsNSD = kingpin.Flag("collector.gpfs.nsd",
		"Also ask mmpmon for nsd_ds, the I/O this node serves as an NSD server.").
		Default("false").Bool()
	gpfsMmpmonRequests = kingpin.Flag("collector.gpfs.mmpmon-requests",
		"File of mmpmon requests (fs_io_s, and nsd_ds on NSD servers) passed with 'mmpmon -i' instead of standard input. "+
			"Required with --collector.gpfs.sudo: sudo cannot restrict standard input, which would let this user send any request, reset included, as root.").
		String()
	gpfsRoundFlags = declareRoundFlags(roundFlagsSpec{name: gpfsSubsystem, interval: "15s", timeout: "5s",
		intervalHelp: "How often mmpmon runs. The GPFS commands run in the background and scrapes export their last answer, " +
			"so a wedged GPFS daemon never delays /metrics.",
		timeoutHelp: "Deadline for one run of a GPFS command; past it the command's process group is killed."})
	gpfsStateInterval = kingpin.Flag("collector.gpfs.state-interval",
		"How often mmgetstate, mmhealth and 'mmfsadm test verbs status' run in the background; mmhealth is far costlier than mmpmon, "+
			"and the daemon's state and whether RDMA started change only when it restarts or fails.").
		Default("60s").Duration()

	// The diagnosis commands: the GPFS signals that explain a throughput drop.
	gpfsMmdiagPath = kingpin.Flag("collector.gpfs.mmdiag-path",
		"Path of mmdiag, run as 'mmdiag --waiters -Y' for plateau_gpfs_waiters and plateau_gpfs_waiter_longest_seconds; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmdiag").String()
	gpfsMmfsadmPath = kingpin.Flag("collector.gpfs.mmfsadm-path",
		"Path of mmfsadm, run as 'mmfsadm test verbs status' for plateau_gpfs_verbs_rdma_started; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmfsadm").String()
	gpfsMmlsfsPath = kingpin.Flag("collector.gpfs.mmlsfs-path",
		"Path of mmlsfs, run as 'mmlsfs all -T -Y' for the file systems (and their mount points) that mmlsdisk and mmlsqos are asked about "+
			"and that plateau_gpfs_filesystem_mounted reports as not mounted; empty to use only the GPFS mounts in /proc/mounts.").
		Default("/usr/lpp/mmfs/bin/mmlsfs").String()
	gpfsMmlsdiskPath = kingpin.Flag("collector.gpfs.mmlsdisk-path",
		"Path of mmlsdisk, run as 'mmlsdisk DEVICE -Y' for each file system, for plateau_gpfs_disk_up and plateau_gpfs_disk_ready; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmlsdisk").String()
	gpfsMmlsqosPath = kingpin.Flag("collector.gpfs.mmlsqos-path",
		"Path of mmlsqos, run as 'mmlsqos DEVICE -Y' for each file system, for plateau_gpfs_qos_*; empty to skip.").
		Default("/usr/lpp/mmfs/bin/mmlsqos").String()
	gpfsWaitersInterval = kingpin.Flag("collector.gpfs.waiters-interval",
		"How often 'mmdiag --waiters' runs. The waiters that explain a slow file system last for minutes, so a minute sees them; "+
			"a shorter interval mostly adds root commands (and, with sudo, log lines).").
		Default("60s").Duration()
	gpfsDisksInterval = kingpin.Flag("collector.gpfs.disks-interval",
		"How often mmlsfs and then mmlsdisk, once per file system, run. A disk goes down or recovers over minutes, "+
			"and each run is one root command per file system (with sudo, a log line each), so a minute is the default.").
		Default("60s").Duration()
	gpfsQoSInterval = kingpin.Flag("collector.gpfs.qos-interval",
		"How often mmlsqos runs for each file system. mmlsqos reports the last 60 seconds by default, so running it more often "+
			"than that shows nothing new; each run is one root command per file system.").
		Default("60s").Duration()
)

// gpfsGauge declares a gauge of the gpfs collector, plateau_gpfs_<name>.
func gpfsGauge(name, help string, labels []string) typedDesc {
	return descsOf(gpfsSubsystem).typed(name, help, prometheus.GaugeValue, labels...)
}

// gpfsCounter declares a counter of the gpfs collector, plateau_gpfs_<name>.
func gpfsCounter(name, help string, labels []string) typedDesc {
	return descsOf(gpfsSubsystem).typed(name, help, prometheus.CounterValue, labels...)
}

func init() {
	registerCollector(gpfsSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newGPFSCollector(gpfsConfig{
			mmpmonPath:     *gpfsMmpmonPath,
			mmgetstatePath: *gpfsMmgetstatePath,
			mmhealthPath:   *gpfsMmhealthPath,
			sudo:           *gpfsSudo,
			nsd:            *gpfsNSD,
			requestsFile:   *gpfsMmpmonRequests,
			timeout:        *gpfsRoundFlags.timeout,
			interval:       *gpfsRoundFlags.interval,
			stateInterval:  *gpfsStateInterval,

			mmdiagPath:      *gpfsMmdiagPath,
			mmfsadmPath:     *gpfsMmfsadmPath,
			mmlsfsPath:      *gpfsMmlsfsPath,
			mmlsdiskPath:    *gpfsMmlsdiskPath,
			mmlsqosPath:     *gpfsMmlsqosPath,
			mountsPath:      procFilePath("mounts"),
			waitersInterval: *gpfsWaitersInterval,
			disksInterval:   *gpfsDisksInterval,
			qosInterval:     *gpfsQoSInterval,

			iohist:           *gpfsIohist,
			iohistInterval:   *gpfsIohistInterval,
			iohistServerName: *gpfsIohistServerName,
		}, logger)
	})
}

type gpfsConfig struct {
	mmpmonPath, mmgetstatePath, mmhealthPath string
	sudo                                     bool
	nsd                                      bool
	// requestsFile, when set, is given to mmpmon with -i; it must hold only
	// the requests this collector reads.
	requestsFile string
	timeout      time.Duration
	// interval is mmpmon's; stateInterval is mmgetstate's, mmhealth's
	// and mmfsadm's.
	interval, stateInterval time.Duration

	// The diagnosis commands; an empty path skips the command.
	mmdiagPath, mmfsadmPath, mmlsfsPath, mmlsdiskPath, mmlsqosPath string
	// mountsPath is /proc/mounts, read at each scrape; empty skips
	// plateau_gpfs_filesystem_mounted.
	mountsPath string
	// waitersInterval is mmdiag's, disksInterval mmlsfs's and
	// mmlsdisk's, qosInterval mmlsqos's.
	waitersInterval, disksInterval, qosInterval time.Duration

	// iohist runs "mmdiag --iohist" every iohistInterval (gpfs_iohist.go).
	iohist           bool
	iohistInterval   time.Duration
	iohistServerName string
}

// allowedMmpmonRequests are the only requests the collector sends or
// accepts in a request file; reset, rhist, nlist and source are refused.
var allowedMmpmonRequests = map[string]bool{"fs_io_s": true, "nsd_ds": true}

// mmpmonRequests decides the requests of each scrape: from the request
// file when there is one (checked once, at start), else from the flags.
func mmpmonRequests(cfg gpfsConfig) ([]string, error) {
	if cfg.requestsFile == "" {
		if cfg.sudo {
			return nil, errors.New("--collector.gpfs.sudo needs --collector.gpfs.mmpmon-requests (a root-owned file of requests): over standard input, sudo would let this user send any mmpmon request, reset included, as root")
		}
		requests := []string{"fs_io_s"}
		if cfg.nsd {
			requests = append(requests, "nsd_ds")
		}
		return requests, nil
	}
	data, err := os.ReadFile(cfg.requestsFile)
	if err != nil {
		return nil, fmt.Errorf("mmpmon request file: %w", err)
	}
	var requests []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !allowedMmpmonRequests[line] {
			return nil, fmt.Errorf("mmpmon request file %s:%d: request %q is not one the gpfs collector reads (only fs_io_s and nsd_ds)", cfg.requestsFile, i+1, line)
		}
		requests = append(requests, line)
	}
	if len(requests) == 0 {
		return nil, fmt.Errorf("mmpmon request file %s has no request", cfg.requestsFile)
	}
	if cfg.nsd && !slices.Contains(requests, "nsd_ds") {
		return nil, fmt.Errorf("--collector.gpfs.nsd is set but %s does not request nsd_ds", cfg.requestsFile)
	}
	return requests, nil
}

// gpfsStates are the daemon states mmgetstate documents; each is exported
// so that a state change flips values rather than making series appear.
func gpfsStates() [5]string {
	return [...]string{"active", "arbitrating", "down", "unknown", "unresponsive"}
}

// gpfsHealthStatuses are the mmhealth statuses exported for every entity.
func gpfsHealthStatuses() [11]string {
	return [...]string{
		"HEALTHY", "TIPS", "DEGRADED", "FAILED", "DEPEND", "UNKNOWN",
		"CHECKING", "STARTING", "STOPPED", "SUSPENDED", "DISABLED",
	}
}

type gpfsCollector struct {
	cfg      gpfsConfig
	requests []string
	logger   log.Logger
	runner   *commandRunner
	// parseErrs counts the lines each command's parser skipped.
	parseErrs *parseErrorCounter

	fs [fsCounterCount]typedDesc

	nsdOps, nsdBytes, nsdWait, nsdQueue typedDesc

	mmpmonRC        typedDesc
	commandSuccess  typedDesc
	commandDuration typedDesc
	commandLastRun  typedDesc
	state           typedDesc
	health          typedDesc

	// The diagnosis commands' descriptors, one file each (gpfs_waiters.go,
	// gpfs_verbs.go, gpfs_disks.go, gpfs_mounts.go, gpfs_qos.go).
	waiterDescs gpfsWaiterDescs
	verbsDescs  gpfsVerbsDescs
	diskDescs   gpfsDiskDescs
	mountDescs  gpfsMountDescs
	qosDescs    gpfsQoSDescs
	iohistDescs gpfsIohistDescs
	iohistState gpfsIohistState

	// mmlsfsCmd is the mmlsfs command, nil when it is skipped; the
	// per-file-system commands wait for its first run.
	mmlsfsCmd *gpfsCommand
	// listed holds the file systems of mmlsfs's last run that listed any.
	listedMu  sync.Mutex
	listed    []gpfsFilesystem
	listedGen uint64
	// mountsCache keeps the mount state of the last scrape, reused while
	// /proc/mounts and the mmlsfs list are unchanged.
	mountsCache gpfsMountsCache

	commands  []*gpfsCommand
	startOnce sync.Once
	stop      chan struct{}
	stopOnce  sync.Once
	loops     sync.WaitGroup
}

func newGPFSCollector(cfg gpfsConfig, logger log.Logger) (*gpfsCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("gpfs timeout must be positive, got %s", cfg.timeout)
	}
	if cfg.interval <= 0 || cfg.stateInterval <= 0 {
		return nil, fmt.Errorf("gpfs intervals must be positive, got %s and %s", cfg.interval, cfg.stateInterval)
	}
	requests, err := mmpmonRequests(cfg)
	if err != nil {
		return nil, err
	}
	fsLabels := []string{"cluster", "filesystem"}
	fsDesc := func(name, help string) typedDesc { return gpfsCounter(name, help, fsLabels) }
	nsdLabels := []string{"nsd", "op"}
	nsdDesc := func(name, help string) typedDesc { return gpfsCounter(name, help, nsdLabels) }
	c := &gpfsCollector{
		cfg:      cfg,
		requests: requests,
		logger:   logger,
		runner:   newCommandRunner(cfg.sudo),

		parseErrs: newParseErrorCounter(logger),

		nsdOps:   nsdDesc("nsd_operations_total", "I/O requests this NSD server performed for the disk (mmpmon nsd_ds _ops_)."),
		nsdBytes: nsdDesc("nsd_bytes_total", "Bytes this NSD server transferred for the disk (mmpmon nsd_ds _b_)."),
		nsdWait:  nsdDesc("nsd_wait_seconds_total", "Total time the disk took to serve this NSD server's requests (mmpmon nsd_ds _tw_), in seconds."),
		nsdQueue: nsdDesc("nsd_queue_seconds_total", "Total time requests spent queued plus served on this NSD server (mmpmon nsd_ds _qt_), in seconds."),

		mmpmonRC: gpfsGauge("mmpmon_return_code",
			"Highest _rc_ mmpmon returned for the request in its last run; 0 means every response succeeded.",
			[]string{"request"}),
		commandSuccess: gpfsGauge("command_success",
			"1 if the last run of the GPFS command succeeded and its output was parsed, 0 otherwise.",
			[]string{"command"}),
		commandDuration: gpfsGauge("command_duration_seconds",
			"How long the last run of the GPFS command took, in seconds.",
			[]string{"command"}),
		commandLastRun: gpfsGauge("command_last_run_timestamp_seconds",
			"When the last run of the GPFS command started, whose results this scrape exports (Unix time).",
			[]string{"command"}),
		state: gpfsGauge("state",
			"GPFS daemon state on this node from mmgetstate: 1 for the current state, 0 for the others.",
			[]string{"state"}),
		health: gpfsGauge("health_status",
			"Health of a component entity from 'mmhealth node show': 1 for the current status, 0 for the others.",
			[]string{"component", "entity", "status"}),
	}
	c.fs[fsReadBytes] = fsDesc("fs_read_bytes_total", "Bytes read by this node from the file system, from disk and cache (mmpmon fs_io_s _br_).")
	c.fs[fsWriteBytes] = fsDesc("fs_write_bytes_total", "Bytes written by this node to the file system, to disk and cache (mmpmon fs_io_s _bw_).")
	c.fs[fsReads] = fsDesc("fs_reads_total", "read() calls on the file system from this node (mmpmon fs_io_s _rdc_).")
	c.fs[fsWrites] = fsDesc("fs_writes_total", "write() calls on the file system from this node (mmpmon fs_io_s _wc_).")
	c.fs[fsOpens] = fsDesc("fs_opens_total", "open() and creat() calls on the file system from this node (mmpmon fs_io_s _oc_).")
	c.fs[fsCloses] = fsDesc("fs_closes_total", "close() calls on the file system from this node (mmpmon fs_io_s _cc_).")
	c.fs[fsReaddirs] = fsDesc("fs_readdirs_total", "readdir() calls on the file system from this node (mmpmon fs_io_s _dir_).")
	c.fs[fsInodeUpdates] = fsDesc("fs_inode_updates_total", "Inode updates to disk from this node (mmpmon fs_io_s _iu_).")

	c.waiterDescs = newGPFSWaiterDescs()
	c.verbsDescs = newGPFSVerbsDescs()
	c.diskDescs = newGPFSDiskDescs()
	c.mountDescs = newGPFSMountDescs()
	c.qosDescs = newGPFSQoSDescs()
	c.iohistDescs = newGPFSIohistDescs()

	c.stop = make(chan struct{})
	c.commands = append(c.commands, &gpfsCommand{name: "mmpmon", path: cfg.mmpmonPath, interval: cfg.interval, run: c.mmpmon})
	for _, cmd := range []*gpfsCommand{
		{name: "mmgetstate", path: cfg.mmgetstatePath, interval: cfg.stateInterval, run: c.mmgetstate},
		{name: "mmhealth", path: cfg.mmhealthPath, interval: cfg.stateInterval, run: c.mmhealth},
		{name: "mmfsadm", path: cfg.mmfsadmPath, interval: cfg.stateInterval, run: c.verbs},
		{name: "mmdiag", path: cfg.mmdiagPath, interval: cfg.waitersInterval, run: c.waiters},
		// mmlsfs comes before the commands that wait for its list.
		{name: "mmlsfs", path: cfg.mmlsfsPath, interval: cfg.disksInterval, run: c.mmlsfs},
		{name: "mmlsdisk", path: cfg.mmlsdiskPath, interval: cfg.disksInterval, run: c.mmlsdisk, perCall: true},
		{name: "mmlsqos", path: cfg.mmlsqosPath, interval: cfg.qosInterval, run: c.mmlsqos, perCall: true},
		{name: "mmdiag_iohist", path: iohistPath(cfg), interval: cfg.iohistInterval, run: c.iohist},
	} {
		if cmd.path == "" {
			continue
		}
		if cmd.interval <= 0 {
			return nil, fmt.Errorf("gpfs: the interval of %s must be positive, got %s", cmd.name, cmd.interval)
		}
		cmd.optional = true
		if cmd.name == "mmlsfs" {
			c.mmlsfsCmd = cmd
		}
		c.commands = append(c.commands, cmd)
	}
	for _, cmd := range c.commands {
		cmd.ready = make(chan struct{})
	}
	return c, nil
}

// presence is cheap: one stat of mmpmon, before any command is started.
func (c *gpfsCollector) presence() (bool, string) {
	if _, err := os.Stat(c.cfg.mmpmonPath); errors.Is(err, fs.ErrNotExist) {
		return false, "no GPFS on this node (no " + c.cfg.mmpmonPath + ")"
	}
	return true, ""
}

// Update exports what each GPFS command returned in its last background run
// (see refreshLoop). The first scrape starts the runs and waits for their
// first answers, so a freshly started exporter does not report a failure
// it has not seen; later scrapes never wait for a command.
func (c *gpfsCollector) Update(ch chan<- prometheus.Metric) error {
	if _, err := os.Stat(c.cfg.mmpmonPath); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s not found: %w", c.cfg.mmpmonPath, ErrNoData)
	}
	c.startOnce.Do(c.startRefresh)

	// A run returns within the timeout plus the reaping grace even when its
	// process cannot be killed; the extra second is only a backstop.
	firstDeadline := time.NewTimer(c.cfg.timeout + abandonAfter + commandWaitDelay + time.Second)
	defer firstDeadline.Stop()
	var errs []error
	for _, cmd := range c.commands {
		select {
		case <-cmd.ready:
		case <-firstDeadline.C:
			firstDeadline.Reset(0)
		}
		cmd.mu.Lock()
		last := cmd.last
		cmd.mu.Unlock()
		if last.started.IsZero() {
			errs = append(errs, fmt.Errorf("%s: no run has finished yet", cmd.name))
			ch <- c.commandSuccess.mustNewConstMetric(0, cmd.name)
			continue
		}
		if last.notInstalled {
			continue
		}
		// The metrics end with the run's command_success, duration
		// and last-run timestamp (see refresh).
		for _, m := range last.metrics {
			ch <- m
		}
		if last.err != nil {
			errs = append(errs, last.err)
		}
	}
	if c.cfg.mountsPath != "" {
		// Read at each scrape: /proc/mounts never waits on a file
		// system, and a mount that goes away should show at once.
		if err := c.mounts(ch); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *gpfsCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

// The sources of plateau_collector_parse_errors_total: one per command
// output the collector parses, and /proc/mounts.
const (
	gpfsSourceMmpmon     = "mmpmon"
	gpfsSourceMmgetstate = "mmgetstate"
	gpfsSourceMmhealth   = "mmhealth"
	gpfsSourceWaiters    = "mmdiag_waiters"
	gpfsSourceVerbs      = "mmfsadm_verbs"
	gpfsSourceMmlsfs     = "mmlsfs"
	gpfsSourceMmlsdisk   = "mmlsdisk"
	gpfsSourceMmlsqos    = "mmlsqos"
	gpfsSourceMounts     = "proc_mounts"
	gpfsSourceIohist     = "mmdiag_iohist"
)

// iohistPath is mmdiag's path when the iohist collector is on, else
// empty, which skips it.
func iohistPath(cfg gpfsConfig) string {
	if !cfg.iohist {
		return ""
	}
	return cfg.mmdiagPath
}

// gpfsCommand is one GPFS command run in the background and its last result.
type gpfsCommand struct {
	name     string
	path     string
	optional bool
	interval time.Duration
	// perCall commands run once per file system: the run's context ends
	// only with Close, and each call gets its own deadline (callContext),
	// so that a cluster with many file systems does not time out a run
	// whose every call was quick.
	perCall bool
	run     func(context.Context) ([]prometheus.Metric, error)

	// ready is closed once the first run has finished.
	ready     chan struct{}
	readyOnce sync.Once

	mu   sync.Mutex
	last gpfsResult
}

type gpfsResult struct {
	metrics      []prometheus.Metric
	err          error
	notInstalled bool
	started      time.Time
	duration     time.Duration
}

// startRefresh starts one loop per command. The commands run on their own
// schedule rather than on each scrape, for three reasons: a wedged GPFS
// daemon would otherwise hold every scrape for the whole timeout; two
// Prometheus servers scraping the node (an HA pair) would double the
// commands run as root; and mmhealth, a client of the system health
// monitor, costs far more than a scrape should.
func (c *gpfsCollector) startRefresh() {
	for _, cmd := range c.commands {
		c.loops.Add(1)
		go c.refreshLoop(cmd)
	}
}

// refreshLoop runs cmd now and then every interval until the collector is
// closed. Runs of one command never overlap: the next run starts only after
// the previous one returned, and a run whose process survived SIGKILL
// (uninterruptible sleep) makes the following runs fail with
// errStillRunning instead of starting a second copy.
func (c *gpfsCollector) refreshLoop(cmd *gpfsCommand) {
	defer c.loops.Done()
	ticker := time.NewTicker(cmd.interval)
	defer ticker.Stop()
	for {
		c.refresh(cmd)
		select {
		case <-ticker.C:
		case <-c.stop:
			return
		}
	}
}

func (c *gpfsCollector) refresh(cmd *gpfsCommand) {
	defer cmd.readyOnce.Do(func() { close(cmd.ready) })
	var res gpfsResult
	res.started = time.Now()
	if _, err := os.Stat(cmd.path); cmd.optional && errors.Is(err, fs.ErrNotExist) {
		// Older releases lack mmhealth; that is not a failure.
		level.Debug(c.logger).Log("msg", "GPFS command not installed, skipped", "path", cmd.path)
		res.notInstalled = true
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
		if cmd.perCall {
			cancel()
			ctx, cancel = c.stopContext()
		}
		res.metrics, res.err = cmd.run(ctx)
		cancel()
	}
	res.duration = time.Since(res.started)
	if !res.notInstalled {
		ok := 1.0
		if res.err != nil {
			ok = 0
		}
		res.metrics = append(res.metrics,
			c.commandSuccess.mustNewConstMetric(ok, cmd.name),
			c.commandDuration.mustNewConstMetric(res.duration.Seconds(), cmd.name),
			c.commandLastRun.mustNewConstMetric(float64(res.started.UnixNano())/1e9, cmd.name))
	}
	freezeMetrics(res.metrics)
	cmd.mu.Lock()
	cmd.last = res
	cmd.mu.Unlock()
}

// frozenMetric is a metric written out once, when the run that measured it
// ends, and handed as is to every scrape until the next run: a scrape of a
// node with hundreds of disks then only copies pointers instead of
// building each series' value anew. The registry treats what Write hands
// out as immutable, as it does for client_golang's own constant metrics.
type frozenMetric struct {
	desc *prometheus.Desc
	pb   *dto.Metric
}

func (m *frozenMetric) Desc() *prometheus.Desc { return m.desc }

func (m *frozenMetric) Write(out *dto.Metric) error {
	out.Label, out.Gauge, out.Counter, out.Untyped = m.pb.Label, m.pb.Gauge, m.pb.Counter, m.pb.Untyped
	out.Summary, out.Histogram, out.TimestampMs = m.pb.Summary, m.pb.Histogram, m.pb.TimestampMs
	return nil
}

// freezeMetrics replaces each metric of ms by its frozen form; one that
// fails to write is kept as it is, so the scrape reports its error.
func freezeMetrics(ms []prometheus.Metric) {
	for i, m := range ms {
		pb := &dto.Metric{}
		if err := m.Write(pb); err != nil {
			continue
		}
		ms[i] = &frozenMetric{desc: m.Desc(), pb: pb}
	}
}

// stopContext returns a context that ends when the collector is closed.
func (c *gpfsCollector) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// callContext bounds one call of a per-file-system command by the timeout.
func (c *gpfsCollector) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.timeout)
}

// Close stops the background runs and waits for the ones in progress to
// return, at most the timeout plus the reaping grace.
func (c *gpfsCollector) Close() error {
	// No loop may start once Close has begun waiting for them.
	c.startOnce.Do(func() {})
	c.stopOnce.Do(func() { close(c.stop) })
	c.loops.Wait()
	return nil
}

// mmpmon asks for fs_io_s (and nsd_ds on NSD servers). It never sends
// "reset": the counters are shared by every mmpmon user on the node. With a
// request file the requests go by -i, so that sudoers can pin the exact
// command line and nothing else can be asked as root.
func (c *gpfsCollector) mmpmon(ctx context.Context) ([]prometheus.Metric, error) {
	requests := c.requests
	var out []byte
	var err error
	if c.cfg.requestsFile != "" {
		out, err = c.runner.run(ctx, nil, c.cfg.mmpmonPath, "-p", "-s", "-i", c.cfg.requestsFile)
	} else {
		var stdin []byte
		for _, r := range requests {
			stdin = append(stdin, r...)
			stdin = append(stdin, '\n')
		}
		out, err = c.runner.run(ctx, stdin, c.cfg.mmpmonPath, "-p", "-s")
	}
	if err != nil {
		return nil, err
	}
	res, bad, parseErr := parseMmpmon(out)
	c.parseErrs.record(gpfsSourceMmpmon, bad)

	var ms []prometheus.Metric
	// The return code series always exist for the requests sent, so an
	// alert on them does not depend on a failure having happened before.
	rcTags := map[string]int{}
	for _, r := range requests {
		rcTags[r] = 0
	}
	for tag, rc := range res.rc {
		rcTags[tag] = rc
	}
	for tag, rc := range rcTags {
		ms = append(ms, c.mmpmonRC.mustNewConstMetric(float64(rc), labelValue(tag)))
	}

	seen := seenSet[[2]string]{}
	for _, f := range res.fs {
		key := [2]string{labelValue(f.cluster), labelValue(f.filesystem)}
		if !seen.first(key) {
			// Two responses with the same labels: keep the first.
			continue
		}
		l := newLabelPairs(c.fs[0].desc, key[0], key[1])
		for i := range f.counters {
			if f.present[i] {
				ms = append(ms, l.metric(&c.fs[i], float64(f.counters[i])))
			}
		}
	}
	seenNSD := map[string]bool{}
	for _, n := range res.nsd {
		name := labelValue(n.nsd)
		if seenNSD[name] {
			continue
		}
		seenNSD[name] = true
		for _, half := range []struct {
			op string
			io mmpmonNSDIO
		}{{"read", n.read}, {"write", n.write}} {
			if !half.io.present {
				continue
			}
			l := newLabelPairs(c.nsdOps.desc, name, half.op)
			ms = append(ms,
				l.metric(&c.nsdOps, float64(half.io.ops)),
				l.metric(&c.nsdBytes, float64(half.io.bytes)),
				l.metric(&c.nsdWait, half.io.waitSeconds),
				l.metric(&c.nsdQueue, half.io.queueSeconds),
			)
		}
	}
	if parseErr != nil {
		return ms, fmt.Errorf("mmpmon: %w", parseErr)
	}
	return ms, nil
}

func (c *gpfsCollector) mmgetstate(ctx context.Context) ([]prometheus.Metric, error) {
	out, err := c.runner.run(ctx, nil, c.cfg.mmgetstatePath, "-Y")
	if err != nil {
		return nil, err
	}
	t, bad, err := parseYTable(out, "mmgetstate -Y", "mmgetstate", "")
	c.parseErrs.record(gpfsSourceMmgetstate, bad)
	if err != nil {
		return nil, err
	}
	if t == nil || len(t.rows) == 0 {
		return nil, errors.New("mmgetstate -Y: no state row")
	}
	col := t.column("state")
	if col < 0 {
		return nil, errors.New("mmgetstate -Y: no state column in HEADER")
	}
	// Without -a or -N, mmgetstate reports only the local node.
	current := labelValue(t.value(t.rows[0], col))
	if current == "" {
		return nil, errors.New("mmgetstate -Y: empty state")
	}
	states := gpfsStates()
	ms := make([]prometheus.Metric, 0, len(states)+1)
	known := false
	for _, s := range states {
		v := 0.0
		if s == current {
			v, known = 1, true
		}
		ms = append(ms, c.state.mustNewConstMetric(v, s))
	}
	if !known {
		ms = append(ms, c.state.mustNewConstMetric(1, current))
	}
	return ms, nil
}

func (c *gpfsCollector) mmhealth(ctx context.Context) ([]prometheus.Metric, error) {
	out, err := c.runner.run(ctx, nil, c.cfg.mmhealthPath, "node", "show", "-Y")
	if err != nil {
		return nil, err
	}
	t, bad, err := requireYTable(out, "mmhealth node show -Y", "mmhealth", "State")
	defer func() { c.parseErrs.record(gpfsSourceMmhealth, bad) }()
	if err != nil {
		return nil, err
	}
	compCol, entCol, statusCol := t.column("component"), t.column("entityname"), t.column("status")
	if compCol < 0 || entCol < 0 || statusCol < 0 {
		return nil, errors.New("mmhealth node show -Y: State HEADER lacks component, entityname or status")
	}
	type entity struct{ component, name string }
	current := map[entity]string{}
	var order []entity
	for i, row := range t.rows {
		e := entity{labelValue(t.value(row, compCol)), labelValue(t.value(row, entCol))}
		if e.component == "" {
			t.badRow(&bad, i, "State row without a component")
			continue
		}
		if _, dup := current[e]; dup {
			// The same name under two entity types would be a duplicate
			// series; the first row is the component's own entity.
			continue
		}
		current[e] = labelValue(t.value(row, statusCol))
		order = append(order, e)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].component != order[j].component {
			return order[i].component < order[j].component
		}
		return order[i].name < order[j].name
	})
	statuses := gpfsHealthStatuses()
	ms := make([]prometheus.Metric, 0, len(order)*len(statuses))
	for _, e := range order {
		status := current[e]
		known := false
		for _, s := range statuses {
			v := 0.0
			if s == status {
				v, known = 1, true
			}
			ms = append(ms, c.health.mustNewConstMetric(v, e.component, e.name, s))
		}
		if !known && status != "" {
			ms = append(ms, c.health.mustNewConstMetric(1, e.component, e.name, status))
		}
	}
	return ms, nil
}

// gpfsCommandLine is one GPFS command whose output is read whole: path and
// args, key for the guard against a second copy (the path when empty; see
// runKeyed) and source, the name its skipped lines are counted under.
type gpfsCommandLine struct {
	key, path string
	args      []string
	source    string
}

// runGPFSParsed runs cmd and parses its output, counting the lines parse
// skipped: a failed run is its error, as is output with nothing readable.
func runGPFSParsed[T any](ctx context.Context, c *gpfsCollector, cmd gpfsCommandLine, parse func([]byte) (T, badLines, error)) (T, error) {
	key := cmd.key
	if key == "" {
		key = cmd.path
	}
	out, err := c.runner.runKeyed(ctx, key, nil, cmd.path, cmd.args...)
	if err != nil {
		var zero T
		return zero, err
	}
	v, bad, err := parse(out)
	c.parseErrs.record(cmd.source, bad)
	return v, err
}
