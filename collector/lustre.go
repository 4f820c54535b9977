package collector

// The Lustre client collector: what this node knows of each OST and MDT it
// talks to (the osc and mdc imports), of each mount (llite) and of the
// node's health_check. The files are read in the background, each through
// the stuck-call guard, because a read of a Lustre parameter can block for
// as long as the client is evicted; a scrape only exports the last round.
//
// Where the files are depends on the release: up to 2.10 everything is
// under /proc/fs/lustre; from 2.12 the single-value attributes (active,
// cur_dirty_bytes) are in /sys/fs/lustre and llite stats in debugfs, under
// /sys/kernel/debug/lustre, while the import, state and osc rpc_stats
// files stay in /proc/fs/lustre through 2.16; 2.17 moves those to debugfs
// too (docs/lustre-versions.md has the table). Like `lctl get_param`, the collector looks for each file
// under the sysfs, procfs and debugfs trees in that order and takes the
// first it finds, so one code path reads every layout.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

const lustreSubsystem = "lustre"

var (
	lustreDebugfsPath = kingpin.Flag("collector.lustre.debugfs-path",
		"debugfs mountpoint, where Lustre 2.12 and later keep llite stats (and 2.17 osc and mdc import, state and rpc_stats); empty means <path.sysfs>/kernel/debug. "+
			"debugfs is readable by root only: a daemon not running as root reads those files with --collector.lustre.sudo instead (see docs/lustre.md).").
		Default("").String()
	lustreSudo = kingpin.Flag("collector.lustre.sudo",
		"Read llite stats, which 2.12 and later keep in debugfs (root only), and osc rpc_stats (debugfs from 2.17) with one 'sudo -n lctl get_param' per round "+
			"instead of from the files, and on 2.17 the osc and mdc import and state files with a second; the packaged sudoers file allows exactly those command lines. "+
			"lnetctl, for LNet health, runs through sudo too.").
		Bool()
	lustreLctlPath = kingpin.Flag("collector.lustre.lctl-path",
		"Path of lctl, run with --collector.lustre.sudo.").
		Default("/usr/sbin/lctl").String()
	lustreRoundFlags = declareRoundFlags(roundFlagsSpec{name: lustreSubsystem, interval: "15s", timeout: "5s",
		intervalHelp: "How often the Lustre parameter files are read, in the background; scrapes export the last complete round.",
		timeoutHelp: "How long one round of Lustre reads may take. A read still blocked then (an evicted client) is left to return on its own " +
			"and not started again until it has; its target's series are missing from that round."})
)

func init() {
	registerCollector(lustreSubsystem, true, func(logger log.Logger) (Collector, error) {
		debugfs := *lustreDebugfsPath
		if debugfs == "" {
			debugfs = sysFilePath("kernel", "debug")
		}
		return newLustreCollector(lustreConfig{
			procRoot:  procFilePath("fs", "lustre"),
			sysRoot:   sysFilePath("fs", "lustre"),
			debugRoot: filepath.Join(debugfs, "lustre"),
			interval:  *lustreRoundFlags.interval,
			timeout:   *lustreRoundFlags.timeout,
			lctlPath:  lctlPathIf(*lustreSudo, *lustreLctlPath),
			sudo:      *lustreSudo,
		}, logger)
	})
}

// lctlPathIf is path when the debugfs files are read through lctl, else
// empty: only sudo mode runs lctl.
func lctlPathIf(sudo bool, path string) string {
	if sudo {
		return path
	}
	return ""
}

// lustreConfig says where the Lustre trees are and how often and how long
// they are read.
type lustreConfig struct {
	// procRoot is /proc/fs/lustre, sysRoot /sys/fs/lustre and debugRoot
	// /sys/kernel/debug/lustre, each under the daemon's path flags.
	procRoot, sysRoot, debugRoot string
	interval, timeout            time.Duration
	// lctlPath, when set, is the lctl that reads the counter files that
	// are, or may be, in debugfs (llite stats from 2.12, rpc_stats from
	// 2.17): one run of lustreLctlArgs per round, and on 2.17 one of
	// lustreLctlImportArgs for the imports and state histories, through
	// sudo -n when sudo is set, because the daemon holds no capability
	// and debugfs is root's alone. The other files are still read
	// directly.
	lctlPath string
	sudo     bool
}

// lustreLctlArgs is the one lctl command line of a round, exactly as the
// sudoers file allows it. The patterns are lctl's own (the '*' reaches
// lctl as is; sudo does not glob, and the sudoers line matches a literal
// '*'), and without -n lctl names each parameter before its value, which
// is how the output is split by device.
func lustreLctlArgs() []string {
	return []string{"get_param", "osc.*.rpc_stats", "llite.*.stats"}
}

// lustreLctlImportArgs is the second lctl command line, run only where the
// imports and state histories are in debugfs (2.17 and later; through
// 2.16 they are in procfs, which the daemon reads itself). A run of its
// own, so that an import whose read blocks (an evicted client) costs the
// imports only, not the counters of the first line.
func lustreLctlImportArgs() []string {
	return []string{"get_param", "osc.*.import", "osc.*.state", "mdc.*.import", "mdc.*.state"}
}

// lustreWorkers bounds how many targets are read at once: enough that one
// blocked read does not hold up the others, few enough that an evicted
// client adds at most this many stuck reads per round.
const lustreWorkers = 4

// errLustreReadTimeout is a read that had not returned when its round ended.
var errLustreReadTimeout = errors.New("read did not return before the round's deadline")

// lustreRead is the result of one guarded read: a file's bytes or a
// directory's entries.
type lustreRead struct {
	data  []byte
	names []string
	err   error
}

// lustreRound is what one background round read, exported as is by the
// scrapes until the next round ends.
type lustreRound struct {
	metrics []prometheus.Metric
	// badLines counts, by source (import, state, rpc_stats, stats, and
	// param for the single-value files), the lines the parsers could not
	// read in this round: what plateau_collector_parse_errors_total will
	// add up.
	badLines map[string]int
}

// lustreTargetHistory follows one import's state history from round to
// round, so that changes are counted once although the kernel keeps only
// the last 16.
type lustreTargetHistory struct {
	prev []lustreStateEntry
	// connected is whether the import has been FULL since the history
	// began (the mount, or the first entry the first round saw); lost
	// whether it then lost its connection (DISCONN, EVICTED) and has
	// not been FULL since.
	connected, lost       bool
	reconnects, evictions uint64
}

type lustreCollector struct {
	cfg    lustreConfig
	logger log.Logger
	reads  stuckCalls[lustreRead]
	// runner runs lctl in sudo mode, in its own process group, killed at
	// the round's deadline.
	runner *commandRunner

	connected, info, reconnects, evictions, timeouts, avgWait typedDesc
	inflight, grant, dirty, active                            typedDesc
	rpcs, rpcPages, rpcInFlight                               typedDesc
	readBytes, writeBytes, readCalls, writeCalls, mdOps       typedDesc
	healthy, stuckReads                                       typedDesc

	// parseErrs counts, per source, the lines and values the parsers
	// skipped, across rounds.
	parseErrs *parseErrorCounter

	// histMu guards history, which only rounds use; two rounds never
	// run at once in the daemon, but a test may call round directly.
	histMu  sync.Mutex
	history map[string]*lustreTargetHistory
	// unknownLogged are the rpc_stats sections a newer Lustre prints
	// that were logged (at debug) already: once each, not every round.
	// Guarded by histMu.
	unknownLogged map[string]bool
	// lctlErr is the last lctl failure logged: a sudo refused every
	// round is logged when it starts and when it changes.
	lctlErr errorChange

	// rounds runs round in the background; scrapes export its last.
	rounds *backgroundRounds[*lustreRound]
}

// lustreMetadataOps are the llite stats counters exported as
// plateau_lustre_metadata_operations_total; each is exported, 0 when the
// file leaves it out, so that an operation's first call does not make a
// series appear.
func lustreMetadataOps() [16]string {
	return [...]string{"open", "close", "getattr", "setattr", "truncate", "create", "unlink", "mkdir",
		"rmdir", "rename", "link", "symlink", "mknod", "readdir", "statfs", "fsync"}
}

func newLustreCollector(cfg lustreConfig, logger log.Logger) (*lustreCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.interval <= 0 || cfg.timeout <= 0 {
		return nil, fmt.Errorf("lustre interval and timeout must be positive, got %s and %s", cfg.interval, cfg.timeout)
	}
	desc := descsOf(lustreSubsystem).typed
	t := []string{"filesystem", "lustre_target"}
	fsOp := []string{"filesystem", "op"}
	c := &lustreCollector{
		cfg:           cfg,
		logger:        logger,
		history:       map[string]*lustreTargetHistory{},
		unknownLogged: map[string]bool{},
		parseErrs:     newParseErrorCounter(logger),
		runner:        newCommandRunner(cfg.sudo),

		// 1 if this client's import of the OST or MDT is FULL, or IDLE:
		// since 2.12 a client closes a connection unused for
		// idle_timeout seconds on purpose and reconnects at the next
		// RPC, so IDLE is not a lost server. 0 in any other state
		// (DISCONN, CONNECTING, RECOVER, REPLAY*, EVICTED, CLOSED, NEW).
		connected: desc("target_connected",
			"1 if this client's import of the OST or MDT is FULL or IDLE, else 0.",
			prometheus.GaugeValue, t...),
		// The server NID this client's import of the OST or MDT is
		// connected to (current_connection); always 1.
		info: desc("target_info",
			"Server NID this client's import of the OST or MDT is connected to; always 1.",
			prometheus.GaugeValue, "filesystem", "lustre_target", "nid"),
		// Counted from the import's state history: FULL again after DISCONN
		// or EVICTED, however many attempts it took. A connection closed and
		// reopened because it was idle (CONNECTING, IDLE, CONNECTING, FULL)
		// is not one, nor is the mount's first connection. The kernel keeps
		// 16 entries, so the count starts with what they show.
		reconnects: desc("target_reconnects_total",
			"Times the import was FULL again after losing its connection.",
			prometheus.CounterValue, t...),
		evictions: desc("target_evictions_total",
			"Times the server evicted this client, counted from the import's state history (EVICTED entries).",
			prometheus.CounterValue, t...),
		timeouts: desc("target_timeouts_total",
			"RPCs to the OST or MDT that timed out (the import's rpcs.timeouts).",
			prometheus.CounterValue, t...),
		// Average time the RPCs to the OST or MDT waited for their reply
		// (the import's avg_waittime), in seconds.
		avgWait: desc("target_avg_wait_seconds",
			"Average reply wait of the RPCs to the OST or MDT (the import's avg_waittime), in seconds.",
			prometheus.GaugeValue, t...),
		inflight: desc("target_rpcs_in_flight",
			"RPCs sent to the OST or MDT and not yet answered (the import's rpcs.inflight).",
			prometheus.GaugeValue, t...),
		grant: desc("target_grant_bytes",
			"Space the OST granted this client for cached writes (osc cur_grant_bytes), in bytes.",
			prometheus.GaugeValue, t...),
		dirty: desc("target_dirty_bytes",
			"Dirty data this client caches for the OST (osc cur_dirty_bytes), in bytes.",
			prometheus.GaugeValue, t...),
		active: desc("target_active",
			"0 if the OST or MDT was deactivated on this client (lctl set_param ... active=0), 1 otherwise.",
			prometheus.GaugeValue, t...),
		// Bulk read or write RPCs this client sent to the file system's
		// OSTs, from the osc rpc_stats pages-per-RPC histograms.
		rpcs: desc("rpcs_total",
			"Bulk read or write RPCs this client sent to the file system's OSTs (osc rpc_stats).",
			prometheus.CounterValue, fsOp...),
		// Pages carried by those RPCs, each counted at its histogram
		// bucket's lower bound (a power of two);
		// rate(plateau_lustre_rpc_pages_total) /
		// rate(plateau_lustre_rpcs_total) is the mean pages per RPC.
		rpcPages: desc("rpc_pages_total",
			"Pages carried by the bulk RPCs, each counted at its histogram bucket's lower bound.",
			prometheus.CounterValue, fsOp...),
		// Sum over those RPCs of the RPCs in flight to the same OST when
		// each was sent (rpc_stats' RPCs-in-flight histograms); divided
		// by plateau_lustre_rpcs_total, the mean concurrency per OST.
		rpcInFlight: desc("rpc_in_flight_sum_total",
			"Sum over the bulk RPCs of the RPCs in flight to the same OST when each was sent.",
			prometheus.CounterValue, fsOp...),
		readBytes: desc("read_bytes_total",
			"Bytes read through this Lustre mount (llite stats read_bytes).",
			prometheus.CounterValue, "filesystem"),
		writeBytes: desc("write_bytes_total",
			"Bytes written through this Lustre mount (llite stats write_bytes).",
			prometheus.CounterValue, "filesystem"),
		readCalls: desc("reads_total",
			"read calls on this Lustre mount (llite stats read_bytes samples).",
			prometheus.CounterValue, "filesystem"),
		writeCalls: desc("writes_total",
			"write calls on this Lustre mount (llite stats write_bytes samples).",
			prometheus.CounterValue, "filesystem"),
		mdOps: desc("metadata_operations_total",
			"Metadata operations on this Lustre mount, by llite stats counter.",
			prometheus.CounterValue, fsOp...),
		healthy: desc("healthy",
			"1 if Lustre's health_check on this node says healthy, 0 if it reports NOT HEALTHY or LBUG.",
			prometheus.GaugeValue),
		// Reads of Lustre parameter files in the last round that did not
		// return in --collector.lustre.timeout, or were not started
		// because an earlier read of the same file still has not
		// returned.
		stuckReads: desc("stuck_reads",
			"Reads of Lustre parameter files in the last round that did not return in time.",
			prometheus.GaugeValue),
	}
	c.rounds = newBackgroundRounds(cfg.interval, cfg.timeout, c.round)
	return c, nil
}

func (c *lustreCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

// The sources of plateau_collector_parse_errors_total: one per kind of
// file the parsers read, the single-value files (active, cur_grant_bytes,
// cur_dirty_bytes) together as param.
const (
	lustreSourceImport   = "import"
	lustreSourceState    = "state"
	lustreSourceRPCStats = "rpc_stats"
	lustreSourceStats    = "stats"
	lustreSourceParam    = "param"
	// lustreSourceLctl is lctl's output itself in sudo mode: lines that
	// are not under a parameter's name.
	lustreSourceLctl = "lctl"
)

// sources lists those of this collector, so that each has its series from the first
// round on, 0 until a line is skipped.
func (c *lustreCollector) sources() []string {
	s := []string{lustreSourceImport, lustreSourceState, lustreSourceRPCStats, lustreSourceStats, lustreSourceParam}
	if c.cfg.lctlPath != "" {
		s = append(s, lustreSourceLctl)
	}
	return s
}

// roots are the trees a parameter file may be in, in lctl's order.
func (c *lustreCollector) roots() [3]string {
	return [...]string{c.cfg.sysRoot, c.cfg.procRoot, c.cfg.debugRoot}
}

// presence stats the Lustre roots (the client's tree is there once the
// module is loaded), so that an absent Lustre never starts the rounds.
func (c *lustreCollector) presence() (bool, string) {
	for _, r := range c.roots() {
		if _, err := os.Stat(r); err == nil {
			return true, ""
		}
	}
	return false, fmt.Sprintf("no Lustre on this node (no %s, %s or %s)", c.cfg.procRoot, c.cfg.sysRoot, c.cfg.debugRoot)
}

// Update exports the last complete round. The first scrape starts the
// rounds and waits for the first; later scrapes never wait for a read.
func (c *lustreCollector) Update(ch chan<- prometheus.Metric) error {
	if present, _ := c.presence(); !present {
		return fmt.Errorf("no Lustre tree under %s, %s or %s: %w", c.cfg.procRoot, c.cfg.sysRoot, c.cfg.debugRoot, ErrNoData)
	}
	return exportLatest(ch, c.rounds, "lustre", func(r *lustreRound) []prometheus.Metric { return r.metrics })
}

// Close stops the rounds and waits for the one in progress, at most the
// timeout. Reads still blocked in the kernel return on their own.
func (c *lustreCollector) Close() error { return c.rounds.Close() }

// guarded runs call under the guard for key and waits for it until ctx
// ends. A call still running from an earlier round is not started again.
func (c *lustreCollector) guarded(ctx context.Context, key string, call func() lustreRead) lustreRead {
	return awaitGuarded(ctx, &c.reads, key, call, errLustreReadTimeout, func(err error) lustreRead { return lustreRead{err: err} })
}

// readParam reads rel (such as osc/<device>/import) from the first tree
// that has it.
func (c *lustreCollector) readParam(ctx context.Context, rel string) lustreRead {
	return c.guarded(ctx, rel, func() lustreRead {
		for _, root := range c.roots() {
			data, err := os.ReadFile(filepath.Join(root, rel))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return lustreRead{data: data, err: err}
		}
		return lustreRead{err: fs.ErrNotExist}
	})
}

// rootList is roots as a slice.
func (c *lustreCollector) rootList() []string { r := c.roots(); return r[:] }

// listDevices lists the devices of kind (osc, mdc, llite) in all trees.
func (c *lustreCollector) listDevices(ctx context.Context, kind string) lustreRead {
	return c.guarded(ctx, "list "+kind, func() lustreRead {
		return lustreRead{names: lustreDirs(c.rootList(), kind)}
	})
}

// isStuck reports whether a read or the lctl run failed because it is, or
// was, blocked.
func isStuck(err error) bool {
	return errors.Is(err, errLustreReadTimeout) || errors.Is(err, errStillRunning) || errors.Is(err, errCommandTimeout)
}

// lustreLctlRun is what a round's lctl run read: each parameter's value
// by its name (osc.<device>.rpc_stats, llite.<device>.stats).
type lustreLctlRun struct {
	params map[string][]byte
	bad    int
	err    error
}

// runLctl runs lctl once with args, bounded by ctx through the command
// runner; key names the run for the guard against a second copy. A
// non-zero exit with output is still read: lctl exits 1 when one of the
// patterns matches nothing (no mount on a server, say) and prints the
// other's values all the same.
func (c *lustreCollector) runLctl(ctx context.Context, key string, args []string) lustreLctlRun {
	out, err := c.runner.runKeyed(ctx, key, nil, c.cfg.lctlPath, args...)
	var exit *commandError
	if err != nil && !(errors.As(err, &exit) && len(out) > 0) {
		return lustreLctlRun{err: err}
	}
	params, bad := parseLctlGetParam(out)
	return lustreLctlRun{params: params, bad: bad}
}

// waitLctl waits for the round's lctl run until the round's deadline.
func waitLctl(ctx context.Context, lctl <-chan lustreLctlRun) lustreLctlRun {
	select {
	case r := <-lctl:
		return r
	case <-ctx.Done():
		select {
		case r := <-lctl:
			return r
		default:
		}
		// The runner kills it at the same deadline; the goroutine ends
		// then, or after abandonAfter if lctl does not die.
		return lustreLctlRun{err: fmt.Errorf("lctl get_param: %w", errLustreReadTimeout)}
	}
}

// logLctlError logs a failure of lctl when it differs from the last one.
func (c *lustreCollector) logLctlError(err error) {
	if c.lctlErr.changed(err) {
		level.Warn(c.logger).Log("msg", "cannot read Lustre's debugfs files through lctl; their series are missing", "err", err)
	}
}

// lustreTargetDevice matches the osc and mdc device names of a client
// mount: <fsname>-<OST|MDT><index>-<osc|mdc>-<mount instance>, the
// instance being the super block's address in hex. A server's own devices
// (lustre-OST0000-osc-MDT0000 on an old MDS) end in a target name instead.
var lustreTargetDevice = regexp.MustCompile(`^(.+)-((?:OST|MDT)[0-9a-fA-F]{4,})-(?:osc|mdc)-[0-9a-fA-F]+$`)

// lustreTargetRead is what one round read of one target.
type lustreTargetRead struct {
	device, kind, fsname, name string
	imp                        lustreImport
	hasImport                  bool
	history                    []lustreStateEntry
	hasState                   bool
	grant, dirty, active       uint64
	hasGrant, hasDirty, hasAct bool
	rpc                        lustreRPCStats
	hasRPC                     bool
	// unknown names the rpc_stats values and histograms that this
	// release of the collector does not read (a newer Lustre's).
	unknown []string
	stuck   int
	bad     map[string]int
}

// readTarget reads one osc or mdc device's files. Once a read is blocked
// the rest are skipped: on an evicted client they would block too.
func (c *lustreCollector) readTarget(ctx context.Context, t *lustreTargetRead) {
	t.bad = map[string]int{}
	files := []string{"import", "state", "active"}
	if t.kind == "osc" {
		files = append(files, "cur_grant_bytes", "cur_dirty_bytes")
		if c.cfg.lctlPath == "" {
			files = append(files, "rpc_stats") // else from the round's lctl run
		}
	}
	for _, f := range files {
		r := c.readParam(ctx, t.kind+"/"+t.device+"/"+f)
		if isStuck(r.err) {
			t.stuck++
			return
		}
		if r.err != nil {
			if !errors.Is(r.err, fs.ErrNotExist) {
				level.Debug(c.logger).Log("msg", "cannot read Lustre parameter", "device", t.device, "file", f, "err", r.err)
			}
			continue
		}
		t.apply(f, r.data)
	}
}

// apply parses data, the content of the target's file f, whether read
// directly or through lctl.
func (t *lustreTargetRead) apply(f string, data []byte) {
	switch f {
	case "import":
		var bad int
		t.imp, bad = parseLustreImport(data)
		t.hasImport = t.imp.state != ""
		t.bad[lustreSourceImport] += bad
	case "state":
		var bad int
		_, t.history, bad = parseLustreState(data)
		t.hasState = true
		t.bad[lustreSourceState] += bad
	case "active":
		t.active, t.hasAct = parseLustreUint(data)
	case "cur_grant_bytes":
		t.grant, t.hasGrant = parseLustreUint(data)
	case "cur_dirty_bytes":
		t.dirty, t.hasDirty = parseLustreUint(data)
	case "rpc_stats":
		var bad int
		t.rpc, bad, t.unknown = parseLustreRPCStats(data)
		t.hasRPC = true
		t.bad[lustreSourceRPCStats] += bad
	}
	if (f == "active" && !t.hasAct) || (f == "cur_grant_bytes" && !t.hasGrant) || (f == "cur_dirty_bytes" && !t.hasDirty) {
		t.bad[lustreSourceParam]++
	}
}

// importsInDebugfs reports whether this Lustre keeps the imports in
// debugfs (2.17 and later): there are targets, and the first has its
// import file in neither sysfs nor procfs. A stat does not read the file,
// so it cannot block on an evicted import.
func (c *lustreCollector) importsInDebugfs(targets []*lustreTargetRead) bool {
	if len(targets) == 0 {
		return false
	}
	for _, root := range []string{c.cfg.sysRoot, c.cfg.procRoot} {
		if _, err := os.Stat(filepath.Join(root, targets[0].kind, targets[0].device, "import")); err == nil {
			return false
		}
	}
	return true
}

// round reads every target, mount and health_check once, within the
// timeout, and builds the metrics the scrapes export until the next round.
func (c *lustreCollector) round() *lustreRound {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	res := &lustreRound{badLines: map[string]int{}}
	stuck := 0
	// In sudo mode lctl reads the debugfs files beside the direct reads,
	// so that a blocked lctl costs only its own series.
	var lctl chan lustreLctlRun
	if c.cfg.lctlPath != "" {
		lctl = make(chan lustreLctlRun, 1)
		go func() { lctl <- c.runLctl(ctx, c.cfg.lctlPath, lustreLctlArgs()) }()
	}

	// health_check and the mounts come first: the deadline that a
	// blocked target read runs into must not cost them too.
	var ms []prometheus.Metric
	if r := c.readParam(ctx, "health_check"); r.err == nil {
		v := 0.0
		if strings.TrimSpace(string(r.data)) == "healthy" {
			v = 1
		}
		ms = append(ms, c.healthy.mustNewConstMetric(v))
	} else if isStuck(r.err) {
		stuck++
	}
	if lctl == nil {
		if l := c.listDevices(ctx, "llite"); isStuck(l.err) {
			stuck++
		} else {
			mounts, n := c.mountMetrics(l.names, func(dev string) lustreRead {
				return c.readParam(ctx, "llite/"+dev+"/stats")
			}, res.badLines)
			ms = append(ms, mounts...)
			stuck += n
		}
	}

	var targets []*lustreTargetRead
	for _, kind := range []string{"osc", "mdc"} {
		l := c.listDevices(ctx, kind)
		if isStuck(l.err) {
			stuck++
			continue
		}
		for _, dev := range l.names {
			m := lustreTargetDevice.FindStringSubmatch(dev)
			if m == nil {
				continue // not a client mount's device (an MDT's own OSP, say)
			}
			targets = append(targets, &lustreTargetRead{device: dev, kind: kind, fsname: m[1], name: m[2]})
		}
	}
	// On 2.17 the imports and state histories need lctl too: a second
	// run, beside the direct reads of the sysfs files.
	var imports chan lustreLctlRun
	if c.cfg.lctlPath != "" && c.importsInDebugfs(targets) {
		imports = make(chan lustreLctlRun, 1)
		go func() { imports <- c.runLctl(ctx, c.cfg.lctlPath+" imports", lustreLctlImportArgs()) }()
	}
	readEach(targets, lustreWorkers, func(t *lustreTargetRead) { c.readTarget(ctx, t) })

	var importsErr error
	if imports != nil {
		run := waitLctl(ctx, imports)
		importsErr = run.err
		if isStuck(run.err) {
			stuck++
		}
		res.badLines[lustreSourceLctl] += run.bad
		for _, t := range targets {
			for f, done := range map[string]bool{"import": t.hasImport, "state": t.hasState} {
				if data, ok := run.params[t.kind+"."+t.device+"."+f]; ok && !done {
					t.apply(f, data)
				}
			}
		}
	}
	if lctl != nil {
		run := waitLctl(ctx, lctl)
		c.logLctlError(errors.Join(importsErr, run.err))
		if isStuck(run.err) {
			stuck++
		}
		res.badLines[lustreSourceLctl] += run.bad
		for _, t := range targets {
			if data, ok := run.params["osc."+t.device+".rpc_stats"]; ok && t.kind == "osc" {
				t.apply("rpc_stats", data)
			}
		}
		var devs []string
		for name := range run.params {
			if dev, ok := strings.CutPrefix(name, "llite."); ok {
				if dev, ok = strings.CutSuffix(dev, ".stats"); ok {
					devs = append(devs, dev)
				}
			}
		}
		sort.Strings(devs)
		mounts, _ := c.mountMetrics(devs, func(dev string) lustreRead {
			return lustreRead{data: run.params["llite."+dev+".stats"]}
		}, res.badLines)
		ms = append(ms, mounts...)
	}

	seen := seenSet[[2]string]{}
	rpcByFS := map[string]*lustreRPCStats{}
	live := map[string]bool{}
	c.histMu.Lock()
	for _, t := range targets {
		stuck += t.stuck
		for src, n := range t.bad {
			res.badLines[src] += n
		}
		for _, u := range t.unknown {
			if !c.unknownLogged[u] {
				c.unknownLogged[u] = true
				level.Debug(c.logger).Log("msg", "skipping a section of rpc_stats this collector does not read", "section", u, "device", t.device)
			}
		}
		key := [2]string{labelValue(t.fsname), labelValue(t.name)}
		if !seen.first(key) {
			// A second mount of the same file system: the first
			// device is kept.
			continue
		}
		live[t.device] = true
		ms = append(ms, c.targetMetrics(t, key)...)
		if t.hasRPC {
			s := rpcByFS[key[0]]
			if s == nil {
				s = &lustreRPCStats{}
				rpcByFS[key[0]] = s
			}
			for _, p := range [][2]*lustreRPCHist{{&s.read, &t.rpc.read}, {&s.write, &t.rpc.write}} {
				p[0].rpcs += p[1].rpcs
				p[0].pages += p[1].pages
				p[0].inFlight += p[1].inFlight
			}
		}
	}
	for dev := range c.history {
		if !live[dev] {
			delete(c.history, dev) // unmounted
		}
	}
	c.histMu.Unlock()
	for fsname, s := range rpcByFS {
		for _, half := range []struct {
			op string
			h  lustreRPCHist
		}{{"read", s.read}, {"write", s.write}} {
			ms = append(ms,
				c.rpcs.mustNewConstMetric(float64(half.h.rpcs), fsname, half.op),
				c.rpcPages.mustNewConstMetric(float64(half.h.pages), fsname, half.op),
				c.rpcInFlight.mustNewConstMetric(float64(half.h.inFlight), fsname, half.op))
		}
	}

	ms = append(ms, c.stuckReads.mustNewConstMetric(float64(stuck)))
	if stuck > 0 {
		level.Warn(c.logger).Log("msg", "Lustre reads blocked; their series are missing from this round", "stuck_reads", stuck)
	}
	for _, src := range c.sources() {
		// The parsers count lines, not keep them: the debug log names the
		// source and the count, and the file is there to read.
		c.parseErrs.record(src, badLines{count: res.badLines[src], first: "(not kept)"})
	}
	freezeMetrics(ms)
	res.metrics = ms
	return res
}

// targetMetrics builds one target's series (at most ten) and counts its
// new state changes. The caller holds histMu.
func (c *lustreCollector) targetMetrics(t *lustreTargetRead, key [2]string) []prometheus.Metric {
	lp := newLabelPairs(c.connected.desc, key[0], key[1])
	var ms []prometheus.Metric
	if t.hasImport {
		v := 0.0
		if t.imp.state == "FULL" || t.imp.state == "IDLE" {
			v = 1
		}
		ms = append(ms, lp.metric(&c.connected, v))
		if t.imp.nid != "" {
			ms = append(ms, c.info.mustNewConstMetric(1, key[0], key[1], labelValue(t.imp.nid)))
		}
		if t.imp.hasTimeouts {
			ms = append(ms, lp.metric(&c.timeouts, float64(t.imp.timeouts)))
		}
		if t.imp.hasAvgWt {
			ms = append(ms, lp.metric(&c.avgWait, float64(t.imp.avgWaitMicros)/1e6))
		}
		if t.imp.hasInflight {
			ms = append(ms, lp.metric(&c.inflight, float64(t.imp.inflight)))
		}
	}
	if t.hasState {
		h := c.history[t.device]
		if h == nil {
			h = &lustreTargetHistory{}
			c.history[t.device] = h
		}
		h.count(t.history)
		ms = append(ms, lp.metric(&c.reconnects, float64(h.reconnects)), lp.metric(&c.evictions, float64(h.evictions)))
	}
	if t.hasGrant {
		ms = append(ms, lp.metric(&c.grant, float64(t.grant)))
	}
	if t.hasDirty {
		ms = append(ms, lp.metric(&c.dirty, float64(t.dirty)))
	}
	if t.hasAct {
		ms = append(ms, lp.metric(&c.active, float64(t.active)))
	}
	return ms
}

// count reads the entries of cur that the previous round had not seen
// through the import's state machine, as lustre/ptlrpc/import.c and
// pinger.c drive it:
//
//   - a connection the client closes because it was idle (osc_idle_timeout,
//     ptlrpc_disconnect_and_idle_import) writes FULL -> CONNECTING -> IDLE,
//     or CONNECTING -> NEW -> CONNECTING -> FULL when requests came in
//     meanwhile; the next request reconnects it, IDLE -> CONNECTING -> FULL.
//     Nothing was lost: none of this is a reconnect;
//   - a lost connection is DISCONN (ptlrpc_set_import_discon, only from
//     FULL) or EVICTED; the import's next FULL is the reconnect, however
//     many CONNECTING/DISCONN attempts, RECOVER or REPLAY states it took;
//   - the mount's first connection is not a reconnect, however many
//     attempts it takes: a DISCONN before the import was ever FULL loses
//     nothing;
//   - every EVICTED entry is an eviction.
//
// The history is a ring of the last 16 changes (IMP_STATE_HIST_LEN) that
// the kernel appends to, so what is left of the previous round's history
// is a prefix of cur: the longest suffix of prev that cur starts with.
// More than 16 changes between two rounds lose the oldest of them; the
// machine goes on from the state it was in. The first round takes the
// start of what it sees as the mount: a history that has already wrapped
// may show a reconnect's end without its start, which is not counted.
func (h *lustreTargetHistory) count(cur []lustreStateEntry) {
	k := min(len(h.prev), len(cur))
	for ; k > 0; k-- {
		if equalStateEntries(h.prev[len(h.prev)-k:], cur[:k]) {
			break
		}
	}
	for _, e := range cur[k:] {
		switch e.state {
		case "FULL":
			if h.lost {
				h.reconnects++
			}
			h.lost, h.connected = false, true
		case "EVICTED":
			h.evictions++
			h.lost, h.connected = true, true
		case "DISCONN":
			if h.connected {
				h.lost = true
			}
		}
		// CONNECTING, IDLE and NEW are a connection's attempts and the
		// idle cycle's steps; RECOVER, REPLAY* and CLOSED change
		// nothing that is counted.
	}
	h.prev = append(h.prev[:0], cur...)
}

func equalStateEntries(a, b []lustreStateEntry) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lustreMountDevice matches an llite device: <fsname>-<mount instance>.
var lustreMountDevice = regexp.MustCompile(`^(.+)-[0-9a-fA-F]+$`)

// mountMetrics builds each mount's series from its llite stats, which
// stats reads; it returns the metrics and the number of stuck reads.
func (c *lustreCollector) mountMetrics(devs []string, stats func(dev string) lustreRead, bad map[string]int) ([]prometheus.Metric, int) {
	var ms []prometheus.Metric
	stuck := 0
	seen := map[string]bool{}
	for _, dev := range devs {
		m := lustreMountDevice.FindStringSubmatch(dev)
		if m == nil {
			continue
		}
		fsname := labelValue(m[1])
		if seen[fsname] {
			continue // a second mount of the same file system
		}
		r := stats(dev)
		if isStuck(r.err) {
			stuck++
			continue
		}
		if r.err != nil {
			if !errors.Is(r.err, fs.ErrNotExist) {
				level.Debug(c.logger).Log("msg", "cannot read llite stats", "device", dev, "err", r.err)
			}
			continue
		}
		seen[fsname] = true
		counters, n := parseLustreStats(r.data)
		bad[lustreSourceStats] += n
		rb, wb := counters["read_bytes"], counters["write_bytes"]
		ms = append(ms,
			c.readBytes.mustNewConstMetric(float64(rb.sum), fsname),
			c.writeBytes.mustNewConstMetric(float64(wb.sum), fsname),
			c.readCalls.mustNewConstMetric(float64(rb.count), fsname),
			c.writeCalls.mustNewConstMetric(float64(wb.count), fsname))
		for _, op := range lustreMetadataOps() {
			ms = append(ms, c.mdOps.mustNewConstMetric(float64(counters[op].count), fsname, op))
		}
	}
	return ms, stuck
}
