package alertstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
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
	// FsIncidentAlert fires per node of the file-system page's incident
	// until it recovers, notifies no one (severity none) and holds that
	// node's own pages back in Alertmanager; see fleet_alerts.yml.
	FsIncidentAlert = "PlateauFileSystemIncident"

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
	// digest and timeline are what a failed test repeats last
	// (ReportFailuresLast); timeline is WatchAlerts'.
	digest   *failureDigest
	timeline *Timeline
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
	s := &Stack{Opts: o}
	s.ReportFailuresLast(t)
	promBin, amBin := RequirePrereqs(t)
	s.Dir = t.TempDir()
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

// OrElse returns the first of its arguments that is not empty.
func OrElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startPrometheus starts one Prometheus of the stack with cfg, and
// returns p with its API.
func (s *Stack) startPrometheus(t *testing.T, promBin string, p promServer, cfg map[string]any) promServer {
	t.Helper()
	addr := probetest.FreeAddr(t)
	config := filepath.Join(s.Dir, p.name+".yml")
	writeYAML(t, config, cfg)
	data := filepath.Join(s.Dir, p.name+"-data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// The resend delay shortened as the rules are (1m by default): an
	// alert's annotations reach Alertmanager again within a second, as
	// its description changes (the servers a file-system page names).
	proc := startProcess(t, p.name, s.Dir, promBin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--rules.alert.resend-delay=1s")
	p.api = PromAPI{url: "http://" + addr}
	WaitReady(t, proc, p.api.url+"/-/ready")
	return p
}

// shippedFederateJob is the scrape job of the shipped federate.yml, as a
// site merges it into its global Prometheus's config: pulling from the
// racks at addrs.
func shippedFederateJob(t *testing.T, addrs []string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(Shipped(t, FederateFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ScrapeConfigs []map[string]any `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", FederateFile, err)
	}
	if len(f.ScrapeConfigs) != 1 {
		t.Fatalf("%s: %d scrape_configs, want 1", FederateFile, len(f.ScrapeConfigs))
	}
	job := f.ScrapeConfigs[0]
	job["static_configs"] = []any{map[string]any{"targets": addrs}}
	return job
}

// waitScrapingAndEvaluating waits until one Prometheus of the stack
// scrapes every target it has and has evaluated every rule it loaded
// without error, and checks that it runs the shortened `for` of the
// alerts of its files, and no alert of another file.
func (s *Stack) waitScrapingAndEvaluating(t *testing.T, p promServer) {
	t.Helper()
	WaitFor(t, p.name+" to scrape every target", 2*time.Minute, func() (bool, error) {
		v, err := p.api.query(`up == 1`)
		if err == nil && len(v) != p.up {
			err = fmt.Errorf("%d of %d targets up", len(v), p.up)
		}
		return err == nil, err
	})
	type apiRule struct {
		Name      string  `json:"name"`
		Type      string  `json:"type"`
		Health    string  `json:"health"`
		LastError string  `json:"lastError"`
		Duration  float64 `json:"duration"`
	}
	var groups struct {
		Groups []struct {
			Name  string    `json:"name"`
			Rules []apiRule `json:"rules"`
		} `json:"groups"`
	}
	WaitFor(t, p.name+" to evaluate every rule", 2*time.Minute, func() (bool, error) {
		if err := p.api.get("/api/v1/rules", nil, &groups); err != nil {
			return false, err
		}
		n := 0
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					return false, fmt.Errorf("rule %s in %s: health %q %s", r.Name, g.Name, r.Health, r.LastError)
				}
			}
		}
		return n > 0, nil
	})
	// It runs the shortened rules of its files: every alert's `for`, by
	// name (a name may have a rule per severity), as the shortened file
	// has it.
	loaded := map[string][]time.Duration{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				loaded[r.Name] = append(loaded[r.Name], time.Duration(r.Duration*float64(time.Second)))
			}
		}
	}
	for name := range loaded {
		if p.alerts[name] == nil {
			t.Fatalf("%s evaluates %s, which none of its files %v has", p.name, name, p.files)
		}
	}
	for name, w := range p.alerts {
		got := loaded[name]
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("%s loaded %s with for %v, want the shortened %v", p.name, name, got, w)
		}
	}
}

// LogSeriesHeld logs how many series each Prometheus of the stack holds
// in its head block: what the split costs where.
func (s *Stack) LogSeriesHeld(t *testing.T) {
	t.Helper()
	var parts []string
	for i, srv := range s.Prom.all() {
		var st struct {
			HeadStats struct {
				NumSeries int `json:"numSeries"`
			} `json:"headStats"`
		}
		if err := srv.get("/api/v1/status/tsdb", nil, &st); err != nil {
			t.Logf("series held: %v", err)
			return
		}
		name := "fleet"
		if i < len(s.Prom.racks) {
			name = fmt.Sprintf("rack %d", i+1)
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, st.HeadStats.NumSeries))
	}
	t.Logf("series held by each Prometheus: %s", strings.Join(parts, ", "))
}

// HeldIn returns the alerts named name that Prometheus holds now, pending
// or firing, for the instance when it is not "".
func (s *Stack) HeldIn(name, instance string) ([]PromAlert, error) {
	all, err := s.Prom.Alerts()
	if err != nil {
		return nil, err
	}
	var out []PromAlert
	for _, a := range all {
		if a.Labels["alertname"] == name && (instance == "" || a.Labels["instance"] == instance) {
			out = append(out, a)
		}
	}
	return out, nil
}

// AmAlerts lists the alerts Alertmanager holds (active, suppressed and
// unprocessed), with a filter such as alertname="X" or none.
func (s *Stack) AmAlerts(filter string) ([]AMAlert, error) {
	u := s.amURL + "/api/v2/alerts"
	if filter != "" {
		u += "?filter=" + url.QueryEscape(filter)
	}
	body, err := HTTPGet(u)
	if err != nil {
		return nil, err
	}
	var alerts []AMAlert
	if err := json.Unmarshal(body, &alerts); err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return alerts, nil
}

func watchRuns(t *testing.T, metricsURL string, every time.Duration) *RunWatcher {
	return WatchTargetRuns(t, metricsURL, Target, every)
}

// WatchTargetRuns follows the runs of target's stackProbe.
func WatchTargetRuns(t *testing.T, metricsURL, target string, every time.Duration) *RunWatcher {
	return WatchProbeRuns(t, metricsURL, WatchedProbe{Target: target, Name: Probe}, every)
}
