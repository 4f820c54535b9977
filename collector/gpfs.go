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
	gpfsTimeout = kingpin.Flag("collector.gpfs.timeout",
		"Deadline for the GPFS commands of one scrape; past it their process groups are killed.").
		Default("5s").Duration()
)

func init() {
	registerCollector(gpfsSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newGPFSCollector(gpfsConfig{
			mmpmonPath:     *gpfsMmpmonPath,
			mmgetstatePath: *gpfsMmgetstatePath,
			mmhealthPath:   *gpfsMmhealthPath,
			sudo:           *gpfsSudo,
			nsd:            *gpfsNSD,
			requestsFile:   *gpfsMmpmonRequests,
			timeout:        *gpfsTimeout,
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

	fs [fsCounterCount]typedDesc

	nsdOps, nsdBytes, nsdWait, nsdQueue typedDesc

	mmpmonRC       typedDesc
	commandSuccess typedDesc
	state          typedDesc
	health         typedDesc
}

func newGPFSCollector(cfg gpfsConfig, logger log.Logger) (*gpfsCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("gpfs timeout must be positive, got %s", cfg.timeout)
	}
	requests, err := mmpmonRequests(cfg)
	if err != nil {
		return nil, err
	}
	fsLabels := []string{"cluster", "filesystem"}
	fsDesc := func(name, help string) typedDesc {
		return typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, name), help, fsLabels, nil), prometheus.CounterValue}
	}
	nsdLabels := []string{"nsd", "op"}
	nsdDesc := func(name, help string) typedDesc {
		return typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, name), help, nsdLabels, nil), prometheus.CounterValue}
	}
	c := &gpfsCollector{
		cfg:      cfg,
		requests: requests,
		logger:   logger,
		runner:   newCommandRunner(cfg.sudo),

		nsdOps:   nsdDesc("nsd_operations_total", "I/O requests this NSD server performed for the disk (mmpmon nsd_ds _ops_)."),
		nsdBytes: nsdDesc("nsd_bytes_total", "Bytes this NSD server transferred for the disk (mmpmon nsd_ds _b_)."),
		nsdWait:  nsdDesc("nsd_wait_seconds_total", "Total time the disk took to serve this NSD server's requests (mmpmon nsd_ds _tw_), in seconds."),
		nsdQueue: nsdDesc("nsd_queue_seconds_total", "Total time requests spent queued plus served on this NSD server (mmpmon nsd_ds _qt_), in seconds."),

		mmpmonRC: typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, "mmpmon_return_code"),
			"Highest _rc_ mmpmon returned for the request in this scrape; 0 means every response succeeded.",
			[]string{"request"}, nil), prometheus.GaugeValue},
		commandSuccess: typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, "command_success"),
			"1 if the GPFS command ran and its output was parsed in this scrape, 0 otherwise.",
			[]string{"command"}, nil), prometheus.GaugeValue},
		state: typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, "state"),
			"GPFS daemon state on this node from mmgetstate: 1 for the current state, 0 for the others.",
			[]string{"state"}, nil), prometheus.GaugeValue},
		health: typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, gpfsSubsystem, "health_status"),
			"Health of a component entity from 'mmhealth node show': 1 for the current status, 0 for the others.",
			[]string{"component", "entity", "status"}, nil), prometheus.GaugeValue},
	}
	c.fs[fsReadBytes] = fsDesc("fs_read_bytes_total", "Bytes read by this node from the file system, from disk and cache (mmpmon fs_io_s _br_).")
	c.fs[fsWriteBytes] = fsDesc("fs_write_bytes_total", "Bytes written by this node to the file system, to disk and cache (mmpmon fs_io_s _bw_).")
	c.fs[fsReads] = fsDesc("fs_reads_total", "read() calls on the file system from this node (mmpmon fs_io_s _rdc_).")
	c.fs[fsWrites] = fsDesc("fs_writes_total", "write() calls on the file system from this node (mmpmon fs_io_s _wc_).")
	c.fs[fsOpens] = fsDesc("fs_opens_total", "open() and creat() calls on the file system from this node (mmpmon fs_io_s _oc_).")
	c.fs[fsCloses] = fsDesc("fs_closes_total", "close() calls on the file system from this node (mmpmon fs_io_s _cc_).")
	c.fs[fsReaddirs] = fsDesc("fs_readdirs_total", "readdir() calls on the file system from this node (mmpmon fs_io_s _dir_).")
	c.fs[fsInodeUpdates] = fsDesc("fs_inode_updates_total", "Inode updates to disk from this node (mmpmon fs_io_s _iu_).")
	return c, nil
}

// Update runs mmpmon, mmgetstate and mmhealth concurrently under one
// deadline, so a wedged daemon costs a scrape at most the timeout, and
// exports what each command returned even when another one failed: the
// daemon state is most useful exactly when mmpmon cannot answer.
func (c *gpfsCollector) Update(ch chan<- prometheus.Metric) error {
	if _, err := os.Stat(c.cfg.mmpmonPath); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s not found: %w", c.cfg.mmpmonPath, ErrNoData)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()

	type job struct {
		name string
		run  func(context.Context) ([]prometheus.Metric, error)
		out  []prometheus.Metric
		err  error
	}
	jobs := []*job{{name: "mmpmon", run: c.mmpmon}}
	for _, j := range []struct {
		name, path string
		run        func(context.Context) ([]prometheus.Metric, error)
	}{
		{"mmgetstate", c.cfg.mmgetstatePath, c.mmgetstate},
		{"mmhealth", c.cfg.mmhealthPath, c.mmhealth},
	} {
		if j.path == "" {
			continue
		}
		if _, err := os.Stat(j.path); errors.Is(err, fs.ErrNotExist) {
			// Older releases lack mmhealth; that is not a failure.
			level.Debug(c.logger).Log("msg", "GPFS command not installed, skipped", "path", j.path)
			continue
		}
		jobs = append(jobs, &job{name: j.name, run: j.run})
	}

	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func(j *job) {
			defer wg.Done()
			j.out, j.err = j.run(ctx)
		}(j)
	}
	wg.Wait()

	var errs []error
	for _, j := range jobs {
		for _, m := range j.out {
			ch <- m
		}
		ok := 1.0
		if j.err != nil {
			ok = 0
			errs = append(errs, j.err)
		}
		ch <- c.commandSuccess.mustNewConstMetric(ok, j.name)
	}
	return errors.Join(errs...)
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
	res, parseErr := parseMmpmon(out)

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

	seen := map[[2]string]bool{}
	for _, f := range res.fs {
		key := [2]string{labelValue(f.cluster), labelValue(f.filesystem)}
		if seen[key] {
			// Two responses with the same labels would be a duplicate
			// series, which fails the whole scrape; keep the first.
			continue
		}
		seen[key] = true
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
	y, err := parseY(out)
	if err != nil {
		return nil, fmt.Errorf("mmgetstate -Y: %w", err)
	}
	t := y.table("mmgetstate", "")
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
	y, err := parseY(out)
	if err != nil {
		return nil, fmt.Errorf("mmhealth node show -Y: %w", err)
	}
	t := y.table("mmhealth", "State")
	if t == nil {
		return nil, errors.New("mmhealth node show -Y: no State table")
	}
	compCol, entCol, statusCol := t.column("component"), t.column("entityname"), t.column("status")
	if compCol < 0 || entCol < 0 || statusCol < 0 {
		return nil, errors.New("mmhealth node show -Y: State HEADER lacks component, entityname or status")
	}
	type entity struct{ component, name string }
	current := map[entity]string{}
	var order []entity
	for _, row := range t.rows {
		e := entity{labelValue(t.value(row, compCol)), labelValue(t.value(row, entCol))}
		if _, dup := current[e]; dup || e.component == "" {
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
