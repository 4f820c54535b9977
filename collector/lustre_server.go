package collector

// The Lustre server collector: on an OSS, the reads, writes and requests
// of each OST it serves (obdfilter.<target>.stats); on an MDS, the metadata
// operations of each MDT (mdt.<target>.md_stats); and, when asked for, the
// heaviest jobs of each target (job_stats), capped so that a server that
// tracks tens of thousands of jobs still answers a scrape with a few series
// per target.
//
// The files are read in the background, each under a stuck-call guard of
// this collector's own: a read of a Lustre parameter can block in the
// kernel, and a scrape only exports the last complete round. This is the
// scheme of the client collector (lustre.go), kept apart from it so that
// either can be enabled alone. Up to 2.10 the targets' directories are in
// /proc/fs/lustre; from 2.12 each target is also a kobject in
// /sys/fs/lustre with its attributes there, while stats, md_stats and
// job_stats stay seq files in /proc/fs/lustre (lprocfs_alloc_obd_stats and
// lprocfs_job_stats_init register them under the obd's proc entry). As
// `lctl get_param` does, a file is taken from sysfs first and procfs
// second, so one code path reads both layouts.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

const lustreServerSubsystem = "lustre_server"

var (
	lustreServerRoundFlags = declareRoundFlags(roundFlagsSpec{name: lustreServerSubsystem, interval: "15s", timeout: "5s",
		intervalHelp: "How often the Lustre server statistics are read, in the background; scrapes export the last complete round.",
		timeoutHelp: "How long one round of Lustre server reads may take. A read still blocked then is left to return on its own " +
			"and not started again until it has; its target's series are missing from that round."})
	lustreServerJobStats = kingpin.Flag("collector.lustre_server.job-stats",
		"Export each OST's and MDT's heaviest jobs from job_stats (off by default: a busy server lists tens of thousands of jobs).").
		Default("false").Bool()
	lustreServerJobStatsTop = kingpin.Flag("collector.lustre_server.job-stats-top",
		"With --collector.lustre_server.job-stats, how many jobs per target are exported, the top ones by bytes read and "+
			"written (then by operations); the other jobs are added up in one series per target, job_id=\""+lustreOtherJobs+"\".").
		Default("20").Int()
)

// lustreOtherJobs is the job_id of the series that add up the jobs out of
// the top N. A real job of that name is added up with them, so that its
// series cannot collide with theirs.
const lustreOtherJobs = "_other"

func init() {
	registerCollector(lustreServerSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newLustreServerCollector(lustreServerConfig{
			procRoot:    procFilePath("fs", "lustre"),
			sysRoot:     sysFilePath("fs", "lustre"),
			interval:    *lustreServerRoundFlags.interval,
			timeout:     *lustreServerRoundFlags.timeout,
			jobStats:    *lustreServerJobStats,
			jobStatsTop: *lustreServerJobStatsTop,
		}, logger)
	})
}

// lustreServerConfig says where the Lustre trees are, how often and how
// long they are read, and whether and how many jobs are exported.
type lustreServerConfig struct {
	// procRoot is /proc/fs/lustre and sysRoot /sys/fs/lustre, under the
	// daemon's path flags.
	procRoot, sysRoot string
	interval, timeout time.Duration
	jobStats          bool
	jobStatsTop       int
}

// lustreServerKind is one kind of server target: its directory in the
// Lustre trees, its counter file and the request counters exported from it.
type lustreServerKind struct {
	dir, statsFile string
	// ops are the counters exported as operations_total, each always
	// (0 when the file leaves it out, as it does until the first call),
	// so that no series appears on a target's first request of a kind.
	ops []string
	// aliases name, for an op, the counter an older release printed
	// for it; both are added up.
	aliases map[string]string
	// bytes says the counter file has read_bytes and write_bytes.
	bytes bool
}

// lustreServerKinds are the OSTs' (obdfilter, lproc_ofd.c) and the MDTs'
// (mdt, mdt_lproc.c) counters.
func lustreServerKinds() [2]lustreServerKind {
	return [...]lustreServerKind{
		{dir: "obdfilter", statsFile: "stats", bytes: true, ops: []string{
			"create", "destroy", "getattr", "setattr", "punch", "sync", "statfs", "get_info", "set_info", "quotactl"},
			// 2.10 and before count set_info requests as set_info_async.
			aliases: map[string]string{"set_info": "set_info_async"}},
		{dir: "mdt", statsFile: "md_stats", ops: []string{
			"open", "close", "mknod", "link", "unlink", "mkdir", "rmdir", "rename", "getattr", "setattr",
			"getxattr", "setxattr", "statfs", "sync", "samedir_rename", "crossdir_rename"}},
	}
}

// lustreServerWorkers bounds how many targets are read at once.
const lustreServerWorkers = 4

// errLustreServerTimeout is a read that had not returned when its round
// ended.
var errLustreServerTimeout = errors.New("read did not return before the round's deadline")

// lustreServerRead is the result of one guarded read: a counter file, a
// job_stats file or a directory listing, parsed in the reading goroutine
// so that no file's text outlives its read.
type lustreServerRead struct {
	counters map[string]lustreCounter
	jobs     lustreJobStats
	recovery lustreRecovery
	names    []string
	bad      badLines
	err      error
}

// lustreServerTarget is what one round read of one target.
type lustreServerTarget struct {
	kind           lustreServerKind
	dir            string // scratch-OST0000
	fsname, name   string
	counters       map[string]lustreCounter
	jobs           lustreJobStats
	hasJobs, stuck bool
	recovery       lustreRecovery
	hasRecovery    bool
}

type lustreServerCollector struct {
	cfg       lustreServerConfig
	logger    log.Logger
	reads     stuckCalls[lustreServerRead]
	parseErrs *parseErrorCounter

	readBytes, writeBytes, readCalls, writeCalls, ops typedDesc
	jobs, jobReadBytes, jobWriteBytes, jobOps         typedDesc
	recovering, recoveryClients, recoveryConnected    typedDesc
	recoveryRemaining                                 typedDesc
	stuckReads                                        typedDesc

	// rounds runs round in the background; scrapes export its last.
	rounds *backgroundRounds[[]prometheus.Metric]
}

func newLustreServerCollector(cfg lustreServerConfig, logger log.Logger) (*lustreServerCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.interval <= 0 || cfg.timeout <= 0 {
		return nil, fmt.Errorf("lustre_server interval and timeout must be positive, got %s and %s", cfg.interval, cfg.timeout)
	}
	if cfg.jobStats && cfg.jobStatsTop < 0 {
		return nil, fmt.Errorf("lustre_server job-stats-top must not be negative, got %d", cfg.jobStatsTop)
	}
	desc := descsOf(lustreServerSubsystem).typed
	t := []string{"filesystem", "lustre_target"}
	job := []string{"filesystem", "lustre_target", "job_id"}
	c := &lustreServerCollector{
		cfg:       cfg,
		logger:    logger,
		parseErrs: newParseErrorCounter(logger),

		readBytes: desc("read_bytes_total",
			"Bytes this OST sent to clients (obdfilter stats read_bytes sum).", prometheus.CounterValue, t...),
		writeBytes: desc("write_bytes_total",
			"Bytes this OST received from clients (obdfilter stats write_bytes sum).", prometheus.CounterValue, t...),
		readCalls: desc("reads_total",
			"Bulk read requests this OST served (obdfilter stats read_bytes samples).", prometheus.CounterValue, t...),
		writeCalls: desc("writes_total",
			"Bulk write requests this OST served (obdfilter stats write_bytes samples).", prometheus.CounterValue, t...),
		// Requests other than bulk reads and writes this OST or MDT
		// served, by obdfilter stats or mdt md_stats counter.
		ops: desc("operations_total",
			"Requests other than bulk reads and writes this OST or MDT served, by counter.",
			prometheus.CounterValue, "filesystem", "lustre_target", "op"),
		// Jobs this OST's or MDT's job_stats lists (those not yet
		// expired by job_cleanup_interval), exported or not.
		jobs: desc("jobs",
			"Jobs listed in this OST's or MDT's job_stats.",
			prometheus.GaugeValue, t...),
		// job_id="_other" (lustreOtherJobs) adds up the jobs out of the top
		// --collector.lustre_server.job-stats-top, and falls when a job
		// enters the top.
		jobReadBytes: desc("job_read_bytes_total",
			"Bytes read by the job from this OST or MDT (job_stats read_bytes sum).",
			prometheus.CounterValue, job...),
		// job_id="_other" as for reads.
		jobWriteBytes: desc("job_write_bytes_total",
			"Bytes written by the job to this OST or MDT (job_stats write_bytes sum).",
			prometheus.CounterValue, job...),
		// Requests of the job to this OST or MDT other than reads and
		// writes (the samples of its other job_stats counters).
		jobOps: desc("job_operations_total",
			"Requests of the job to this OST or MDT other than reads and writes (job_stats).",
			prometheus.CounterValue, job...),
		// 1 while the target is in recovery after a restart or failover
		// (recovery_status RECOVERING, WAITING_FOR_CLIENTS or WAITING): its
		// clients' I/O waits until they have reconnected and replayed, or
		// time_remaining runs out. 0 once COMPLETE, or INACTIVE.
		recovering: desc("recovering",
			"1 while the OST or MDT is in recovery after a restart or failover, else 0.",
			prometheus.GaugeValue, t...),
		// The total of recovery_status connected_clients while recovering,
		// of completed_clients once complete.
		recoveryClients: desc("recovery_clients",
			"Clients the OST's or MDT's recovery waits for (those it had before it restarted).",
			prometheus.GaugeValue, t...),
		// connected_clients while recovering, completed_clients once
		// complete; fewer than recovery_clients after a recovery means
		// clients were evicted.
		recoveryConnected: desc("recovery_connected_clients",
			"Clients that reconnected to the OST or MDT in its recovery, or completed it.",
			prometheus.GaugeValue, t...),
		// recovery_status time_remaining, while RECOVERING only.
		recoveryRemaining: desc("recovery_time_remaining_seconds",
			"Time the OST's or MDT's recovery still waits for clients before it evicts those missing.",
			prometheus.GaugeValue, t...),
		// Reads of Lustre server statistics in the last round that did
		// not return in --collector.lustre_server.timeout, or were not
		// started because an earlier read of the same file still has not
		// returned.
		stuckReads: desc("stuck_reads",
			"Reads of Lustre server statistics in the last round that did not return in time.",
			prometheus.GaugeValue),
	}
	c.rounds = newBackgroundRounds(cfg.interval, cfg.timeout, c.round)
	return c, nil
}

func (c *lustreServerCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

// roots are the trees a statistics file may be in, in lctl's order.
func (c *lustreServerCollector) roots() [2]string {
	return [...]string{c.cfg.sysRoot, c.cfg.procRoot}
}

// presence stats the server directories, so that a client or a node
// without Lustre never starts the rounds.
func (c *lustreServerCollector) presence() (bool, string) {
	for _, r := range c.roots() {
		for _, k := range lustreServerKinds() {
			if _, err := os.Stat(filepath.Join(r, k.dir)); err == nil {
				return true, ""
			}
		}
	}
	return false, fmt.Sprintf("no Lustre server target on this node (no obdfilter or mdt under %s or %s)", c.cfg.sysRoot, c.cfg.procRoot)
}

// Update exports the last complete round. The first scrape starts the
// rounds and waits for the first; later scrapes never wait for a read.
func (c *lustreServerCollector) Update(ch chan<- prometheus.Metric) error {
	if present, _ := c.presence(); !present {
		return fmt.Errorf("no obdfilter or mdt directory under %s or %s: %w", c.cfg.sysRoot, c.cfg.procRoot, ErrNoData)
	}
	return exportLatest(ch, c.rounds, "lustre_server", func(r []prometheus.Metric) []prometheus.Metric { return r })
}

// Close stops the rounds and waits for the one in progress, at most the
// timeout. Reads still blocked in the kernel return on their own.
func (c *lustreServerCollector) Close() error { return c.rounds.Close() }

// guarded runs call under the guard for key and waits for it until ctx
// ends. A call still running from an earlier round is not started again.
func (c *lustreServerCollector) guarded(ctx context.Context, key string, call func() lustreServerRead) lustreServerRead {
	return awaitGuarded(ctx, &c.reads, key, call, errLustreServerTimeout, func(err error) lustreServerRead { return lustreServerRead{err: err} })
}

func (c *lustreServerCollector) isStuck(err error) bool {
	return errors.Is(err, errLustreServerTimeout) || errors.Is(err, errStillRunning)
}

// open opens rel in the first tree that has it.
func (c *lustreServerCollector) open(rel string) (*os.File, error) {
	for _, root := range c.roots() {
		f, err := os.Open(filepath.Join(root, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return f, err
	}
	return nil, fs.ErrNotExist
}

// maxLustreServerStats bounds what is read of a counter file, a few dozen
// lines of some 100 bytes.
const maxLustreServerStats = 64 << 10

// readCounters reads and parses a stats or md_stats file.
func (c *lustreServerCollector) readCounters(ctx context.Context, rel string) lustreServerRead {
	return c.readSmall(ctx, rel, maxLustreServerStats, func(data []byte) lustreServerRead {
		counters, bad := parseLustreServerStats(data)
		return lustreServerRead{counters: counters, bad: bad}
	})
}

// readSmall reads at most limit bytes of rel, under the guard, and hands
// them to parse, in the reading goroutine.
func (c *lustreServerCollector) readSmall(ctx context.Context, rel string, limit int64, parse func([]byte) lustreServerRead) lustreServerRead {
	return c.guarded(ctx, rel, func() lustreServerRead {
		f, err := c.open(rel)
		if err != nil {
			return lustreServerRead{err: err}
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, limit))
		if err != nil {
			return lustreServerRead{err: fmt.Errorf("%s: %w", rel, err)}
		}
		return parse(data)
	})
}

// maxLustreRecoveryStatus bounds what is read of a recovery_status file,
// a dozen short lines (a WAITING MDT lists the MDTs it waits for).
const maxLustreRecoveryStatus = 16 << 10

// readRecovery reads and parses a recovery_status file.
func (c *lustreServerCollector) readRecovery(ctx context.Context, rel string) lustreServerRead {
	return c.readSmall(ctx, rel, maxLustreRecoveryStatus, func(data []byte) lustreServerRead {
		rec, bad := parseLustreRecoveryStatus(data)
		return lustreServerRead{recovery: rec, bad: bad}
	})
}

// readJobStats streams a job_stats file through the parser, which keeps
// the top jobs only.
func (c *lustreServerCollector) readJobStats(ctx context.Context, rel string) lustreServerRead {
	return c.guarded(ctx, rel, func() lustreServerRead {
		f, err := c.open(rel)
		if err != nil {
			return lustreServerRead{err: err}
		}
		defer f.Close()
		jobs, bad, err := parseLustreJobStats(f, c.cfg.jobStatsTop)
		if err != nil {
			return lustreServerRead{err: fmt.Errorf("%s: %w", rel, err)}
		}
		return lustreServerRead{jobs: jobs, bad: bad}
	})
}

// rootList is roots as a slice.
func (c *lustreServerCollector) rootList() []string { r := c.roots(); return r[:] }

// listTargets lists the target directories of kind in both trees.
func (c *lustreServerCollector) listTargets(ctx context.Context, kind string) lustreServerRead {
	return c.guarded(ctx, "list "+kind, func() lustreServerRead {
		return lustreServerRead{names: lustreDirs(c.rootList(), kind)}
	})
}

// lustreServerTargetDir matches a target's directory: <fsname>-<OST|MDT><index>.
var lustreServerTargetDir = regexp.MustCompile(`^(.+)-((?:OST|MDT)[0-9a-fA-F]{4,})$`)

// readTarget reads one target's files. Once a read is blocked the rest of
// the target's are skipped: they would most likely block too.
func (c *lustreServerCollector) readTarget(ctx context.Context, t *lustreServerTarget) (stuck int) {
	rel := t.kind.dir + "/" + t.dir + "/"
	// Each file in turn: file is its name and the source its bad lines
	// are counted under, keep takes what was read into t.
	files := []struct {
		file, logMsg string
		read         func(context.Context, string) lustreServerRead
		keep         func(lustreServerRead)
	}{
		{t.kind.statsFile, "cannot read Lustre server stats", c.readCounters,
			func(r lustreServerRead) { t.counters = r.counters }},
		{"recovery_status", "cannot read Lustre recovery_status", c.readRecovery,
			func(r lustreServerRead) { t.recovery, t.hasRecovery = r.recovery, r.recovery.status != "" }},
		{"job_stats", "cannot read Lustre job_stats", c.readJobStats,
			func(r lustreServerRead) { t.jobs, t.hasJobs = r.jobs, true }},
	}
	if !c.cfg.jobStats {
		files = files[:2]
	}
	for _, f := range files {
		r := f.read(ctx, rel+f.file)
		switch {
		case c.isStuck(r.err):
			t.stuck = true
			return 1
		case r.err == nil:
			c.parseErrs.record(f.file, r.bad)
			f.keep(r)
		case !errors.Is(r.err, fs.ErrNotExist):
			level.Debug(c.logger).Log("msg", f.logMsg, "target", t.dir, "err", r.err)
		}
	}
	return 0
}

// round reads every target once, within the timeout, and builds the
// metrics the scrapes export until the next round.
func (c *lustreServerCollector) round() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	stuck := 0
	var targets []*lustreServerTarget
	for _, kind := range lustreServerKinds() {
		l := c.listTargets(ctx, kind.dir)
		if c.isStuck(l.err) {
			stuck++
			continue
		}
		for _, dir := range l.names {
			m := lustreServerTargetDir.FindStringSubmatch(dir)
			if m == nil {
				continue
			}
			targets = append(targets, &lustreServerTarget{kind: kind, dir: dir, fsname: labelValue(m[1]), name: labelValue(m[2])})
		}
	}
	var stuckMu sync.Mutex
	readEach(targets, lustreServerWorkers, func(t *lustreServerTarget) {
		n := c.readTarget(ctx, t)
		stuckMu.Lock()
		stuck += n
		stuckMu.Unlock()
	})

	var ms []prometheus.Metric
	for _, t := range targets {
		ms = append(ms, c.targetMetrics(t)...)
	}
	ms = append(ms, c.stuckReads.mustNewConstMetric(float64(stuck)))
	if stuck > 0 {
		level.Warn(c.logger).Log("msg", "Lustre server reads blocked; their series are missing from this round", "stuck_reads", stuck)
	}
	freezeMetrics(ms)
	return ms
}

// targetMetrics builds one target's series: on an OST 4 and one per
// request counter (14), on an MDT one per counter (16); with
// recovery_status, at most 4 more; with job_stats,
// one more and 3 per exported job, the top N and the others.
func (c *lustreServerCollector) targetMetrics(t *lustreServerTarget) []prometheus.Metric {
	var ms []prometheus.Metric
	if t.counters != nil {
		lp := newLabelPairs(c.readBytes.desc, t.fsname, t.name)
		if t.kind.bytes {
			rb, wb := t.counters["read_bytes"], t.counters["write_bytes"]
			ms = append(ms,
				lp.metric(&c.readBytes, float64(rb.sum)), lp.metric(&c.writeBytes, float64(wb.sum)),
				lp.metric(&c.readCalls, float64(rb.count)), lp.metric(&c.writeCalls, float64(wb.count)))
		}
		for _, op := range t.kind.ops {
			n := t.counters[op].count
			if old, ok := t.kind.aliases[op]; ok {
				n += t.counters[old].count
			}
			ms = append(ms, c.ops.mustNewConstMetric(float64(n), t.fsname, t.name, op))
		}
	}
	if t.hasRecovery {
		lp := newLabelPairs(c.recovering.desc, t.fsname, t.name)
		v := 0.0
		if t.recovery.recovering() {
			v = 1
		}
		ms = append(ms, lp.metric(&c.recovering, v))
		if t.recovery.hasClients {
			ms = append(ms, lp.metric(&c.recoveryClients, float64(t.recovery.total)),
				lp.metric(&c.recoveryConnected, float64(t.recovery.connected)))
		}
		if t.recovery.status == "RECOVERING" && t.recovery.hasRemaining {
			ms = append(ms, lp.metric(&c.recoveryRemaining, float64(t.recovery.remaining)))
		}
	}
	if t.hasJobs {
		ms = append(ms, c.jobs.mustNewConstMetric(float64(t.jobs.jobs), t.fsname, t.name))
		rest := t.jobs.rest
		seen := seenSet[string]{lustreOtherJobs: true}
		jobMetrics := func(id string, j lustreJob) {
			lp := newLabelPairs(c.jobReadBytes.desc, t.fsname, t.name, id)
			ms = append(ms, lp.metric(&c.jobReadBytes, float64(j.readBytes)),
				lp.metric(&c.jobWriteBytes, float64(j.writeBytes)), lp.metric(&c.jobOps, float64(j.ops)))
		}
		for _, j := range t.jobs.top {
			id := labelValue(j.id)
			if !seen.first(id) {
				// A job named like the others' series, or two ids that are
				// the same once made valid UTF-8: the job is added up with
				// the others.
				rest.addUp(j)
				continue
			}
			jobMetrics(id, j)
		}
		// Always exported, so that a target's series do not change in
		// number when its jobs come to outnumber the cap.
		jobMetrics(lustreOtherJobs, rest)
	}
	return ms
}
