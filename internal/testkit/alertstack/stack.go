package alertstack

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const (
	Target = "loop"
	Probe  = "seq"
	// Job is the job the stack's Prometheus scrapes its daemons as.
	Job = "plateau"
	// ServerJob is the job the storage servers' own daemons are scraped
	// as, apart from the clients', as a site scrapes its servers.
	ServerJob = "plateau-servers"

	// The page of a node, and of a file system (many nodes at once), and
	// the chronic warning; see alerts.yml.
	RegressionAlert   = "PlateauProbeRegression"
	FsRegressionAlert = "PlateauFileSystemRegression"
	BelowPlateauAlert = "PlateauProbeBelowPlateau"

	// MinChangeRuns is how many successful runs a probe needs before the
	// daemon exports plateau_probe_change_ratio (the store's minChangeRuns:
	// the 4 recent runs, 10 runs of normal, 3 more for the first normal
	// run's rolling mean). The tests wait for the series itself, and use
	// this only to size their deadlines.
	MinChangeRuns = plateau.MinNormalRuns + 2*plateau.ChangeRuns - 1

	// A probe every few seconds in the single-node stack, so that the
	// daemon's 24-run median of the ratio and the 37-run history of the
	// change ratio fill in a few minutes.
	ProbeInterval = 5 * time.Second
	probeTimeout  = 4 * time.Second
	blockSize     = 4 << 20

	// durationScale divides every `for` and keep_firing_for of the shipped
	// rules, for a probe every 5s instead of the default 15m: a `for` of
	// 15m, one run in production, becomes 10s, two runs here, which leaves
	// room for Prometheus's 1s scrape and evaluation intervals; 30m of
	// keep_firing_for becomes 20s.
	durationScale = 90

	// The device has a plateau of the test's choosing: the daemon's
	// cgroup throttles the RAM-backed loop device to devicePlateau in both
	// directions from the start, and the slowdown lowers the read limit to
	// throttleFraction of the characterized read rate. Unthrottled, the
	// device read at ~6 GB/s, where blk-throttle's burst at the start of a
	// read (~52ms at the limit, 140 MB) made a 512 MiB read throttled to
	// 40% come out at 0.54 of its baseline (CI run of 2b93a7b), and its
	// writes fell to under 1 GB/s for tens of seconds when the host was
	// busy, an unthrottled write that the test must never see alert. At
	// 400 MB/s the same device measures within ±2% (see probetest.IOCgroup),
	// and the burst is ~3% of a throttled read of the 256 MiB file, which
	// then lasts ~1.6s: ratio ~0.38 of the baseline.
	DevicePlateau = 400e6
	FileSize      = 256 << 20
	loopSize      = 1 << 30

	// ThrottleFraction throttles the device to 40% of its measured read rate.
	ThrottleFraction = 0.4

	// waitPoll is how often the tests look at Prometheus, Alertmanager and
	// the webhook; every wait has a deadline of minutes on top.
	waitPoll = 500 * time.Millisecond
)

// Options say what a stack runs: one daemon per host name, all on one
// file system, each in a cgroup of its own that gives it the device at
// plateau bytes per second both ways.
type Options struct {
	Hosts    []string
	Interval time.Duration
	Timeout  time.Duration
	// Splay spreads the daemons' runs over the interval by host name, as
	// in production; a single daemon needs none.
	Splay    bool
	FileSize int64
	Plateau  int64
	// CharacterizeSpacing is characterize's --run-spacing.
	CharacterizeSpacing time.Duration
	// PromInterval is Prometheus's scrape and evaluation interval.
	PromInterval time.Duration
	// DurationScale divides the rules' `for`, keep_firing_for and group
	// intervals (0: durationScale, for a 5s probe interval).
	DurationScale int
	// Racks splits the monitoring as README.md's "Prometheus for a
	// fleet" does: this many rack Prometheus servers scrape the daemons
	// and the storage servers' daemons (dealt out in turn) and evaluate
	// rules.yml and alerts.yml, and a global one pulls federate.yml's
	// selection from them and evaluates rules.yml and fleet_alerts.yml;
	// all send to the one Alertmanager. 0: one Prometheus with every rule
	// file.
	Racks int
}

// scale is what the stack divides the rules' durations by.
func (o Options) scale() int {
	if o.DurationScale > 0 {
		return o.DurationScale
	}
	return durationScale
}

// singleNodeOptions is the stack of the single-node tests.
func singleNodeOptions() Options {
	return Options{
		Hosts:               []string{"node1"},
		Interval:            ProbeInterval,
		Timeout:             probeTimeout,
		FileSize:            FileSize,
		Plateau:             DevicePlateau,
		CharacterizeSpacing: 5 * time.Second,
		PromInterval:        time.Second,
	}
}

// Daemon is one plateau_exporter of a stack, a node of the fleet.
type Daemon struct {
	Host string
	// Cgroup gives the daemon its share of the stack's loop device; nil
	// when the daemon probes something else (a MooseFS client's mount).
	Cgroup *probetest.IOCgroup
	// ConfigFile is the daemon's own config, when it is not the stack's.
	ConfigFile string
	Proc       *Process
	// Addr is where it listens, and so its instance label in Prometheus.
	Addr        string
	URL         string
	HistoryFile string
	Runs        *RunWatcher
	// MetadataRuns follows the runs of the metadata target's probe on
	// the MooseFS cluster's clients while they have it (fault c); nil
	// elsewhere.
	MetadataRuns *RunWatcher
}

// Stack is everything one alerting test runs.
type Stack struct {
	Opts       Options
	Start      time.Time
	Dir        string
	exporter   string
	configFile string
	// Baseline is the characterized plateau, bytes per second by op.
	Baseline map[string]float64
	Daemons  []*Daemon
	// Servers are the storage servers' own daemons, each probing its own
	// data device under serverTarget (which `serves` stackTarget), scraped
	// as job serverJob; none but on the MooseFS cluster. They are not
	// nodes of the fleet: rounds, overlaps and the per-node checks read
	// daemons only.
	Servers    []*Daemon
	Prom       Proms
	amURL      string
	Hook       *Webhook
	shortRules map[string][]string
	// ShortFor is every alert's shortened `for`, by name.
	ShortFor map[string][]time.Duration
}

// Since formats the time elapsed since the stack started, for timelines.
func (s *Stack) Since(at time.Time) string {
	return "t+" + at.Sub(s.Start).Round(100*time.Millisecond).String()
}

// HostOf names the daemon behind an instance label, for logs.
func (s *Stack) HostOf(instance string) string {
	for _, d := range append(slices.Clone(s.Daemons), s.Servers...) {
		if d.Addr == instance {
			return d.Host
		}
	}
	return instance
}

// Rounds is how many runs every daemon has completed: the fewest any has.
func (s *Stack) Rounds() int {
	n := math.MaxInt
	for _, d := range s.Daemons {
		n = min(n, d.Runs.Count())
	}
	return n
}

// StartSingleNode is the single-node stack.
func StartSingleNode(t *testing.T) *Stack {
	t.Helper()
	return Start(t, singleNodeOptions())
}

// Start sets up the loop file system, a cgroup per daemon, the
// baseline, the daemons, Alertmanager, the webhook and Prometheus, in that
// order, and waits until Prometheus scrapes every daemon and evaluates the
// rules.
func Start(t *testing.T, o Options) *Stack {
	t.Helper()
	promBin, amBin := RequirePrereqs(t)
	s := &Stack{Opts: o, Dir: t.TempDir()}
	// Direct I/O from the loop device to a backing file in RAM (tmpfs):
	// the page cache neither flatters the probe nor hides the throttle, and
	// the VM's virtual disk does not move the plateau. Backed by that disk,
	// reads drifted by ±40% within minutes (825 MB/s to 1.9 GB/s in ten
	// back-to-back reads, against 4.0 to 5.6 GB/s from tmpfs), and once a
	// baseline taken in a fast minute kept a true warning firing after the
	// throttle was lifted.
	loop := probetest.MountLoopIn(t, probetest.MemoryDir(t), "ext4", loopSize)
	// One cgroup per daemon, so that a test can slow one node's path to
	// the device alone (a client problem) or every node's (a storage
	// problem). Created before the daemons, they are removed after them.
	for _, h := range o.Hosts {
		d := &Daemon{Host: h, Cgroup: probetest.NewIOCgroup(t, loop.DevNum)}
		if err := d.Cgroup.ThrottleRead(o.Plateau); err != nil {
			t.Fatal(err)
		}
		if err := d.Cgroup.ThrottleWrite(o.Plateau); err != nil {
			t.Fatal(err)
		}
		s.Daemons = append(s.Daemons, d)
	}
	t.Logf("loop ext4 at %s (device %s); %d daemon(s), each given %.0f MB/s both ways by its own cgroup",
		loop.Mount, loop.DevNum, len(s.Daemons), float64(o.Plateau)/1e6)

	s.BuildExporter(t)
	targetPath := filepath.Join(loop.Mount, "plateau")
	if err := os.Mkdir(targetPath, 0o755); err != nil {
		t.Fatal(err)
	}
	// One config and one baselines file for every node, as a site ships
	// them: the target has the same name on every client of the file
	// system, which is what makes the nodes peers in the fleet rules.
	s.configFile = filepath.Join(s.Dir, "plateau.yml")
	writeExporterConfig(t, s.configFile, o, targetPath, filepath.Join(s.Dir, "baselines.yml"))
	s.characterize(t)
	// The device must deliver its plateau for the throttle to mean what
	// the test says; a machine too busy for it is named here.
	for op, v := range s.Baseline {
		if v < 0.8*float64(o.Plateau) || v > 1.5*float64(o.Plateau) {
			t.Fatalf("characterized %s at %.0f MB/s on a device throttled to %.0f MB/s: the machine does not deliver the plateau the test sets", op, v/1e6, float64(o.Plateau)/1e6)
		}
	}

	s.StartDaemons(t, func(d *Daemon) []string { return InCgroup(d.Cgroup) })
	s.StartMonitoring(t, promBin, amBin)
	return s
}

// BuildExporter builds the plateau_exporter the stack runs.
func (s *Stack) BuildExporter(t *testing.T) {
	t.Helper()
	s.exporter = BuildExporter(t, s.Dir)
}

// StartDaemons starts a plateau_exporter per daemon of the stack, its
// command line begun with prefix(d) (a cgroup to enter, or nothing), waits
// until each answers, and starts following each one's runs.
func (s *Stack) StartDaemons(t *testing.T, prefix func(d *Daemon) []string) {
	t.Helper()
	o := s.Opts
	for _, d := range s.Daemons {
		s.StartExporter(t, d, prefix(d))
	}
	for _, d := range s.Daemons {
		WaitReady(t, d.Proc, d.URL+"/-/healthy")
		if d.Cgroup == nil {
			continue
		}
		pids, err := d.Cgroup.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pids, d.Proc.Cmd.Process.Pid) {
			t.Fatalf("daemon %s (pid %d) is not in %s (its processes: %v)", d.Host, d.Proc.Cmd.Process.Pid, d.Cgroup, pids)
		}
	}
	s.Start = time.Now()
	for _, d := range s.Daemons {
		// A tenth of the interval catches every run, and four daemons
		// polled that often still cost little of two cores.
		d.Runs = watchRuns(t, d.URL+"/metrics", o.Interval/10)
	}
}

// StartExporter starts d's plateau_exporter on an address of its own, its
// command line begun with prefix; it does not wait for it.
func (s *Stack) StartExporter(t *testing.T, d *Daemon, prefix []string) {
	t.Helper()
	d.Addr = probetest.FreeAddr(t)
	d.URL = "http://" + d.Addr
	d.HistoryFile = filepath.Join(s.Dir, d.Host+"-history.json")
	name := "plateau_exporter"
	if len(s.Daemons)+len(s.Servers) > 1 {
		name += "-" + d.Host
	}
	config := OrElse(d.ConfigFile, s.configFile)
	d.Proc = startProcess(t, name, s.Dir, append(slices.Clone(prefix), s.exporter, "--config.file="+config,
		"--probe.hostname="+d.Host, "--probe.history-file="+d.HistoryFile,
		"--collector.disable-defaults", "--web.listen-address="+d.Addr, "--log.level=debug")...)
}

// StartMonitoring starts the webhook, Alertmanager with the shipped route
// and inhibitions, and Prometheus with the shipped rules (durations
// shortened) scraping every daemon, and waits until Prometheus evaluates.
func (s *Stack) StartMonitoring(t *testing.T, promBin, amBin string) {
	t.Helper()
	o := s.Opts

	s.Hook = startWebhook(t)
	amAddr := probetest.FreeAddr(t)
	s.amURL = "http://" + amAddr
	amConfig := filepath.Join(s.Dir, "alertmanager.yml")
	writeAlertmanagerConfig(t, amConfig, s.Hook.srv.URL+"/")
	amData := filepath.Join(s.Dir, "alertmanager-data")
	if err := os.Mkdir(amData, 0o700); err != nil {
		t.Fatal(err)
	}
	am := startProcess(t, "alertmanager", s.Dir, amBin, "--config.file="+amConfig, "--storage.path="+amData,
		"--web.listen-address="+amAddr, "--cluster.listen-address=")
	WaitReady(t, am, s.amURL+"/-/ready")

	s.shortRules = map[string][]string{}
	short := map[string]string{}                          // a shipped rule file: its shortened copy
	shortForOf := map[string]map[string][]time.Duration{} // an alert file: its alerts' shortened `for`
	for _, f := range ShippedRuleFiles() {
		orig, err := os.ReadFile(Shipped(t, f))
		if err != nil {
			t.Fatal(err)
		}
		shortened, changes, err := shortenRuleFile(orig, o.scale())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkOnlyDurationsChanged(t, f, orig, shortened)
		path := filepath.Join(s.Dir, f)
		if err := os.WriteFile(path, shortened, 0o644); err != nil {
			t.Fatal(err)
		}
		short[f] = path
		s.shortRules[f] = changes
		if slices.Contains(AlertFiles(), f) {
			shortForOf[f] = alertForDurations(t, shortened)
		}
	}
	if len(s.shortRules[AlertsFile]) == 0 {
		t.Fatalf("%s: no `for` to shorten; the test's timing assumes them", AlertsFile)
	}
	shortened := func(files ...string) []string {
		var out []string
		for _, f := range files {
			out = append(out, short[f])
		}
		return out
	}
	// A server loading files evaluates the alerts of those files, each
	// with the `for` of its shortened copy.
	alertsIn := func(files ...string) map[string][]time.Duration {
		out := map[string][]time.Duration{}
		for _, f := range files {
			maps.Copy(out, shortForOf[f])
		}
		return out
	}
	s.ShortFor = alertsIn(AlertFiles()...)
	jobsOf := func(daemons, servers []*Daemon) map[string][]string {
		jobs := map[string][]string{}
		for _, d := range daemons {
			jobs[Job] = append(jobs[Job], d.Addr)
		}
		for _, d := range servers {
			jobs[ServerJob] = append(jobs[ServerJob], d.Addr)
		}
		return jobs
	}
	var servers []promServer
	if o.Racks == 0 {
		servers = append(servers, s.startPrometheus(t, promBin, promServer{
			name:   "prometheus",
			files:  ShippedRuleFiles(),
			alerts: alertsIn(ShippedRuleFiles()...),
			up:     len(s.Daemons) + len(s.Servers),
		}, prometheusConfig(o.PromInterval, jobsOf(s.Daemons, s.Servers), amAddr, shortened(ShippedRuleFiles()...))))
		s.Prom = Proms{fleet: servers[0].api}
	} else {
		// Each rack a share of the clients and of the storage servers,
		// dealt out in turn, so that the fleet's rules must put together
		// what no rack has alone.
		var rackAddrs []string
		for r := range o.Racks {
			daemons, storage := dealt(s.Daemons, r, o.Racks), dealt(s.Servers, r, o.Racks)
			rack := s.startPrometheus(t, promBin, promServer{
				name:   fmt.Sprintf("prometheus-rack%d", r+1),
				files:  []string{RulesFile, AlertsFile},
				alerts: alertsIn(RulesFile, AlertsFile),
				up:     len(daemons) + len(storage),
			}, prometheusConfig(o.PromInterval, jobsOf(daemons, storage), amAddr, shortened(RulesFile, AlertsFile)))
			servers = append(servers, rack)
			s.Prom.racks = append(s.Prom.racks, rack.api)
			rackAddrs = append(rackAddrs, strings.TrimPrefix(rack.api.url, "http://"))
		}
		cfg := prometheusConfig(o.PromInterval, nil, amAddr, shortened(RulesFile, FleetAlertsFile))
		cfg["scrape_configs"] = []any{shippedFederateJob(t, rackAddrs)}
		global := s.startPrometheus(t, promBin, promServer{
			name:   "prometheus-global",
			files:  []string{RulesFile, FleetAlertsFile},
			alerts: alertsIn(RulesFile, FleetAlertsFile),
			up:     o.Racks,
		}, cfg)
		servers = append(servers, global)
		s.Prom.fleet = global.api
	}
	for _, srv := range servers {
		s.waitScrapingAndEvaluating(t, srv)
	}
	s.checkPageOrder(t)
	t.Logf("%s: daemons, Alertmanager and %d Prometheus up; rules shortened by %d: %s", s.Since(time.Now()), len(servers), o.scale(), strings.Join(s.shortRules[AlertsFile][:min(4, len(s.shortRules[AlertsFile]))], "; "))
}

// dealt is the share of the daemons that rack r of n scrapes: every n-th,
// from the r-th.
func dealt(daemons []*Daemon, r, n int) []*Daemon {
	var out []*Daemon
	for i, d := range daemons {
		if i%n == r {
			out = append(out, d)
		}
	}
	return out
}

// rackOf is the fleet's nodes that the Prometheus scraping d scrapes: d
// and its rack's other nodes, or every node on a stack of one Prometheus.
func (s *Stack) rackOf(d *Daemon) []*Daemon {
	if s.Opts.Racks == 0 {
		return s.Daemons
	}
	i := slices.Index(s.Daemons, d)
	return dealt(s.Daemons, i%s.Opts.Racks, s.Opts.Racks)
}

// InCgroup is the start of a command line that moves itself into c before
// it becomes the command that follows: that process and everything it
// forks (the daemon's probe workers) are in the group from their first
// I/O on.
func InCgroup(c *probetest.IOCgroup) []string {
	return []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, c.ProcsFile()}
}

func FormatSize(b int64) string { return strconv.FormatInt(b>>20, 10) + "MiB" }

// writeExporterConfig writes the stack's config: one target, stackTarget
// at targetPath, with one sequential probe of the stack's size.
func writeExporterConfig(t *testing.T, path string, o Options, targetPath, baselines string) {
	t.Helper()
	WriteTargetConfig(t, path, o, baselines, ExporterTarget{Name: Target, Path: targetPath})
}

// ExporterTarget is a target of a stack daemon's config.
type ExporterTarget struct {
	Name, Path string
	// Serves is the target's `serves` (a storage server's own target), or
	// "".
	Serves string
	// MinFreeRatio is the target's min_free_ratio, when not 0.
	MinFreeRatio float64
	// MoreProbes are probes beside stackProbe, each a YAML flow mapping.
	MoreProbes []string
	// MetadataProbe, with metadataFiles, makes the target's one probe a
	// metadata probe of that name and number of empty files, in place of
	// stackProbe and moreProbes.
	MetadataProbe string
	MetadataFiles int
}

// WriteTargetConfig writes a config of targets at o's interval and
// timeout, each with one sequential probe (stackProbe) of o's size and its
// moreProbes, or with its metadata probe.
func WriteTargetConfig(t *testing.T, path string, o Options, baselines string, targets ...ExporterTarget) {
	t.Helper()
	cfg := fmt.Sprintf("defaults:\n  interval: %s\n  timeout: %s\n  splay: %t\ntargets:\n", o.Interval, o.Timeout, o.Splay)
	for _, target := range targets {
		cfg += fmt.Sprintf("  - name: %s\n    path: %s\n", target.Name, target.Path)
		if target.Serves != "" {
			cfg += "    serves: " + target.Serves + "\n"
		}
		if target.MinFreeRatio != 0 {
			cfg += fmt.Sprintf("    min_free_ratio: %g\n", target.MinFreeRatio)
		}
		cfg += "    probes:\n"
		probes := append([]string{fmt.Sprintf("{name: %s, kind: sequential, workers: 1, file_size: %s, block_size: %s}", Probe, FormatSize(o.FileSize), FormatSize(blockSize))}, target.MoreProbes...)
		if target.MetadataProbe != "" {
			probes = []string{fmt.Sprintf("{name: %s, kind: metadata, workers: 1, files: %d, file_size: 0}", target.MetadataProbe, target.MetadataFiles)}
		}
		for _, p := range probes {
			cfg += "      - " + p + "\n"
		}
	}
	cfg += "baselines_file: " + baselines + "\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// characterize writes the baseline with the exporter's own command, the
// way an administrator would on a known-good node (the first daemon's, in
// its cgroup), and reads it back.
func (s *Stack) characterize(t *testing.T) {
	t.Helper()
	d := s.Daemons[0]
	s.CharacterizeOn(t, InCgroup(d.Cgroup), s.configFile, d.Host)
}

// CharacterizeOn runs characterize with a config, its command line begun
// with prefix, and reads back the baseline it wrote.
func (s *Stack) CharacterizeOn(t *testing.T, prefix []string, configFile, host string) {
	t.Helper()
	s.RunCharacterize(t, prefix, configFile, host)
	s.loadBaseline(t)
}

// RunCharacterize runs characterize with a config, its command line begun
// with prefix: it writes the config's baselines_file.
func (s *Stack) RunCharacterize(t *testing.T, prefix []string, configFile, host string) {
	t.Helper()
	args := []string{s.exporter, "characterize", "--config.file=" + configFile, "--probe.hostname=" + host,
		"--runs=3", "--run-spacing=" + s.Opts.CharacterizeSpacing.String()}
	argv := append(slices.Clone(prefix), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("%s:\n%s", strings.Join(args[1:], " "), bytes.TrimSpace(out))
}

func (s *Stack) loadBaseline(t *testing.T) {
	t.Helper()
	b, err := plateau.LoadBaselines(filepath.Join(s.Dir, "baselines.yml"))
	if err != nil {
		t.Fatalf("reading the characterized baselines: %v", err)
	}
	s.Baseline = map[string]float64{}
	for _, op := range []string{"write", "read"} {
		e := b.Entries[plateau.BaselineKey{Target: Target, Probe: Probe, Op: op}]
		if e == nil || e.Unit != probe.UnitBytesPerSecond || e.Value <= 0 {
			t.Fatalf("characterized baselines have no %s throughput for %s/%s: %+v", op, Target, Probe, e)
		}
		s.Baseline[op] = e.Value
	}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkPageOrder checks that the file-system page waits less than the
// node page: it can only inhibit the node pages it explains if it fires
// first.
func (s *Stack) checkPageOrder(t *testing.T) {
	t.Helper()
	node, fleet := s.ShortFor[RegressionAlert], s.ShortFor[FsRegressionAlert]
	if len(node) != 1 || len(fleet) != 1 {
		t.Fatalf("%s have %d rules %s and %d %s, want one each", AlertFiles(), len(node), RegressionAlert, len(fleet), FsRegressionAlert)
	}
	t.Logf("the regression pages wait for %s (node) and %s (file system)", node[0], fleet[0])
	if fleet[0] >= node[0] {
		t.Fatalf("%s waits for %s and %s for %s: the file system alert must have the shorter `for` to inhibit the node pages", FsRegressionAlert, fleet[0], RegressionAlert, node[0])
	}
}

// RequirePrereqs fails, naming what is missing and where it comes
// from, unless this process can run the alerting integration tests.
func RequirePrereqs(t *testing.T) (prometheus, alertmanager string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the alerting integration tests need root (loop device, mount, blkio cgroup); run `make integration` as root (euid is %d)", os.Geteuid())
	}
	var missing []string
	look := func(name, pkg string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", name, pkg))
		}
		return p
	}
	prometheus = look("prometheus", "prometheus")
	alertmanager = look("prometheus-alertmanager", "prometheus-alertmanager")
	look("mkfs.ext4", "e2fsprogs")
	look("losetup", "util-linux")
	look("mount", "mount")
	look("go", "the Go toolchain, to build plateau_exporter")
	if len(missing) > 0 {
		t.Fatalf("missing commands for the alerting integration tests: %s (.ci/packages.txt lists the packages)", strings.Join(missing, ", "))
	}
	return prometheus, alertmanager
}

// Process is a server the tests started, in its own process group so that
// cleanup reaches everything it forked (procgroup).
type Process struct {
	name string
	Cmd  *exec.Cmd
	Log  string
	pg   *procgroup.Proc
}

// startProcess starts argv with its output in a log file of dir, and stops
// its process group in cleanup: SIGTERM, then SIGKILL if it lingers 20s,
// which fails the test (a server must stop on SIGTERM).
func startProcess(t *testing.T, name, dir string, argv ...string) *Process {
	t.Helper()
	p := &Process{name: name, Log: filepath.Join(dir, name+".log"), Cmd: exec.Command(argv[0], argv[1:]...)}
	p.pg = procgroup.Start(t, p.Cmd, procgroup.Options{Name: name, Log: p.Log, Grace: 20 * time.Second, SlowStopFails: true})
	return p
}

// Exited says whether the process has exited.
func (p *Process) Exited() bool { return p.pg.Exited() }

// TailFile is procgroup.TailFile: the last n lines of a log.
func TailFile(path string, n int) string { return procgroup.TailFile(path, n) }

// WaitReady waits until the process answers 200 on url.
func WaitReady(t *testing.T, p *Process, url string) {
	t.Helper()
	WaitFor(t, p.name+" to answer "+url, 2*time.Minute, func() (bool, error) {
		if p.Exited() {
			t.Fatalf("%s exited while starting; its log:\n%s", p.name, TailFile(p.Log, 40))
		}
		_, err := HTTPGet(url)
		return err == nil, err
	})
}

// WaitFor polls cond every waitPoll until it holds, failing the test at
// the deadline with the last error cond gave.
func WaitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	wait.UntilWith(t, wait.Options{Every: waitPoll}, what, timeout, cond)
}

// HTTPClient is what the stack asks its servers with: a deadline on every
// request, so that a hung server fails a wait instead of blocking it.
var HTTPClient = &http.Client{Timeout: 10 * time.Second}

// HTTPGet returns the body of a 200 answer to GET url, or an error that
// names the status and carries the body.
func HTTPGet(url string) ([]byte, error) {
	resp, err := HTTPClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// Timeline records, with times, what the alerting pipeline did: every
// alert's states in Prometheus (pending, firing, gone) and in Alertmanager
// (active, or suppressed and by what), every notification the webhook got,
// and the test's phases. It logs each change as it sees it, and the whole
// story at the end, with every probe run of every daemon when the test
// failed, so that a failure can be read off the log.
type Timeline struct {
	s      *Stack
	mu     sync.Mutex
	events []timelineEvent
	prom   map[string]string // alert -> state in Prometheus
	am     map[string]string // alert -> state in Alertmanager
	hookN  int
	errs   map[string]bool
	// host is how busy the machine was, every few seconds: runs slow
	// for all daemons at once are the machine's doing when other work
	// presses on it, and a failure's timeline should show it.
	host      []timelineEvent
	lastSteal uint64
}

type timelineEvent struct {
	at   time.Time
	what string
}

// WatchAlerts starts a timeline, polling every waitPoll until cleanup.
func (s *Stack) WatchAlerts(t *testing.T) *Timeline {
	tl := &Timeline{s: s, prom: map[string]string{}, am: map[string]string{}, errs: map[string]bool{}}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(waitPoll)
		defer tick.Stop()
		for i := 0; ; i++ {
			tl.observe(t)
			if i%10 == 0 {
				tl.sampleHost()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
		tl.observe(t)
		tl.summary(t)
	})
	return tl
}

// AlertKey names an alert for the timeline: its name, severity, node (the
// daemon's host name rather than its address) and op.
func (s *Stack) AlertKey(l map[string]string) string {
	k := l["alertname"] + "{" + l["severity"] + "}"
	if in := l["instance"]; in != "" {
		k += " " + s.HostOf(in)
	} else if tg := l["target"]; tg != "" {
		k += " target=" + tg
	}
	if op := l["op"]; op != "" {
		k += " op=" + op
	}
	return k
}

// Mark records a step of the test.
func (tl *Timeline) Mark(t *testing.T, format string, args ...any) time.Time {
	t.Helper()
	now := time.Now()
	what := fmt.Sprintf(format, args...)
	tl.Add(t, now, "TEST: "+what)
	return now
}

func (tl *Timeline) Add(t *testing.T, at time.Time, what string) {
	tl.mu.Lock()
	tl.events = append(tl.events, timelineEvent{at, what})
	tl.mu.Unlock()
	t.Logf("%s: %s", tl.s.Since(at), what)
}

func (tl *Timeline) fail(t *testing.T, what string, err error) {
	if msg := what + ": " + err.Error(); !tl.errs[msg] {
		tl.errs[msg] = true
		tl.Add(t, time.Now(), msg)
	}
}

func (tl *Timeline) observe(t *testing.T) {
	now := time.Now()
	if alerts, err := tl.s.Prom.Alerts(); err != nil {
		tl.fail(t, "Prometheus alerts", err)
	} else {
		seen := map[string]string{}
		for _, a := range alerts {
			k := tl.s.AlertKey(a.Labels)
			seen[k] = a.State
			if tl.prom[k] != a.State {
				tl.Add(t, now, fmt.Sprintf("Prometheus: %s %s (value %s)", k, a.State, a.Value))
			}
		}
		for k := range tl.prom {
			if _, ok := seen[k]; !ok {
				tl.Add(t, now, fmt.Sprintf("Prometheus: %s gone (resolved)", k))
			}
		}
		tl.prom = seen
	}
	if alerts, err := tl.s.AmAlerts(""); err != nil {
		tl.fail(t, "Alertmanager alerts", err)
	} else {
		byFP := map[string]string{}
		for _, a := range alerts {
			byFP[a.Fingerprint] = tl.s.AlertKey(a.Labels)
		}
		seen := map[string]string{}
		for _, a := range alerts {
			k, st := tl.s.AlertKey(a.Labels), a.Status.State
			for _, fp := range a.Status.InhibitedBy {
				st += ", inhibited by " + OrElse(byFP[fp], fp)
			}
			seen[k] = st
			if tl.am[k] != st {
				tl.Add(t, now, fmt.Sprintf("Alertmanager: %s %s", k, st))
			}
		}
		for k := range tl.am {
			if _, ok := seen[k]; !ok {
				tl.Add(t, now, fmt.Sprintf("Alertmanager: %s gone", k))
			}
		}
		tl.am = seen
	}
	got := tl.s.Hook.Received()
	for _, a := range got[tl.hookN:] {
		tl.Add(t, a.At, fmt.Sprintf("webhook: %s %s", a.Status, tl.s.AlertKey(a.Labels)))
	}
	tl.hookN = len(got)
}

// sampleHost records the load average, the pressure stall information
// of CPU, I/O and memory (the share of the last 10s in which some task
// waited; throttled probes count in io) and the CPU time the hypervisor
// stole since the last sample.
func (tl *Timeline) sampleHost() {
	var b strings.Builder
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "load %s", strings.Fields(string(data))[0])
	}
	for _, res := range []string{"cpu", "io", "memory"} {
		data, err := os.ReadFile("/proc/pressure/" + res)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(strings.SplitN(string(data), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				fmt.Fprintf(&b, ", %s pressure %s%%", res, v)
			}
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		// "cpu user nice system idle iowait irq softirq steal ..." (proc(5))
		if f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0]); len(f) > 8 {
			if steal, err := strconv.ParseUint(f[8], 10, 64); err == nil {
				if tl.lastSteal > 0 {
					fmt.Fprintf(&b, ", steal %d ticks", steal-tl.lastSteal)
				}
				tl.lastSteal = steal
			}
		}
	}
	tl.mu.Lock()
	tl.host = append(tl.host, timelineEvent{time.Now(), "host: " + b.String()})
	tl.mu.Unlock()
}

// OrElse returns the first of its arguments that is not empty.
func OrElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (tl *Timeline) summary(t *testing.T) {
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	if t.Failed() {
		events = append(events, tl.host...)
		for _, d := range tl.s.Daemons {
			runs, _ := d.Runs.Snapshot()
			for i, r := range runs {
				events = append(events, timelineEvent{r.End, fmt.Sprintf("run %d of %s ended: %s", i+1, d.Host, r)})
			}
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %-9s %s", tl.s.Since(e.at), e.what)
	}
	what := "alerts"
	if t.Failed() {
		what = "alerts and probe runs"
	}
	t.Logf("timeline of the %s (t+0 is when the daemons were up):%s", what, b.String())
}
