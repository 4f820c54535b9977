//go:build integration

package dashboards

// Set-up shared by the alerting integration tests: one or more real
// plateau_exporter daemons probing one loop-mounted ext4, each from inside
// its own blkio cgroup, with a baseline characterized on that device; the
// Prometheus of the Debian package scraping them all with the shipped
// rule files (only their `for` and keep_firing_for
// shortened); the Alertmanager of the Debian package with the shipped route
// and inhibitions, posting to a webhook inside the test. Everything runs on
// free 127.0.0.1 ports with its own storage, never on a system service, and
// is torn down in t.Cleanup in reverse order of set-up, also when the test
// fails.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const (
	stackTarget = "loop"
	stackProbe  = "seq"
	// stackJob is the job the stack's Prometheus scrapes its daemons as.
	stackJob = "plateau"

	// The page of a node, and of a file system (many nodes at once), and
	// the chronic warning; see alerts.yml.
	regressionAlert   = "PlateauProbeRegression"
	fsRegressionAlert = "PlateauFileSystemRegression"
	belowPlateauAlert = "PlateauProbeBelowPlateau"

	// minChangeRuns is how many successful runs a probe needs before the
	// daemon exports plateau_probe_change_ratio (the store's minChangeRuns:
	// the 4 recent runs, 10 runs of normal, 3 more for the first normal
	// run's rolling mean). The tests wait for the series itself, and use
	// this only to size their deadlines.
	minChangeRuns = plateau.MinNormalRuns + 2*plateau.ChangeRuns - 1

	// A probe every few seconds in the single-node stack, so that the
	// daemon's 24-run median of the ratio and the 37-run history of the
	// change ratio fill in a few minutes.
	probeInterval = 5 * time.Second
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
	devicePlateau = 400e6
	fileSize      = 256 << 20
	loopSize      = 1 << 30

	// throttleFraction throttles the device to 40% of its measured read rate.
	throttleFraction = 0.4

	// waitPoll is how often the tests look at Prometheus, Alertmanager and
	// the webhook; every wait has a deadline of minutes on top.
	waitPoll = 500 * time.Millisecond
)

// requireAlertingPrereqs fails, naming what is missing and where it comes
// from, unless this process can run the alerting integration tests.
func requireAlertingPrereqs(t *testing.T) (prometheus, alertmanager string) {
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

// process is a server the tests started, in its own process group so that
// cleanup reaches everything it forked (procgroup).
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	pg   *procgroup.Proc
}

// startProcess starts argv with its output in a log file of dir, and stops
// its process group in cleanup: SIGTERM, then SIGKILL if it lingers 20s,
// which fails the test (a server must stop on SIGTERM).
func startProcess(t *testing.T, name, dir string, argv ...string) *process {
	t.Helper()
	p := &process{name: name, log: filepath.Join(dir, name+".log"), cmd: exec.Command(argv[0], argv[1:]...)}
	p.pg = procgroup.Start(t, p.cmd, procgroup.Options{Name: name, Log: p.log, Grace: 20 * time.Second, SlowStopFails: true})
	return p
}

func (p *process) exited() bool { return p.pg.Exited() }

func tailFile(path string, n int) string { return procgroup.TailFile(path, n) }

// waitReady waits until the process answers 200 on url.
func waitReady(t *testing.T, p *process, url string) {
	t.Helper()
	waitFor(t, p.name+" to answer "+url, 2*time.Minute, func() (bool, error) {
		if p.exited() {
			t.Fatalf("%s exited while starting; its log:\n%s", p.name, tailFile(p.log, 40))
		}
		_, err := httpGet(url)
		return err == nil, err
	})
}

// waitFor polls cond every waitPoll until it holds, failing the test at
// the deadline with the last error cond gave.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	wait.UntilWith(t, wait.Options{Every: waitPoll}, what, timeout, cond)
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func httpGet(url string) ([]byte, error) {
	resp, err := httpClient.Get(url)
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

// shortenRuleFile returns a rule file with every `for`, keep_firing_for and group interval
// divided by scale (rounded, at least 1s) and nothing else changed, and a
// line per change. A `for` of 0s stays 0s: an alert that fires at the
// evaluation its condition holds (the file-system page) must do so here
// too. It edits the YAML node tree, so expressions, labels and
// annotations are re-emitted from their parsed values untouched.
func shortenRuleFile(src []byte, scale int) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, fmt.Errorf("parsing rule file: %w", err)
	}
	var changes []string
	groups := mappingValue(doc.Content[0], "groups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return nil, nil, errors.New("rule file has no groups list")
	}
	for _, g := range groups.Content {
		// A group's own interval (the slow plateau.causes.day) shrinks like
		// the durations, or it would not evaluate within a test.
		if iv := mappingValue(g, "interval"); iv != nil {
			d, err := model.ParseDuration(iv.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("line %d: interval %q: %w", iv.Line, iv.Value, err)
			}
			short := max(time.Duration(d)/time.Duration(scale), time.Second).Round(time.Second)
			changes = append(changes, fmt.Sprintf("group %s interval: %s -> %s", mappingValue(g, "name").Value, iv.Value, model.Duration(short)))
			iv.Value = model.Duration(short).String()
		}
		rules := mappingValue(g, "rules")
		if rules == nil {
			continue
		}
		for _, r := range rules.Content {
			name := mappingValue(r, "alert")
			for i := 0; i+1 < len(r.Content); i += 2 {
				key, val := r.Content[i].Value, r.Content[i+1]
				if key != "for" && key != "keep_firing_for" {
					continue
				}
				d, err := model.ParseDuration(val.Value)
				if err != nil {
					return nil, nil, fmt.Errorf("line %d: %s %q: %w", val.Line, key, val.Value, err)
				}
				if d == 0 {
					continue
				}
				short := max(time.Duration(d)/time.Duration(scale), time.Second).Round(time.Second)
				changes = append(changes, fmt.Sprintf("%s %s: %s -> %s", name.Value, key, val.Value, model.Duration(short)))
				val.Value = model.Duration(short).String()
			}
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("writing rule file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("writing rule file: %w", err)
	}
	return out.Bytes(), changes, nil
}

// alertForDurations returns the `for` of every alert of a rule file, by
// name (0 where a rule has none).
func alertForDurations(t *testing.T, src []byte) map[string][]time.Duration {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string         `yaml:"alert"`
				For   model.Duration `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(src, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string][]time.Duration{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = append(out[r.Alert], time.Duration(r.For))
			}
		}
	}
	return out
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkOnlyDurationsChanged fails unless short is orig with nothing but
// `for`, keep_firing_for and group interval values changed: same groups,
// same rules in the same order, expressions byte for byte.
func checkOnlyDurationsChanged(t *testing.T, name string, orig, short []byte) {
	t.Helper()
	type file struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var a, b file
	if err := yaml.Unmarshal(orig, &a); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := yaml.Unmarshal(short, &b); err != nil {
		t.Fatalf("shortened %s: %v", name, err)
	}
	if len(a.Groups) != len(b.Groups) {
		t.Fatalf("shortened %s has %d groups, the original %d", name, len(b.Groups), len(a.Groups))
	}
	for gi := range a.Groups {
		ra, _ := a.Groups[gi]["rules"].([]any)
		rb, _ := b.Groups[gi]["rules"].([]any)
		if len(ra) != len(rb) {
			t.Fatalf("%s group %d: %d rules shortened, %d originally", name, gi, len(rb), len(ra))
		}
		ga, gb := withoutKeys(a.Groups[gi], "rules", "interval"), withoutKeys(b.Groups[gi], "rules", "interval")
		if !reflect.DeepEqual(ga, gb) {
			t.Fatalf("%s group %d changed: %v -> %v", name, gi, ga, gb)
		}
		for ri := range ra {
			ma, _ := ra[ri].(map[string]any)
			mb, _ := rb[ri].(map[string]any)
			ea, _ := ma["expr"].(string)
			eb, _ := mb["expr"].(string)
			if ea == "" || ea != eb {
				t.Fatalf("%s group %d rule %d: expression changed from %q to %q", name, gi, ri, ea, eb)
			}
			ka, kb := withoutKeys(ma, "for", "keep_firing_for"), withoutKeys(mb, "for", "keep_firing_for")
			if !reflect.DeepEqual(ka, kb) {
				t.Fatalf("%s group %d rule %d changed beyond its durations: %v -> %v", name, gi, ri, ka, kb)
			}
		}
	}
}

func withoutKeys(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// webhookMessage is Alertmanager's webhook payload, version 4
// (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
type webhookMessage struct {
	Version  string         `json:"version"`
	Status   string         `json:"status"`
	Receiver string         `json:"receiver"`
	Alerts   []webhookAlert `json:"alerts"`
}

type webhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Fingerprint string            `json:"fingerprint"`
}

// receivedAlert is one alert of one notification, with when it arrived.
type receivedAlert struct {
	At time.Time
	webhookAlert
}

// webhook is the receiver Alertmanager notifies.
type webhook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts []receivedAlert
	errs   []string
}

func startWebhook(t *testing.T) *webhook {
	t.Helper()
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var m webhookMessage
		err := json.NewDecoder(r.Body).Decode(&m)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil || m.Version != "4" {
			w.errs = append(w.errs, fmt.Sprintf("undecodable notification (version %q): %v", m.Version, err))
			http.Error(rw, "bad payload", http.StatusBadRequest)
			return
		}
		now := time.Now()
		for _, a := range m.Alerts {
			w.alerts = append(w.alerts, receivedAlert{At: now, webhookAlert: a})
		}
	}))
	t.Cleanup(func() {
		w.srv.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, e := range w.errs {
			t.Errorf("webhook: %s", e)
		}
	})
	return w
}

// received returns every alert notified so far, oldest first.
func (w *webhook) received() []receivedAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.alerts)
}

// first returns the first notified alert that match accepts.
func (w *webhook) first(match func(receivedAlert) bool) (receivedAlert, bool) {
	for _, a := range w.received() {
		if match(a) {
			return a, true
		}
	}
	return receivedAlert{}, false
}

// promAPI queries the test's Prometheus over its HTTP API
// (https://prometheus.io/docs/prometheus/latest/querying/api/).
type promAPI struct{ url string }

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

func (p promAPI) get(path string, params url.Values, data any) error {
	body, err := httpGet(p.url + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (p promAPI) alerts() ([]promAlert, error) {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &d)
	return d.Alerts, err
}

type promSample struct {
	Metric map[string]string
	Value  float64
}

// query evaluates an instant vector expression now.
func (p promAPI) query(q string) ([]promSample, error) {
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", q, d.ResultType)
	}
	var out []promSample
	for _, r := range d.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", q, s, err)
		}
		out = append(out, promSample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// countOverRange returns, per series, how many samples the selector had
// from since until now: every sample Prometheus stored, not only those a
// range query's steps would land on.
func (p promAPI) countOverRange(selector string, since time.Time) ([]promSample, error) {
	secs := int64(math.Ceil(time.Since(since).Seconds())) + 1
	return p.query(fmt.Sprintf("count_over_time(%s[%ds])", selector, secs))
}

// stackProm is every Prometheus of a stack: the one that evaluates the
// fleet's alerts, and the racks' that scrape the nodes when the stack is
// split as README.md's "Prometheus for a fleet" (stackOptions.racks); with
// no racks, fleet is the one Prometheus that does everything. Its queries
// ask every server and put the answers together: an alert is evaluated on
// one of them (the node alerts on a rack, the fleet's at the top), and a
// node's own series are on its rack only.
type stackProm struct {
	fleet promAPI
	racks []promAPI
}

// all are the racks' servers and the fleet's.
func (p stackProm) all() []promAPI { return append(slices.Clone(p.racks), p.fleet) }

// nodes are the servers that scrape the nodes.
func (p stackProm) nodes() []promAPI {
	if len(p.racks) > 0 {
		return p.racks
	}
	return []promAPI{p.fleet}
}

// askEach asks each server and puts the answers together.
func askEach[T any](servers []promAPI, ask func(promAPI) ([]T, error)) ([]T, error) {
	var out []T
	for _, srv := range servers {
		got, err := ask(srv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", srv.url, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// query evaluates q on every server.
func (p stackProm) query(q string) ([]promSample, error) {
	return askEach(p.all(), func(srv promAPI) ([]promSample, error) { return srv.query(q) })
}

// queryNodes evaluates q on the servers that scrape the nodes, for the
// nodes' own series and records (the top one holds copies of some).
func (p stackProm) queryNodes(q string) ([]promSample, error) {
	return askEach(p.nodes(), func(srv promAPI) ([]promSample, error) { return srv.query(q) })
}

// queryOne evaluates an expression that must give exactly one sample,
// over every server.
func (p stackProm) queryOne(q string) (float64, error) {
	s, err := p.query(q)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1: %v", q, len(s), s)
	}
	return s[0].Value, nil
}

// countOverRange is promAPI.countOverRange on every server.
func (p stackProm) countOverRange(selector string, since time.Time) ([]promSample, error) {
	return askEach(p.all(), func(srv promAPI) ([]promSample, error) { return srv.countOverRange(selector, since) })
}

// alerts are the pending and firing alerts of every server.
func (p stackProm) alerts() ([]promAlert, error) {
	return askEach(p.all(), promAPI.alerts)
}

// probeRun is one successful run of a probe (the stack's, unless a
// watcher follows another), as a daemon exported it.
type probeRun struct {
	End     time.Time
	Seconds float64
	// Ops are the probe's ops, in the order it runs them.
	Ops   []string
	Ratio map[string]float64 // to the baseline, by op
	// Rate is bytes per second by op, or operations per second for a
	// metadata probe's.
	Rate     map[string]float64
	metadata bool
	// Change and Noise are plateau_probe_change_fast_ratio and
	// plateau_probe_change_fast_noise_ratio (what the page reads) after the
	// run, by op; empty until
	// the probe has the runs for them.
	Change map[string]float64
	Noise  map[string]float64
}

func (r probeRun) Start() time.Time {
	return r.End.Add(-time.Duration(r.Seconds * float64(time.Second)))
}

func (r probeRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.2fs", r.Seconds)
	for _, op := range r.Ops {
		var about []string
		if ratio, ok := r.Ratio[op]; ok {
			about = append(about, fmt.Sprintf("%.2f of baseline", ratio))
		}
		if c, ok := r.Change[op]; ok {
			about = append(about, fmt.Sprintf("change %.2f noise %.3f", c, r.Noise[op]))
		}
		if r.metadata {
			fmt.Fprintf(&b, "; %s %.0f/s", op, r.Rate[op])
		} else {
			fmt.Fprintf(&b, "; %s %.0f MB/s", op, r.Rate[op]/1e6)
		}
		if len(about) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(about, ", "))
		}
	}
	return b.String()
}

// runWatcher follows a daemon's /metrics and records every successful run
// of one probe. The daemon keeps only the last result, so it polls well
// inside one probe interval.
type runWatcher struct {
	url   string
	probe watchedProbe
	mu    sync.Mutex
	runs  []probeRun
	err   error
}

// watchedProbe is the probe a runWatcher follows: target and name, and
// whether it is a metadata probe (its ops and their unit).
type watchedProbe struct {
	target, name string
	metadata     bool
}

// ops are the probe's ops, in the order it runs them.
func (p watchedProbe) ops() []string {
	if p.metadata {
		return []string{"create", "stat", "read", "remove"}
	}
	return []string{"write", "read"}
}

// rateFamily is the family of the probe's rates.
func (p watchedProbe) rateFamily() string {
	if p.metadata {
		return "plateau_probe_operations_per_second"
	}
	return "plateau_probe_throughput_bytes_per_second"
}

func watchRuns(t *testing.T, metricsURL string, every time.Duration) *runWatcher {
	return watchTargetRuns(t, metricsURL, stackTarget, every)
}

// watchTargetRuns follows the runs of target's stackProbe.
func watchTargetRuns(t *testing.T, metricsURL, target string, every time.Duration) *runWatcher {
	return watchProbeRuns(t, metricsURL, watchedProbe{target: target, name: stackProbe}, every)
}

// watchProbeRuns follows the runs of p.
func watchProbeRuns(t *testing.T, metricsURL string, p watchedProbe, every time.Duration) *runWatcher {
	w := &runWatcher{url: metricsURL, probe: p}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-stopped })
	return w
}

func (w *runWatcher) poll() {
	run, err := scrapeRun(w.url, w.probe)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	if err != nil || run == nil {
		return
	}
	if n := len(w.runs); n == 0 || run.End.After(w.runs[n-1].End) {
		w.runs = append(w.runs, *run)
	}
}

// snapshot returns the runs seen so far and the last scrape error.
func (w *runWatcher) snapshot() ([]probeRun, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.runs), w.err
}

// count is the number of runs seen so far.
func (w *runWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// firstRunStartedAfter waits for a run that started after t0, so that all
// of its I/O saw what was set at t0.
func (w *runWatcher) firstRunStartedAfter(t *testing.T, what string, t0 time.Time, interval time.Duration) probeRun {
	t.Helper()
	var found probeRun
	waitFor(t, "a probe run started after "+what, 10*interval+time.Minute, func() (bool, error) {
		runs, err := w.snapshot()
		for _, r := range runs {
			if r.Start().After(t0) {
				found = r
				return true, nil
			}
		}
		return false, err
	})
	return found
}

// medianRate is the median rate of op over the runs that ended before t0:
// a daemon's own unthrottled rate, which throttles and checks are
// relative to.
func (w *runWatcher) medianRate(op string, t0 time.Time) float64 {
	runs, _ := w.snapshot()
	var rates []float64
	for _, r := range runs {
		if r.End.Before(t0) {
			rates = append(rates, r.Rate[op])
		}
	}
	if len(rates) == 0 {
		return 0
	}
	sort.Float64s(rates)
	return medianOf(rates)
}

// scrapeRun reads the last successful run of p from a daemon, or nil when
// there is none yet with a ratio (with a rate, for a metadata probe,
// which may have no baseline).
func scrapeRun(metricsURL string, p watchedProbe) (*probeRun, error) {
	fams, _, err := scrapeFamilies(metricsURL)
	if err != nil {
		return nil, err
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		return probetest.FamilyValue(fams, name, labels)
	}
	id := map[string]string{"target": p.target, "probe": p.name}
	lastSuccess, ok1 := value("plateau_probe_last_success_timestamp_seconds", id)
	lastRun, ok2 := value("plateau_probe_last_run_timestamp_seconds", id)
	seconds, ok3 := value("plateau_probe_duration_seconds", id)
	// The duration is the last run's: it belongs to the last success only
	// when the last run succeeded.
	if !ok1 || !ok2 || !ok3 || lastSuccess != lastRun {
		return nil, nil
	}
	run := &probeRun{
		End:      time.Unix(0, int64(lastSuccess*1e9)),
		Seconds:  seconds,
		Ops:      p.ops(),
		Ratio:    map[string]float64{},
		Rate:     map[string]float64{},
		Change:   map[string]float64{},
		Noise:    map[string]float64{},
		metadata: p.metadata,
	}
	for _, op := range run.Ops {
		l := map[string]string{"target": p.target, "probe": p.name, "op": op}
		if r, ok := value("plateau_probe_ratio", l); ok {
			run.Ratio[op] = r
		} else if !p.metadata {
			return nil, nil
		}
		rate, ok := value(p.rateFamily(), l)
		if !ok {
			return nil, nil
		}
		run.Rate[op] = rate
		if c, ok := value("plateau_probe_change_fast_ratio", l); ok {
			run.Change[op] = c
			run.Noise[op], _ = value("plateau_probe_change_fast_noise_ratio", l)
		}
	}
	return run, nil
}

// stackOptions say what a stack runs: one daemon per host name, all on one
// file system, each in a cgroup of its own that gives it the device at
// plateau bytes per second both ways.
type stackOptions struct {
	hosts    []string
	interval time.Duration
	timeout  time.Duration
	// splay spreads the daemons' runs over the interval by host name, as
	// in production; a single daemon needs none.
	splay    bool
	fileSize int64
	plateau  int64
	// characterizeSpacing is characterize's --run-spacing.
	characterizeSpacing time.Duration
	// promInterval is Prometheus's scrape and evaluation interval.
	promInterval time.Duration
	// durationScale divides the rules' `for`, keep_firing_for and group
	// intervals (0: durationScale, for a 5s probe interval).
	durationScale int
	// racks splits the monitoring as README.md's "Prometheus for a
	// fleet" does: this many rack Prometheus servers scrape the daemons
	// and the storage servers' daemons (dealt out in turn) and evaluate
	// rules.yml and alerts.yml, and a global one pulls federate.yml's
	// selection from them and evaluates rules.yml and fleet_alerts.yml;
	// all send to the one Alertmanager. 0: one Prometheus with every rule
	// file.
	racks int
}

// scale is what the stack divides the rules' durations by.
func (o stackOptions) scale() int {
	if o.durationScale > 0 {
		return o.durationScale
	}
	return durationScale
}

// singleNodeOptions is the stack of the single-node tests.
func singleNodeOptions() stackOptions {
	return stackOptions{
		hosts:               []string{"node1"},
		interval:            probeInterval,
		timeout:             probeTimeout,
		fileSize:            fileSize,
		plateau:             devicePlateau,
		characterizeSpacing: 5 * time.Second,
		promInterval:        time.Second,
	}
}

// stackDaemon is one plateau_exporter of a stack, a node of the fleet.
type stackDaemon struct {
	host string
	// cgroup gives the daemon its share of the stack's loop device; nil
	// when the daemon probes something else (a MooseFS client's mount).
	cgroup *probetest.IOCgroup
	// configFile is the daemon's own config, when it is not the stack's.
	configFile string
	proc       *process
	// addr is where it listens, and so its instance label in Prometheus.
	addr        string
	url         string
	historyFile string
	runs        *runWatcher
	// metadataRuns follows the runs of the metadata target's probe on
	// the MooseFS cluster's clients while they have it (fault c); nil
	// elsewhere.
	metadataRuns *runWatcher
}

// alertStack is everything one alerting test runs.
type alertStack struct {
	opts       stackOptions
	start      time.Time
	dir        string
	exporter   string
	configFile string
	// baseline is the characterized plateau, bytes per second by op.
	baseline map[string]float64
	daemons  []*stackDaemon
	// servers are the storage servers' own daemons, each probing its own
	// data device under serverTarget (which `serves` stackTarget), scraped
	// as job serverJob; none but on the MooseFS cluster. They are not
	// nodes of the fleet: rounds, overlaps and the per-node checks read
	// daemons only.
	servers    []*stackDaemon
	prom       stackProm
	amURL      string
	hook       *webhook
	shortRules map[string][]string
	// shortFor is every alert's shortened `for`, by name.
	shortFor map[string][]time.Duration
}

// since formats the time elapsed since the stack started, for timelines.
func (s *alertStack) since(at time.Time) string {
	return "t+" + at.Sub(s.start).Round(100*time.Millisecond).String()
}

// hostOf names the daemon behind an instance label, for logs.
func (s *alertStack) hostOf(instance string) string {
	for _, d := range append(slices.Clone(s.daemons), s.servers...) {
		if d.addr == instance {
			return d.host
		}
	}
	return instance
}

// rounds is how many runs every daemon has completed: the fewest any has.
func (s *alertStack) rounds() int {
	n := math.MaxInt
	for _, d := range s.daemons {
		n = min(n, d.runs.count())
	}
	return n
}

// startAlertStack is the single-node stack.
func startAlertStack(t *testing.T) *alertStack {
	t.Helper()
	return startStack(t, singleNodeOptions())
}

// startStack sets up the loop file system, a cgroup per daemon, the
// baseline, the daemons, Alertmanager, the webhook and Prometheus, in that
// order, and waits until Prometheus scrapes every daemon and evaluates the
// rules.
func startStack(t *testing.T, o stackOptions) *alertStack {
	t.Helper()
	promBin, amBin := requireAlertingPrereqs(t)
	s := &alertStack{opts: o, dir: t.TempDir()}
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
	for _, h := range o.hosts {
		d := &stackDaemon{host: h, cgroup: probetest.NewIOCgroup(t, loop.DevNum)}
		if err := d.cgroup.ThrottleRead(o.plateau); err != nil {
			t.Fatal(err)
		}
		if err := d.cgroup.ThrottleWrite(o.plateau); err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, d)
	}
	t.Logf("loop ext4 at %s (device %s); %d daemon(s), each given %.0f MB/s both ways by its own cgroup",
		loop.Mount, loop.DevNum, len(s.daemons), float64(o.plateau)/1e6)

	s.buildExporter(t)
	targetPath := filepath.Join(loop.Mount, "plateau")
	if err := os.Mkdir(targetPath, 0o755); err != nil {
		t.Fatal(err)
	}
	// One config and one baselines file for every node, as a site ships
	// them: the target has the same name on every client of the file
	// system, which is what makes the nodes peers in the fleet rules.
	s.configFile = filepath.Join(s.dir, "plateau.yml")
	writeExporterConfig(t, s.configFile, o, targetPath, filepath.Join(s.dir, "baselines.yml"))
	s.characterize(t)
	// The device must deliver its plateau for the throttle to mean what
	// the test says; a machine too busy for it is named here.
	for op, v := range s.baseline {
		if v < 0.8*float64(o.plateau) || v > 1.5*float64(o.plateau) {
			t.Fatalf("characterized %s at %.0f MB/s on a device throttled to %.0f MB/s: the machine does not deliver the plateau the test sets", op, v/1e6, float64(o.plateau)/1e6)
		}
	}

	s.startDaemons(t, func(d *stackDaemon) []string { return inCgroup(d.cgroup) })
	s.startMonitoring(t, promBin, amBin)
	return s
}

// buildExporter builds the plateau_exporter the stack runs.
func (s *alertStack) buildExporter(t *testing.T) {
	t.Helper()
	s.exporter = buildExporter(t, s.dir)
}

// buildExporter builds plateau_exporter into dir and returns its path.
func buildExporter(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "plateau_exporter")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/plateau_exporter").CombinedOutput(); err != nil {
		t.Fatalf("building plateau_exporter: %v\n%s", err, out)
	}
	return bin
}

// startDaemons starts a plateau_exporter per daemon of the stack, its
// command line begun with prefix(d) (a cgroup to enter, or nothing), waits
// until each answers, and starts following each one's runs.
func (s *alertStack) startDaemons(t *testing.T, prefix func(d *stackDaemon) []string) {
	t.Helper()
	o := s.opts
	for _, d := range s.daemons {
		s.startExporter(t, d, prefix(d))
	}
	for _, d := range s.daemons {
		waitReady(t, d.proc, d.url+"/-/healthy")
		if d.cgroup == nil {
			continue
		}
		pids, err := d.cgroup.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pids, d.proc.cmd.Process.Pid) {
			t.Fatalf("daemon %s (pid %d) is not in %s (its processes: %v)", d.host, d.proc.cmd.Process.Pid, d.cgroup, pids)
		}
	}
	s.start = time.Now()
	for _, d := range s.daemons {
		// A tenth of the interval catches every run, and four daemons
		// polled that often still cost little of two cores.
		d.runs = watchRuns(t, d.url+"/metrics", o.interval/10)
	}
}

// startExporter starts d's plateau_exporter on an address of its own, its
// command line begun with prefix; it does not wait for it.
func (s *alertStack) startExporter(t *testing.T, d *stackDaemon, prefix []string) {
	t.Helper()
	d.addr = probetest.FreeAddr(t)
	d.url = "http://" + d.addr
	d.historyFile = filepath.Join(s.dir, d.host+"-history.json")
	name := "plateau_exporter"
	if len(s.daemons)+len(s.servers) > 1 {
		name += "-" + d.host
	}
	config := orElse(d.configFile, s.configFile)
	d.proc = startProcess(t, name, s.dir, append(slices.Clone(prefix), s.exporter, "--config.file="+config,
		"--probe.hostname="+d.host, "--probe.history-file="+d.historyFile,
		"--collector.disable-defaults", "--web.listen-address="+d.addr, "--log.level=debug")...)
}

// startMonitoring starts the webhook, Alertmanager with the shipped route
// and inhibitions, and Prometheus with the shipped rules (durations
// shortened) scraping every daemon, and waits until Prometheus evaluates.
func (s *alertStack) startMonitoring(t *testing.T, promBin, amBin string) {
	t.Helper()
	o := s.opts

	s.hook = startWebhook(t)
	amAddr := probetest.FreeAddr(t)
	s.amURL = "http://" + amAddr
	amConfig := filepath.Join(s.dir, "alertmanager.yml")
	writeAlertmanagerConfig(t, amConfig, s.hook.srv.URL+"/")
	amData := filepath.Join(s.dir, "alertmanager-data")
	if err := os.Mkdir(amData, 0o700); err != nil {
		t.Fatal(err)
	}
	am := startProcess(t, "alertmanager", s.dir, amBin, "--config.file="+amConfig, "--storage.path="+amData,
		"--web.listen-address="+amAddr, "--cluster.listen-address=")
	waitReady(t, am, s.amURL+"/-/ready")

	s.shortRules = map[string][]string{}
	short := map[string]string{}                          // a shipped rule file: its shortened copy
	shortForOf := map[string]map[string][]time.Duration{} // an alert file: its alerts' shortened `for`
	for _, f := range shippedRuleFiles() {
		orig, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		shortened, changes, err := shortenRuleFile(orig, o.scale())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkOnlyDurationsChanged(t, f, orig, shortened)
		path := filepath.Join(s.dir, f)
		if err := os.WriteFile(path, shortened, 0o644); err != nil {
			t.Fatal(err)
		}
		short[f] = path
		s.shortRules[f] = changes
		if slices.Contains(alertFiles(), f) {
			shortForOf[f] = alertForDurations(t, shortened)
		}
	}
	if len(s.shortRules[alertsFile]) == 0 {
		t.Fatalf("%s: no `for` to shorten; the test's timing assumes them", alertsFile)
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
	s.shortFor = alertsIn(alertFiles()...)
	jobsOf := func(daemons, servers []*stackDaemon) map[string][]string {
		jobs := map[string][]string{}
		for _, d := range daemons {
			jobs[stackJob] = append(jobs[stackJob], d.addr)
		}
		for _, d := range servers {
			jobs[serverJob] = append(jobs[serverJob], d.addr)
		}
		return jobs
	}
	var servers []promServer
	if o.racks == 0 {
		servers = append(servers, s.startPrometheus(t, promBin, promServer{
			name:   "prometheus",
			files:  shippedRuleFiles(),
			alerts: alertsIn(shippedRuleFiles()...),
			up:     len(s.daemons) + len(s.servers),
		}, prometheusConfig(o.promInterval, jobsOf(s.daemons, s.servers), amAddr, shortened(shippedRuleFiles()...))))
		s.prom = stackProm{fleet: servers[0].api}
	} else {
		// Each rack a share of the clients and of the storage servers,
		// dealt out in turn, so that the fleet's rules must put together
		// what no rack has alone.
		var rackAddrs []string
		for r := range o.racks {
			daemons, storage := dealt(s.daemons, r, o.racks), dealt(s.servers, r, o.racks)
			rack := s.startPrometheus(t, promBin, promServer{
				name:   fmt.Sprintf("prometheus-rack%d", r+1),
				files:  []string{rulesFile, alertsFile},
				alerts: alertsIn(rulesFile, alertsFile),
				up:     len(daemons) + len(storage),
			}, prometheusConfig(o.promInterval, jobsOf(daemons, storage), amAddr, shortened(rulesFile, alertsFile)))
			servers = append(servers, rack)
			s.prom.racks = append(s.prom.racks, rack.api)
			rackAddrs = append(rackAddrs, strings.TrimPrefix(rack.api.url, "http://"))
		}
		cfg := prometheusConfig(o.promInterval, nil, amAddr, shortened(rulesFile, fleetAlertsFile))
		cfg["scrape_configs"] = []any{shippedFederateJob(t, rackAddrs)}
		global := s.startPrometheus(t, promBin, promServer{
			name:   "prometheus-global",
			files:  []string{rulesFile, fleetAlertsFile},
			alerts: alertsIn(rulesFile, fleetAlertsFile),
			up:     o.racks,
		}, cfg)
		servers = append(servers, global)
		s.prom.fleet = global.api
	}
	for _, srv := range servers {
		s.waitScrapingAndEvaluating(t, srv)
	}
	s.checkPageOrder(t)
	t.Logf("%s: daemons, Alertmanager and %d Prometheus up; rules shortened by %d: %s", s.since(time.Now()), len(servers), o.scale(), strings.Join(s.shortRules[alertsFile][:min(4, len(s.shortRules[alertsFile]))], "; "))
}

// dealt is the share of the daemons that rack r of n scrapes: every n-th,
// from the r-th.
func dealt(daemons []*stackDaemon, r, n int) []*stackDaemon {
	var out []*stackDaemon
	for i, d := range daemons {
		if i%n == r {
			out = append(out, d)
		}
	}
	return out
}

// rackOf is the fleet's nodes that the Prometheus scraping d scrapes: d
// and its rack's other nodes, or every node on a stack of one Prometheus.
func (s *alertStack) rackOf(d *stackDaemon) []*stackDaemon {
	if s.opts.racks == 0 {
		return s.daemons
	}
	i := slices.Index(s.daemons, d)
	return dealt(s.daemons, i%s.opts.racks, s.opts.racks)
}

// promServer is one Prometheus of a stack: its name (its config and data
// directory), the shipped rule files it evaluates (their shortened
// copies) and the alerts they hold with their shortened `for`, and how
// many scrape targets it has.
type promServer struct {
	name   string
	files  []string
	alerts map[string][]time.Duration
	up     int
	api    promAPI
}

// startPrometheus starts one Prometheus of the stack with cfg, and
// returns p with its API.
func (s *alertStack) startPrometheus(t *testing.T, promBin string, p promServer, cfg map[string]any) promServer {
	t.Helper()
	addr := probetest.FreeAddr(t)
	config := filepath.Join(s.dir, p.name+".yml")
	writeYAML(t, config, cfg)
	data := filepath.Join(s.dir, p.name+"-data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// The resend delay shortened as the rules are (1m by default): an
	// alert's annotations reach Alertmanager again within a second, as
	// its description changes (the servers a file-system page names).
	proc := startProcess(t, p.name, s.dir, promBin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--rules.alert.resend-delay=1s")
	p.api = promAPI{url: "http://" + addr}
	waitReady(t, proc, p.api.url+"/-/ready")
	return p
}

// shippedFederateJob is the scrape job of the shipped federate.yml, as a
// site merges it into its global Prometheus's config: pulling from the
// racks at addrs.
func shippedFederateJob(t *testing.T, addrs []string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(federateFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ScrapeConfigs []map[string]any `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", federateFile, err)
	}
	if len(f.ScrapeConfigs) != 1 {
		t.Fatalf("%s: %d scrape_configs, want 1", federateFile, len(f.ScrapeConfigs))
	}
	job := f.ScrapeConfigs[0]
	job["static_configs"] = []any{map[string]any{"targets": addrs}}
	return job
}

// inCgroup is the start of a command line that moves itself into c before
// it becomes the command that follows: that process and everything it
// forks (the daemon's probe workers) are in the group from their first
// I/O on.
func inCgroup(c *probetest.IOCgroup) []string {
	return []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, c.ProcsFile()}
}

func formatSize(b int64) string { return strconv.FormatInt(b>>20, 10) + "MiB" }

// writeExporterConfig writes the stack's config: one target, stackTarget
// at targetPath, with one sequential probe of the stack's size.
func writeExporterConfig(t *testing.T, path string, o stackOptions, targetPath, baselines string) {
	t.Helper()
	writeTargetConfig(t, path, o, baselines, exporterTarget{name: stackTarget, path: targetPath})
}

// exporterTarget is a target of a stack daemon's config.
type exporterTarget struct {
	name, path string
	// serves is the target's `serves` (a storage server's own target), or
	// "".
	serves string
	// minFreeRatio is the target's min_free_ratio, when not 0.
	minFreeRatio float64
	// moreProbes are probes beside stackProbe, each a YAML flow mapping.
	moreProbes []string
	// metadataProbe, with metadataFiles, makes the target's one probe a
	// metadata probe of that name and number of empty files, in place of
	// stackProbe and moreProbes.
	metadataProbe string
	metadataFiles int
}

// writeTargetConfig writes a config of targets at o's interval and
// timeout, each with one sequential probe (stackProbe) of o's size and its
// moreProbes, or with its metadata probe.
func writeTargetConfig(t *testing.T, path string, o stackOptions, baselines string, targets ...exporterTarget) {
	t.Helper()
	cfg := fmt.Sprintf("defaults:\n  interval: %s\n  timeout: %s\n  splay: %t\ntargets:\n", o.interval, o.timeout, o.splay)
	for _, target := range targets {
		cfg += fmt.Sprintf("  - name: %s\n    path: %s\n", target.name, target.path)
		if target.serves != "" {
			cfg += "    serves: " + target.serves + "\n"
		}
		if target.minFreeRatio != 0 {
			cfg += fmt.Sprintf("    min_free_ratio: %g\n", target.minFreeRatio)
		}
		cfg += "    probes:\n"
		probes := append([]string{fmt.Sprintf("{name: %s, kind: sequential, workers: 1, file_size: %s, block_size: %s}", stackProbe, formatSize(o.fileSize), formatSize(blockSize))}, target.moreProbes...)
		if target.metadataProbe != "" {
			probes = []string{fmt.Sprintf("{name: %s, kind: metadata, workers: 1, files: %d, file_size: 0}", target.metadataProbe, target.metadataFiles)}
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
func (s *alertStack) characterize(t *testing.T) {
	t.Helper()
	d := s.daemons[0]
	s.characterizeOn(t, inCgroup(d.cgroup), s.configFile, d.host)
}

// characterizeOn runs characterize with a config, its command line begun
// with prefix, and reads back the baseline it wrote.
func (s *alertStack) characterizeOn(t *testing.T, prefix []string, configFile, host string) {
	t.Helper()
	s.runCharacterize(t, prefix, configFile, host)
	s.loadBaseline(t)
}

// runCharacterize runs characterize with a config, its command line begun
// with prefix: it writes the config's baselines_file.
func (s *alertStack) runCharacterize(t *testing.T, prefix []string, configFile, host string) {
	t.Helper()
	args := []string{s.exporter, "characterize", "--config.file=" + configFile, "--probe.hostname=" + host,
		"--runs=3", "--run-spacing=" + s.opts.characterizeSpacing.String()}
	argv := append(slices.Clone(prefix), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("%s:\n%s", strings.Join(args[1:], " "), bytes.TrimSpace(out))
}

func (s *alertStack) loadBaseline(t *testing.T) {
	t.Helper()
	b, err := plateau.LoadBaselines(filepath.Join(s.dir, "baselines.yml"))
	if err != nil {
		t.Fatalf("reading the characterized baselines: %v", err)
	}
	s.baseline = map[string]float64{}
	for _, op := range []string{"write", "read"} {
		e := b.Entries[plateau.BaselineKey{Target: stackTarget, Probe: stackProbe, Op: op}]
		if e == nil || e.Unit != probe.UnitBytesPerSecond || e.Value <= 0 {
			t.Fatalf("characterized baselines have no %s throughput for %s/%s: %+v", op, stackTarget, stackProbe, e)
		}
		s.baseline[op] = e.Value
	}
}

// writeAlertmanagerConfig writes dashboards/alertmanager.yml with the
// webhook as its receiver and the route's timers shortened; its grouping
// and inhibit rules are kept as shipped.
func writeAlertmanagerConfig(t *testing.T, path, hookURL string) {
	t.Helper()
	var cfg map[string]any
	data, err := os.ReadFile(alertmanagerFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", alertmanagerFile, err)
	}
	route, ok := cfg["route"].(map[string]any)
	if !ok {
		t.Fatalf("%s has no route", alertmanagerFile)
	}
	if _, ok := cfg["inhibit_rules"]; !ok {
		t.Fatalf("%s has no inhibit_rules; the test checks them", alertmanagerFile)
	}
	if sub, ok := route["routes"]; ok {
		t.Fatalf("%s has sub-routes (%v); the test routes everything to one webhook and would need to learn them", alertmanagerFile, sub)
	}
	route["receiver"] = "test-webhook"
	route["group_wait"] = "1s"
	route["group_interval"] = "1s"
	route["repeat_interval"] = "1h"
	cfg["receivers"] = []any{map[string]any{
		"name":            "test-webhook",
		"webhook_configs": []any{map[string]any{"url": hookURL, "send_resolved": true}},
	}}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// prometheusConfig is a Prometheus config that scrapes each job's
// addresses (job name to addresses) every interval, evaluates the rule
// files and sends to the Alertmanager at amAddr.
func prometheusConfig(every time.Duration, jobs map[string][]string, amAddr string, ruleFiles []string) map[string]any {
	iv := model.Duration(every).String()
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     iv,
			"scrape_timeout":      iv,
			"evaluation_interval": iv,
		},
		"rule_files": ruleFiles,
		"alerting": map[string]any{
			"alertmanagers": []any{map[string]any{
				"static_configs": []any{map[string]any{"targets": []string{amAddr}}},
			}},
		},
	}
	var scrape []any
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		scrape = append(scrape, map[string]any{
			"job_name":       job,
			"static_configs": []any{map[string]any{"targets": jobs[job]}},
		})
	}
	cfg["scrape_configs"] = scrape
	return cfg
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

// waitScrapingAndEvaluating waits until one Prometheus of the stack
// scrapes every target it has and has evaluated every rule it loaded
// without error, and checks that it runs the shortened `for` of the
// alerts of its files, and no alert of another file.
func (s *alertStack) waitScrapingAndEvaluating(t *testing.T, p promServer) {
	t.Helper()
	waitFor(t, p.name+" to scrape every target", 2*time.Minute, func() (bool, error) {
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
	waitFor(t, p.name+" to evaluate every rule", 2*time.Minute, func() (bool, error) {
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

// logSeriesHeld logs how many series each Prometheus of the stack holds
// in its head block: what the split costs where.
func (s *alertStack) logSeriesHeld(t *testing.T) {
	t.Helper()
	var parts []string
	for i, srv := range s.prom.all() {
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
		if i < len(s.prom.racks) {
			name = fmt.Sprintf("rack %d", i+1)
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, st.HeadStats.NumSeries))
	}
	t.Logf("series held by each Prometheus: %s", strings.Join(parts, ", "))
}

// checkPageOrder checks that the file-system page waits less than the
// node page: it can only inhibit the node pages it explains if it fires
// first.
func (s *alertStack) checkPageOrder(t *testing.T) {
	t.Helper()
	node, fleet := s.shortFor[regressionAlert], s.shortFor[fsRegressionAlert]
	if len(node) != 1 || len(fleet) != 1 {
		t.Fatalf("%s have %d rules %s and %d %s, want one each", alertFiles(), len(node), regressionAlert, len(fleet), fsRegressionAlert)
	}
	t.Logf("the regression pages wait for %s (node) and %s (file system)", node[0], fleet[0])
	if fleet[0] >= node[0] {
		t.Fatalf("%s waits for %s and %s for %s: the file system alert must have the shorter `for` to inhibit the node pages", fsRegressionAlert, fleet[0], regressionAlert, node[0])
	}
}

// amAlert is an alert as Alertmanager's API v2 shows it.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State       string   `json:"state"`
		InhibitedBy []string `json:"inhibitedBy"`
		SilencedBy  []string `json:"silencedBy"`
	} `json:"status"`
}

// amAlerts lists the alerts Alertmanager holds (active, suppressed and
// unprocessed), with a filter such as alertname="X" or none.
func (s *alertStack) amAlerts(filter string) ([]amAlert, error) {
	u := s.amURL + "/api/v2/alerts"
	if filter != "" {
		u += "?filter=" + url.QueryEscape(filter)
	}
	body, err := httpGet(u)
	if err != nil {
		return nil, err
	}
	var alerts []amAlert
	if err := json.Unmarshal(body, &alerts); err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return alerts, nil
}

// heldIn returns the alerts named name that Prometheus holds now, pending
// or firing, for the instance when it is not "".
func (s *alertStack) heldIn(name, instance string) ([]promAlert, error) {
	all, err := s.prom.alerts()
	if err != nil {
		return nil, err
	}
	var out []promAlert
	for _, a := range all {
		if a.Labels["alertname"] == name && (instance == "" || a.Labels["instance"] == instance) {
			out = append(out, a)
		}
	}
	return out, nil
}

// timeline records, with times, what the alerting pipeline did: every
// alert's states in Prometheus (pending, firing, gone) and in Alertmanager
// (active, or suppressed and by what), every notification the webhook got,
// and the test's phases. It logs each change as it sees it, and the whole
// story at the end, with every probe run of every daemon when the test
// failed, so that a failure can be read off the log.
type timeline struct {
	s      *alertStack
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

// watchAlerts starts a timeline, polling every waitPoll until cleanup.
func (s *alertStack) watchAlerts(t *testing.T) *timeline {
	tl := &timeline{s: s, prom: map[string]string{}, am: map[string]string{}, errs: map[string]bool{}}
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

// alertKey names an alert for the timeline: its name, severity, node (the
// daemon's host name rather than its address) and op.
func (s *alertStack) alertKey(l map[string]string) string {
	k := l["alertname"] + "{" + l["severity"] + "}"
	if in := l["instance"]; in != "" {
		k += " " + s.hostOf(in)
	} else if tg := l["target"]; tg != "" {
		k += " target=" + tg
	}
	if op := l["op"]; op != "" {
		k += " op=" + op
	}
	return k
}

// mark records a step of the test.
func (tl *timeline) mark(t *testing.T, format string, args ...any) time.Time {
	t.Helper()
	now := time.Now()
	what := fmt.Sprintf(format, args...)
	tl.add(t, now, "TEST: "+what)
	return now
}

func (tl *timeline) add(t *testing.T, at time.Time, what string) {
	tl.mu.Lock()
	tl.events = append(tl.events, timelineEvent{at, what})
	tl.mu.Unlock()
	t.Logf("%s: %s", tl.s.since(at), what)
}

func (tl *timeline) fail(t *testing.T, what string, err error) {
	if msg := what + ": " + err.Error(); !tl.errs[msg] {
		tl.errs[msg] = true
		tl.add(t, time.Now(), msg)
	}
}

func (tl *timeline) observe(t *testing.T) {
	now := time.Now()
	if alerts, err := tl.s.prom.alerts(); err != nil {
		tl.fail(t, "Prometheus alerts", err)
	} else {
		seen := map[string]string{}
		for _, a := range alerts {
			k := tl.s.alertKey(a.Labels)
			seen[k] = a.State
			if tl.prom[k] != a.State {
				tl.add(t, now, fmt.Sprintf("Prometheus: %s %s (value %s)", k, a.State, a.Value))
			}
		}
		for k := range tl.prom {
			if _, ok := seen[k]; !ok {
				tl.add(t, now, fmt.Sprintf("Prometheus: %s gone (resolved)", k))
			}
		}
		tl.prom = seen
	}
	if alerts, err := tl.s.amAlerts(""); err != nil {
		tl.fail(t, "Alertmanager alerts", err)
	} else {
		byFP := map[string]string{}
		for _, a := range alerts {
			byFP[a.Fingerprint] = tl.s.alertKey(a.Labels)
		}
		seen := map[string]string{}
		for _, a := range alerts {
			k, st := tl.s.alertKey(a.Labels), a.Status.State
			for _, fp := range a.Status.InhibitedBy {
				st += ", inhibited by " + orElse(byFP[fp], fp)
			}
			seen[k] = st
			if tl.am[k] != st {
				tl.add(t, now, fmt.Sprintf("Alertmanager: %s %s", k, st))
			}
		}
		for k := range tl.am {
			if _, ok := seen[k]; !ok {
				tl.add(t, now, fmt.Sprintf("Alertmanager: %s gone", k))
			}
		}
		tl.am = seen
	}
	got := tl.s.hook.received()
	for _, a := range got[tl.hookN:] {
		tl.add(t, a.At, fmt.Sprintf("webhook: %s %s", a.Status, tl.s.alertKey(a.Labels)))
	}
	tl.hookN = len(got)
}

// sampleHost records the load average, the pressure stall information
// of CPU, I/O and memory (the share of the last 10s in which some task
// waited; throttled probes count in io) and the CPU time the hypervisor
// stole since the last sample.
func (tl *timeline) sampleHost() {
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

// orElse returns the first of its arguments that is not empty.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (tl *timeline) summary(t *testing.T) {
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	if t.Failed() {
		events = append(events, tl.host...)
		for _, d := range tl.s.daemons {
			runs, _ := d.runs.snapshot()
			for i, r := range runs {
				events = append(events, timelineEvent{r.End, fmt.Sprintf("run %d of %s ended: %s", i+1, d.host, r)})
			}
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %-9s %s", tl.s.since(e.at), e.what)
	}
	what := "alerts"
	if t.Failed() {
		what = "alerts and probe runs"
	}
	t.Logf("timeline of the %s (t+0 is when the daemons were up):%s", what, b.String())
}

func medianOf(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// namesOp says whether the alert's description names the op of the probe
// as one of its ops in regression or under plateau ("seq read (sequential)
// at ..."): the verdict alerts are per node and target, and their
// descriptions list the ops.
func namesOp(a receivedAlert, probe, op string) bool {
	return strings.Contains(strings.Join(strings.Fields(a.Annotations["description"]), " "), probe+" "+op+" (")
}
